// Diff: where two runs of the same requests split, and why (DESIGN, data flow "diff A B").
//
//   ASSIGN_OR_RETURN(DiffReport d, diff_traces("a.trace", "b.trace", {}));
//   std::cout << render_diff(d, /*json=*/false);
//
// Each trace is opened once. Traces that both hold kernel records (llmrr record-cuda,
// diff_kernels.h) get their kernel sequences compared too, and alone when neither holds
// engine steps; the report carries both, and render_diff writes them as text or one JSON
// object.
//
// Two passes. The first streams both traces once (one thread each, bounded memory: one
// decoded chunk per trace plus a few dozen bytes per (request, position)) and keeps, per
// request row, the step and batch row that computed it and an order-free digest of its
// fingerprints at every site; per sampled row its logits fingerprint, top two and token.
// Requests are aligned by prompt hash and the sampling params that can change the output
// (temperature, top-k, top-p, and the seed only when temperature > 0: at temperature 0 the
// choice is greedy and none of them matters), or by prompt alone, or by request id, or one
// explicit pair; positions by position. The second pass reads, by random access, only the few steps
// that explain each split: the first differing row's step in each run, where the first differing
// site (forward order, SiteId::operator<) among the sites both traces hold for that row is found,
// and the causes present there: batch composition, the plans of the ops that feed that site,
// routing of that row, arrival-order (atomic) reductions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"
#include "llmrr/replayer/diff_kernels.h"
#include "llmrr/runtime/observer.h"

namespace llmrr::replay {

// How requests of A are paired with requests of B (the n-th occurrence of a key in A with the
// n-th in B).
enum class AlignBy : uint8_t {
  kPromptAndParams = 0,  // prompt hash + the sampling params that can change the output
  kPrompt = 1,           // prompt hash alone
  kIds = 2,              // request id
  // Token sequence (prompt + what it generated): A's request is paired with the first B
  // request (by arrival) whose sequence agrees with it over the shorter one, which covers both
  // prompts: a rollout (prompt P, completion C) against a trainer's forward over P + C (one
  // prefill), whatever the steps and chunking. Positions are compared where both hold rows or
  // logits. Pairing waits for both scans (every summary is held until then).
  kTokens = 3,
};
const char* align_by_name(AlignBy a);  // "prompt hash and sampling params", "prompt hash", ...

// --align tokens' rule: two requests' sequences (prompt + completion) cover each other when
// they agree over the shorter one and that length covers both prompts. Returns the length,
// else -1.
int32_t tokens_cover(const std::vector<int32_t>& seq_a, size_t prompt_a,
                     const std::vector<int32_t>& seq_b, size_t prompt_b);

// The rows of a padded batch (llmrr.runtimes.torch): one request labelled "padding" of id
// 2^32 - 1. --align tokens and mismatch pair no such request.
inline bool is_padding_request(const trace::RequestRecord& r) {
  return r.id == 0xFFFFFFFFu && r.label == "padding";
}

struct DiffOptions {
  AlignBy align = AlignBy::kPromptAndParams;
  // Compare these two requests only (A's id, B's id) instead of aligning by prompt.
  std::optional<std::pair<RequestId, RequestId>> request;
  // Model spec for decoding token text ("" = as A's header records, "none" = print ids).
  std::string model;
  int32_t continuation = 12;    // tokens of each continuation shown after a visible split
  int32_t max_candidates = 64;  // differing rows examined per request before giving up
  bool parallel = true;         // read the two traces on two threads
};

enum class Verdict : uint8_t {
  kIdentical = 0,  // logits and tokens bit-identical at every common position
  kNumerical = 1,  // logits differ somewhere, every token is the same
  kVisible = 2,    // a token differs
};
const char* verdict_name(Verdict v);  // "identical", "numerical split", "visible split"

// The batch of the step where a difference appeared, in one run.
struct BatchSide {
  int64_t step = -1;
  int64_t rows = 0;
  int32_t requests = 0;
  int32_t prefill_segments = 0;
  int32_t decode_segments = 0;
  int64_t batch_row = -1;  // the differing row's place in it
  trace::Segment own;      // the differing row's segment
  std::vector<trace::Segment> segments;
};

// One op whose plan differs between the runs at the step of the first difference.
struct PlanDifference {
  uint64_t site = 0;  // packed SiteId
  std::string site_name;
  bool in_a = false, in_b = false;
  trace::PlanRecord a, b;
  std::string a_text, b_text;         // plan_to_string
  bool arrival_only = false;          // same plan but for the arrival (atomic) order
  bool is_first_site = false;         // the plan of the first differing site itself
  bool output_checked_equal = false;  // its rows were compared and equal for this row
};

// Routing of the differing row at one MoE layer in both runs.
struct RoutingDifference {
  int32_t layer = 0;
  std::vector<int32_t> chosen_a, chosen_b;    // the router's top-k
  std::vector<int32_t> experts_a, experts_b;  // after capacity (-1 dropped)
  std::vector<trace::RouteOutcome> outcome_a, outcome_b;
  int32_t capacity_a = 0, capacity_b = 0;
  int64_t rows_a = 0, rows_b = 0;  // tokens routed at that layer and step
  int64_t rerouted_a = 0, dropped_a = 0, rerouted_b = 0, dropped_b = 0;  // whole step
  bool row_differs = false;  // this row's experts differ
};

// One op whose record (format 1.6: what a runtime's op ran with, e.g. llama.cpp's graph
// nodes) differs between the runs for the differing row, at the first differing site's layer.
struct OpDifference {
  std::string name, op;  // the runtime's name ("kq", "graph") and kind ("MUL_MAT")
  int32_t layer = -1;    // the layer compared; -1 outside the layers
  bool in_a = false, in_b = false;
  std::string attrs_a, attrs_b;
  std::vector<std::string> changes;  // "src1 f32:64x1 vs f32:64x19", one per differing key
};

struct RequestDiff {
  RequestId a = 0, b = 0;
  std::string label;
  int32_t prompt_len = 0;
  int32_t generated_a = 0, generated_b = 0;
  Verdict verdict = Verdict::kIdentical;
  int32_t compared_logits = 0;  // sampled positions compared

