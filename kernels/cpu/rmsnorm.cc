// RMSNorm following a kRmsNorm plan: the sum of squares in `splits` chunks, each chunk with
// the 16-lane order of plan.h, chunks combined in order. Threads split rows.
#include <algorithm>
#include <cmath>

#include "cpu/vec_math.h"
#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"

namespace llmrr::kernels {

void rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* weight, float eps,
             float* y, int64_t ldy, const Plan& plan, ThreadPool& pool) {
  const bool simd = active_isa() != Isa::kScalar;
  const int64_t splits = std::max<uint32_t>(plan.splits, 1);
  const int64_t c = ((dim + splits - 1) / splits + 15) / 16 * 16;
  auto row = [&](int64_t i) {
    const float* xr = x + i * ldx;
    float sum = 0.0f;
    for (int64_t s = 0; s < splits; ++s) {
      const int64_t a = std::min(s * c, dim), b = std::min(a + c, dim);
      const float chunk =
          simd ? dot16_avx2(xr + a, xr + a, b - a) : ref::dot16(xr + a, xr + a, b - a);
      sum = s == 0 ? chunk : sum + chunk;
    }
    const float r = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    float* yr = y + i * ldy;
    int64_t d = 0;
    if (simd) {
      const __m256 rv = _mm256_set1_ps(r);
      for (; d + 8 <= dim; d += 8) {
        const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(xr + d), rv);
        _mm256_storeu_ps(yr + d, _mm256_mul_ps(_mm256_loadu_ps(weight + d), t));
      }
    }
    for (; d < dim; ++d) yr[d] = weight[d] * (xr[d] * r);
  };
  if (rows * dim < (1 << 14) || pool.size() == 1) {
    for (int64_t i = 0; i < rows; ++i) row(i);
  } else {
    pool.parallel_for(rows, row);
  }
}

}  // namespace llmrr::kernels
