// AVX-512 primitives for attention_impl.h.
// GCC 12 warns spuriously about _mm512_undefined inside its own intrinsics headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "cpu/attention_impl.h"
#include "cpu/internal.h"
#include "cpu/vec_math_avx512.h"

namespace llmrr::kernels {
namespace {

struct Avx512V {
  static float dot16(const float* a, const float* b, int64_t n) { return dot16_avx512(a, b, n); }
  static void dot16x4(const float* q, const float* const* k, int64_t n, float* out) {
    __m512 acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = _mm512_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= n; d += 16) {
      const __m512 qv = _mm512_loadu_ps(q + d);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) acc[i] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k[i] + d), acc[i]);
    }
    if (d < n) {
      const __mmask16 m = first_lanes16(n - d);
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        acc[i] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k[i] + d), acc[i]);
      }
    }
    for (int i = 0; i < 4; ++i) out[i] = halving16(acc[i]);
  }
  static void exp_shift(float* s, int64_t n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      _mm512_storeu_ps(s + j, exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv)));
    }
    if (j < n) {
      const __mmask16 k = first_lanes16(n - j);
      _mm512_mask_storeu_ps(s + j, k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv)));
    }
  }
  // o[d0, d0 + 16·NV) held in registers across all j; the last vector may be partial.
  template <int NV, class F>
  static void attend_block(float* o, const float* e, int64_t n, int64_t d0, int64_t w, F& v_at) {
    __mmask16 mask[NV];
    __m512 acc[NV];
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) {
      mask[i] = first_lanes16(w - 16 * i);
      acc[i] = _mm512_maskz_loadu_ps(mask[i], o + d0 + 16 * i);
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_at(j) + d0;
      const __m512 ev = _mm512_set1_ps(e[j]);
#pragma GCC unroll 8
      for (int i = 0; i < NV; ++i) {
        acc[i] = _mm512_fmadd_ps(ev, _mm512_maskz_loadu_ps(mask[i], v + 16 * i), acc[i]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) _mm512_mask_storeu_ps(o + d0 + 16 * i, mask[i], acc[i]);
  }
  template <class F>
  static void attend(float* o, const float* e, int64_t n, int64_t hd, F&& v_at) {
    for (int64_t d0 = 0; d0 < hd; d0 += 128) {
      const int64_t w = std::min<int64_t>(128, hd - d0);
      using Block = void (*)(float*, const float*, int64_t, int64_t, int64_t, F&);
      static constexpr Block kBlocks[8] = {
          &attend_block<1, F>, &attend_block<2, F>, &attend_block<3, F>, &attend_block<4, F>,
          &attend_block<5, F>, &attend_block<6, F>, &attend_block<7, F>, &attend_block<8, F>};
      kBlocks[(w + 15) / 16 - 1](o, e, n, d0, w, v_at);
    }
  }
  static void scale_add(float* o, const float* p, float f, int64_t n) {
    const __m512 fv = _mm512_set1_ps(f);
    int64_t d = 0;
    for (; d + 16 <= n; d += 16) {
      _mm512_storeu_ps(
          o + d, _mm512_add_ps(_mm512_loadu_ps(o + d), _mm512_mul_ps(_mm512_loadu_ps(p + d), fv)));
    }
    if (d < n) {
      const __mmask16 k = first_lanes16(n - d);
      _mm512_mask_storeu_ps(o + d, k,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(k, o + d),
                                          _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + d), fv)));
    }
  }
  static void divide(float* out, const float* o, float l, int64_t n) {
    const __m512 lv = _mm512_set1_ps(l);
    int64_t d = 0;
    for (; d + 16 <= n; d += 16)
      _mm512_storeu_ps(out + d, _mm512_div_ps(_mm512_loadu_ps(o + d), lv));
    if (d < n) {
      const __mmask16 k = first_lanes16(n - d);
      _mm512_mask_storeu_ps(out + d, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, o + d), lv));
    }
  }
};

}  // namespace

void internal::attention_row_group_avx512(const AttnRow& row, int32_t g, const AttnShape& shape,
                                          const Plan& plan) {
  attn::row_group<Avx512V>(row, g, shape, plan);
}

}  // namespace llmrr::kernels
