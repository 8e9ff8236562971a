// Bisect: the smallest set of recorded factors that turns run A into run B for one request
// (DESIGN, data flow "bisect A B").
//
//   ASSIGN_OR_RETURN(BisectReport r, bisect_traces("alone.trace", "loaded.trace", {}));
//   std::cout << format_bisect_report(r);
//
// Counterfactual replay. Diff (diff.h) aligns the request R in both traces and finds its
// split points: P, the first sampled row whose logits differ bitwise (numerical split), and
// V, the first token that differs (visible split). A *hybrid* is a request-alone replay of R
// (DESIGN invariant 3: R's rows depend on other requests only through plans and routing)
// driven by A's trace — A's batches, A's plans, A's routing, forced through the engine's
// replay hooks (ScheduleSource, forced PlanSource, RoutingSource) — with some of B's factors
// swapped in. The factors are every point where A and B differ for R, up to the split:
//
// - plan: the plan of one (step, site) where both runs ran that op with different plans.
//   Steps are aligned by R's positions, not by step number: A's step computing R's positions
//   [p, q) pairs with B's step computing the same positions (B's may be numbered later).
//   A site only one run ran at a step (an expert only B's batch used) is no factor: the
//   hybrid takes the plan of the run that has one, and where neither has (a hybrid routes R
//   to an expert neither batch used) A's policy plans it for A's batch.
// - routing: R's experts and outcomes at one (step, layer). Only when expert capacity (or
//   a recorded override) decided routing in A or B: routing then depends on other requests'
//   tokens, which a request-alone replay does not compute, so it is forced — A's unless the
//   factor is swapped. When both runs are dropless and every recorded expert is the
//   router's own choice, routing is recomputed from R's rows in every hybrid instead:
//   a routing difference is then a consequence of earlier numerical differences, no cause.
// - schedule: R's own rows, where the runs batch them differently (chunk boundaries:
//   positions [p, q) in one step of A and in three of B). Other requests' rows reach R only
//   through plans and routing, so a step's composition is a factor of its own only there;
//   the rest of a composition change shows as the plan and routing factors it caused at that
//   step (grouped under that step). Swapping a schedule factor takes B's steps for those
//   positions whole: B's batches, plans and routing (there is no A step to align them with).
//
// Delta debugging (ddmin.h) over the factors ordered by step, then site in forward order
// (layer by layer; routing after plans) — cuts snap to step, then layer boundaries, so the
// search starts with whole steps — finds a 1-minimal set that reproduces B's numerical
// split (the hybrid's logits at P equal B's bit for bit: the full-vocabulary fingerprint;
// R's tokens before P as in both runs) and,
// separately, its visible split (the hybrid samples B's token at V; the tokens before V as in
// both runs). Before searching, the empty set must reproduce A and the full set B (two
// replays); otherwise the report says why no search ran. Replays are memoized by factor set,
// and with `jobs` > 1 the candidates of a ddmin round are replayed in parallel (the answer
// does not depend on `jobs`; the number of replays may, by speculation).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/observer.h"

