// Literal, scalar, single-threaded implementations of plan.h: one loop per sentence of the
// contract, no blocking, no SIMD. Tests compare the fast paths (every ISA, every thread
// count) against these bit for bit; a CUDA port can do the same. Slow on purpose.
#pragma once

#include <cstdint>
#include <span>

#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/plan.h"

namespace llmrr::kernels::ref {

// The 16-lane dot product of plan.h (kRmsNorm): lane j takes i ≡ j (mod 16) with fma in
// increasing i, then pairwise halving 8, 4, 2, 1. dot16(x, x, n) is a chunk's sum of squares.
float dot16(const float* a, const float* b, int64_t n);

// y[i, :] = x[i, :] · Wᵀ with W row-major [n, k] (fp32 values; pass bf16-rounded values to
// check a kBF16 PackedWeight).
void gemm(const float* x, int64_t ldx, int64_t m, const float* w, int64_t n, int64_t k, float* y,
          int64_t ldy, const Plan& plan);

// The same, reading the logical values of a PackedWeight through at().
void gemm(const float* x, int64_t ldx, int64_t m, const PackedWeight& w, float* y, int64_t ldy,
          const Plan& plan);

void rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* weight, float eps,
             float* y, int64_t ldy, const Plan& plan);

void attention(std::span<const AttnRow> rows, const AttnShape& shape, const Plan& plan);

void moe_combine(const float* expert_rows, int64_t ld_expert, const int32_t* src,
                 const float* gates, int64_t rows, int k, int64_t dim, float* out, int64_t ldo,
                 const Plan& plan);

}  // namespace llmrr::kernels::ref
