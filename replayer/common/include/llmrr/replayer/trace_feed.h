// TraceFeed: a trace driving an Engine — the on-disk twin of MemoryTrace. It is the
// ScheduleSource (the recorded batches), the PlanSource (the recorded plans, arrival
// permutations included) and the RoutingSource (the recorded experts and outcomes) of a
// replay, streaming the trace one step at a time through a StepCursor: memory stays at
// one decoded chunk plus one step, whatever the trace's size.
//
// Requests are handed to the engine as the stream reaches their arrival records (before
// the step that first schedules them), through `on_arrival`; a request-alone replay
// passes only the one request it replays.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/recorder/convert.h"  // to_plan, to_request_spec, to_segment
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/observer.h"
#include "llmrr/runtime/policy.h"

namespace llmrr::replay {

class TraceFeed : public ScheduleSource, public PlanSource, public RoutingSource {
 public:
  using ArrivalFn = std::function<Status(const RequestSpec&)>;

  // `reader` must outlive the feed. Steps in [first, last] only (a replay starts at the
  // first step; tests may stop early).
  TraceFeed(const trace::TraceReader& reader, ArrivalFn on_arrival, int64_t last_step = INT64_MAX);

  // ScheduleSource: reads the next recorded step, hands its arrivals over, returns its batch.
  Result<std::optional<ScheduledStep>> next() override;
  // PlanSource: the current step's plan of `site` (nullopt for another step or no plan).
  std::optional<Plan> plan(int64_t step, SiteId site) override;
  // RoutingSource: the current step's routing of `layer`.
  const ForcedRouting* routing(int64_t step, int32_t layer) override;

  // The step record last returned by next() (valid until the following next()).
  const trace::StepRecord& current() const { return step_; }
  bool has_current() const { return has_current_; }
  int64_t steps_read() const { return steps_read_; }

 private:
  trace::StepCursor cursor_;
  ArrivalFn on_arrival_;
  trace::StepRecord step_;
  bool has_current_ = false;
  int64_t steps_read_ = 0;
  std::unordered_map<uint64_t, Plan> plans_;            // current step, by packed site
  std::unordered_map<int32_t, ForcedRouting> routing_;  // current step, by layer
};

}  // namespace llmrr::replay
