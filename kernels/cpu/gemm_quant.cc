// The scalar quantized GEMM micro-kernel (AVX2 in gemm_quant_avx2.cc, AVX-512 in
// gemm_quant_avx512.cc). It computes, for rows × one 32-column panel,
// t = Σ_k x[r, k]·W[n, k] from +0 with one fma per k in increasing k — the order of every
// other GEMM micro-kernel (plan.h) — where W[n, k] is decoded from the packed group just
// before its fma as quant.h defines it:
// A·float(c), then + B for formats with a minimum (a multiply and an add, never fused). The
// decoding is exact integer work plus those two roundings, so every ISA computes the same
// weight and therefore the same bits.
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

template <int R, bool kMin, int kKind>
struct ScalarFn {
  static constexpr QuantTileFn fn = &qtile_scalar<R, kMin, kKind>;
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

}  // namespace llmrr::kernels
