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
  static void dot16x4(const float* q, const float* const* k, int64_t n, float* out) {
    for (int i = 0; i < 4; ++i) out[i] = ref::dot16(q, k[i], n);
  }
  static void exp_shift(float* s, int64_t n, float m) {
    for (int64_t j = 0; j < n; ++j) s[j] = numerics::exp_f32(s[j] - m);
  }
  template <class F>
  static void attend(float* o, const float* e, int64_t n, int64_t hd, F&& v_at) {
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_at(j);
      for (int64_t d = 0; d < hd; ++d) o[d] = std::fma(e[j], v[d], o[d]);
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
  static void dot16x4(const float* q, const float* const* k, int64_t n, float* out) {
    __m256 lo[4], hi[4];
    for (int i = 0; i < 4; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= n; d += 16) {
      const __m256 q0 = _mm256_loadu_ps(q + d), q1 = _mm256_loadu_ps(q + d + 8);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        lo[i] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[i] + d), lo[i]);
        hi[i] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k[i] + d + 8), hi[i]);
      }
    }
    if (d < n) {
      const __m256i m0 = first_lanes8(n - d), m1 = first_lanes8(n - d - 8);
      const __m256 q0 = _mm256_maskload_ps(q + d, m0), q1 = _mm256_maskload_ps(q + d + 8, m1);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        lo[i] = _mm256_fmadd_ps(q0, _mm256_maskload_ps(k[i] + d, m0), lo[i]);
        hi[i] = _mm256_fmadd_ps(q1, _mm256_maskload_ps(k[i] + d + 8, m1), hi[i]);
      }
    }
    for (int i = 0; i < 4; ++i) out[i] = halving16(lo[i], hi[i]);
  }
  static void exp_shift(float* s, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      _mm256_storeu_ps(s + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv)));
    }
    for (; j < n; ++j) s[j] = numerics::exp_f32(s[j] - m);
  }
  // o[d0, d0 + 8·NV) held in registers across all j; the last vector may be partial.
  template <int NV, class F>
  static void attend_block(float* o, const float* e, int64_t n, int64_t d0, int64_t w, F& v_at) {
    __m256i mask[NV];
    __m256 acc[NV];
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) {
      mask[i] = first_lanes8(w - 8 * i);
      acc[i] = _mm256_maskload_ps(o + d0 + 8 * i, mask[i]);
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_at(j) + d0;
      const __m256 ev = _mm256_broadcast_ss(e + j);
#pragma GCC unroll 8
      for (int i = 0; i < NV; ++i) {
        acc[i] = _mm256_fmadd_ps(ev, _mm256_maskload_ps(v + 8 * i, mask[i]), acc[i]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) _mm256_maskstore_ps(o + d0 + 8 * i, mask[i], acc[i]);
  }
  template <class F>
  static void attend(float* o, const float* e, int64_t n, int64_t hd, F&& v_at) {
    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
      const int64_t w = std::min<int64_t>(64, hd - d0);
      using Block = void (*)(float*, const float*, int64_t, int64_t, int64_t, F&);
      static constexpr Block kBlocks[8] = {
          &attend_block<1, F>, &attend_block<2, F>, &attend_block<3, F>, &attend_block<4, F>,
          &attend_block<5, F>, &attend_block<6, F>, &attend_block<7, F>, &attend_block<8, F>};
      kBlocks[(w + 7) / 8 - 1](o, e, n, d0, w, v_at);
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
