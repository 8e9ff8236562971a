#include "llmrr/replayer/trace_feed.h"

#include <string>
#include <utility>

namespace llmrr::replay {

TraceFeed::TraceFeed(const trace::TraceReader& reader, ArrivalFn on_arrival, int64_t last_step)
    : cursor_(reader.steps(std::numeric_limits<int64_t>::min(), last_step)),
      on_arrival_(std::move(on_arrival)) {}

Result<std::optional<ScheduledStep>> TraceFeed::next() {
  plans_.clear();
  routing_.clear();
  Result<bool> got = cursor_.next(&step_);
  if (!got.ok()) {
    has_current_ = false;
    return got.status().with_context("replay: reading the step after " +
                                     std::to_string(steps_read_) + " steps: ");
  }
  if (!*got) {
    has_current_ = false;
    return std::optional<ScheduledStep>();
  }
  has_current_ = true;
  ++steps_read_;
  for (const trace::RequestRecord& a : step_.arrivals) {
    if (on_arrival_) RETURN_IF_ERROR(on_arrival_(to_request_spec(a)));
  }
  for (const trace::SitePlan& sp : step_.plans) plans_.emplace(sp.site, to_plan(sp.plan));
  for (const trace::Routing& r : step_.routing) {
    ForcedRouting& f = routing_[r.layer];
    f.rows = r.rows;
    f.k = r.k;
    f.capacity = r.capacity;
    f.experts = r.experts;
    f.outcome = r.outcome;
  }
  ScheduledStep s;
  s.step = step_.step;
  s.segments.reserve(step_.segments.size());
  for (const trace::Segment& g : step_.segments) s.segments.push_back(to_segment(g));
  return std::optional<ScheduledStep>(std::move(s));
}

std::optional<Plan> TraceFeed::plan(int64_t step, SiteId site) {
  if (!has_current_ || step != step_.step) return std::nullopt;
  auto it = plans_.find(site.packed());
  if (it == plans_.end()) return std::nullopt;
  return it->second;
}

const ForcedRouting* TraceFeed::routing(int64_t step, int32_t layer) {
  if (!has_current_ || step != step_.step) return nullptr;
  auto it = routing_.find(layer);
  return it == routing_.end() ? nullptr : &it->second;
}

}  // namespace llmrr::replay
