// AVX-512 versions of llmrr's numerics and of the 16-lane dot product (plan.h); include only
// from *_avx512.cc files. Lane by lane the same operations as numerics.cc / ref::dot16.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "numerics_internal.h"

namespace llmrr::kernels {

inline __m512 exp16(__m512 x) {
  using namespace numerics::exp_consts;
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 xnan = _mm512_add_ps(x, x);
  __m512 xc = _mm512_max_ps(x, _mm512_set1_ps(kMinX));
  xc = _mm512_min_ps(xc, _mm512_set1_ps(kMaxX));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kC7);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC0));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(_mm512_add_epi32(ni, _mm512_srli_epi32(ni, 31)), 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  const __mmask16 tiny = _mm512_cmp_ps_mask(y, _mm512_set1_ps(kMinNormal), _CMP_LT_OQ);
  y = _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), y);
  return _mm512_mask_mov_ps(y, nan, xnan);
}

inline __mmask16 first_lanes16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff)
                 : static_cast<__mmask16>((1u << (n > 0 ? n : 0)) - 1u);
}

// Pairwise halving of 16 lanes: w = 8, 4, 2, 1.
inline float halving16(__m512 s) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}

inline float dot16_avx512(const float* a, const float* b, int64_t n) {
  __m512 s = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    s = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s);
  if (i < n) {
    const __mmask16 m = first_lanes16(n - i);
    s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s);
  }
  return halving16(s);
}

}  // namespace llmrr::kernels
