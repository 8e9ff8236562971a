// The cuBLASLt algorithm as a Plan (kernels/plan.h, CublasLtAlgo): pure data, no CUDA needed.
//
// On CUDA the production policy's GEMMs run through cuBLASLt. The engine asks cuBLASLt's
// heuristic (cublasLtMatmulAlgoGetHeuristic) for the shape, reads the chosen algorithm's
// configuration attributes into a CublasLtAlgo (kernels/cuda/cublaslt_gemm.cu), and turns it
// into the Plan it reports and the recorder stores (to_plan below). A replay takes the Plan
// back (from_plan, which rejects anything malformed with a reason), re-creates the algorithm
// with cublasLtMatmulAlgoInit + cublasLtMatmulAlgoConfigSetAttribute and runs it: the same
// algorithm on the same GPU model and cuBLASLt version computes the same bits.
//
// The CPU cannot reproduce a tensor-core GEMM (its accumulation order is the hardware's), so
// is_cublaslt() is how the CPU engine and the replayer tell such a plan apart.
//
// The numeric constants are cuBLASLt's (cublas_api.h, library_types.h, cublasLt.h);
// kernels/cuda/cublaslt_gemm.cu static_asserts that they match the headers it builds with.
#pragma once

#include <cstdint>
#include <string>

#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/plan.h"

namespace llmrr::cublaslt {

// cublasComputeType_t values the engine uses.
inline constexpr int32_t kCompute32F = 68;          // CUBLAS_COMPUTE_32F (bf16 inputs)
inline constexpr int32_t kCompute32FFastTF32 = 77;  // CUBLAS_COMPUTE_32F_FAST_TF32 (fp32 inputs)
// cudaDataType values.
inline constexpr int32_t kR32F = 0;    // CUDA_R_32F
inline constexpr int32_t kR16F = 2;    // CUDA_R_16F
inline constexpr int32_t kR16BF = 14;  // CUDA_R_16BF
// cublasLtReductionScheme_t: NONE, INPLACE, COMPUTE_TYPE, OUTPUT_TYPE.
inline constexpr uint32_t kReductionNone = 0, kReductionInplace = 1, kReductionComputeType = 2,
                          kReductionOutputType = 4;
// Bounds no real algorithm comes near; a value past them is a corrupt or hostile trace.
inline constexpr int32_t kMaxSplitK = 1024;
inline constexpr uint64_t kMaxWorkspace = uint64_t{1} << 32;  // 4 GiB

// The matmul types of the engine's GEMM for weights of `weight_type` (fp32 activations,
// fp32 output, fp32 accumulation): bf16 weights take bf16 activations (exact: the engine's
// bf16 activations are bf16 values) on tensor cores; fp32 weights use TF32 tensor cores.
CublasLtAlgo matmul_types(kernels::WeightType weight_type);

// Empty when `algo` is well formed, else what is wrong (field, expected, found).
std::string check(const CublasLtAlgo& algo);

// The Plan of a GEMM that runs `algo` (op kGemm, splits = its split-K count for reports).
Plan to_plan(const CublasLtAlgo& algo);

// The algorithm a Plan asks for, into *out. Returns an empty string, or why the plan is not
// a runnable cuBLASLt GEMM plan (another op, an exact plan, arrival order, a malformed
// algorithm); *out is untouched then.
std::string from_plan(const Plan& plan, CublasLtAlgo* out);

// Whether the plan runs through cuBLASLt (and so only on a GPU).
inline bool is_cublaslt(const Plan& plan) {
  return plan.cublaslt.has_value();
}

// "cuBLASLt algo 66, tile 21, stages 15, split-K 1, reduction none, swizzle 0, custom 0,
// inner shape 0, cluster shape 0, workspace 0 B, bf16 x bf16 -> f32 (compute 32F)".
std::string describe(const CublasLtAlgo& algo);
// "f32", "f16", "bf16", or "type N".
std::string data_type_name(int32_t type);
// "none", "in place", "compute type", "output type", or "scheme N".
std::string reduction_name(uint32_t scheme);

}  // namespace llmrr::cublaslt
