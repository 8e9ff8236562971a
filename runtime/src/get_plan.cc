#include "get_plan.h"

#include <string>
#include <utility>

namespace llmrr {

Result<Plan> get_plan(const StepBatch& b, Policy& policy, PlanQuery q, const PlanDevice& device) {
  q.step = b.step;
  auto where = [&] { return "step " + std::to_string(b.step) + ", site " + site_name(q.site); };
  Plan p;
  if (q.op == OpKind::kGemm && device.gemm && policy.gemm_from_device()) {
    ASSIGN_OR_RETURN(p, device.gemm(q));
  } else {
    ASSIGN_OR_RETURN(p, policy.plan(q));
  }
  if (p.cublaslt && !device.runs_cublaslt) {
    return make_error(
        ErrorCode::kUnsupported,
        where() + ": " + plan_to_string(p) + " is a tensor-core GEMM; only --device cuda runs it");
  }
  const bool combine = q.op == OpKind::kCombine;
  if (std::string why = plan_check(p, combine ? b.full_rows : 0, combine ? q.top_k : 0);
      !why.empty()) {
    return make_error(ErrorCode::kSemantic,
                      where() + ": bad plan (" + plan_to_string(p) + "): " + why);
  }
  return p;
}

}  // namespace llmrr
