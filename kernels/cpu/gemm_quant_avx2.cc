// AVX2 quantized GEMM micro-kernels: R rows × one 32-column panel, each weight decoded as
// quant.h defines it right before its fma, one fma per k per output in increasing k — the
// sequence of gemm_quant.cc's scalar kernel, so the bits are the same.
//
// One row (decode, M = 1) takes all 32 columns in one pass: four independent fma chains,
// where a 16-column pass had two, which left the row waiting on the fma latency. More rows
// take two 16-column passes so that their accumulators, the half-panel's A and B and the
// decoded weights fit the 16 ymm registers. (Two panels per call for one row, eight chains,
// measured half as fast: their A and B no longer fit the registers.)
//
// Decoding in fewer instructions, with the same values (gemm_quant_avx512.cc explains the
// exactness):
// - the k inside a quad is a constant (four k per quad, unrolled), so every shift is an
//   immediate, and the shift of byte 3's high nibble needs no mask;
// - binary16 scales (the legacy formats): A·float(c) is exact, so fma(A, c, B) rounds
//   exactly like the contract's multiply then add; 8-bit codes move to the top byte of their
//   word in one vpshufb (float(c·2^24), exact) with A pre-scaled by 2^-24 (exact).
// k-quants (binary32 scales, which are products) keep the multiply and the add.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "cpu/gemm_internal.h"

namespace llmrr::kernels {
namespace {

// vpshufb control moving byte i of every 32-bit word to its top byte, zeroing the rest.
template <int I>
__m256i top_byte_control() {
  auto word = [](unsigned j) { return static_cast<int>((4 * j + I) << 24 | 0x808080u); };
  return _mm256_setr_epi32(word(0), word(1), word(2), word(3), word(0), word(1), word(2),
                           word(3));
}

// kKind: 0 4-bit codes, 1 4-bit codes with an offset, 2 8-bit codes. kF16: binary16 scales.
// kV column vectors of 8 per row and pass: 4 (the whole panel) or 2 (half kHalf of it).
template <int R, bool kMin, int kKind, bool kF16, int kV, int kHalf>
__attribute__((always_inline)) inline void qpass(const float* x, int64_t ldx,
                                                 const uint8_t* panel, const QuantLayout& q,
                                                 int64_t k0, int64_t k1, float* t) {
  const int64_t G = q.group;
  constexpr int vb = kV == 4 ? 0 : 2 * kHalf;  // first column vector of this pass
  const __m256i m4 = _mm256_set1_epi32(0xf);
  const __m256i off = _mm256_set1_epi32(q.offset);
  constexpr int64_t kQuadBytes = kKind == 2 ? 128 : 64;  // QuantLayout::quad_bytes
  __m256 acc[R][kV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t g = k0 / G; g * G < k1; ++g) {
    const uint8_t* grp = panel + g * q.group_bytes;
    __m256 a[kV], b[kV];
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      const int col = 8 * (vb + v);
      if constexpr (kF16) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(grp);
        a[v] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h + col)));
        b[v] = kMin ? _mm256_cvtph_ps(_mm_load_si128(
                          reinterpret_cast<const __m128i*>(h + kPanel + col)))
                    : _mm256_setzero_ps();
        if constexpr (kKind == 2) a[v] = _mm256_mul_ps(a[v], _mm256_set1_ps(0x1p-24f));
      } else {
        const float* f = reinterpret_cast<const float*>(grp);
        a[v] = _mm256_load_ps(f + col);
        b[v] = kMin ? _mm256_load_ps(f + kPanel + col) : _mm256_setzero_ps();
      }
    }
    const int64_t ka = std::max(k0, g * G), kb = std::min(k1, g * G + G);
    const uint8_t* codes = grp + q.hdr_bytes;
    // One k (byte I of the quad's words): decode its weights, then one fma per row and
    // column. I is a constant, so every shift and shuffle control is an immediate.
    auto step = [&](auto ic, const uint8_t* quad, int64_t k) __attribute__((always_inline)) {
      constexpr int I = decltype(ic)::value;
      __m256 w[kV];
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) {
        const int cv = vb + v;  // column vector 0..3 of the panel
        __m256 c;
        if constexpr (kKind == 2) {
          const __m256i word = _mm256_load_si256(reinterpret_cast<const __m256i*>(quad) + cv);
          if constexpr (kF16) {
            c = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(word, top_byte_control<I>()));
          } else {
            c = _mm256_cvtepi32_ps(
                _mm256_srai_epi32(_mm256_slli_epi32(word, 24 - 8 * I), 24));
          }
        } else {
          // Columns 8cv.. : words (cv & 1)·8.., the low nibble for cv < 2, else the high.
          const __m256i word =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(quad) + (cv & 1));
          const int sh = 8 * I + 4 * (cv >> 1);
          __m256i ci;
          if (sh == 28) {
            ci = _mm256_srli_epi32(word, 28);
          } else if (sh == 0) {
            ci = _mm256_and_si256(word, m4);
          } else {
            ci = _mm256_and_si256(_mm256_srli_epi32(word, sh), m4);
          }
          if constexpr (kKind == 1) ci = _mm256_sub_epi32(ci, off);
          c = _mm256_cvtepi32_ps(ci);
        }
        if constexpr (kMin && kF16) {
          w[v] = _mm256_fmadd_ps(a[v], c, b[v]);
        } else if constexpr (kMin) {
          w[v] = _mm256_add_ps(_mm256_mul_ps(a[v], c), b[v]);
        } else {
          w[v] = _mm256_mul_ps(a[v], c);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256 bx = _mm256_broadcast_ss(x + r * ldx + k);
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) acc[r][v] = _mm256_fmadd_ps(bx, w[v], acc[r][v]);
      }
    };
    using I0 = std::integral_constant<int, 0>;
    using I1 = std::integral_constant<int, 1>;
    using I2 = std::integral_constant<int, 2>;
    using I3 = std::integral_constant<int, 3>;
    // The k of one quad, from byte `from` on, below kb (a range that starts or ends inside a
    // quad: odd k-tiles or split ends; the plans of this project never make one).
    auto partial = [&](const uint8_t* quad, int64_t k, int from, int64_t kend) {
      for (int i = from; i < 4 && k < kend; ++i, ++k) {
        switch (i) {
          case 0: step(I0{}, quad, k); break;
          case 1: step(I1{}, quad, k); break;
          case 2: step(I2{}, quad, k); break;
          default: step(I3{}, quad, k); break;
        }
      }
    };
    const int64_t e0 = ka - g * G;
    const uint8_t* quad = codes + (e0 >> 2) * kQuadBytes;
    int64_t k = ka;
    if ((e0 & 3) != 0) [[unlikely]] {
      partial(quad, k, static_cast<int>(e0 & 3), kb);
      k = std::min(kb, k + 4 - (e0 & 3));
      quad += kQuadBytes;
    }
    for (; k + 4 <= kb; k += 4, quad += kQuadBytes) {
      step(I0{}, quad, k);
      step(I1{}, quad, k + 1);
      step(I2{}, quad, k + 2);
      step(I3{}, quad, k + 3);
    }
    if (k < kb) [[unlikely]] partial(quad, k, 0, kb);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) _mm256_storeu_ps(t + r * kPanel + 8 * (vb + v), acc[r][v]);
}

