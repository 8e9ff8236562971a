// Embedding lookup as one phase: a copy (fp32) or the exact bf16 widening, one thread per
// element; an id outside [0, vocab) gives zeros (as kernels/cpu/embedding.cc).
#pragma once

#include <cstdint>

#include "block_exec.h"
#include "llmrr/kernels/numerics_hd.h"
#include "rope_phases.h"  // elementwise_launch

namespace llmrr::kernels::cuda::detail {

struct EmbeddingParams {
  const void* table;
  bool bf16;
  int64_t vocab, dim;
  const int32_t* ids;
  int64_t rows;
  float* out;
  int64_t ldo;
};

inline Launch embedding_launch(const EmbeddingParams& p) {
  return elementwise_launch(p.rows * p.dim);
}

template <class Block>
LLMRR_HD void embedding_block(Block& b, const EmbeddingParams& p) {
  b.phase([&](int t) {
    const int64_t idx = b.bx * b.nthreads + t;
    if (idx >= p.rows * p.dim) return;
    const int64_t r = idx / p.dim, d = idx % p.dim;
    const int64_t id = p.ids[r];
    float v = 0.0f;
    if (id >= 0 && id < p.vocab) {
      v = p.bf16 ? numerics::hd::bf16_to_f32(static_cast<const uint16_t*>(p.table)[id * p.dim + d])
                 : static_cast<const float*>(p.table)[id * p.dim + d];
    }
    p.out[r * p.ldo + d] = v;
  });
}

}  // namespace llmrr::kernels::cuda::detail