  // Numerical split: the first sampled position whose logits differ bitwise.
  int32_t split_position = -1;
  int64_t split_step_a = -1, split_step_b = -1;
  trace::Fingerprint logits_a, logits_b;
  float logits_top_max_delta = 0;  // max |Δ| over token ids in both top-K lists
  int32_t logits_top_common = 0;

  // Where the difference first appeared: the first differing row (by position) and its
  // first differing site among those both traces hold.
  bool root_found = false;
  int32_t root_position = -1;
  std::string first_site;  // "" when no captured site differs
  uint64_t first_site_packed = 0;
  trace::Fingerprint site_a, site_b;
  int32_t common_sites = 0;  // sites both hold for that row
  std::string capture_note;  // what the captured sites cannot tell
  BatchSide batch_a, batch_b;
  bool batch_differs = false;
  std::vector<PlanDifference> plans;
  std::optional<RoutingDifference> routing;
  std::vector<OpDifference> ops;  // in graph order; the "graph" record last
  // "plan", "arrival-order", "routing", "op" (what an op ran with: its shapes, layout,
  // weights' buffer, threads), "batch", "weights", "config", "unknown", "".
  std::string cause;
  std::string cause_text;  // one sentence

  // Visible split: the first position whose token differs.
  int32_t visible_position = -1;
  int32_t top1_a = -1, top2_a = -1, top1_b = -1, top2_b = -1;
  float top1_value_a = 0, top2_value_a = 0, top1_value_b = 0, top2_value_b = 0;
  float margin_a = 0, margin_b = 0;
  std::vector<int32_t> context;  // tokens just before the split (common)
  std::vector<int32_t> continuation_a, continuation_b;
  std::string context_text, text_a, text_b;  // decoded when a tokenizer is available
  std::string token_a_text, token_b_text;
  std::string top1_a_text, top2_a_text, top1_b_text, top2_b_text;
  std::vector<std::string> notes;  // e.g. internal rows differ but logits do not
};

struct DiffReport {
  std::string a_path, b_path;
  trace::RunHeader a_header, b_header;
  bool a_complete = true, b_complete = true;
  int64_t a_last_step = -1, b_last_step = -1;
  int64_t a_steps = 0, b_steps = 0;
  int64_t a_requests = 0, b_requests = 0;
  std::string alignment;  // align_by_name(options.align), or "explicit ids"
  std::vector<std::string> header_differences;  // "policy: production vs invariant", ...
  std::vector<RequestDiff> requests;            // common requests, A's arrival order
  std::vector<RequestId> only_a, only_b;
  std::vector<std::string> notes;  // truncated traces, tokenizer missing, ...
  bool text_decoded = false;
  // Both traces hold kernel records: their kernel sequences, compared.
  std::optional<KernelDiffReport> kernels;
  // False when neither trace holds engine steps (two record-cuda traces): only `kernels`
  // is filled in.
  bool engine = true;
  // Every common request identical (requests present in one run only do not count), and the
  // kernel sequences, where compared, identical.
  bool identical() const;
};

// A pair of traces with requests on both sides but none in common is an error
// (kInvalidArgument) whose message says which alignment keys differed: there is nothing to
// compare, which is neither "identical" nor "differ". So is a trace that holds neither a
// whole step nor kernel records (kSemantic, "holds no whole step").
Result<DiffReport> diff_traces(const std::string& a_path, const std::string& b_path,
                               const DiffOptions& options = {});

// The short story: a header line per trace, one paragraph per common request (details for
// the first `max_explained` that split).
// format_diff_story and diff_report_json cover the engine part (`engine` true) only.
std::string format_diff_story(const DiffReport& report, int max_explained = 8);
std::string diff_report_json(const DiffReport& report);
// What `llmrr diff` prints: the story then the kernel diff, or one JSON object whose
// "kernels" member (last) is the kernel diff; the kernel diff alone when `engine` is false.
// JSON ends with a newline.
std::string render_diff(const DiffReport& report, bool json, int max_explained = 8);

}  // namespace llmrr::replay
