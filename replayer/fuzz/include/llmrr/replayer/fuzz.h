// Fuzz: run one target request under many batch compositions and report what splits it
// (DESIGN, data flow "fuzz"; `llmrr fuzz`).
//
//   FuzzCampaign c;  c.model = &model;  c.target.prompt = ...;  c.runs = 1000;  ...
//   ASSIGN_OR_RETURN(FuzzSummary s, run_fuzz_campaign(c));
//   std::cout << format_fuzz_summary(s);  write_file("summary.json", fuzz_summary_json(s));
//
// A composition is everything around the target that the engine's scheduler turns into
// batches: the co-requests (prompt, max tokens, arrival step), the target's own arrival
// step, and the deployment knobs that interact with them (prefill chunk, MoE expert
// capacity factor and overflow). generate_composition(space, seed, i) is a pure function,
// so run i is the same composition in every shard and on every host.
//
// Each run is compared with the target alone under the same engine config (its baseline):
// identical (logits bit-identical at every sampled position), numerical split (logits
// differ, tokens do not) or visible split (a token differs), with the first split's token
// index and its cause. The cause is found in process, without a trace, the way `llmrr diff`
// names it: the first target row (by position) whose hidden state differs, at its first
// differing layer; if the attention half of that layer (L.attn.resid) already differs the
// cause is a batch-dependent plan ("plan"); else if the row's experts differ it is
// "capacity" when the router chose the same experts in both runs (capacity decided) and
// "routing" when the router's own top-k changed; else "plan" (the MLP / expert GEMMs).
//
// Visible splits are shrunk greedily (fewest co-requests, shortest prompts and
// generations, latest arrivals that still split) and saved as a trace pair recorded with
// capture all (solo.trace, split.trace) plus the requests files and the `llmrr record`
// command lines that reproduce them; diff_traces() then confirms and explains the pair.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/moe_router.h"
#include "llmrr/runtime/observer.h"
#include "llmrr/runtime/policy.h"

