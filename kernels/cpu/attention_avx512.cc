// AVX-512 primitives for attention_impl.h.
// GCC 12 warns spuriously about _mm512_undefined inside its own intrinsics headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "cpu/attention_impl.h"
#include "cpu/internal.h"
#include "cpu/vec_math_avx512.h"

namespace llmrr::kernels {
namespace {

struct Avx512V {
  static float dot16(const float* a, const float* b, int64_t n) { return dot16_avx512(a, b, n); }
  // HB heads × JB positions: HB·JB independent 16-lane chains.
  template <int HB, int JB>
  static void dot_block_t(const float* q, const float* const* k, int64_t n, float* out) {
    __m512 acc[HB * JB];
#pragma GCC unroll 4
    for (int c = 0; c < HB * JB; ++c) acc[c] = _mm512_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= n; d += 16) {
#pragma GCC unroll 4
      for (int i = 0; i < HB; ++i) {
        const __m512 qv = _mm512_loadu_ps(q + i * n + d);
#pragma GCC unroll 4
        for (int t = 0; t < JB; ++t) {
          acc[i * JB + t] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k[t] + d), acc[i * JB + t]);
        }
      }
    }
    if (d < n) {
      const __mmask16 m = first_lanes16(n - d);
#pragma GCC unroll 4
      for (int i = 0; i < HB; ++i) {
        const __m512 qv = _mm512_maskz_loadu_ps(m, q + i * n + d);
#pragma GCC unroll 4
        for (int t = 0; t < JB; ++t) {
          acc[i * JB + t] =
              _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k[t] + d), acc[i * JB + t]);
        }
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < HB * JB; ++c) out[c] = halving16(acc[c]);
  }
  static void dot_block(int hb, int jb, const float* q, const float* const* k, int64_t n,
                        float* out) {
    if (hb == 1 && jb == 4) return dot_block_t<1, 4>(q, k, n, out);
    if (hb == 2 && jb == 2) return dot_block_t<2, 2>(q, k, n, out);
    if (hb == 3 && jb == 1) return dot_block_t<3, 1>(q, k, n, out);
    if (hb == 4 && jb == 1) return dot_block_t<4, 1>(q, k, n, out);
    for (int i = 0; i < hb; ++i)
      for (int t = 0; t < jb; ++t) out[i * jb + t] = dot16_avx512(q + i * n, k[t], n);
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
  // HB heads × o[d0, d0 + 16·NV) held in registers across all j (the last vector may be
  // partial); each V chunk is loaded once for all HB heads.
  template <int HB, int NV, class F>
  static void attend_block(float* o, const float* e, int64_t es, int64_t n, int64_t hd, int64_t d0,
                           F& v_at) {
    const int64_t w = std::min<int64_t>(16 * NV, hd - d0);
    __mmask16 mask[NV];
    __m512 acc[HB][NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) mask[c] = first_lanes16(w - 16 * c);
#pragma GCC unroll 4
    for (int i = 0; i < HB; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c)
        acc[i][c] = _mm512_maskz_loadu_ps(mask[c], o + i * hd + d0 + 16 * c);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_at(j) + d0;
      __m512 vv[NV];
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) vv[c] = _mm512_maskz_loadu_ps(mask[c], v + 16 * c);
#pragma GCC unroll 4
      for (int i = 0; i < HB; ++i) {
        const __m512 ev = _mm512_set1_ps(e[i * es + j]);
#pragma GCC unroll 4
        for (int c = 0; c < NV; ++c) acc[i][c] = _mm512_fmadd_ps(ev, vv[c], acc[i][c]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < HB; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c)
        _mm512_mask_storeu_ps(o + i * hd + d0 + 16 * c, mask[c], acc[i][c]);
  }
  template <class F>
  static void attend(int hb, float* o, const float* e, int64_t es, int64_t n, int64_t hd,
                     F&& v_at) {
    using Block = void (*)(float*, const float*, int64_t, int64_t, int64_t, int64_t, F&);
    static constexpr Block kBlocks[4][4] = {{&attend_block<1, 1, F>, &attend_block<1, 2, F>,
                                             &attend_block<1, 3, F>, &attend_block<1, 4, F>},
                                            {&attend_block<2, 1, F>, &attend_block<2, 2, F>,
                                             &attend_block<2, 3, F>, &attend_block<2, 4, F>},
                                            {&attend_block<3, 1, F>, &attend_block<3, 2, F>,
                                             &attend_block<3, 3, F>, &attend_block<3, 4, F>},
                                            {&attend_block<4, 1, F>, &attend_block<4, 2, F>,
                                             &attend_block<4, 3, F>, &attend_block<4, 4, F>}};
    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
      const int64_t w = std::min<int64_t>(64, hd - d0);
      kBlocks[hb - 1][(w + 15) / 16 - 1](o, e, es, n, hd, d0, v_at);
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
