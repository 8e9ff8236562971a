// The scalar definitions every backend reproduces bit for bit (numerics.h). Only correctly
// rounded IEEE operations appear here, each written out (the build uses -ffp-contract=off,
// fma is always explicit), so a CUDA port built with -fmad=false matches exactly.
#include "llmrr/kernels/numerics.h"

#include <cmath>

#include "llmrr/kernels/numerics_hd.h"
#include "numerics_internal.h"

namespace llmrr::numerics {

uint16_t f32_to_bf16(float x) {
  return hd::f32_to_bf16(x);  // numerics_hd.h: one text for host and device
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {
      // Subnormal half: normalise into an fp32 normal (always representable).
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | ((127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The definitions live in numerics_hd.h so host and device run one text.
float exp_f32(float x) {
  return hd::exp_f32(x);
}

float rsqrt_f32(float x) {
  return hd::rsqrt_f32(x);
}

float silu_f32(float x) {
  return hd::silu_f32(x);
}

}  // namespace llmrr::numerics
