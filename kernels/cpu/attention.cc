// Attention over a paged KV cache following a kAttention plan (plan.h). Threads split
// (row, KV head) pairs; each pair runs entirely on one thread in the plan's order
// (attention_impl.h), so the thread count never changes a bit.
#include <algorithm>
#include <cmath>
#include <span>

#include "cpu/attention_impl.h"
#include "cpu/internal.h"
#include "cpu/vec_math.h"
#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"

namespace llmrr::kernels {
namespace {

struct ScalarV {
  static float dot16(const float* a, const float* b, int64_t n) { return ref::dot16(a, b, n); }
  static void dot_block(int hb, int jb, const float* q, const float* const* k, int64_t n,
                        float* out) {
    for (int i = 0; i < hb; ++i)
      for (int t = 0; t < jb; ++t) out[i * jb + t] = ref::dot16(q + i * n, k[t], n);
  }
  static void exp_shift(float* s, int64_t n, float m) {
    for (int64_t j = 0; j < n; ++j) s[j] = numerics::exp_f32(s[j] - m);
  }
  template <class F>
  static void attend(int hb, float* o, const float* e, int64_t es, int64_t n, int64_t hd,
                     F&& v_at) {
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_at(j);
      for (int i = 0; i < hb; ++i)
        for (int64_t d = 0; d < hd; ++d)
          o[i * hd + d] = std::fma(e[i * es + j], v[d], o[i * hd + d]);
    }
  }
  static void scale_add(float* o, const float* p, float f, int64_t n) {
    for (int64_t d = 0; d < n; ++d) o[d] = o[d] + p[d] * f;
  }
  static void divide(float* out, const float* o, float l, int64_t n) {
    for (int64_t d = 0; d < n; ++d) out[d] = o[d] / l;
  }
};

struct Avx2V {
  static float dot16(const float* a, const float* b, int64_t n) { return dot16_avx2(a, b, n); }
  // HB heads × JB positions: HB·JB independent 16-lane chains (lanes as two ymm halves).
  template <int HB, int JB>
  static void dot_block_t(const float* q, const float* const* k, int64_t n, float* out) {
    __m256 lo[HB * JB], hi[HB * JB];
#pragma GCC unroll 4
    for (int c = 0; c < HB * JB; ++c) lo[c] = hi[c] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= n; d += 16) {
#pragma GCC unroll 4
      for (int i = 0; i < HB; ++i) {
        const __m256 q0 = _mm256_loadu_ps(q + i * n + d), q1 = _mm256_loadu_ps(q + i * n + d + 8);
#pragma GCC unroll 4
        for (int t = 0; t < JB; ++t) {
          lo[i * JB + t] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[t] + d), lo[i * JB + t]);
          hi[i * JB + t] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k[t] + d + 8), hi[i * JB + t]);
        }
      }
    }
    if (d < n) {
      const __m256i m0 = first_lanes8(n - d), m1 = first_lanes8(n - d - 8);
#pragma GCC unroll 4
      for (int i = 0; i < HB; ++i) {
        const __m256 q0 = _mm256_maskload_ps(q + i * n + d, m0);
        const __m256 q1 = _mm256_maskload_ps(q + i * n + d + 8, m1);
#pragma GCC unroll 4
        for (int t = 0; t < JB; ++t) {
          lo[i * JB + t] = _mm256_fmadd_ps(q0, _mm256_maskload_ps(k[t] + d, m0), lo[i * JB + t]);
          hi[i * JB + t] =
              _mm256_fmadd_ps(q1, _mm256_maskload_ps(k[t] + d + 8, m1), hi[i * JB + t]);
        }
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < HB * JB; ++c) out[c] = halving16(lo[c], hi[c]);
  }
  static void dot_block(int hb, int jb, const float* q, const float* const* k, int64_t n,
                        float* out) {
    if (hb == 1 && jb == 4) return dot_block_t<1, 4>(q, k, n, out);
    if (hb == 2 && jb == 2) return dot_block_t<2, 2>(q, k, n, out);
    if (hb == 3 && jb == 1) return dot_block_t<3, 1>(q, k, n, out);
    if (hb == 4 && jb == 1) return dot_block_t<4, 1>(q, k, n, out);
    for (int i = 0; i < hb; ++i)
      for (int t = 0; t < jb; ++t) out[i * jb + t] = dot16_avx2(q + i * n, k[t], n);
  }
  static void exp_shift(float* s, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      _mm256_storeu_ps(s + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv)));
    }
    for (; j < n; ++j) s[j] = numerics::exp_f32(s[j] - m);
  }
  // HB heads × o[d0, d0 + 8·NV) held in registers across all j (the last vector may be
  // partial); each V chunk is loaded once for all HB heads.
  template <int HB, int NV, class F>
  static void attend_block(float* o, const float* e, int64_t es, int64_t n, int64_t hd, int64_t d0,
                           F& v_at) {
    const int64_t w = std::min<int64_t>(8 * NV, hd - d0);
    __m256i mask[NV];
    __m256 acc[HB][NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) mask[c] = first_lanes8(w - 8 * c);
#pragma GCC unroll 4
    for (int i = 0; i < HB; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[i][c] = _mm256_maskload_ps(o + i * hd + d0 + 8 * c, mask[c]);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_at(j) + d0;
      __m256 vv[NV];
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) vv[c] = _mm256_maskload_ps(v + 8 * c, mask[c]);
#pragma GCC unroll 4
      for (int i = 0; i < HB; ++i) {
        const __m256 ev = _mm256_broadcast_ss(e + i * es + j);
#pragma GCC unroll 4
        for (int c = 0; c < NV; ++c) acc[i][c] = _mm256_fmadd_ps(ev, vv[c], acc[i][c]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < HB; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) _mm256_maskstore_ps(o + i * hd + d0 + 8 * c, mask[c], acc[i][c]);
  }
  template <class F>
  static void attend(int hb, float* o, const float* e, int64_t es, int64_t n, int64_t hd,
                     F&& v_at) {
    using Block = void (*)(float*, const float*, int64_t, int64_t, int64_t, int64_t, F&);
    // Up to 2 heads: chunks of 32 (≤ 8 accumulators); 3–4 heads: chunks of 16, so
    // accumulators, the V chunk and a broadcast stay within the 16 ymm registers.
    static constexpr Block kBlocks[4][4] = {
        {&attend_block<1, 1, F>, &attend_block<1, 2, F>, &attend_block<1, 3, F>,
         &attend_block<1, 4, F>},
        {&attend_block<2, 1, F>, &attend_block<2, 2, F>, &attend_block<2, 3, F>,
         &attend_block<2, 4, F>},
        {&attend_block<3, 1, F>, &attend_block<3, 2, F>, nullptr, nullptr},
        {&attend_block<4, 1, F>, &attend_block<4, 2, F>, nullptr, nullptr}};
    const int64_t chunk = hb <= 2 ? 32 : 16;
    for (int64_t d0 = 0; d0 < hd; d0 += chunk) {
      const int64_t w = std::min<int64_t>(chunk, hd - d0);
      kBlocks[hb - 1][(w + 7) / 8 - 1](o, e, es, n, hd, d0, v_at);
    }
  }
  static void scale_add(float* o, const float* p, float f, int64_t n) {
    const __m256 fv = _mm256_set1_ps(f);
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) {
      _mm256_storeu_ps(
          o + d, _mm256_add_ps(_mm256_loadu_ps(o + d), _mm256_mul_ps(_mm256_loadu_ps(p + d), fv)));
    }
    for (; d < n; ++d) o[d] = o[d] + p[d] * f;
  }
  static void divide(float* out, const float* o, float l, int64_t n) {
    const __m256 lv = _mm256_set1_ps(l);
    int64_t d = 0;
    for (; d + 8 <= n; d += 8) _mm256_storeu_ps(out + d, _mm256_div_ps(_mm256_loadu_ps(o + d), lv));
    for (; d < n; ++d) out[d] = o[d] / l;
  }
};

}  // namespace

void attention(std::span<const AttnRow> rows, const AttnShape& shape, const Plan& plan,
               ThreadPool& pool) {
  if (rows.empty() || shape.heads <= 0 || shape.kv_heads <= 0) return;
  const Isa isa = active_isa();
  const int64_t tasks = static_cast<int64_t>(rows.size()) * shape.kv_heads;
  auto run = [&](int64_t t) {
    const AttnRow& row = rows[t / shape.kv_heads];
    const int32_t g = static_cast<int32_t>(t % shape.kv_heads);
    switch (isa) {
      case Isa::kAvx512:
        internal::attention_row_group_avx512(row, g, shape, plan);
        break;
      case Isa::kAvx2:
        attn::row_group<Avx2V>(row, g, shape, plan);
        break;
      default:
        attn::row_group<ScalarV>(row, g, shape, plan);
        break;
    }
  };
  pool.parallel_for(tasks, run);
}

}  // namespace llmrr::kernels
