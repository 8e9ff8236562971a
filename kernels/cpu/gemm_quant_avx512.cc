// AVX-512 quantized GEMM micro-kernels: R rows × 32 columns (two zmm per row), each weight
// decoded as quant.h defines it right before its fma, one fma per k per output in increasing
// k — the sequence of gemm_quant.cc's scalar kernel, so the bits are the same. (Two panels
// per call for a single row, as the fp32 GEMV does, measured slower: decoding, not the fma
// latency, bounds these kernels.)
//
// Decoding in fewer instructions, with the same values:
// - 4-bit codes: vpermps reads only the low 4 bits of each index, so a table of the 16
//   values float(nibble − offset) turns a shifted code word into floats in one instruction
//   (no mask, no subtract, no conversion).
// - binary16 scales (the legacy formats): A has 11 significant bits and |c| ≤ 128 has 8, so
//   A·float(c) is exact in binary32; fma(A, c, B) therefore rounds exactly like the
//   contract's multiply then add. For 8-bit codes the code byte is moved to the top of its
//   word (one vpshufb: float(c·2^24), exact) and A is pre-scaled by 2^-24 (exact: A is 0 or
//   ≥ 2^-24) — the product is the same exact A·c.
// k-quants (binary32 scales, which are products) keep the multiply and the add.
// GCC 12 warns spuriously about _mm512_undefined inside its own intrinsics headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "cpu/gemm_internal.h"

namespace llmrr::kernels {
namespace {

// vpshufb control moving byte i of every 32-bit word to its top byte, zeroing the rest.
template <int I>
__m512i top_byte_control() {
  // Per 128-bit lane: word j takes byte 4j + I (into its top byte); 0x80 zeroes a byte.
  auto word = [](unsigned j) { return static_cast<int>((4 * j + I) << 24 | 0x808080u); };
  return _mm512_set4_epi32(word(3), word(2), word(1), word(0));
}

// kKind: 0 4-bit codes, 1 4-bit codes with an offset, 2 8-bit codes. kF16: binary16 scales.
template <int R, bool kMin, int kKind, bool kF16>
void qtile_body(const float* x, int64_t ldx, const uint8_t* panel, const QuantLayout& q,
                int64_t k0, int64_t k1, float* t) {
  const int64_t G = q.group;
  const __m512 lut = _mm512_cvtepi32_ps(_mm512_sub_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32(q.offset)));
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t g = k0 / G; g * G < k1; ++g) {
    const uint8_t* grp = panel + g * q.group_bytes;
    __m512 a0, a1, b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if constexpr (kF16) {
      const __m256i* h = reinterpret_cast<const __m256i*>(grp);
      a0 = _mm512_cvtph_ps(_mm256_load_si256(h));
      a1 = _mm512_cvtph_ps(_mm256_load_si256(h + 1));
      if constexpr (kMin) {
        b0 = _mm512_cvtph_ps(_mm256_load_si256(h + 2));
        b1 = _mm512_cvtph_ps(_mm256_load_si256(h + 3));
      }
      if constexpr (kKind == 2) {
        a0 = _mm512_mul_ps(a0, _mm512_set1_ps(0x1p-24f));
        a1 = _mm512_mul_ps(a1, _mm512_set1_ps(0x1p-24f));
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
    // One k (byte I of the quad's words): decode its 32 weights, then one fma per row and
    // column. I is a constant, so every shift and shuffle control is an immediate.
    auto step = [&](auto ic, const uint8_t* quad, int64_t k) __attribute__((always_inline)) {
      constexpr int I = decltype(ic)::value;
      __m512 c0, c1;
      if constexpr (kKind == 2) {
        const __m512i v0 = _mm512_load_si512(quad), v1 = _mm512_load_si512(quad + 64);
        if constexpr (kF16) {
          c0 = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(v0, top_byte_control<I>()));
          c1 = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(v1, top_byte_control<I>()));
        } else {
          c0 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v0, 24 - 8 * I), 24));
          c1 = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v1, 24 - 8 * I), 24));
        }
      } else {
        const __m512i v = _mm512_load_si512(quad);
        c0 = _mm512_permutexvar_ps(I == 0 ? v : _mm512_srli_epi32(v, 8 * I), lut);
        c1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 8 * I + 4), lut);
      }
      __m512 w0, w1;
      if constexpr (kMin && kF16) {
        w0 = _mm512_fmadd_ps(a0, c0, b0);
        w1 = _mm512_fmadd_ps(a1, c1, b1);
      } else if constexpr (kMin) {
        w0 = _mm512_add_ps(_mm512_mul_ps(a0, c0), b0);
        w1 = _mm512_add_ps(_mm512_mul_ps(a1, c1), b1);
      } else {
        w0 = _mm512_mul_ps(a0, c0);
        w1 = _mm512_mul_ps(a1, c1);
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 bx = _mm512_set1_ps(x[r * ldx + k]);
        acc[r][0] = _mm512_fmadd_ps(bx, w0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(bx, w1, acc[r][1]);
      }
    };
    using I0 = std::integral_constant<int, 0>;
    using I1 = std::integral_constant<int, 1>;
    using I2 = std::integral_constant<int, 2>;
    using I3 = std::integral_constant<int, 3>;
    for (int64_t k = ka; k < kb;) {
      const int64_t e = k - g * G;
      const uint8_t* quad = codes + (e >> 2) * q.quad_bytes;
      if ((e & 3) == 0 && k + 4 <= kb) {
        step(I0{}, quad, k);
        step(I1{}, quad, k + 1);
        step(I2{}, quad, k + 2);
        step(I3{}, quad, k + 3);
        k += 4;
        continue;
      }
      // A range that starts or ends inside a quad (odd k-tiles or split ends).
      switch (e & 3) {
        case 0: step(I0{}, quad, k); break;
        case 1: step(I1{}, quad, k); break;
        case 2: step(I2{}, quad, k); break;
        default: step(I3{}, quad, k); break;
      }
      k += 1;
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(t + r * kPanel, acc[r][0]);
    _mm512_storeu_ps(t + r * kPanel + 16, acc[r][1]);
  }
}

template <int R, bool kMin, int kKind>
void qtile_avx512(const float* x, int64_t ldx, const uint8_t* panel, const QuantLayout& q,
                  int64_t k0, int64_t k1, float* t) {
  if (q.f16_scales) {
    qtile_body<R, kMin, kKind, true>(x, ldx, panel, q, k0, k1, t);
  } else {
    qtile_body<R, kMin, kKind, false>(x, ldx, panel, q, k0, k1, t);
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
