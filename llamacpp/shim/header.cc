#include "header.h"

#include <dlfcn.h>
#include <xxhash.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace llmrr::llamacpp {

namespace {

template <class F>
F fn(F, const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}
#define CALL(name, dflt, ...) \
  ([&] { static auto f = fn(&name, #name); return f != nullptr ? f(__VA_ARGS__) : (dflt); }())

std::string meta(const llama_model* m, const char* key) {
  char buf[512] = {0};
  const int32_t n = CALL(llama_model_meta_val_str, -1, m, key, buf, sizeof buf);
  return n >= 0 ? std::string(buf) : std::string();
}

std::string read_small(const std::string& path) {
  std::ifstream in(path);
  std::string s, line;
  while (std::getline(in, line) && s.size() < 4096) s += (s.empty() ? "" : "; ") + line;
  return s;
}

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string s, arg;
  while (std::getline(in, arg, '\0') && s.size() < 4096) s += (s.empty() ? "" : " ") + arg;
  return s;
}

}  // namespace

std::string file_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) XXH3_64bits_update(st, buf.data(), static_cast<size_t>(in.gcount()));
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  char b[40];
  std::snprintf(b, sizeof b, "xxh3-64:%016" PRIx64, h);
  return b;
}

HeaderInfo describe(llama_context* ctx, const llama_context_params& p, const std::string& path) {
  HeaderInfo h;
  const llama_model* m = CALL(llama_get_model, nullptr, ctx);
  const llama_vocab* v = m != nullptr ? CALL(llama_model_get_vocab, nullptr, m) : nullptr;
  std::string version, lib;
  Dl_info di{};
  // a function the shim does not wrap, so dladdr names libllama itself
  if (void* f = dlsym(RTLD_DEFAULT, "llama_print_system_info"); f != nullptr && dladdr(f, &di) && di.dli_fname) {
    lib = di.dli_fname;
    const std::string dir = lib.substr(0, lib.rfind('/'));
    version = read_small(dir + "/../VERSION");
  }
  h.tool_version = "llama.cpp" + (version.empty() ? std::string() : " (" + version + ")");
  if (m != nullptr) {
    h.model_name = meta(m, "general.name");
    h.architecture = meta(m, "general.architecture");
    h.layers = CALL(llama_model_n_layer, 0, m);
    h.hidden = CALL(llama_model_n_embd, 0, m);
    h.heads = CALL(llama_model_n_head, 0, m);
    h.kv_heads = CALL(llama_model_n_head_kv, 0, m);
  }
  if (v != nullptr) {
    h.vocab = CALL(llama_vocab_n_tokens, 0, v);
    for (int32_t t = 0; t < h.vocab; ++t)
      if (CALL(llama_vocab_is_eog, false, v, t)) h.eog_tokens.push_back(t);
  }
  h.model_path = path;
  h.weight_hash = path.empty() ? std::string() : file_hash(path);
  h.threads = p.n_threads;
  h.command_line = command_line();
  char desc[256] = {0};
  if (m != nullptr) CALL(llama_model_desc, 0, m, desc, sizeof desc);
  const char* sys = CALL(llama_print_system_info, static_cast<const char*>(nullptr));
  nlohmann::json j = {
      {"version", version},
      {"library", lib},
      {"system_info", sys != nullptr ? sys : ""},
      {"model_desc", desc},
      {"n_ctx", CALL(llama_n_ctx, 0u, ctx)},
      {"n_batch", CALL(llama_n_batch, 0u, ctx)},
      {"n_ubatch", CALL(llama_n_ubatch, 0u, ctx)},
      {"n_seq_max", CALL(llama_n_seq_max, 0u, ctx)},
      {"n_threads", p.n_threads},
      {"n_threads_batch", p.n_threads_batch},
      {"flash_attn_type", static_cast<int>(p.flash_attn_type)},
      {"kv_unified", p.kv_unified},
      {"swa_full", p.swa_full},
      {"type_k", static_cast<int>(p.type_k)},
      {"type_v", static_cast<int>(p.type_v)},
      {"offload_kqv", p.offload_kqv},
      {"op_offload", p.op_offload},
      {"rope_freq_base", p.rope_freq_base},
      {"rope_freq_scale", p.rope_freq_scale},
      {"n_rs_seq", p.n_rs_seq},
      {"fingerprints", "mixsum64 of each row where the tensor lives: host tensors in place; "
                       "tensors of another backend copied to the host first (one device-to-host "
                       "copy per recorded node)"},
      {"sampling", "not visible to libllama: requests are recorded with temperature 0"},
  };
  h.extra_json = nlohmann::json{{"runtime", "llamacpp"}, {"llamacpp", j}}.dump();
  return h;
}

void HeaderInfo::fill(llmrr_recorder_config& cfg) const {
  cfg.tool_version = tool_version.c_str();
  cfg.model_name = model_name.c_str();
  cfg.model_path = model_path.c_str();
  cfg.architecture = architecture.c_str();
  cfg.weight_hash = weight_hash.empty() ? nullptr : weight_hash.c_str();
  cfg.layers = layers;
  cfg.hidden = hidden;
  cfg.vocab = vocab;
  cfg.heads = heads;
  cfg.kv_heads = kv_heads;
  cfg.threads = threads;
  cfg.policy = "llama.cpp";
  cfg.extra_config_json = extra_json.c_str();
  cfg.command_line = command_line.c_str();
}

}  // namespace llmrr::llamacpp
