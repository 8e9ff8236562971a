// MoE combine as one phase: one thread per (row, d) runs the k slots in rank order or the
// row's arrival order, out = fmaf(gate, expert_row[d], out) from +0, dropped slots skipped
// (plan.h kCombine; kernels/cpu/moe_combine.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "block_exec.h"
#include "llmrr/kernels/plan.h"
#include "rope_phases.h"  // elementwise_launch

namespace llmrr::kernels::cuda::detail {

struct CombineParams {
  const float* expert_rows;
  int64_t ld_expert;
  const int32_t* src;
  const float* gates;
  int64_t rows;
  int k;
  int64_t dim;
  float* out;
  int64_t ldo;
  const uint16_t* order;  // rows·k slot order, or nullptr for rank order
};

// The arrival list to pass as CombineParams::order, or empty for rank order: as the CPU op,
// a list of the wrong size or with an entry ≥ k falls back to rank order.
inline std::vector<uint16_t> combine_order(const Plan& plan, int64_t rows, int k) {
  bool arrival = plan.order == CombineOrder::kArrival &&
                 plan.arrival.size() == static_cast<size_t>(rows) * static_cast<size_t>(k);
  if (arrival) {
    for (uint16_t a : plan.arrival) arrival = arrival && a < k;
  }
  return arrival ? plan.arrival : std::vector<uint16_t>{};
}

inline Launch combine_launch(const CombineParams& p) {
  return elementwise_launch(p.rows * p.dim);
}

template <class Block>
LLMRR_HD void moe_combine_block(Block& b, const CombineParams& p) {
  b.phase([&](int t) {
    const int64_t idx = b.bx * b.nthreads + t;
    if (idx >= p.rows * p.dim) return;
    const int64_t r = idx / p.dim, d = idx % p.dim;
    float o = 0.0f;
    for (int i = 0; i < p.k; ++i) {
      const int64_t slot = p.order != nullptr ? p.order[r * p.k + i] : i;
      const int32_t s = p.src[r * p.k + slot];
      if (s < 0) continue;
      o = fmaf(p.gates[r * p.k + slot], p.expert_rows[s * p.ld_expert + d], o);
    }
    p.out[r * p.ldo + d] = o;
  });
}

}  // namespace llmrr::kernels::cuda::detail
