// The batch of one step as the forward pass sees it (engine.cc builds it; the CPU forward
// in engine.cc and the device forward, device_forward.h, run it).
#pragma once

#include <cstdint>
#include <vector>

#include "llmrr/runtime/engine.h"
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

}  // namespace llmrr
