// AVX-512 GEMM micro-kernels: R rows × 32 columns (two zmm per row), one fma per k per
// output in increasing k — the same sequence as the scalar and AVX2 kernels (gemm.cc).
// GCC 12 warns spuriously about _mm512_undefined inside its own intrinsics headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <utility>

#include "cpu/gemm_internal.h"

namespace llmrr::kernels {
namespace {

// Panel elements: fp32, bfloat16 (interleaved halves) or binary16 (the fp32 layout).
enum Elem { kElemF32 = 0, kElemBf16 = 1, kElemF16 = 2 };

// R rows × NP panels (32·NP columns). NP > 1 only for few rows (the wide GEMV kernel).
template <int R, int NP, int kElem>
void tile_avx512(const float* x, int64_t ldx, const void* panel, int64_t pstride, int64_t k0,
                 int64_t k1, float* t) {
  __m512 acc[R][2 * NP];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * NP; ++v) acc[r][v] = _mm512_setzero_ps();
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t k = k0; k < k1; ++k) {
    __m512 w[2 * NP];
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      if constexpr (kElem == kElemF16) {
        const __m256i* h = reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(panel) +
                                                            q * pstride + k * kPanel);
        w[2 * q] = _mm512_cvtph_ps(_mm256_load_si256(h));
        w[2 * q + 1] = _mm512_cvtph_ps(_mm256_load_si256(h + 1));
      } else if constexpr (kElem == kElemBf16) {
        // Word i holds column i (low half) and column 16 + i (high half).
        const __m512i l =
            _mm512_load_si512(static_cast<const uint16_t*>(panel) + q * pstride + k * kPanel);
        w[2 * q] = _mm512_castsi512_ps(_mm512_slli_epi32(l, 16));
        w[2 * q + 1] = _mm512_castsi512_ps(_mm512_and_si512(l, hi_mask));
      } else {
        const float* wk = static_cast<const float*>(panel) + q * pstride + k * kPanel;
        w[2 * q] = _mm512_load_ps(wk);
        w[2 * q + 1] = _mm512_load_ps(wk + 16);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(x[r * ldx + k]);
#pragma GCC unroll 8
      for (int v = 0; v < 2 * NP; ++v) acc[r][v] = _mm512_fmadd_ps(b, w[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * NP; ++v) _mm512_storeu_ps(t + r * NP * kPanel + 16 * v, acc[r][v]);
}

template <int... Rs>
GemmKernels make(std::integer_sequence<int, Rs...>) {
  GemmKernels g;
  g.max_rows = sizeof...(Rs);
  ((g.f32[Rs + 1] = &tile_avx512<Rs + 1, 1, kElemF32>), ...);
  ((g.bf16[Rs + 1] = &tile_avx512<Rs + 1, 1, kElemBf16>), ...);
  ((g.f16[Rs + 1] = &tile_avx512<Rs + 1, 1, kElemF16>), ...);
  g.wide_panels = 4;
  g.wide_max_rows = 2;
  g.f32_wide[1] = &tile_avx512<1, 4, kElemF32>;
  g.f32_wide[2] = &tile_avx512<2, 4, kElemF32>;
  g.bf16_wide[1] = &tile_avx512<1, 4, kElemBf16>;
  g.bf16_wide[2] = &tile_avx512<2, 4, kElemBf16>;
  g.f16_wide[1] = &tile_avx512<1, 4, kElemF16>;
  g.f16_wide[2] = &tile_avx512<2, 4, kElemF16>;
  return g;
}

}  // namespace

const GemmKernels& gemm_kernels_avx512() {
  static const GemmKernels k = make(std::make_integer_sequence<int, 8>());
  return k;
}

}  // namespace llmrr::kernels