namespace llmrr::replay {

enum class FactorKind : uint8_t { kSchedule = 0, kPlan = 1, kRouting = 2 };
const char* factor_kind_name(FactorKind kind);  // "schedule", "plan", "routing"

struct Factor {
  FactorKind kind = FactorKind::kPlan;
  int32_t unit = 0;                  // index of R's aligned step (or region) in the timeline
  int64_t step_a = -1, step_b = -1;  // first step of that unit in each trace
  int64_t last_step_a = -1, last_step_b = -1;
  int32_t first_position = 0;  // R's positions [first, last] computed there
  int32_t last_position = 0;
  uint64_t site = 0;                 // kPlan: packed SiteId
  std::string site_name;             // kPlan: "L3.moe.e6.up"; kRouting: "routing L1"
  int32_t layer = -1;                // kPlan (-1 for embed/final_norm/logits), kRouting
  trace::PlanRecord plan_a, plan_b;  // kPlan
  std::string a_text, b_text;        // what A and B did there, in words
  std::string text;                  // the whole factor in one phrase
};

struct BisectOptions {
  // Bisect these two requests (A's id, B's id); default: the first request that splits.
  std::optional<std::pair<RequestId, RequestId>> request;
  std::string model;    // model spec overriding the recorded one ("" = as recorded)
  int32_t jobs = 1;     // replays in parallel
  int32_t threads = 0;  // engine threads per replay; 0: the host's cores / jobs, at most 8
  // Replays each search may run beyond its two sanity checks (0: no limit). ddmin's set
  // reproduces the split at every moment, so a search that reaches the budget reports the
  // set it has narrowed to (SearchResult::exhausted): it reproduces, but a factor of it may
  // be dispensable. Worth it where B differs from A almost everywhere (production against
  // invariant: hundreds of plans, and a numerical split that needs most of them).
  int64_t max_replays = 0;
  // The splits to search: both, or only the numerical or only the visible one.
  enum class Searches : uint8_t { kBoth = 0, kNumerical = 1, kVisible = 2 };
  Searches searches = Searches::kBoth;
  // Called after every replay (from the searching thread).
  std::function<void(const std::string& phase, int64_t replays, int64_t candidates)> progress;
};

struct SearchResult {
  bool ran = false;              // false: no such split, not asked for, or the sanity checks failed
  bool skipped = false;          // not asked for (BisectOptions::searches)
  std::string target;            // "B's logits at position 29" / "B's token 'e' at position 50"
  int32_t position = -1;         // P (a row) or V (a token position)
  int32_t universe = 0;          // factors that can act on it (steps up to that row)
  std::vector<int32_t> minimal;  // indices into BisectReport::factors, in order
  bool seeded = false;           // searched within the numerical split's set (it reproduced)
  bool exhausted = false;        // stopped at max_replays: `minimal` reproduces, unproven minimal
  int64_t replays = 0;           // replays this search ran (cache hits not counted)
  std::string conclusion;        // "... alone reproduces it"
};

struct BisectReport {
  std::string a_path, b_path;
  trace::RunHeader a_header, b_header;
  RequestId request_a = 0, request_b = 0;
  std::string label;
  int32_t prompt_len = 0;
  Verdict verdict = Verdict::kIdentical;
  int32_t split_position = -1;         // P
  int32_t visible_position = -1;       // V
  int32_t token_a = -1, token_b = -1;  // at V
  std::string routing_mode;            // "recomputed" or "forced"
  std::string routing_reason;
  int32_t units = 0;            // aligned steps and schedule regions up to the split
  std::vector<Factor> factors;  // everything that differs up to the visible split
  SearchResult numerical, visible;
  int64_t replays = 0;     // replays run in all (including the two sanity checks)
  int64_t cache_hits = 0;  // candidates answered from the memo
  double seconds = 0;      // wall time of the whole bisect (diff, loading, replays)
  std::vector<std::string> notes;
  bool split() const { return verdict != Verdict::kIdentical; }
  // Every split the options asked for was searched (or there is none).
  bool explained() const {
    return (split_position < 0 || numerical.ran || numerical.skipped) &&
           (visible_position < 0 || visible.ran || visible.skipped);
  }
};

// Errors: unreadable traces; the two traces record different models (kInvalidArgument, the
// message names both identities and weight hashes) or engine precisions; the request is not
// in both traces; the model cannot be loaded. An explained split is a report whose searches
// ran; a pair that does not split is a report with verdict kIdentical. The visible search
// first tries the numerical split's minimal set: when that reproduces the visible split too,
// ddmin runs within it (its 1-minimal subset is 1-minimal all the same).
Result<BisectReport> bisect_traces(const std::string& a_path, const std::string& b_path,
                                   const BisectOptions& options = {});

// The lower level, for tests: the factors of one request pair and a hybrid replay of any
// subset of them.
class BisectSession {
 public:
  // Runs diff, reads R's steps from both traces, aligns them and lists the factors. `model`
  // may be null (loaded from the header, or options.model).
  static Result<std::unique_ptr<BisectSession>> open(const std::string& a_path,
                                                     const std::string& b_path,
                                                     const BisectOptions& options,
                                                     const LoadedModel* model = nullptr);
  ~BisectSession();

  // The report so far: split points, factors, routing mode (no search yet).
  const BisectReport& report() const;

  struct Outcome {
    bool ok = false;  // the replay ran (an engine error makes it false)
    std::string error;
    bool numerical = false;  // logits at P equal B's bit for bit, tokens before as both
    bool visible = false;    // token at V is B's, tokens before as both
    bool matches_a_numerical = false, matches_a_visible = false;
    trace::Fingerprint logits;  // the hybrid's logits at P
    int32_t token = -1;         // the hybrid's token at V
  };
  // One hybrid replay (memoized) up to row `through` (-1: through V - 1, or P when there is
  // no visible split), with the factors `set` (indices into report().factors) swapped in.
  Outcome evaluate(const std::vector<int32_t>& set, int32_t through = -1);

  // Runs the two searches and returns the finished report.
  BisectReport run();

  struct Impl;

 private:
  explicit BisectSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The story: what splits, how many factors, the minimal set of each split in words, replays
// and time.
std::string format_bisect_report(const BisectReport& report);
std::string bisect_report_json(const BisectReport& report);

}  // namespace llmrr::replay
