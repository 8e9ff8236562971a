// How an exact CUDA kernel is written so that the device code itself runs on the CPU.
//
// Each kernel is a block body, `template <class Block> LLMRR_HD void <op>_block(Block&,
// const <Op>Params&)`: block-uniform control flow (loops over parts, tiles, tree levels)
// around calls `b.phase([&](int t) { ... })`, where the lambda is the work of thread t
// between two barriers. Threads of one phase may only communicate through shared memory
// (b.smem) or global memory written in an earlier phase, exactly the __syncthreads() rule.
//
// - DeviceBlock (below, nvcc only): every thread runs the body; phase(f) runs f for this
//   thread, then __syncthreads(). The __global__ wrappers in kernels/cuda/*.cu build one.
// - HostBlock (tests/kernels_cuda/grid_runner.h): one CPU thread runs the body once per
//   block; phase(f) runs f for every thread index in turn (forward or reversed, so a missing
//   barrier shows up as a difference), with shared memory emulated by a poisoned buffer.
//
// So the same text computes on the GPU and in the CPU tests; only phase() differs.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>

#include "llmrr/kernels/hd.h"

namespace llmrr::kernels::cuda::detail {

// A launch configuration: grid (gx, gy), `threads` per block, `smem` bytes of dynamic
// shared memory. Computed on the host by each op's <op>_launch(), used by the .cu launcher
// and by the CPU grid runner alike.
struct Launch {
  int64_t gx = 1, gy = 1;
  int threads = 1;
  size_t smem = 0;
};

#if defined(__CUDACC__)
struct DeviceBlock {
  int64_t bx, by;
  int nthreads;
  void* smem;

  template <class F>
  __host__ __device__ void phase(F&& f) {
#if defined(__CUDA_ARCH__)
    f(static_cast<int>(threadIdx.x));
    __syncthreads();
#endif
  }
};

__device__ inline DeviceBlock make_device_block(void* smem) {
  return DeviceBlock{static_cast<int64_t>(blockIdx.x), static_cast<int64_t>(blockIdx.y),
                     static_cast<int>(blockDim.x), smem};
}
#endif

// Shared-memory carving: a bump allocator over the block's dynamic shared memory, with
// the same offsets on host and device (sizes computed by the same function).
struct SmemCarver {
  unsigned char* base;
  size_t off = 0;
  template <typename T>
  LLMRR_HD T* take(size_t count) {
    off = (off + alignof(T) - 1) / alignof(T) * alignof(T);
    T* p = reinterpret_cast<T*>(base + off);
    off += count * sizeof(T);
    return p;
  }
};
// The bytes a sequence of take<T>(count) calls needs (same alignment rule).
struct SmemSizer {
  size_t off = 0;
  template <typename T>
  void take(size_t count) {
    off = (off + alignof(T) - 1) / alignof(T) * alignof(T);
    off += count * sizeof(T);
  }
};

LLMRR_HD inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
LLMRR_HD inline int64_t round_up16(int64_t v) {
  return (v + 15) / 16 * 16;
}
LLMRR_HD inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
LLMRR_HD inline int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}
// std::max(a, b) as the reference uses it: (a < b) ? b : a (keeps a on ties and NaN b).
LLMRR_HD inline float std_max(float a, float b) {
  return a < b ? b : a;
}

// plan.h's 16-lane dot product (ref::dot16): lane j takes i ≡ j (mod 16) with fmaf in
// increasing i, then pairwise halving 8, 4, 2, 1.
LLMRR_HD inline float dot16(const float* a, const float* b, int64_t n) {
  float s[16];
  for (int j = 0; j < 16; ++j) s[j] = 0.0f;
  for (int64_t i = 0; i < n; ++i) s[i % 16] = fmaf(a[i], b[i], s[i % 16]);
  for (int w = 8; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) s[j] = s[j] + s[j + w];
  }
  return s[0];
}

}  // namespace llmrr::kernels::cuda::detail
