// Dispatch of the SIMD building blocks (cpu/internal.h).
#include "cpu/internal.h"
#include "cpu/vec_math.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/reference.h"

namespace llmrr::kernels::internal {

void exp_array(const float* x, float* y, int64_t n, Isa isa) {
  if (isa == Isa::kAvx512) return exp_array_avx512(x, y, n);
  int64_t i = 0;
  if (isa == Isa::kAvx2) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  }
  for (; i < n; ++i) y[i] = numerics::exp_f32(x[i]);
}

float dot16(const float* a, const float* b, int64_t n, Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return dot16_avx512(a, b, n);
    case Isa::kAvx2:
      return dot16_avx2(a, b, n);
    default:
      return ref::dot16(a, b, n);
  }
}

}  // namespace llmrr::kernels::internal
