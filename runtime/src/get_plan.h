// The plan of one op at one site, for both forwards: the CPU's (engine/forward.cc, mla.cc,
// moe.cc, through Engine::Impl::get_plan) and the CUDA one (cuda/cuda_forward.cc). They ask
// the same questions (step_batch.h's query builders) and get their answers here, so a plan
// is the same whichever device runs the step — except where the device has its own GEMM
// heuristic and the policy defers to it (Policy::gemm_from_device: production on CUDA asks
// cuBLASLt). The caller tells its observers (the CPU at once, CUDA after the step's sync).
#pragma once

#include <functional>

#include "llmrr/format/status.h"
#include "llmrr/kernels/plan.h"
#include "llmrr/runtime/policy.h"
#include "step_batch.h"

namespace llmrr {

// What the device running the step adds to the policy's answer.
struct PlanDevice {
  // The device's own heuristic for this GEMM (CUDA: cuBLASLt's algorithm for the weight being
  // multiplied), asked instead of the policy when the policy defers to it. Empty: none (the
  // CPU; a query that is no GEMM).
  std::function<Result<Plan>(const PlanQuery&)> gemm;
  // Runs tensor-core (cuBLASLt) plans, e.g. forced from a GPU trace. The CPU does not: such
  // a plan is kUnsupported there.
  bool runs_cublaslt = false;
};

// q with the step's number, answered by the policy (or the device's GEMM heuristic), then
// checked: kUnsupported for a cuBLASLt plan the device cannot run, kSemantic for a malformed
// plan (plan_check; a combine's arrival order against the step's rows), each naming the step
// and the site.
Result<Plan> get_plan(const StepBatch& b, Policy& policy, PlanQuery q, const PlanDevice& device);

}  // namespace llmrr
