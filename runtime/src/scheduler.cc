#include "llmrr/runtime/scheduler.h"

#include <algorithm>
#include <string>

namespace llmrr {

std::string check_scheduler_config(const SchedulerConfig& c) {
  if (c.max_batch_tokens < 1) {
    return "max batch tokens must be >= 1 (got " + std::to_string(c.max_batch_tokens) + ")";
  }
  if (c.max_seqs < 1) return "max seqs must be >= 1 (got " + std::to_string(c.max_seqs) + ")";
  if (c.prefill_chunk < 0) {
    return "prefill chunk must be >= 0 (got " + std::to_string(c.prefill_chunk) + ")";
  }
  return "";
}

void Scheduler::add(RequestId id, int32_t prompt_len, int64_t arrival_step) {
  Seq s{id, prompt_len, arrival_step, next_order_++};
  auto it = std::upper_bound(waiting_.begin(), waiting_.end(), s, [](const Seq& a, const Seq& b) {
    return a.arrival_step != b.arrival_step ? a.arrival_step < b.arrival_step
                                            : a.order < b.order;
  });
  waiting_.insert(it, s);
}

std::optional<int64_t> Scheduler::next_arrival() const {
  if (waiting_.empty()) return std::nullopt;
  return waiting_.front().arrival_step;
}

void Scheduler::add_chunk(Seq& s, int32_t& budget, std::vector<BatchSegment>& out) {
  int32_t remaining = s.prompt_len - s.processed;
  int32_t n = std::min(remaining, budget);
  if (config_.prefill_chunk > 0) n = std::min(n, config_.prefill_chunk);
  if (n <= 0) return;
  BatchSegment seg;
  seg.request = s.id;
  seg.start = s.processed;
  seg.count = n;
  seg.cached = s.processed;
  seg.kind = SegmentKind::kPrefill;
  seg.sample = s.processed + n == s.prompt_len;
  out.push_back(seg);
  s.processed += n;
  budget -= n;
}

std::vector<BatchSegment> Scheduler::next_batch(int64_t step) {
  std::vector<BatchSegment> out;
  int32_t budget = config_.max_batch_tokens;
  // 1. decodes
  for (Seq& s : running_) {
    if (budget == 0) break;
    if (s.processed >= s.prompt_len && s.token_pending) {
      BatchSegment seg;
      seg.request = s.id;
      seg.start = s.processed;
      seg.count = 1;
      seg.cached = s.processed;
      seg.kind = SegmentKind::kDecode;
      seg.sample = true;
      out.push_back(seg);
      s.processed += 1;
      s.token_pending = false;
      budget -= 1;
    }
  }
  // 2. continuing prefills
  for (Seq& s : running_) {
    if (budget == 0) break;
    if (s.processed < s.prompt_len) add_chunk(s, budget, out);
  }
  // 3. admissions
  while (!waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<size_t>(config_.max_seqs) &&
         waiting_.front().arrival_step <= step) {
    running_.push_back(waiting_.front());
    waiting_.pop_front();
    add_chunk(running_.back(), budget, out);
  }
  return out;
}

void Scheduler::on_token(RequestId id, bool finished) {
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i].id != id) continue;
    if (finished) {
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      running_[i].token_pending = true;
    }
    return;
  }
}

}  // namespace llmrr
