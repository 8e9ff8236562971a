#include "llmrr/runtime/memory_trace.h"

#include <xxhash.h>

#include <algorithm>

namespace llmrr {

uint64_t hash_row(const float* data, int64_t n) {
  return XXH3_64bits(data, static_cast<size_t>(n) * sizeof(float));
}

void MemoryTrace::on_arrival(int64_t step, const RequestSpec& request) {
  arrivals_.push_back(request);
}

void MemoryTrace::on_step(const StepInfo& step) {
  ScheduledStep s;
  s.step = step.step;
  s.segments.assign(step.segments.begin(), step.segments.end());
  steps_.push_back(std::move(s));
}

void MemoryTrace::on_plan(int64_t step, SiteId site, const Plan& plan) {
  plans_.set(step, site, plan);
}

void MemoryTrace::on_rows(const RowsView& v) {
  for (int64_t r = 0; r < v.rows; ++r) {
    int64_t row = v.batch_rows ? v.batch_rows[r] : r;
    // A device fingerprint's hash is the same xxh3-64 of the row's bytes.
    hashes_[{v.step, v.site.packed(), row}] =
        v.fingerprints ? v.fingerprints[r].hash : hash_row(v.data + r * v.ld, v.cols);
  }
}

void MemoryTrace::on_routing(const RoutingView& v) {
  ForcedRouting& f = routing_[{v.step, v.layer}];
  // With batch_rows (a request-alone run) the rows land at their recorded indices.
  int64_t rows = v.rows;
  if (v.batch_rows) {
    for (int64_t r = 0; r < v.rows; ++r) rows = std::max<int64_t>(rows, v.batch_rows[r] + 1);
  }
  f.rows = rows;
  f.k = v.k;
  f.capacity = v.capacity;
  f.experts.assign(static_cast<size_t>(rows) * v.k, -1);
  f.outcome.assign(f.experts.size(), RouteOutcome::kDropped);
  for (int64_t r = 0; r < v.rows; ++r) {
    int64_t row = v.batch_rows ? v.batch_rows[r] : r;
    for (int i = 0; i < v.k; ++i) {
      f.experts[row * v.k + i] = v.experts[r * v.k + i];
      f.outcome[row * v.k + i] = v.outcome[r * v.k + i];
    }
  }
}

void MemoryTrace::on_logits(const LogitsView& v) {
  if (!opt_.logits) return;
  logits_[{v.request, v.position}].assign(v.logits, v.logits + v.vocab);
}

void MemoryTrace::on_token(const TokenEvent& t) { tokens_[t.request].push_back(t.token); }

void MemoryTrace::on_finish(const RequestFinish& f) { finishes_[f.request] = f; }

Result<std::optional<ScheduledStep>> MemoryTrace::next() {
  if (cursor_ >= steps_.size()) return std::optional<ScheduledStep>();
  return std::optional<ScheduledStep>(steps_[cursor_++]);
}

const ForcedRouting* MemoryTrace::routing(int64_t step, int32_t layer) {
  auto it = routing_.find({step, layer});
  return it == routing_.end() ? nullptr : &it->second;
}

const std::vector<float>* MemoryTrace::logits_at(RequestId request, int32_t position) const {
  auto it = logits_.find({request, position});
  return it == logits_.end() ? nullptr : &it->second;
}

const std::vector<int32_t>& MemoryTrace::tokens(RequestId request) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tokens_.find(request);
  return it == tokens_.end() ? kEmpty : it->second;
}

int64_t MemoryTrace::step_of(RequestId request, int32_t position) const {
  for (const ScheduledStep& s : steps_) {
    for (const BatchSegment& g : s.segments) {
      if (g.request == request && position >= g.start && position < g.start + g.count) {
        return s.step;
      }
    }
  }
  return -1;
}

int64_t MemoryTrace::batch_row_of(RequestId request, int32_t position) const {
  for (const ScheduledStep& s : steps_) {
    int64_t row = 0;
    for (const BatchSegment& g : s.segments) {
      if (g.request == request && position >= g.start && position < g.start + g.count) {
        return row + (position - g.start);
      }
      row += g.count;
    }
  }
  return -1;
}

}  // namespace llmrr