template <int R, bool kMin, int kKind, bool kF16>
void qtile_body(const float* x, int64_t ldx, const uint8_t* panel, const QuantLayout& q,
                int64_t k0, int64_t k1, float* t) {
  if constexpr (R == 1) {
    qpass<1, kMin, kKind, kF16, 4, 0>(x, ldx, panel, q, k0, k1, t);
  } else {
    qpass<R, kMin, kKind, kF16, 2, 0>(x, ldx, panel, q, k0, k1, t);
    qpass<R, kMin, kKind, kF16, 2, 1>(x, ldx, panel, q, k0, k1, t);
  }
}

template <int R, bool kMin, int kKind>
void qtile_avx2(const float* x, int64_t ldx, const uint8_t* panel, const QuantLayout& q,
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
  ((k.fn[0][0][Rs + 1] = &qtile_avx2<Rs + 1, false, 0>), ...);
  ((k.fn[0][1][Rs + 1] = &qtile_avx2<Rs + 1, false, 1>), ...);
  ((k.fn[0][2][Rs + 1] = &qtile_avx2<Rs + 1, false, 2>), ...);
  ((k.fn[1][0][Rs + 1] = &qtile_avx2<Rs + 1, true, 0>), ...);
  ((k.fn[1][1][Rs + 1] = &qtile_avx2<Rs + 1, true, 1>), ...);
  ((k.fn[1][2][Rs + 1] = &qtile_avx2<Rs + 1, true, 2>), ...);
  return k;
}

}  // namespace

const QuantKernels& quant_kernels_avx2() {
  static const QuantKernels k = make(std::make_integer_sequence<int, 3>());
  return k;
}

}  // namespace llmrr::kernels
