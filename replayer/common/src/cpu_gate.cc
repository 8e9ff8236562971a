#include "cpu_gate.h"

#include "llmrr/kernels/cublaslt_plan.h"

namespace llmrr::replay {

Result<Plan> CpuGatePolicy::plan(const PlanQuery& q) {
  ASSIGN_OR_RETURN(Plan p, inner_->plan(q));
  if (!cublaslt::is_cublaslt(p)) return p;
  stop_ = CpuStop{q.step, q.site, p};
  return make_error(ErrorCode::kUnsupported,
                    "step " + std::to_string(q.step) + ", site " + site_name(q.site) +
                        ": the recorded plan is a tensor-core GEMM (" + plan_to_string(p) +
                        "), which the CPU cannot reproduce; replay with --device cuda on the "
                        "GPU model it was recorded on");
}

}  // namespace llmrr::replay
