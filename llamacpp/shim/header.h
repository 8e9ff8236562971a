// The run header of a llama.cpp recording: the model (libllama's getters, the GGUF's
// general.name, an xxh3-64 hash of the GGUF file's bytes), the context's settings, and in
// extra_config_json {"runtime":"llamacpp","llamacpp":{...}} everything a replay needs to build
// the same context (n_ctx, n_batch, n_ubatch, n_seq_max, threads, flash attention, kv_unified,
// KV types, ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llama.h"
#include "llmrr/recorder.h"

namespace llmrr::llamacpp {

struct HeaderInfo {
  std::string tool_version, model_name, model_path, architecture, weight_hash, extra_json,
      command_line, device_name;
  int32_t layers = 0, hidden = 0, vocab = 0, heads = 0, kv_heads = 0, threads = 0;
  std::vector<int32_t> eog_tokens;
  void fill(llmrr_recorder_config& cfg) const;  // cfg's strings point into this
};

HeaderInfo describe(llama_context* ctx, const llama_context_params& params,
                    const std::string& model_path);

// "xxh3-64:<hex>" of a file's bytes; "" when it cannot be read.
std::string file_hash(const std::string& path);

}  // namespace llmrr::llamacpp
