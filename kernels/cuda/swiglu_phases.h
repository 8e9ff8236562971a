// SwiGLU as one phase: out = silu(gate) · up with llmrr's silu (numerics_hd.h), one thread
// per element.
#pragma once

#include <cstdint>

#include "block_exec.h"
#include "llmrr/kernels/numerics_hd.h"
#include "rope_phases.h"  // elementwise_launch

namespace llmrr::kernels::cuda::detail {

struct SwigluParams {
  const float* gate;
  int64_t ldg;
  const float* up;
  int64_t ldu, rows, cols;
  float* out;
  int64_t ldo;
};

inline Launch swiglu_launch(const SwigluParams& p) {
  return elementwise_launch(p.rows * p.cols);
}

template <class Block>
LLMRR_HD void swiglu_block(Block& b, const SwigluParams& p) {
  b.phase([&](int t) {
    const int64_t idx = b.bx * b.nthreads + t;
    if (idx >= p.rows * p.cols) return;
    const int64_t r = idx / p.cols, j = idx % p.cols;
    p.out[r * p.ldo + j] = numerics::hd::silu_f32(p.gate[r * p.ldg + j]) * p.up[r * p.ldu + j];
  });
}

}  // namespace llmrr::kernels::cuda::detail
