// Mismatch: the rollout against the trainer. An RL rollout (A: vLLM, llmrr's engine, any
// recorder) sampled a completion; a trainer (B: llmrr.runtimes.torch.score, one teacher-forced
// forward over prompt + completion) recomputed the log-probs of the same tokens. The two
// differ, and RL users measure it (|Δlogp|, k3-KL, χ², Pearson) and correct for it. This says,
// per token, what both log-probs were, how far apart, and the first site where the rows that
// produced them differ; per layer, how often the first difference is there; for MoE, how often
// the two routed a position to the same experts.
//
//   ASSIGN_OR_RETURN(MismatchReport m, mismatch_traces("rollout.trace", "trainer.trace", {}));
//   std::cout << render_mismatch(m, /*json=*/false);
//
// Requests are paired by tokens (diff's --align tokens rule, tokens_cover in diff.h): A's
// request with the first B request whose prompt + completion agrees with its own over the
// shorter one, which covers both prompts. A token is the one at position p + 1 of the longer
// sequence, predicted by the row at p in each run (p below the common length, so both runs
// saw the same inputs); it is compared where both runs recorded logits at p. Its log-prob is its logit minus the row's logsumexp (format 1.5): exact for a
// token in the recorded top-K, unknown otherwise (record with a larger top_k, or --logits
// full). Both traces are read whole once, holding per position its site hashes, logits
// summary and routing: a few hundred bytes per position.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"

namespace llmrr::replay {

struct MismatchOptions {
  double threshold = 0.01;  // a token whose |Δlogp| exceeds this counts as past it
};

struct TokenMismatch {
  int32_t position = 0;  // of the row whose logits predict the token (at position + 1)
  int32_t token = 0;
  std::optional<double> logp_a, logp_b;  // nullopt: outside that run's top-K, or no logsumexp
  bool logits_equal = false;             // the two logits rows are bit-identical
  // The first site (forward order) among those both runs hold for the row at `position`
  // whose fingerprints differ; "logits" when every held site agrees and only the logits
  // differ; "" when nothing differs.
  std::string first_site;
  int32_t first_layer = -1;  // that site's layer (-1: embed, final_norm, logits, none)
};

// What RL frameworks report, over the tokens whose two log-probs are known. A is the rollout
// (the sampling policy), B the trainer: log_ratio = logp_b - logp_a.
struct MismatchStats {
  int64_t tokens = 0;         // compared: both log-probs known
  int64_t unknown = 0;        // a log-prob missing on a side (outside its top-K)
  int64_t logits_differ = 0;  // of all compared positions, those whose logits differ bitwise
  int64_t past_threshold = 0;
  double mean_abs_dlogp = 0, max_abs_dlogp = 0;
  double mean_abs_dp = 0, max_abs_dp = 0;  // |exp(logp_a) - exp(logp_b)|
  double k3_kl = 0;  // mean of exp(r) - 1 - r, r = log_ratio: KL(A || B) estimated on A's samples
  double chi2 = 0;   // mean of (exp(r) - 1)^2: χ²(B || A) on A's samples
  double pearson = 0;  // correlation of logp_a and logp_b (NaN below two tokens or no spread)
};

struct RequestMismatch {
  uint64_t a = 0, b = 0;
  std::string label;
  int32_t prompt_len_a = 0, prompt_len_b = 0;
  int32_t covered = 0;  // positions of the common sequence
  std::vector<TokenMismatch> tokens;
  MismatchStats stats;
};

// One MoE layer: positions both runs routed, and those routed to the same set of experts.
struct RoutingAgreement {
  int32_t layer = 0;
  int64_t positions = 0;
  int64_t same = 0;
};

struct MismatchReport {
  std::string a_path, b_path;
  std::string a_producer, b_producer;  // the run headers' tool_version
  bool sites_comparable = true;  // both traces hash rows the same way (engine.fingerprint)
  std::string fingerprint_a, fingerprint_b;
  double threshold = 0.01;
  std::vector<RequestMismatch> requests;
  std::vector<uint64_t> only_a, only_b;  // requests left unpaired
  MismatchStats total;
  // First differing layer of each token whose rows differ: layer -> tokens (-1: a site
  // outside the layers: embed, final_norm, or the logits alone).
  std::map<int32_t, int64_t> first_layer_histogram;
  std::map<std::string, int64_t> first_site_histogram;
  std::vector<RoutingAgreement> routing;  // MoE layers both traces routed
  bool identical() const;  // every compared token: same logits bits
};

Result<MismatchReport> mismatch_traces(const std::string& a_path, const std::string& b_path,
                                       const MismatchOptions& options);

// Text (`top` tokens of each request by |Δlogp|) or one JSON object (every token).
std::string render_mismatch(const MismatchReport& report, bool json, int top = 10);

}  // namespace llmrr::replay