namespace llmrr::replay {

// ---- compositions -------------------------------------------------------------------

struct CoRequest {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 1;
  int64_t arrival_step = 0;
  bool operator==(const CoRequest&) const = default;
};

struct Composition {
  int64_t target_arrival = 0;
  int32_t prefill_chunk = 64;             // 0 = no limit
  double capacity_factor = 0;             // 0 = dropless
  Overflow overflow = Overflow::kNone;    // kNone exactly when capacity_factor == 0
  std::vector<CoRequest> others;
  bool operator==(const Composition&) const = default;
  int64_t prompt_tokens() const;          // Σ co-request prompt lengths
  // Ordering used by the shrinker: fewer co-requests, then fewer prompt tokens, then fewer
  // generated tokens. A shrunk composition is never bigger than its original.
  bool smaller_than(const Composition& other) const;
};

// What the generator draws from. A pinned knob (an optional with a value) is the same in
// every run; an unpinned one is drawn per run.
struct FuzzSpace {
  int32_t max_co_requests = 16;
  int32_t min_prompt = 1, max_prompt = 48;  // co-request prompt lengths, inclusive
  int32_t max_new = 32;                     // co-request max tokens in [1, max_new]
  int64_t max_arrival = 12;                 // co-request arrivals in [0, max_arrival]
  int64_t max_target_arrival = 8;           // target arrival in [0, max_target_arrival]
  std::optional<int32_t> prefill_chunk;     // unpinned: one of 0, 8, 16, 32, 64
  // Unpinned capacity (MoE models only; dense models are always dropless): dropless or a
  // factor of 1, 1.25, 1.5, 2 with overflow drop or reroute.
  std::optional<double> capacity_factor;    // pinned: 0 = dropless
  std::optional<Overflow> overflow;         // pinned overflow (with a factor > 0)
  bool moe = false;
  int32_t vocab = 256;
  int32_t max_positions = 2048;
  int32_t token_lo = 0, token_hi = 0;       // co-request prompt tokens in [lo, hi); 0 = vocab
};

// The space for a model: printable bytes for the builtin byte-level vocabularies.
FuzzSpace default_fuzz_space(const ModelConfig& model);

// Composition i of the campaign with `seed`: a pure function of (space, seed, index).
Composition generate_composition(const FuzzSpace& space, uint64_t seed, int64_t index);

// ---- one run ------------------------------------------------------------------------

// What the engine is, apart from the composition: the model and the fixed engine options.
struct FuzzEngine {
  const LoadedModel* model = nullptr;
  EngineConfig config;                 // scheduler.prefill_chunk and capacity are replaced
  PolicyKind policy = PolicyKind::kProduction;
  VirtualDevice device;
  int32_t attn_split = 0;              // invariant split size (0: the model's default)
  int32_t gemm_split = 0;              // invariant K columns per GEMM split (0: no split-K)
  std::shared_ptr<Policy> make_policy() const;
  // The config a composition runs under.
  EngineConfig config_for(const Composition& c) const;
};

struct FuzzTarget {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 32;
};

// The requests a composition submits: the target (id 0, label "target") first, then the
// co-requests (ids 1.., label "co-<i>"), all greedy. `solo`: the target alone.
std::vector<RequestSpec> composition_requests(const FuzzTarget& target, const Composition& c,
                                              bool solo);

// What one run shows of the target: its tokens, per sampled position the logits hash,
// per (position, layer) its hidden-state hashes and its routing.
struct TargetObservation {
  std::vector<int32_t> tokens;
  std::vector<uint64_t> logits;          // by generated-token index
  struct RowLayer {
    uint64_t attn = 0;                   // L.attn.resid
    uint64_t out = 0;                    // L.out
    std::vector<int32_t> chosen, experts;  // MoE layers only
  };
  std::map<int32_t, std::vector<RowLayer>> rows;  // position → per layer
  int64_t dropped = 0, rerouted = 0;     // target slots that capacity moved
};

// Runs `c` (or the target alone) in process and observes the target. `observers` are
// added too (a recorder, when saving).
Result<TargetObservation> run_composition(const FuzzEngine& engine, const FuzzTarget& target,
                                          const Composition& c, bool solo,
                                          const std::vector<Observer*>& observers = {});

enum class FuzzVerdict : uint8_t { kIdentical = 0, kNumerical = 1, kVisible = 2 };
const char* fuzz_verdict_name(FuzzVerdict v);  // "identical", "numerical", "visible"

struct FuzzComparison {
  FuzzVerdict verdict = FuzzVerdict::kIdentical;
  int32_t numerical_token = -1;  // first generated-token index whose logits differ
  int32_t visible_token = -1;    // first generated-token index whose token differs
  std::string cause;             // "plan" | "routing" | "capacity" | "" (identical)
  int32_t cause_position = -1;   // the first differing row and layer (-1: logits only)
  int32_t cause_layer = -1;
};

FuzzComparison compare_with_baseline(const TargetObservation& baseline,
                                     const TargetObservation& run);

// ---- campaigns ----------------------------------------------------------------------

struct FuzzCampaign {
  FuzzEngine engine;
  std::string model_spec;         // as given (--model), for command lines
  std::string dtype;              // "" | fp32 | bf16, for command lines
  FuzzTarget target;
  std::string prompt_text;        // for the report ("" with --prompt-ids)
  FuzzSpace space;
  uint64_t seed = 0;
  int64_t runs = 100;
  int32_t shard = 0, shards = 1;  // runs i with i % shards == shard
  int32_t jobs = 1;
  int32_t max_shrink = 8;         // distinct visible splits shrunk and saved
  int32_t shrink_budget = 64;     // runs per shrink
  std::string out_dir;            // "" = save nothing
  std::function<void(int64_t done, int64_t total)> progress;
};

// One run as summary.json keeps it: the composition is regenerable from (space, seed,
// index), so only its size and knobs are kept.
struct FuzzRunResult {
  int64_t index = 0;
  int32_t co_requests = 0;
  int64_t prompt_tokens = 0;
  int64_t target_arrival = 0;
  int32_t prefill_chunk = 0;
  double capacity_factor = 0;
  Overflow overflow = Overflow::kNone;
  FuzzComparison comparison;
  std::string completion;         // 64-bit hash (hex) of the target's tokens
  int64_t dropped = 0, rerouted = 0;  // target slots that capacity moved
};

struct FuzzSplit {
  int64_t first_index = 0;        // the first run with this completion
  std::string completion;
  Composition original, shrunk;
  int32_t shrink_runs = 0;
  FuzzComparison shrunk_comparison;
  std::string dir;                // relative to the summary's directory
  std::vector<std::string> commands;  // llmrr record ... (solo, split), llmrr diff
  std::string diff_verdict, diff_cause, diff_cause_text;  // from diff_traces on the pair
};

struct FuzzSummary {
  // The campaign (merge checks that shards agree on these).
  std::string model_spec, model_identity, policy, dtype;
  std::vector<int32_t> target_prompt;
  std::string prompt_text;
  int32_t max_tokens = 0;
  uint64_t seed = 0;
  int64_t runs = 0;
  int32_t shards = 1;
  std::vector<int32_t> shard_list;  // shards this summary holds
  std::string space_json;           // the generator's space
  // The target alone under the default config, and per completion its tokens and text.
  std::string baseline_completion;
  std::map<std::string, std::vector<int32_t>> completion_tokens;
  std::map<std::string, std::string> completion_text;
  std::vector<FuzzRunResult> results;  // by index
  std::vector<FuzzSplit> splits;
  double seconds = 0;                  // wall time of the runs (not of the shrinking)
  // Aggregates (recomputed from `results` by summarize()).
  int64_t identical = 0, numerical = 0, visible = 0;
  int64_t unique_completions = 0;
  std::map<int32_t, int64_t> numerical_hist, visible_hist;  // token index → runs
  std::map<std::string, int64_t> causes;                    // over numerical + visible
  std::map<std::string, int64_t> visible_causes;
};

void summarize(FuzzSummary* summary);

Result<FuzzSummary> run_fuzz_campaign(const FuzzCampaign& campaign);

std::string fuzz_summary_json(const FuzzSummary& summary);
Result<FuzzSummary> parse_fuzz_summary(const std::string& json_text, const std::string& name);
// Shards of one campaign into one summary (kInvalidArgument when they are not shards of the
// same campaign or overlap). Split directories are rewritten relative to `out_dir` from
// each input's `dirs[i]`.
Result<FuzzSummary> merge_fuzz_summaries(const std::vector<FuzzSummary>& shards,
                                         const std::vector<std::string>& dirs,
                                         const std::string& out_dir);
std::string format_fuzz_summary(const FuzzSummary& summary);

// The composition as JSON (summary.json's form) and back.
std::string composition_json(const Composition& c);

}  // namespace llmrr::replay
