// A step's batch from its segments (StepBatch): the rows each computed segment adds, the
// rows of other requests left out in request-alone replay (set_isolated_request), and the
// checks a forced schedule's segments must pass against the state of their requests.
#include <string>

#include "impl.h"

namespace llmrr {

// Builds the computed rows of `b` from b.full. Validates forced segments.
Status Engine::Impl::build_batch(StepBatch& b, bool forced) {
  b.full_rows = 0;
  b.full_sampled = 0;
  b.attn_seqs.clear();
  b.identity = true;
  for (size_t i = 0; i < b.full.size(); ++i) {
    const BatchSegment& seg = b.full[i];
    const int64_t orig0 = b.full_rows;
    b.full_rows += seg.count;
    if (seg.sample) ++b.full_sampled;
    b.attn_seqs.push_back(AttnSeq{seg.count, seg.cached, seg.kind == SegmentKind::kDecode});
    if (isolated && seg.request != *isolated) {
      b.identity = false;
      continue;
    }
    auto it = reqs.find(seg.request);
    if (it == reqs.end()) {
      return make_error(ErrorCode::kSemantic, step_str(b.step) + ", segment " +
                                                  std::to_string(i) + ": request " +
                                                  std::to_string(seg.request) +
                                                  " was never added");
    }
    RequestState& r = it->second;
    if (forced) RETURN_IF_ERROR(check_segment(b, i, seg, r));
    ActiveSeg a;
    a.seg = seg;
    a.req = &r;
    a.table = &tables[seg.request];
    a.tokens = seqs[seg.request].data();
    a.row0 = b.rows();
    a.orig_row0 = orig0;
    b.segs.push_back(a);
    b.active_segments.push_back(seg);
    for (int32_t j = 0; j < seg.count; ++j) {
      b.tokens.push_back(a.tokens[seg.start + j]);
      b.positions.push_back(seg.start + j);
      b.orig.push_back(static_cast<int32_t>(orig0 + j));
      b.row_seg.push_back(static_cast<int32_t>(b.segs.size() - 1));
    }
    if (seg.sample) {
      b.sampled.push_back(static_cast<int32_t>(b.rows() - 1));
      b.sampled_orig.push_back(static_cast<int32_t>(orig0 + seg.count - 1));
    }
  }
  return Status::Ok();
}

Status Engine::Impl::check_segment(const StepBatch& b, size_t i, const BatchSegment& seg,
                                   const RequestState& r) {
  auto bad = [&](const std::string& what) {
    return make_error(ErrorCode::kSemantic, step_str(b.step) + ", segment " + std::to_string(i) +
                                                " (request " + std::to_string(seg.request) +
                                                "): " + what);
  };
  const int32_t plen = static_cast<int32_t>(r.spec.prompt.size());
  const int32_t ngen = static_cast<int32_t>(r.generated.size());
  if (r.spec.arrival_step > b.step) {
    return bad("the request arrives at step " + std::to_string(r.spec.arrival_step));
  }
  if (r.finished) return bad("the request already finished");
  if (seg.count <= 0) return bad("count must be positive");
  if (seg.start != r.processed) {
    return bad("starts at position " + std::to_string(seg.start) + " but the request has " +
               std::to_string(r.processed) + " positions in its KV cache");
  }
  if (seg.cached != seg.start) {
    return bad("cached " + std::to_string(seg.cached) + " differs from start " +
               std::to_string(seg.start));
  }
  for (const ActiveSeg& a : b.segs) {
    if (a.seg.request == seg.request) return bad("the request appears twice in the batch");
  }
  if (seg.kind == SegmentKind::kPrefill) {
    if (seg.start + seg.count > plen) {
      return bad("prefill rows [" + std::to_string(seg.start) + ", " +
                 std::to_string(seg.start + seg.count) + ") run past the prompt of " +
                 std::to_string(plen) + " tokens");
    }
    if (seg.sample != (seg.start + seg.count == plen)) {
      return bad(seg.sample ? "samples before the end of its prompt"
                            : "reaches the end of its prompt without sampling");
    }
  } else {
    if (seg.count != 1 || !seg.sample) return bad("a decode segment has one sampling row");
    if (ngen == 0 || r.processed != plen + ngen - 1) {
      return bad("decode at position " + std::to_string(seg.start) +
                 " but the request has no token waiting there");
    }
  }
  return Status::Ok();
}

}  // namespace llmrr
