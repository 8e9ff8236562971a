// LLMRR_HD marks functions that run on the host and on a CUDA device. Under nvcc it is
// `__host__ __device__`; under g++ it is nothing, so the same headers (numerics_hd.h, the
// phase headers in kernels/cuda/) compile into CPU code, and the device code is tested on
// the CPU (tests/kernels_cuda/).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LLMRR_HD __host__ __device__
#else
#define LLMRR_HD
#endif

namespace llmrr::hd {

// Bit casts that compile on both sides (memcpy is fine in device code, but the intrinsics
// are what nvcc turns into a register move).
LLMRR_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
LLMRR_HD inline uint32_t bits_of_f32(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

}  // namespace llmrr::hd
