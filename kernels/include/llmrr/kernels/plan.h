// Plan: how one op reduces. Every reduction in llmrr follows a Plan, and a kernel's output
// is a pure function of (inputs, weights, plan) — DESIGN invariant 1. The exact order each
// field implies is spelled out here, because the CPU kernels, the CUDA kernels and the
// replayer must all follow the same definition bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llmrr/format/vocab.h"

namespace llmrr {

// The ops and orders are the trace's vocabulary (llmrr/format/vocab.h): one definition.
using OpKind = trace::OpKind;              // kGemm, kRmsNorm, kAttention, kCombine
using CombineOrder = trace::CombineOrder;  // kFixed, kArrival (the order in Plan::arrival)
using SplitMode = trace::SplitMode;        // kCount (equal parts), kSize (parts of split_size)

// A cuBLASLt matmul algorithm, as cuBLASLt's heuristic picked it for one GEMM shape: the
// plan of a fast-family (tensor-core) GEMM on CUDA. Tensor cores accumulate in an order no
// field above can describe, so the plan *is* the algorithm: the same algorithm on the same
// GPU model and cuBLASLt version gives the same bits, and replay re-creates it with
// cublasLtMatmulAlgoInit + cublasLtMatmulAlgoConfigSetAttribute. Field values are
// cuBLASLt's own (cublasLtMatmulAlgoConfigAttributes_t, cublasComputeType_t, cudaDataType);
// kernels/cublaslt_plan.h converts and checks them without needing CUDA.
struct CublasLtAlgo {
  int32_t algo_id = 0;         // CUBLASLT_ALGO_CONFIG_ID
  uint32_t tile = 0;           // CUBLASLT_ALGO_CONFIG_TILE_ID (cublasLtMatmulTile_t)
  uint32_t stages = 0;         // CUBLASLT_ALGO_CONFIG_STAGES_ID (cublasLtMatmulStages_t)
  int32_t splitk = 1;          // CUBLASLT_ALGO_CONFIG_SPLITK_NUM
  uint32_t reduction = 0;      // CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME (cublasLtReductionScheme_t)
  uint32_t swizzle = 0;        // CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING (0 or 1)
  uint32_t custom = 0;         // CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION
  uint16_t inner_shape = 0;    // CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID (cublasLtMatmulInnerShape_t)
  uint16_t cluster_shape = 0;  // CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID (cublasLtClusterShape_t)
  uint64_t workspace = 0;      // bytes of workspace the algorithm needs
  // The matmul it was initialized for (cublasLtMatmulAlgoInit's arguments).
  int32_t compute_type = 0;  // cublasComputeType_t, e.g. CUBLAS_COMPUTE_32F = 68
  int32_t scale_type = 0;    // cudaDataType of alpha/beta, e.g. CUDA_R_32F = 0
  int32_t a_type = 0;        // cudaDataType of A (activations), e.g. CUDA_R_16BF = 14
  int32_t b_type = 0;        // of B (weights)
  int32_t c_type = 0;        // of C and D (output)

