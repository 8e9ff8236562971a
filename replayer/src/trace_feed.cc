#include "llmrr/replayer/trace_feed.h"

#include <string>
#include <utility>

namespace llmrr::replay {

Plan to_plan(const trace::PlanRecord& r) {
  Plan p;
  p.op = static_cast<OpKind>(r.op);
  p.mode = static_cast<SplitMode>(r.mode);
  p.order = static_cast<CombineOrder>(r.order);
  p.separate_new_kv = r.separate_new_kv;
  p.splits = r.splits;
  p.split_size = r.split_size;
  p.k_tile = r.k_tile;
  p.arrival = r.arrival;
  return p;
}

trace::PlanRecord to_plan_record(const Plan& p) {
  trace::PlanRecord r;
  r.op = static_cast<trace::OpKind>(p.op);
  r.mode = static_cast<trace::SplitMode>(p.mode);
  r.order = static_cast<trace::CombineOrder>(p.order);
  r.separate_new_kv = p.separate_new_kv;
  r.splits = p.splits;
  r.split_size = p.split_size;
  r.k_tile = p.k_tile;
  r.arrival = p.arrival;
  return r;
}

RequestSpec to_request_spec(const trace::RequestRecord& r) {
  RequestSpec s;
  s.id = r.id;
  s.prompt = r.prompt;
  s.sampling.temperature = r.temperature;
  s.sampling.top_k = r.top_k;
  s.sampling.top_p = r.top_p;
  s.sampling.seed = r.seed;
  s.max_tokens = r.max_tokens;
  s.arrival_step = r.arrival_step;
  s.stop_at_eos = r.stop_at_eos;
  s.label = r.label;
  return s;
}

BatchSegment to_segment(const trace::Segment& g) {
  BatchSegment s;
  s.request = g.request;
  s.start = g.start;
  s.count = g.count;
  s.cached = g.cached;
  s.kind = static_cast<SegmentKind>(g.kind);
  s.sample = g.sample;
  return s;
}

TraceFeed::TraceFeed(const trace::TraceReader& reader, ArrivalFn on_arrival, int64_t last_step)
    : reader_(reader),
      cursor_(reader.steps(std::numeric_limits<int64_t>::min(), last_step)),
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
    f.outcome.resize(r.outcome.size());
    for (size_t i = 0; i < r.outcome.size(); ++i) {
      f.outcome[i] = static_cast<RouteOutcome>(r.outcome[i]);
    }
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
