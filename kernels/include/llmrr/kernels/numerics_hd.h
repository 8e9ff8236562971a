// The scalar numerics of numerics.h written once for host and device (LLMRR_HD): the CPU
// definitions in numerics.cc call these, and the CUDA kernels call them directly, so both
// sides execute the same sequence of correctly rounded operations (invariant 4). Only
// +, −, ×, /, sqrtf, fmaf, rintf and exact power-of-two scaling appear; the build uses
// -ffp-contract=off on the host and -fmad=false on the device.
#pragma once

#include <math.h>

#include <cstdint>

#include "llmrr/kernels/hd.h"

namespace llmrr::numerics {

namespace exp_consts {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;         // 355/512: n·kLn2Hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;      // ln 2 − kLn2Hi
inline constexpr float kMinX = -104.0f;               // exp(-104) < 2^-149
inline constexpr float kMaxX = 89.0f;                 // exp(89) > FLT_MAX
inline constexpr float kMinNormal = 1.17549435e-38f;  // 2^-126
// Minimax polynomial for e^r on [-ln2/2, ln2/2] (Cephes expf), in Horner form from c7.
inline constexpr float kC7 = 1.9875691500e-4f;
inline constexpr float kC6 = 1.3981999507e-3f;
inline constexpr float kC5 = 8.3334519073e-3f;
inline constexpr float kC4 = 4.1665795894e-2f;
inline constexpr float kC3 = 1.6666665459e-1f;
inline constexpr float kC2 = 5.0000001201e-1f;
inline constexpr float kC1 = 1.0f;
inline constexpr float kC0 = 1.0f;
}  // namespace exp_consts

// 2^e for e in [-126, 127], exact.
LLMRR_HD inline float pow2i(int e) {
  return ::llmrr::hd::f32_from_bits(static_cast<uint32_t>(e + 127) << 23);
}

namespace hd {

LLMRR_HD inline float bf16_to_f32(uint16_t h) {
  return ::llmrr::hd::f32_from_bits(static_cast<uint32_t>(h) << 16);
}

// numerics.h f32_to_bf16: NaN stays NaN (quiet bit set), else round to nearest even (carries
// into the exponent, so the largest finite values round to inf).
LLMRR_HD inline uint16_t f32_to_bf16(float x) {
  uint32_t u = ::llmrr::hd::bits_of_f32(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
LLMRR_HD inline float round_to_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

// numerics.h exp_f32: the same operations in the same order.
LLMRR_HD inline float exp_f32(float x) {
  using namespace exp_consts;
  if (x != x) return x + x;
  // Clamping keeps n within [-150, 128]; outside, the result is inf or flushes to 0 anyway.
  x = x < kMinX ? kMinX : x;
  x = x > kMaxX ? kMaxX : x;
  // rintf rounds to nearest even in the default rounding mode (host) and always (device).
  const float n = rintf(x * kLog2e);
  float r = fmaf(-n, kLn2Hi, x);
  r = fmaf(-n, kLn2Lo, r);
  float p = kC7;
  p = fmaf(p, r, kC6);
  p = fmaf(p, r, kC5);
  p = fmaf(p, r, kC4);
  p = fmaf(p, r, kC3);
  p = fmaf(p, r, kC2);
  p = fmaf(p, r, kC1);
  p = fmaf(p, r, kC0);
  // p · 2ⁿ as two exact power-of-two scalings (both factors are normal floats), so the only
  // rounding is the final one; then subnormal results flush to 0.
  const int ni = static_cast<int>(n);
  const int n1 = ni / 2;
  const int n2 = ni - n1;
  const float y = (p * pow2i(n1)) * pow2i(n2);
  return y < kMinNormal ? 0.0f : y;
}

LLMRR_HD inline float rsqrt_f32(float x) {
  return 1.0f / sqrtf(x);
}

LLMRR_HD inline float silu_f32(float x) {
  return x / (1.0f + exp_f32(-x));
}

}  // namespace hd
}  // namespace llmrr::numerics
