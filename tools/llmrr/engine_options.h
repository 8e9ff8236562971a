// Engine command-line options shared by `llmrr run`, `llmrr record` and `llmrr replay`:
// model, policy, virtual device, scheduler, MoE capacity, sampling, synthetic load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "llmrr/format/status.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/policy.h"

namespace llmrr::cli {

struct EngineOptions {
  std::string model;
  std::string prompt;
  std::string prompt_ids;            // "1,2,3"
  std::string policy = "production"; // production | invariant (PolicyKind::parse)
  bool atomics = false;
  int32_t load = 0;
  int64_t arrival = 0;               // step at which the target request arrives
  uint64_t seed = 0;
  int32_t max_tokens = 32;
  double temperature = 0.0;
  int32_t top_k = 0;
  double top_p = 1.0;
  double capacity_factor = 0.0;
  std::string overflow;              // "" (drop when a capacity factor is given), drop, reroute
  int32_t threads = 0;               // 0: the host's cores, at most 8
  int32_t max_batch_tokens = 256;
  int32_t max_seqs = 16;
  int32_t prefill_chunk = 64;
  int32_t kv_block = 16;
  int32_t sms = 132;
  int32_t blocks_per_sm = 2;
  int32_t attn_split = 0;            // invariant split size; 0: default for the model
  int32_t gemm_split = 0;            // invariant K columns per GEMM split; 0: no split-K
  std::string dtype;                 // "" (as stored), fp32, bf16
  std::string scoring;               // "" (as the model), softmax, sigmoid
  bool chat = false;
  bool raw = false;
  std::string device = "cpu";        // cpu | cuda
};

// Registers the options on `app`. `with_prompt`: --prompt / --prompt-ids (record also takes
// --requests, which it adds itself).
void add_engine_options(CLI::App& app, EngineOptions& options, bool with_prompt = true);

// Everything a command needs to build and drive an engine, validated.
struct EngineSetup {
  LoadedModel model;
  EngineConfig config;
  PolicyKind policy_kind = PolicyKind::kProduction;  // --policy, parsed
  std::shared_ptr<Policy> policy;
  std::string policy_name;           // "production", "production+atomics", "invariant"
  VirtualDevice device;
  bool chat = false;                 // the prompt went through the model's chat template
  std::vector<RequestSpec> requests; // the target (id 0, label "target") first, then load
  RequestId target = 0;
};

// Checks every value (kInvalidArgument with a message naming the option), loads the model,
// tokenizes the prompt (when `need_prompt`) and derives the load requests.
Result<EngineSetup> make_engine_setup(const EngineOptions& options, bool need_prompt = true);

// The synthetic load for a model: `count` requests from `seed`, ids from first_id.
std::vector<RequestSpec> make_load_for(const LoadedModel& model, int32_t count, uint64_t seed,
                                       RequestId first_id);

// Streams the target request's text to stdout as its tokens are sampled (token ids when the
// model has no tokenizer); the EOS token is not printed. Shared by run and record so their
// stdout is the same bytes.
class TextStream : public Observer {
 public:
  TextStream(const Tokenizer* tok, RequestId target, int32_t eos)
      : tok_(tok), target_(target), eos_(eos) {}
  void on_token(const TokenEvent& t) override;

 private:
  const Tokenizer* tok_;
  RequestId target_;
  int32_t eos_;
  std::vector<int32_t> ids_;
  size_t printed_ = 0;
};

// "1,2,3" → ids.
Result<std::vector<int32_t>> parse_id_list(const std::string& text);

}  // namespace llmrr::cli
