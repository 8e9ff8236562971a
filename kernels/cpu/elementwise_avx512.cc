// GCC 12 warns spuriously about _mm512_undefined inside its own intrinsics headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "cpu/internal.h"
#include "cpu/vec_math_avx512.h"

namespace llmrr::kernels::internal {

void exp_array_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = first_lanes16(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

float dot16_avx512(const float* a, const float* b, int64_t n) {
  return kernels::dot16_avx512(a, b, n);
}

}  // namespace llmrr::kernels::internal
