// AVX-512 quantized GEMM micro-kernels: R rows × 32 columns (two zmm per row), each weight
// decoded as quant.h defines it right before its fma, one fma per k per output in increasing
// k — the sequence of gemm_quant.cc's scalar kernel, so the bits are the same.
// GCC 12 warns spuriously about _mm512_undefined inside its own intrinsics headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "cpu/gemm_internal.h"

namespace llmrr::kernels {
namespace {

// kKind: 0 4-bit codes, 1 4-bit codes with an offset, 2 8-bit codes.
template <int R, bool kMin, int kKind>
void qtile_avx512(const float* x, int64_t ldx, const uint8_t* panel, const QuantLayout& q,
                  int64_t k0, int64_t k1, float* t) {
  const int64_t G = q.group;
  const __m512i m4 = _mm512_set1_epi32(0xf);
  const __m512i off = _mm512_set1_epi32(q.offset);
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t g = k0 / G; g * G < k1; ++g) {
    const uint8_t* grp = panel + g * q.group_bytes;
    __m512 a0, a1, b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if (q.f16_scales) {
      const __m256i* h = reinterpret_cast<const __m256i*>(grp);
      a0 = _mm512_cvtph_ps(_mm256_load_si256(h));
      a1 = _mm512_cvtph_ps(_mm256_load_si256(h + 1));
      if constexpr (kMin) {
        b0 = _mm512_cvtph_ps(_mm256_load_si256(h + 2));
        b1 = _mm512_cvtph_ps(_mm256_load_si256(h + 3));
      }
    } else {
      const float* f = reinterpret_cast<const float*>(grp);
      a0 = _mm512_load_ps(f);
      a1 = _mm512_load_ps(f + 16);
      if constexpr (kMin) {
        b0 = _mm512_load_ps(f + kPanel);
        b1 = _mm512_load_ps(f + kPanel + 16);
      }
    }
    const uint8_t* codes = grp + q.hdr_bytes;
    const int64_t ka = std::max(k0, g * G), kb = std::min(k1, g * G + G);
    // One k: decode its 32 weights (byte i of each word), then one fma per row and column.
    // Whole quads run with the byte index known at compile time (immediate shifts).
    auto step = [&](const uint8_t* quad, int i, int64_t k) __attribute__((always_inline)) {
      __m512i c0, c1;
      if constexpr (kKind == 2) {
        c0 = _mm512_srai_epi32(_mm512_slli_epi32(_mm512_load_si512(quad), 24 - 8 * i), 24);
        c1 = _mm512_srai_epi32(_mm512_slli_epi32(_mm512_load_si512(quad + 64), 24 - 8 * i), 24);
      } else {
        const __m512i v = _mm512_load_si512(quad);
        c0 = _mm512_and_si512(_mm512_srli_epi32(v, 8 * i), m4);
        c1 = _mm512_and_si512(_mm512_srli_epi32(v, 8 * i + 4), m4);
        if constexpr (kKind == 1) {
          c0 = _mm512_sub_epi32(c0, off);
          c1 = _mm512_sub_epi32(c1, off);
        }
      }
      __m512 w0 = _mm512_mul_ps(a0, _mm512_cvtepi32_ps(c0));
      __m512 w1 = _mm512_mul_ps(a1, _mm512_cvtepi32_ps(c1));
      if constexpr (kMin) {
        w0 = _mm512_add_ps(w0, b0);
        w1 = _mm512_add_ps(w1, b1);
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 bx = _mm512_set1_ps(x[r * ldx + k]);
        acc[r][0] = _mm512_fmadd_ps(bx, w0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(bx, w1, acc[r][1]);
      }
    };
    for (int64_t k = ka; k < kb;) {
      const int64_t e = k - g * G;
      const uint8_t* quad = codes + (e >> 2) * q.quad_bytes;
      if ((e & 3) == 0 && k + 4 <= kb) {
        step(quad, 0, k);
        step(quad, 1, k + 1);
        step(quad, 2, k + 2);
        step(quad, 3, k + 3);
        k += 4;
      } else {
        step(quad, static_cast<int>(e & 3), k);
        k += 1;
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(t + r * kPanel, acc[r][0]);
    _mm512_storeu_ps(t + r * kPanel + 16, acc[r][1]);
  }
}

template <int... Rs>
QuantKernels make(std::integer_sequence<int, Rs...>) {
  QuantKernels k;
  k.max_rows = sizeof...(Rs);
  ((k.fn[0][0][Rs + 1] = &qtile_avx512<Rs + 1, false, 0>), ...);
  ((k.fn[0][1][Rs + 1] = &qtile_avx512<Rs + 1, false, 1>), ...);
  ((k.fn[0][2][Rs + 1] = &qtile_avx512<Rs + 1, false, 2>), ...);
  ((k.fn[1][0][Rs + 1] = &qtile_avx512<Rs + 1, true, 0>), ...);
  ((k.fn[1][1][Rs + 1] = &qtile_avx512<Rs + 1, true, 1>), ...);
  ((k.fn[1][2][Rs + 1] = &qtile_avx512<Rs + 1, true, 2>), ...);
  return k;
}

}  // namespace

const QuantKernels& quant_kernels_avx512() {
  static const QuantKernels k = make(std::make_integer_sequence<int, 8>());
  return k;
}

}  // namespace llmrr::kernels
