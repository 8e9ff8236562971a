// The batch of one step as the forward pass sees it (engine/batch.cc builds it; the CPU
// forward in engine/forward.cc and engine/moe.cc and the device forward, device_forward.h,
// run it).
#pragma once

#include <cstdint>
#include <vector>

#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/policy.h"

namespace llmrr {

// One segment of the step that is computed.
struct ActiveSeg {
  BatchSegment seg;
  RequestState* req = nullptr;          // null for score_prompt
  std::vector<int32_t>* table = nullptr;
  const int32_t* tokens = nullptr;      // the sequence's tokens (prompt then generated)
  int64_t row0 = 0;                     // first computed row
  int64_t orig_row0 = 0;                // its row in the recorded batch
};

struct StepBatch {
  int64_t step = 0;
  bool notify = true;
  std::vector<BatchSegment> full;       // the whole batch (segments in row order)
  std::vector<AttnSeq> attn_seqs;       // of the whole batch, for the policy
  int64_t full_rows = 0;
  int64_t full_sampled = 0;
  bool identity = true;                 // computed rows == batch rows
  std::vector<ActiveSeg> segs;
  std::vector<BatchSegment> active_segments;
  std::vector<int32_t> tokens, positions, orig, row_seg;
  std::vector<int32_t> sampled;         // computed rows that produce logits
  std::vector<int32_t> sampled_orig;
  int64_t rows() const { return static_cast<int64_t>(tokens.size()); }
  const int32_t* row_map() const { return identity ? nullptr : orig.data(); }
};

// The questions the forward asks the policy, one builder per op: the CPU forward
// (engine/forward.cc, engine/moe.cc) and the CUDA forward (cuda/cuda_forward.cc) must ask the
// same ones, or a trace recorded on one device would not force the same plans on the other.
// Shapes are the whole step's.
inline PlanQuery plan_query(const StepBatch& b, SiteId site, OpKind op) {
  PlanQuery q;
  q.step = b.step;
  q.site = site;
  q.op = op;
  q.batch_rows = b.full_rows;
  return q;
}

// A GEMM of plan_m rows (M) by a weight of n outputs and k inputs.
inline PlanQuery gemm_plan_query(const StepBatch& b, SiteId site, int64_t plan_m, int64_t n,
                                 int64_t k, bool expert = false) {
  PlanQuery q = plan_query(b, site, OpKind::kGemm);
  q.rows = plan_m;
  q.n = n;
  q.k = k;
  q.expert = expert;
  return q;
}

inline PlanQuery norm_plan_query(const StepBatch& b, SiteId site, int64_t plan_rows,
                                 int64_t dim) {
  PlanQuery q = plan_query(b, site, OpKind::kRmsNorm);
  q.rows = plan_rows;
  q.k = dim;
  return q;
}

inline PlanQuery attention_plan_query(const StepBatch& b, const ModelConfig& c, SiteId site,
                                      int32_t kv_block_size) {
  PlanQuery q = plan_query(b, site, OpKind::kAttention);
  q.rows = b.full_rows;
  q.k = c.cache_dim();  // MLA: the latent row (kv_lora + rope), one KV head
  q.seqs = b.attn_seqs;
  q.heads = c.heads;
  q.kv_heads = c.cache_heads();
  q.block_size = kv_block_size;
  return q;
}

inline PlanQuery combine_plan_query(const StepBatch& b, SiteId site, int32_t top_k) {
  PlanQuery q = plan_query(b, site, OpKind::kCombine);
  q.rows = b.full_rows;
  q.top_k = top_k;
  return q;
}

}  // namespace llmrr
