// MemoryTrace: a whole run recorded in memory — schedule, plans, routing, logits, tokens,
// and optionally a 64-bit hash of every row at every site — that can drive a replay of
// itself (it is a ScheduleSource, a PlanSource and a RoutingSource). Tests use it for
// record → replay → compare without files; it is also the reference for what the on-disk
// recorder and replayer must carry.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/observer.h"
#include "llmrr/runtime/policy.h"

namespace llmrr {

class MemoryTrace : public Observer,
                    public ScheduleSource,
                    public PlanSource,
                    public RoutingSource {
 public:
  struct Options {
    bool logits = true;      // keep every sampled row's logits
    bool row_hashes = false; // hash every row of every site
  };
  MemoryTrace() = default;
  explicit MemoryTrace(Options o) : opt_(o) {}

  // Observer.
  bool wants_rows(SiteId site) override { return opt_.row_hashes; }
  void on_arrival(int64_t step, const RequestSpec& request) override;
  void on_step(const StepInfo& step) override;
  void on_plan(int64_t step, SiteId site, const Plan& plan) override;
  void on_rows(const RowsView& rows) override;
  void on_routing(const RoutingView& routing) override;
  void on_logits(const LogitsView& logits) override;
  void on_token(const TokenEvent& token) override;
  void on_finish(const RequestFinish& finish) override;

  // ScheduleSource: the recorded steps, from the first (rewind() restarts).
  Result<std::optional<ScheduledStep>> next() override;
  void rewind() { cursor_ = 0; }
  // PlanSource / RoutingSource.
  std::optional<Plan> plan(int64_t step, SiteId site) override { return plans_.plan(step, site); }
  const ForcedRouting* routing(int64_t step, int32_t layer) override;

  // What was recorded.
  const std::vector<RequestSpec>& arrivals() const { return arrivals_; }
  const std::vector<ScheduledStep>& steps() const { return steps_; }
  PlanTable& plans() { return plans_; }
  const PlanTable& plans() const { return plans_; }
  std::map<std::pair<int64_t, int32_t>, ForcedRouting>& routings() { return routing_; }
  // Logits of (request, position) — the row at `position`, predicting position + 1.
  const std::map<std::pair<RequestId, int32_t>, std::vector<float>>& logits() const {
    return logits_;
  }
  const std::vector<float>* logits_at(RequestId request, int32_t position) const;
  const std::vector<int32_t>& tokens(RequestId request) const;
  const std::map<RequestId, RequestFinish>& finishes() const { return finishes_; }
  // Row hashes keyed by (step, packed site, batch row).
  const std::map<std::tuple<int64_t, uint64_t, int64_t>, uint64_t>& row_hashes() const {
    return hashes_;
  }
  // The recorded step that holds `request`'s row at `position` (-1 if none).
  int64_t step_of(RequestId request, int32_t position) const;
  // The recorded batch row of that row (-1 if none).
  int64_t batch_row_of(RequestId request, int32_t position) const;

 private:
  Options opt_;
  std::vector<RequestSpec> arrivals_;
  std::vector<ScheduledStep> steps_;
  size_t cursor_ = 0;
  PlanTable plans_;
  std::map<std::pair<int64_t, int32_t>, ForcedRouting> routing_;
  std::map<std::pair<RequestId, int32_t>, std::vector<float>> logits_;
  std::map<RequestId, std::vector<int32_t>> tokens_;
  std::map<RequestId, RequestFinish> finishes_;
  std::map<std::tuple<int64_t, uint64_t, int64_t>, uint64_t> hashes_;
};

// 64-bit hash of a row's raw bits (xxh3).
uint64_t hash_row(const float* data, int64_t n);

}  // namespace llmrr
