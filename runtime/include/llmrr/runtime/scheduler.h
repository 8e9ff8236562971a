// Continuous batching with chunked prefill. Deterministic: the batch of a step is a pure
// function of the requests submitted (in submission order), the tokens they sampled so far
// and the config.
//
// Rules, in order, for step s:
//  1. Decode first. Every running request whose prompt is fully in the KV cache and that
//     has a sampled token not yet processed gets one decode row, in admission order, while
//     the token budget (max_batch_tokens) lasts.
//  2. Prefill continues. Running requests still in prefill, in admission order, each get
//     the next chunk: min(remaining prompt, prefill_chunk, budget left).
//  3. Admission. Waiting requests with arrival_step ≤ s, ordered by (arrival_step,
//     submission order), are admitted while fewer than max_seqs requests run and budget is
//     left; each takes its first chunk as in 2.
//  4. A prefill segment samples iff it reaches the end of the prompt; decode rows always
//     sample. A request finishes when its token is EOS (and stop_at_eos) or it has
//     max_tokens tokens; it leaves the running set at the end of the step.
// Rows of a step are laid out in that order: decodes, continuing prefills, new prefills.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "llmrr/runtime/observer.h"

namespace llmrr {

struct SchedulerConfig {
  int32_t max_batch_tokens = 256;  // rows per step
  int32_t max_seqs = 16;           // requests running at once
  int32_t prefill_chunk = 64;      // most prompt rows of one request per step (0 = no limit)
};

// Empty string when valid, else why not.
std::string check_scheduler_config(const SchedulerConfig& config);

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config) : config_(config) {}

  // Submission order breaks ties between equal arrival steps.
  void add(RequestId id, int32_t prompt_len, int64_t arrival_step);

  // The segments of step `step` (rows in batch order). Empty when nothing can run now.
  std::vector<BatchSegment> next_batch(int64_t step);

  // After the step: `id` sampled a token; `finished` when that was its last.
  void on_token(RequestId id, bool finished);

  // No request waiting or running.
  bool idle() const { return running_.empty() && waiting_.empty(); }
  // Earliest arrival step among waiting requests (nullopt when none wait).
  std::optional<int64_t> next_arrival() const;
  size_t running() const { return running_.size(); }

 private:
  struct Seq {
    RequestId id;
    int32_t prompt_len;
    int64_t arrival_step;
    int64_t order;
    int32_t processed = 0;      // positions in the KV cache
    bool token_pending = false; // sampled a token that is not processed yet
    bool finished = false;
  };
  void add_chunk(Seq& s, int32_t& budget, std::vector<BatchSegment>& out);

  SchedulerConfig config_;
  std::deque<Seq> waiting_;  // sorted by (arrival_step, order)
  std::vector<Seq> running_; // admission order
  int64_t next_order_ = 0;
};

}  // namespace llmrr
