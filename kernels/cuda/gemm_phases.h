// Exact GEMM, y[m, n] = Σ_k x[m, k]·W[n, k] in plan.h's kGemm order, as phases (see
// block_exec.h). Block (bx, by) owns row m = by and output columns [bx·nb, bx·nb + nb);
// thread t computes column j = t % nb and the split ranges s ≡ t / nb (mod groups).
//   phase 1: each split's partial p_s (k-tiles of sequential fmaf, tile sums added in
//            order) into shared partial[s][j];
//   phase 2: thread group 0 combines the partials in plan order (or `arrival`) and stores y.
// The weight is K-major (W[n, k] at k·N + n), so a warp's columns read one row of Wᵀ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "block_exec.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/numerics_hd.h"
#include "llmrr/kernels/plan.h"

namespace llmrr::kernels::cuda::detail {

inline constexpr int kGemmCols = 32;      // output columns per block (one warp)
inline constexpr int kGemmMaxGroups = 8;  // thread groups over the splits
inline constexpr int64_t kGemmMaxSplits = 256;

struct GemmParams {
  const float* x;
  int64_t ldx, m;
  const void* w;  // K-major fp32, or bf16 bits
  bool bf16;
  int64_t n, k;
  float* y;
  int64_t ldy;
  int64_t splits, c, k_tile;
  const uint16_t* order;  // combine order, or nullptr for 0, 1, 2, ...
  int groups;
  // Row indirection: output row r reads x row x_rows[r] (MoE's rows routed to one expert,
  // moe_experts_phases.h), or row r when nullptr.
  const int32_t* x_rows = nullptr;
};

// Host side: parameters (everything but the pointers) and launch from the plan. `order`
// receives the arrival list to pass as GemmParams::order when it is well formed (as the CPU
// op: right size, every entry < splits; otherwise fixed order). Empty string = fine.
inline std::string gemm_prepare(const Plan& plan, int64_t m, int64_t n, int64_t k, GemmParams& p,
                                Launch& l, std::vector<uint16_t>& order) {
  const int64_t splits = plan.splits == 0 ? 1 : plan.splits;
  if (splits > kGemmMaxSplits) {
    return "gemm: " + std::to_string(splits) + " splits, the CUDA kernel takes at most " +
           std::to_string(kGemmMaxSplits);
  }
  if (m > 65535) return "gemm: m = " + std::to_string(m) + " rows, at most 65535 per call";
  p.m = m;
  p.n = n;
  p.k = k;
  p.splits = splits;
  p.c = round_up16(ceil_div(k, splits));
  p.k_tile = plan.k_tile;
  order.clear();
  bool arrival =
      plan.order == CombineOrder::kArrival && plan.arrival.size() == static_cast<size_t>(splits);
  if (arrival) {
    for (uint16_t a : plan.arrival) arrival = arrival && a < splits;
  }
  if (arrival) order = plan.arrival;
  p.groups = static_cast<int>(min64(splits, kGemmMaxGroups));
  l.gx = ceil_div(n, kGemmCols);
  l.gy = m;
  l.threads = kGemmCols * p.groups;
  l.smem = static_cast<size_t>(splits) * kGemmCols * sizeof(float);
  return "";
}

LLMRR_HD inline float gemm_w(const GemmParams& p, int64_t kk, int64_t col) {
  const int64_t at = kk * p.n + col;
  return p.bf16 ? numerics::hd::bf16_to_f32(static_cast<const uint16_t*>(p.w)[at])
                : static_cast<const float*>(p.w)[at];
}

// Split s of output (row, col): plan.h's partial p_s.
LLMRR_HD inline float gemm_partial(const GemmParams& p, const float* xr, int64_t col, int64_t s) {
  const int64_t a = min64(s * p.c, p.k), b = min64(a + p.c, p.k);
  if (p.k_tile == 0) {
    float t = 0.0f;
    for (int64_t kk = a; kk < b; ++kk) t = fmaf(xr[kk], gemm_w(p, kk, col), t);
    return t;
  }
  float part = 0.0f;
  for (int64_t t0 = a; t0 < b; t0 += p.k_tile) {
    const int64_t t1 = min64(t0 + p.k_tile, b);
    float t = 0.0f;
    for (int64_t kk = t0; kk < t1; ++kk) t = fmaf(xr[kk], gemm_w(p, kk, col), t);
    part = part + t;
  }
  return part;
}

// Output row `row`, columns [bx·nb, bx·nb + nb), on a block of at least kGemmCols·groups
// threads (the rest idle): gemm_block's body, shared with the grouped expert GEMM.
template <class Block>
LLMRR_HD void gemm_row(Block& b, const GemmParams& p, int64_t row) {
  float* partial = static_cast<float*>(b.smem);  // [splits][kGemmCols]
  const float* xr = p.x + (p.x_rows != nullptr ? p.x_rows[row] : row) * p.ldx;
  b.phase([&](int t) {
    const int j = t % kGemmCols;
    const int64_t col = b.bx * kGemmCols + j;
    if (col >= p.n || t >= kGemmCols * p.groups) return;
    for (int64_t s = t / kGemmCols; s < p.splits; s += p.groups) {
      partial[s * kGemmCols + j] = gemm_partial(p, xr, col, s);
    }
  });
  b.phase([&](int t) {
    if (t >= kGemmCols) return;
    const int64_t col = b.bx * kGemmCols + t;
    if (col >= p.n) return;
    float acc = 0.0f;
    for (int64_t si = 0; si < p.splits; ++si) {
      const int64_t s = p.order != nullptr ? p.order[si] : si;
      const float v = partial[s * kGemmCols + t];
      acc = si == 0 ? v : acc + v;
    }
    p.y[row * p.ldy + col] = acc;
  });
}

template <class Block>
LLMRR_HD void gemm_block(Block& b, const GemmParams& p) {
  gemm_row(b, p, b.by);
}

// Host side: W[n, k] row-major fp32 → the K-major device layout (bf16 bits when `bf16`,
// rounded to nearest even like PackedWeight::pack).
inline std::vector<float> gemm_pack_f32(const float* w, int64_t n, int64_t k) {
  std::vector<float> out(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) out[kk * n + j] = w[j * k + kk];
  }
  return out;
}
inline std::vector<uint16_t> gemm_pack_bf16(const float* w, int64_t n, int64_t k) {
  std::vector<uint16_t> out(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) out[kk * n + j] = numerics::f32_to_bf16(w[j * k + kk]);
  }
  return out;
}

}  // namespace llmrr::kernels::cuda::detail
