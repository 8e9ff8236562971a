// Scalar numerics that every backend must reproduce bit for bit (invariant 4): bf16
// rounding, exp, rsqrt and silu built only from correctly rounded operations (+, −, ×, /,
// sqrt, fma, exact scaling by powers of two) in a fixed sequence. The SIMD paths in
// kernels/cpu/ and the CUDA kernels apply the same sequence lane by lane.
#pragma once

#include <cstdint>
#include <cstring>

namespace llmrr::numerics {

// fp32 → bf16, round to nearest even; NaN stays NaN (quiet).
uint16_t f32_to_bf16(float x);
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// fp16 (IEEE binary16) → fp32, exact (used by GGUF dequantization).
float f16_to_f32(uint16_t h);

// exp(x) to within 2 ulp for x in the normal range; exp(-inf) = 0, exp(+inf) = inf,
// overflow → inf, underflow → 0 (subnormal results flush to 0), NaN → NaN. The sequence:
// n = round_to_nearest_even(x · log2(e)); r = fma(−n, ln2_hi, x); r = fma(−n, ln2_lo, r);
// p = Horner polynomial in r with fma; result = p · 2ⁿ. The constants are in numerics.cc.
float exp_f32(float x);

// 1 / sqrt(x), two correctly rounded operations.
float rsqrt_f32(float x);

// x / (1 + exp(−x)).
float silu_f32(float x);

}  // namespace llmrr::numerics
