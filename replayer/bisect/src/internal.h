// Internal to the bisect sources (bisect.h is the public face): the session's state
// (BisectSession::Impl) and what its files share. bisect.cc opens a session (R's steps read
// from both traces, aligned into units, the factors listed) and runs it; search.cc replays
// the hybrids and runs the two searches.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/bisect.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/policy.h"

namespace llmrr::replay {

namespace bisect_internal {

// One recorded step that computes rows of R.
struct SideStep {
  int64_t step = 0;
  std::vector<trace::Segment> segments;
  trace::Segment own;  // R's segment
  int64_t row0 = 0;    // its first batch row
  std::vector<trace::SitePlan> plans;
  std::vector<trace::Routing> routing;
};

// What one trace says about R.
struct Side {
  std::string path;
  RequestId id = 0;
  trace::RequestRecord arrival;
  bool have_arrival = false;
  std::vector<SideStep> steps;
  std::map<int32_t, trace::LogitsRecord> logits;  // by row position
  std::map<int32_t, int32_t> tokens;              // by token position
};

// A unit of R's timeline: one A step and one B step computing the same positions
// (aligned), or a run of steps of each covering the same positions in different chunks.
struct Unit {
  int32_t first = 0, end = 0;  // positions [first, end)
  std::vector<int32_t> a, b;   // indices into Side::steps
  bool aligned() const { return a.size() == 1 && b.size() == 1; }
};

inline const trace::Routing* find_routing(const std::vector<trace::Routing>& v, int32_t layer) {
  for (const trace::Routing& r : v) {
    if (r.layer == layer) return &r;
  }
  return nullptr;
}

// A hybrid's schedule and forced routing (search.cc).
class ListSchedule;
class TableRouting;

}  // namespace bisect_internal

using bisect_internal::find_routing;
using bisect_internal::ListSchedule;
using bisect_internal::Side;
using bisect_internal::SideStep;
using bisect_internal::TableRouting;
using bisect_internal::Unit;

struct BisectSession::Impl {
  BisectOptions options;
  BisectReport report;
  std::unique_ptr<trace::TraceReader> ra, rb;
  LoadedModel owned_model;
  const LoadedModel* model = nullptr;
  Side a, b;
  std::vector<Unit> units;
  bool force_routing = false;
  EngineConfig config;
  int32_t numerical_universe = 0;  // factors [0, n) act on row P

  std::mutex mu;
  std::unordered_map<std::string, Outcome> memo;
  std::atomic<int64_t> replays{0}, hits{0};

  // Rows the hybrid must compute: through row P (numerical) or V - 1 (visible).
  int32_t default_through() const {
    return report.visible_position >= 0 ? report.visible_position - 1 : report.split_position;
  }

  const trace::RunHeader& a_header_for_policy() const { return report.a_header; }
  Status build_units(int32_t horizon);
  void list_factors(int32_t horizon);
  Outcome replay(const std::vector<int32_t>& set, int32_t through);
  void add_side_step(const Side& side, const SideStep& st, bool is_b, ListSchedule* sched,
                     PlanTable* plans, TableRouting* routing) const;
  // `seed`: a set that may already reproduce (the numerical split's, for the visible one).
  SearchResult search(bool visible, int32_t through, int32_t universe,
                      const std::vector<int32_t>& seed = {});
};

}  // namespace llmrr::replay
