// MoE experts on the device, as phases (block_exec.h), exactly runtime/src/engine/moe.cc's
// moe_mlp after routing (moe_route_phases.h):
//
//   group_by_expert_block  one block: thread e counts the slots routed to expert e, thread 0
//                          turns the counts into bases, thread e hands its slots their
//                          gathered index in the CPU's order (experts in index order, rows in
//                          batch order, slots in rank order) → base[E + 1], erows (gathered
//                          index → batch row) and src (slot → gathered index, −1 dropped).
//   grouped_gemm_block     one exact GEMM per expert, each with its own weight and plan
//                          (gemm_phases.h's gemm_row, the kGemm order), reading its x rows
//                          through erows (no gather copy) and writing gathered rows. Block
//                          (bx, j) is output row j: its expert is found from base, so one
//                          launch with rows·k rows covers every expert (blocks past base[E]
//                          return at once, block-uniformly).
//   then swiglu_block over the gathered rows, the down projection as another grouped GEMM,
//   moe_combine_block, and moe_finish_block: the shared expert's output (Qwen2-MoE scaled by
//   its sigmoid gate) added after the routed sum, as the CPU does, with the engine's
//   bf16_activations roundings of those steps. (Its roundings after each GEMM and swiglu are
//   the CUDA engine's round_bf16 pass, as for dense layers.)
#pragma once

#include <cstdint>

#include "block_exec.h"
#include "gemm_phases.h"
#include "llmrr/kernels/numerics_hd.h"
#include "rope_phases.h"  // elementwise_launch

namespace llmrr::kernels::cuda::detail {

struct GroupByExpertParams {
  const int32_t* experts_used;  // rows × k, −1 dropped
  int64_t rows;
  int32_t experts, k;
  int64_t* base;   // experts + 1
  int32_t* erows;  // ≤ rows·k
  int32_t* src;    // rows × k
};

inline Launch group_by_expert_launch(const GroupByExpertParams&) {
  Launch l;
  l.threads = 128;
  return l;
}

template <class Block>
LLMRR_HD void group_by_expert_block(Block& b, const GroupByExpertParams& p) {
  const int64_t slots = p.rows * p.k;
  b.phase([&](int t) {
    for (int32_t e = t; e < p.experts; e += b.nthreads) {
      int64_t n = 0;
      for (int64_t s = 0; s < slots; ++s) n += p.experts_used[s] == e ? 1 : 0;
      p.base[e + 1] = n;
    }
  });
  b.phase([&](int t) {
    if (t != 0) return;
    p.base[0] = 0;
    for (int32_t e = 0; e < p.experts; ++e) p.base[e + 1] = p.base[e] + p.base[e + 1];
  });
  b.phase([&](int t) {
    for (int32_t e = t; e < p.experts; e += b.nthreads) {
      int64_t j = p.base[e];
      for (int64_t s = 0; s < slots; ++s) {
        if (p.experts_used[s] != e) continue;
        p.erows[j] = static_cast<int32_t>(s / p.k);
        p.src[s] = static_cast<int32_t>(j);
        ++j;
      }
    }
    for (int64_t s = t; s < slots; s += b.nthreads) {
      if (p.experts_used[s] < 0) p.src[s] = -1;
    }
  });
}

struct GroupedGemmParams {
  // Per expert: gemm_prepare's parameters from the expert's plan, its weight, and the
  // shared x / ldx / y / ldy (x_rows and y are offset by the expert's base on the device).
  const GemmParams* expert;
  int32_t experts;
  const int64_t* base;   // group_by_expert's
  const int32_t* erows;  // gathered row → x row
};

// Launch for up to `max_rows` gathered rows of n columns: the largest block any expert's
// plan needs (thread groups, shared partials).
inline Launch grouped_gemm_launch(const GemmParams* expert, int32_t experts, int64_t n,
                                  int64_t max_rows) {
  Launch l;
  int groups = 1;
  int64_t splits = 1;
  for (int32_t e = 0; e < experts; ++e) {
    groups = expert[e].groups > groups ? expert[e].groups : groups;
    splits = max64(splits, expert[e].splits);
  }
  l.gx = ceil_div(n, kGemmCols);
  l.gy = max_rows;
  l.threads = kGemmCols * groups;
  l.smem = static_cast<size_t>(splits) * kGemmCols * sizeof(float);
  return l;
}

template <class Block>
LLMRR_HD void grouped_gemm_block(Block& b, const GroupedGemmParams& p) {
  const int64_t j = b.by;
  if (j >= p.base[p.experts]) return;
  int32_t e = 0;
  while (p.base[e + 1] <= j) ++e;
  GemmParams q = p.expert[e];
  q.x_rows = p.erows + p.base[e];
  q.y = q.y + p.base[e] * q.ldy;
  gemm_row(b, q, j - p.base[e]);
}

struct MoeFinishParams {
  const float* routed;        // the combine's rows × dim
  const float* shared;        // shared expert's rows × dim, or nullptr
  const float* shared_scale;  // rows, sigmoid already applied, or nullptr
  int64_t rows, dim;
  float* out;
  bool bf16;  // bf16_activations: round where the engine rounds
};

inline Launch moe_finish_launch(const MoeFinishParams& p) {
  return elementwise_launch(p.rows * p.dim);
}

template <class Block>
LLMRR_HD void moe_finish_block(Block& b, const MoeFinishParams& p) {
  b.phase([&](int t) {
    const int64_t i = b.bx * b.nthreads + t;
    if (i >= p.rows * p.dim) return;
    float o = p.routed[i];
    if (p.bf16) o = numerics::hd::round_to_bf16(o);
    if (p.shared != nullptr) {
      float d = p.shared[i];
      if (p.shared_scale != nullptr) {
        d = p.shared_scale[i / p.dim] * d;
        if (p.bf16) d = numerics::hd::round_to_bf16(d);
      }
      o = o + d;
      if (p.bf16) o = numerics::hd::round_to_bf16(o);
    }
    p.out[i] = o;
  });
}

}  // namespace llmrr::kernels::cuda::detail
