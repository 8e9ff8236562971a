// Semantic checks of step records, shared by TraceWriter (a record that would make the
// trace fail verification is refused before anything is written) and TraceReader::verify.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "llmrr/format/records.h"

namespace llmrr::trace::detail {

// Problems with a plan on its own ("" when valid): trace::check_plan (records.h).
std::string plan_problem(const PlanRecord& plan);

class SemanticChecker {
 public:
  // Checks `step` against the steps seen so far and records its effects (arrivals,
  // finishes). Returns "" when valid, else "what: expected ..., found ...". On failure
  // nothing is recorded.
  std::string check_step(const StepRecord& step, int64_t blob_count);

  int64_t steps() const { return steps_; }
  int64_t tokens() const { return tokens_; }
  int64_t first_step() const { return first_step_; }
  int64_t last_step() const { return last_step_; }
  // Requests in arrival order, with finishes applied.
  const std::vector<RequestSummary>& requests() const { return requests_; }

 private:
  struct Req {
    size_t index;  // into requests_
    bool finished;
  };
  std::unordered_map<uint64_t, Req> by_id_;
  std::vector<RequestSummary> requests_;
  bool any_ = false;
  int64_t first_step_ = -1;
  int64_t last_step_ = -1;
  int64_t steps_ = 0;
  int64_t tokens_ = 0;
  template <typename T>
  std::string duplicate_site(const std::vector<T>& v, const char* list);

  // scratch, reused from step to step
  std::vector<std::pair<uint64_t, bool>> in_step_;  // (request, sampling) per segment, sorted
  std::vector<uint64_t> arriving_;
  std::vector<uint64_t> scratch_ids_;
};

}  // namespace llmrr::trace::detail
