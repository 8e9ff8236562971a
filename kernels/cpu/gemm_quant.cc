// Quantized GEMM micro-kernels (scalar and AVX2; AVX-512 in gemm_quant_avx512.cc). Each one
// computes, for rows × one 32-column panel, t = Σ_k x[r, k]·W[n, k] from +0 with one fma per k
// in increasing k — the order of every other GEMM micro-kernel (plan.h) — where W[n, k] is
// decoded from the packed group just before its fma as quant.h defines it:
// A·float(c), then + B for formats with a minimum (a multiply and an add, never fused). The
// decoding is exact integer work plus those two roundings, so every ISA computes the same
// weight and therefore the same bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "cpu/gemm_internal.h"
#include "llmrr/kernels/numerics.h"

namespace llmrr::kernels {
namespace {

// kKind: 0 4-bit codes, 1 4-bit codes with an offset, 2 8-bit codes.
template <int R, bool kMin, int kKind>
void qtile_scalar(const float* x, int64_t ldx, const uint8_t* panel, const QuantLayout& q,
                  int64_t k0, int64_t k1, float* t) {
  float acc[R][kPanel];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kPanel; ++j) acc[r][j] = 0.0f;
  const int64_t G = q.group;
  for (int64_t g = k0 / G; g * G < k1; ++g) {
    const uint8_t* grp = panel + g * q.group_bytes;
    float a[kPanel], b[kPanel];
    for (int j = 0; j < kPanel; ++j) {
      if (q.f16_scales) {
        a[j] = numerics::f16_to_f32(reinterpret_cast<const uint16_t*>(grp)[j]);
        b[j] = kMin ? numerics::f16_to_f32(reinterpret_cast<const uint16_t*>(grp)[kPanel + j])
                    : 0.0f;
      } else {
        a[j] = reinterpret_cast<const float*>(grp)[j];
        b[j] = kMin ? reinterpret_cast<const float*>(grp)[kPanel + j] : 0.0f;
      }
    }
    const uint8_t* codes = grp + q.hdr_bytes;
    const int64_t ka = std::max(k0, g * G), kb = std::min(k1, g * G + G);
    for (int64_t k = ka; k < kb; ++k) {
      const int64_t e = k - g * G;
      const uint8_t* quad = codes + (e / 4) * q.quad_bytes;
      const int i = static_cast<int>(e % 4);
      float w[kPanel];
      for (int j = 0; j < kPanel; ++j) {
        int c;
        if constexpr (kKind == 2) {
          c = static_cast<int8_t>(quad[j * 4 + i]);
        } else {
          c = (quad[(j % 16) * 4 + i] >> (j < 16 ? 0 : 4)) & 0xf;
          if constexpr (kKind == 1) c -= q.offset;
        }
        w[j] = a[j] * static_cast<float>(c);
        if constexpr (kMin) w[j] = w[j] + b[j];
      }
      for (int r = 0; r < R; ++r) {
        const float xv = x[r * ldx + k];
        for (int j = 0; j < kPanel; ++j) acc[r][j] = std::fma(xv, w[j], acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kPanel; ++j) t[r * kPanel + j] = acc[r][j];
}

// AVX2: two passes of 16 columns (2 ymm per row), as the bf16 kernels do, so R ≤ 3 rows of
// accumulators, the half-panel's A and B and the decoded weights fit the 16 registers.
template <int R, bool kMin, int kKind>
void qtile_avx2(const float* x, int64_t ldx, const uint8_t* panel, const QuantLayout& q,
                int64_t k0, int64_t k1, float* t) {
  const int64_t G = q.group;
  const __m256i m4 = _mm256_set1_epi32(0xf);
  const __m256i off = _mm256_set1_epi32(q.offset);
  for (int half = 0; half < 2; ++half) {
    __m256 acc[R][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t g = k0 / G; g * G < k1; ++g) {
      const uint8_t* grp = panel + g * q.group_bytes;
      __m256 a0, a1, b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
      if (q.f16_scales) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(grp) + 16 * half;
        a0 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
        a1 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h + 8)));
        if constexpr (kMin) {
          b0 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h + kPanel)));
          b1 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h + kPanel + 8)));
        }
      } else {
        const float* f = reinterpret_cast<const float*>(grp) + 16 * half;
        a0 = _mm256_load_ps(f);
        a1 = _mm256_load_ps(f + 8);
        if constexpr (kMin) {
          b0 = _mm256_load_ps(f + kPanel);
          b1 = _mm256_load_ps(f + kPanel + 8);
        }
      }
      const uint8_t* codes = grp + q.hdr_bytes;
      const int64_t ka = std::max(k0, g * G), kb = std::min(k1, g * G + G);
      for (int64_t k = ka; k < kb; ++k) {
        const int64_t e = k - g * G;
        const int i = static_cast<int>(e & 3);
        const uint8_t* quad = codes + (e >> 2) * q.quad_bytes;
        __m256i c0, c1;
        if constexpr (kKind == 2) {
          const __m256i* v = reinterpret_cast<const __m256i*>(quad) + 2 * half;
          const __m128i shl = _mm_cvtsi32_si128(24 - 8 * i);
          const __m128i sar = _mm_cvtsi32_si128(24);
          c0 = _mm256_sra_epi32(_mm256_sll_epi32(_mm256_load_si256(v), shl), sar);
          c1 = _mm256_sra_epi32(_mm256_sll_epi32(_mm256_load_si256(v + 1), shl), sar);
        } else {
          const __m256i* v = reinterpret_cast<const __m256i*>(quad);
          const __m128i sh = _mm_cvtsi32_si128(8 * i + 4 * half);
          c0 = _mm256_and_si256(_mm256_srl_epi32(_mm256_load_si256(v), sh), m4);
          c1 = _mm256_and_si256(_mm256_srl_epi32(_mm256_load_si256(v + 1), sh), m4);
          if constexpr (kKind == 1) {
            c0 = _mm256_sub_epi32(c0, off);
            c1 = _mm256_sub_epi32(c1, off);
          }
        }
        __m256 w0 = _mm256_mul_ps(a0, _mm256_cvtepi32_ps(c0));
        __m256 w1 = _mm256_mul_ps(a1, _mm256_cvtepi32_ps(c1));
        if constexpr (kMin) {
          w0 = _mm256_add_ps(w0, b0);
          w1 = _mm256_add_ps(w1, b1);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m256 bx = _mm256_broadcast_ss(x + r * ldx + k);
          acc[r][0] = _mm256_fmadd_ps(bx, w0, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(bx, w1, acc[r][1]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(t + r * kPanel + 16 * half, acc[r][0]);
      _mm256_storeu_ps(t + r * kPanel + 16 * half + 8, acc[r][1]);
    }
  }
}

template <int R, bool kMin, int kKind>
struct ScalarFn {
  static constexpr QuantTileFn fn = &qtile_scalar<R, kMin, kKind>;
};
template <int R, bool kMin, int kKind>
struct Avx2Fn {
  static constexpr QuantTileFn fn = &qtile_avx2<R, kMin, kKind>;
};

template <template <int, bool, int> class F, int... Rs>
QuantKernels make(int max_rows, std::integer_sequence<int, Rs...>) {
  QuantKernels k;
  k.max_rows = max_rows;
  ((k.fn[0][0][Rs + 1] = F<Rs + 1, false, 0>::fn), ...);
  ((k.fn[0][1][Rs + 1] = F<Rs + 1, false, 1>::fn), ...);
  ((k.fn[0][2][Rs + 1] = F<Rs + 1, false, 2>::fn), ...);
  ((k.fn[1][0][Rs + 1] = F<Rs + 1, true, 0>::fn), ...);
  ((k.fn[1][1][Rs + 1] = F<Rs + 1, true, 1>::fn), ...);
  ((k.fn[1][2][Rs + 1] = F<Rs + 1, true, 2>::fn), ...);
  return k;
}

}  // namespace

const QuantKernels& quant_kernels_scalar() {
  static const QuantKernels k = make<ScalarFn>(4, std::make_integer_sequence<int, 4>());
  return k;
}

const QuantKernels& quant_kernels_avx2() {
  static const QuantKernels k = make<Avx2Fn>(3, std::make_integer_sequence<int, 3>());
  return k;
}

}  // namespace llmrr::kernels
