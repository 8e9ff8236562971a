// MoE combine: out[r, :] = Σ gate·expert_row in rank order or the plan's arrival order, one
// fma per slot per element; dropped slots (src < 0) are skipped. Threads split rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/ops.h"

namespace llmrr::kernels {

void moe_combine(const float* expert_rows, int64_t ld_expert, const int32_t* src,
                 const float* gates, int64_t rows, int k, int64_t dim, float* out, int64_t ldo,
                 const Plan& plan, ThreadPool& pool) {
  const bool simd = active_isa() != Isa::kScalar;
  // A malformed arrival list (plan_check rejects it) falls back to rank order rather than
  // reading out of bounds.
  bool arrival = plan.order == CombineOrder::kArrival &&
                 plan.arrival.size() == static_cast<size_t>(rows) * static_cast<size_t>(k);
  if (arrival) {
    for (uint16_t a : plan.arrival) arrival = arrival && a < k;
  }
  auto row = [&](int64_t r) {
    float* o = out + r * ldo;
    std::fill(o, o + dim, 0.0f);
    for (int i = 0; i < k; ++i) {
      const int slot = arrival ? plan.arrival[r * k + i] : i;
      const int32_t s = src[r * k + slot];
      if (s < 0) continue;
      const float* e = expert_rows + s * ld_expert;
      const float g = gates[r * k + slot];
      int64_t d = 0;
      if (simd) {
        const __m256 gv = _mm256_set1_ps(g);
        for (; d + 8 <= dim; d += 8) {
          _mm256_storeu_ps(o + d,
                           _mm256_fmadd_ps(gv, _mm256_loadu_ps(e + d), _mm256_loadu_ps(o + d)));
        }
      }
      for (; d < dim; ++d) o[d] = std::fma(g, e[d], o[d]);
    }
  };
  if (rows * dim * k < (1 << 15) || pool.size() == 1) {
    for (int64_t r = 0; r < rows; ++r) row(r);
  } else {
    pool.parallel_for(rows, row);
  }
}

}  // namespace llmrr::kernels
