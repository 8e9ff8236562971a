// AVX2 versions of llmrr's numerics (numerics.cc) and of the 16-lane dot product of
// plan.h, lane by lane the same operations as the scalar definitions. Baseline ISA
// (x86-64-v3), so any kernels/cpu file may include this.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "numerics_internal.h"

namespace llmrr::kernels {

// exp_f32 on 8 lanes.
inline __m256 exp8(__m256 x) {
  using namespace numerics::exp_consts;
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 xnan = _mm256_add_ps(x, x);
  __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(kMinX));
  xc = _mm256_min_ps(xc, _mm256_set1_ps(kMaxX));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kC7);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC0));
  const __m256i ni = _mm256_cvtps_epi32(n);
  // n1 = n / 2 truncated toward zero, n2 = n − n1, as in numerics.cc.
  const __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  const __m256 tiny = _mm256_cmp_ps(y, _mm256_set1_ps(kMinNormal), _CMP_LT_OQ);
  y = _mm256_andnot_ps(tiny, y);
  return _mm256_blendv_ps(y, xnan, nan);
}

// Mask with the first `n` (0..8) lanes set.
inline __m256i first_lanes8(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// Pairwise halving of 16 lanes held as lo (0..7) and hi (8..15): w = 8, 4, 2, 1.
inline float halving16(__m256 lo, __m256 hi) {
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

// The 16-lane dot product of plan.h (ref::dot16).
inline float dot16_avx2(const float* a, const float* b, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
    hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
  }
  if (i < n) {
    // Missing lanes load as +0: fma(0, 0, s) = s exactly.
    const int64_t rest = n - i;
    const __m256i m0 = first_lanes8(rest), m1 = first_lanes8(rest - 8);
    lo = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m0), _mm256_maskload_ps(b + i, m0), lo);
    hi = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 8, m1), _mm256_maskload_ps(b + i + 8, m1), hi);
  }
  return halving16(lo, hi);
}

// out[i] = silu(g[i]) · u[i] for the largest multiple of 8 ≤ n; returns how many were done.
inline int64_t swiglu_avx2(const float* g, const float* u, float* o, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = exp8(_mm256_xor_ps(gv, sign));
    const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
  }
  return i;
}

}  // namespace llmrr::kernels
