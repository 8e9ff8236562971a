// Entry points private to kernels/ and its tests: the SIMD building blocks, reachable per
// ISA so tests can prove every path computes the scalar definition's bits.
#pragma once

#include <cstdint>

#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/ops.h"

namespace llmrr::kernels::internal {

// y[i] = exp_f32(x[i]) through the given path (y may alias x).
void exp_array(const float* x, float* y, int64_t n, Isa isa);
// ref::dot16 through the given path.
float dot16(const float* a, const float* b, int64_t n, Isa isa);

// AVX-512 halves (elementwise_avx512.cc).
void exp_array_avx512(const float* x, float* y, int64_t n);
float dot16_avx512(const float* a, const float* b, int64_t n);
// One (row, KV head) of attention on the AVX-512 path (attention_avx512.cc).
void attention_row_group_avx512(const AttnRow& row, int32_t g, const AttnShape& shape,
                                const Plan& plan);

// What LLMRR_ISA=value asks for, before clamping to the hardware (nullptr or unknown →
// the hardware's best).
Isa parse_isa_env(const char* value);

}  // namespace llmrr::kernels::internal
