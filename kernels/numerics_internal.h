// Constants of llmrr's exp, shared by the scalar definition (numerics.cc) and the SIMD
// versions in kernels/cpu/. Changing any of them changes results: bump nothing silently.
#pragma once

#include <cstdint>
#include <cstring>

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
inline float pow2i(int e) {
  uint32_t u = static_cast<uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace llmrr::numerics
