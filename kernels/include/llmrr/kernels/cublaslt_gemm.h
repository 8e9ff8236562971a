// The production GEMM on CUDA: y = x·Wᵀ through cuBLASLt on tensor cores, with the
// algorithm as the plan (kernels/cublaslt_plan.h). Built only with LLMRR_CUDA (target
// llmrr_cublaslt); compiles without the CUDA headers.
//
//   ASSIGN_OR_RETURN(auto lt, CublasLtGemm::create(stream));
//   ASSIGN_OR_RETURN(CublasLtAlgo algo, lt->choose(m, w));          // the heuristic's pick
//   RETURN_IF_ERROR(lt->gemm(x, ldx, m, w, y, ldy, algo, stream));  // or a recorded algo
//
// Layout: x [m, ldx] and y [m, ldy] row-major fp32 device memory; w a DeviceWeight (N×K,
// stored K-major, i.e. column-major N×K with leading dimension N). cuBLASLt computes the
// column-major product yᵀ[N×m] = W[N×K] · xᵀ[K×m], so A = the weights and B = the
// activations. With bf16 weights the activations are converted to bf16 on the device first
// (exact for the engine's bf16 activations); fp32 weights run in TF32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "llmrr/format/status.h"
#include "llmrr/kernels/cuda_ops.h"
#include "llmrr/kernels/plan.h"

namespace llmrr::kernels::cuda {

class CublasLtGemm {
 public:
  // One cuBLASLt handle and a workspace of `workspace_bytes` (the heuristic is told so,
  // and a recorded algorithm that needs more is refused with the amount).
  static Result<std::unique_ptr<CublasLtGemm>> create(Stream stream,
                                                      size_t workspace_bytes = 32u << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // The algorithm cuBLASLt's heuristic picks for an m-row product with `w` (cached per
  // shape: the heuristic is asked once per (m, n, k, type)).
  Result<CublasLtAlgo> choose(int64_t m, const DeviceWeight& w);

  // y = x·Wᵀ with `algo`, re-created by cublasLtMatmulAlgoInit + ConfigSetAttribute and
  // checked by cublasLtMatmulAlgoCheck: an algorithm this GPU or cuBLASLt cannot run is
  // kUnsupported, naming it. The types in `algo` must be those of `w`.
  Status gemm(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
              const CublasLtAlgo& algo, Stream stream);

  // cublasLtGetVersion as "major.minor.patch", e.g. "13.1.0".
  static std::string version();

  struct Impl;

 private:
  explicit CublasLtGemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrr::kernels::cuda
