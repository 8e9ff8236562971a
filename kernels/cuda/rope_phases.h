// RoPE ("rotate_half" pairs i, i + half) as one phase: one thread per (row, head, pair),
// products rounded, then the sum, as kernels/cpu/rope.cc.
#pragma once

#include <cstdint>

#include "block_exec.h"

namespace llmrr::kernels::cuda::detail {

inline constexpr int kElementwiseThreads = 256;

struct RopeParams {
  float* x;
  int64_t ldx, rows;
  const int32_t* positions;
  int64_t n_heads, head_dim, max_pos;
  const float* cos;  // [max_pos][head_dim / 2]
  const float* sin;
};

inline Launch elementwise_launch(int64_t total) {
  Launch l;
  l.gx = ceil_div(total, kElementwiseThreads);
  l.threads = kElementwiseThreads;
  return l;
}

inline Launch rope_launch(const RopeParams& p) {
  return elementwise_launch(p.rows * p.n_heads * (p.head_dim / 2));
}

template <class Block>
LLMRR_HD void rope_block(Block& b, const RopeParams& p) {
  b.phase([&](int t) {
    const int64_t half = p.head_dim / 2;
    const int64_t idx = b.bx * b.nthreads + t;
    if (idx >= p.rows * p.n_heads * half) return;
    const int64_t i = idx % half, h = (idx / half) % p.n_heads, r = idx / (half * p.n_heads);
    const int64_t pos = p.positions[r];
    if (pos < 0 || pos >= p.max_pos) return;
    const float c = p.cos[pos * half + i], s = p.sin[pos * half + i];
    float* v = p.x + r * p.ldx + h * p.head_dim;
    const float x1 = v[i], x2 = v[i + half];
    const float a = x1 * c, bb = x2 * s;
    const float d = x2 * c, e = x1 * s;
    v[i] = a - bb;
    v[i + half] = d + e;
  });
}

}  // namespace llmrr::kernels::cuda::detail
