// GPU -> CPU replay: the forced plans pass through, up to the first one the CPU cannot run.
//
// A trace recorded on CUDA with the exact or invariant policy holds only exact plans, which
// the CPU kernels follow bit for bit: it replays on the CPU like any CPU trace. A trace of
// the production (fast) family on CUDA holds cuBLASLt plans: tensor-core GEMMs whose
// accumulation order is the hardware's, which no CPU kernel reproduces. The gate stops the
// replay at the first such plan (in forward order), so everything before it is still
// checked, and remembers where and why.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "llmrr/runtime/policy.h"
#include "llmrr/format/site.h"

namespace llmrr::replay {

struct CpuStop {
  int64_t step = -1;
  SiteId site;
  Plan plan;
};

class CpuGatePolicy final : public Policy {
 public:
  explicit CpuGatePolicy(std::shared_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  Result<Plan> plan(const PlanQuery& query) override;
  const std::optional<CpuStop>& stop() const { return stop_; }

 private:
  std::shared_ptr<Policy> inner_;
  std::optional<CpuStop> stop_;
};

}  // namespace llmrr::replay