  bool operator==(const CublasLtAlgo&) const = default;
};

// One plan for one op at one site at one step.
//
// Exact semantics (all accumulations start from +0.0f; "fma" is a single-rounding fused
// multiply-add; "+" and "*" are IEEE binary32 round-to-nearest-even):
//
// kGemm, y[m,n] = Σ_k x[m,k]·W[n,k]:
//   K is cut into `splits` ranges of length c = round_up(ceil(K/splits), 16), the last one
//   shorter (empty ranges contribute +0). Inside a range, k runs upward in tiles of
//   `k_tile` (0 = one tile spanning the range): each tile's sum t starts at +0 and
//   accumulates t = fma(x[m,k], W[n,k], t) sequentially in k; the range's partial p starts
//   at +0 and takes p = p + t after each tile — except with k_tile == 0, where p = t.
//   Partials combine as y = ((p_a + p_b) + p_c) + ... with (a, b, c, ...) = (0, 1, 2, ...)
//   for kFixed, or `arrival` (a permutation of 0..splits-1) for kArrival; a single split
//   is y = p_0.
//
// kRmsNorm: the sum of squares over `dim` is cut into `splits` chunks of length
//   c = round_up(ceil(dim/splits), 16). Inside a chunk, 16 lanes: lane j accumulates
//   s_j = fma(x_i, x_i, s_j) for i ≡ j (mod 16) in increasing i, then the lanes reduce by
//   pairwise halving: for w = 8, 4, 2, 1: s_j = s_j + s_{j+w} for j < w; the sum is s_0.
//   Chunk sums combine in chunk order, c = ((c_0 + c_1) + c_2) + ... (kFixed only). Then
//   r = 1 / sqrt(sum / dim + eps) (each op correctly rounded) and y_i = w_i * (x_i * r).
//
// kAttention, per row, per query head h (KV head g = h / (heads / kv_heads)):
//   the row at query position p attends to KV positions [0, p]. With `separate_new_kv`,
//   positions [0, cached) and [cached, p] are reduced as two independent sequences whose
//   results are merged cached-first (what a chunked-prefill engine does when it reads the
//   cache and the new chunk separately); otherwise [0, p] is one sequence. Each sequence
//   of length L is split by `mode`: kCount → `splits` parts of ceil(L/splits) positions;
//   kSize → parts of `split_size` positions. Inside a part, scores s_j = (q·k_j) * scale
//   with the dot product in the 16-lane order of kRmsNorm (over head_dim); m = max_j s_j;
//   e_j = exp(s_j − m) with llmrr's exp (kernels/numerics.h); l = Σ e_j sequentially in j;
//   o[d] = fma(e_j, v_j[d], o[d]) sequentially in j. Parts merge in order (kFixed only):
//   M = max m_i; l = Σ_i l_i·exp(m_i − M); o[d] = Σ_i o_i[d]·exp(m_i − M), each sum
//   sequential in i using "*" then "+"; out[d] = o[d] / l. An empty part (kCount with more
//   parts than positions) has m = −inf, l = +0, o = +0 and adds exactly +0 to the merge.
//   With `separate_new_kv`, each sequence's parts merge into a state (M, l, o) by the rule
//   above (before the division), then the two states merge the same way as two parts,
//   cached first, and out[d] = o[d] / l; an empty sequence (cached = 0) is skipped, and
//   `cached` is clamped to [0, p + 1].
//
// kCombine (MoE), per token row r with k routed experts (rank order 0..k-1):
//   out[d] = +0; for i in order: out[d] = fma(gate_i, y_i[d], out[d]); dropped slots are
//   skipped. Order is rank order for kFixed, or arrival[r*k .. r*k+k-1] for kArrival.
struct Plan {
  OpKind op = OpKind::kGemm;
  SplitMode mode = SplitMode::kCount;   // kAttention only
  CombineOrder order = CombineOrder::kFixed;
  bool separate_new_kv = false;         // kAttention only
  uint32_t splits = 1;                  // kGemm split-K; kRmsNorm chunks; kAttention kCount parts
  uint32_t split_size = 0;              // kAttention kSize: positions per part
  uint32_t k_tile = 0;                  // kGemm: tile length in k, multiple of 16 (0 = whole range)
  // kArrival only. kGemm: permutation of 0..splits-1. kCombine: rows×k, one permutation of
  // 0..k-1 per row. Empty otherwise.
  std::vector<uint16_t> arrival;
  // kGemm only: the GEMM runs through cuBLASLt with this algorithm instead of the exact
  // order above (`splits` then mirrors its split-K count, for reports only). Only a CUDA
  // engine can run such a plan; the CPU refuses it (see cublaslt_plan.h).
  std::optional<CublasLtAlgo> cublaslt;

  bool operator==(const Plan&) const = default;
};

// Short human form for diffs and dumps: "split-K 4", "split-K 1, k-tile 64",
// "norm chunks 2", "split-KV 3 parts", "split-KV 256 positions, new KV separate",
// "combine rank order", "split-K 4, arrival order 2,0,3,1".
std::string plan_to_string(const Plan& plan);

// Checks a plan is well formed for its op (splits ≥ 1, k_tile multiple of 16, arrival a
// permutation of the right length, ...). Returns an empty string when valid, else why not.
std::string plan_check(const Plan& plan, int64_t rows_for_combine = 0, int k_for_combine = 0);

}  // namespace llmrr
