// One step on its way from the producer's calls to the writer (StepRecorder's pipeline).
//
// The producer's thread fills a slot with what the callbacks hand over: the small records
// (arrivals, segments, plans, routing, tokens, finishes) as they will be stored, and the
// float rows whose fingerprints, top-K and blobs are still to be computed as plain copies in
// one arena. The recorder's thread then completes the StepRecord from the copies and appends
// it. Slots are reused step after step, so in steady state nothing is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "llmrr/format/records.h"

namespace llmrr::recording::internal {

// A growable float buffer addressed by offsets (which stay valid when it grows). Unlike a
// std::vector, taking space does not zero it: every float taken is written by a copy.
class FloatArena {
 public:
  // Returns the offset of n floats at the end of the arena.
  size_t take(size_t n) {
    if (used_ + n > capacity_) grow(used_ + n);
    const size_t at = used_;
    used_ += n;
    return at;
  }
  float* at(size_t offset) { return data_.get() + offset; }
  const float* at(size_t offset) const { return data_.get() + offset; }
  size_t used() const { return used_; }
  void clear() { used_ = 0; }

 private:
  void grow(size_t need) {
    size_t cap = capacity_ ? capacity_ : 4096;
    while (cap < need) cap *= 2;
    std::unique_ptr<float[]> d(new float[cap]);
    if (used_) std::memcpy(d.get(), data_.get(), used_ * sizeof(float));
    data_ = std::move(d);
    capacity_ = cap;
  }
  std::unique_ptr<float[]> data_;
  size_t used_ = 0;
  size_t capacity_ = 0;
};

// step.rows[index].rows is to be filled with the fingerprints of `rows` dense rows of
// `cols` floats at arena offset `offset`.
struct PendingRows {
  size_t index = 0;
  size_t offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
};

// step.logits[index] is to be completed (top-K, margin, fingerprint, blob) from the row of
// `vocab` floats at arena offset `offset`.
struct PendingLogits {
  size_t index = 0;
  size_t offset = 0;
  int64_t vocab = 0;
};

// Records with lists of their own, kept for reuse: a record taken from here keeps its
// lists' capacity, so the engine's thread fills it without allocating (and the thread that
// completed the step frees nothing).
template <typename T>
class Recycler {
 public:
  T take() {
    if (spare_.empty()) return T{};
    T t = std::move(spare_.back());
    spare_.pop_back();
    return t;
  }
  void give_back(std::vector<T>& used) {
    for (T& t : used) spare_.push_back(std::move(t));
    used.clear();
  }

 private:
  std::vector<T> spare_;
};

struct StepSlot {
  trace::StepRecord step;
  std::vector<PendingRows> rows;
  std::vector<PendingLogits> logits;
  FloatArena arena;
  // The copy of the "logits" site's rows, when this step has one (index into rows, or −1):
  // a logits view the engine marks as one of those rows is not copied again.
  int64_t logits_site_rows = -1;
  Recycler<trace::SiteRows> spare_rows;
  Recycler<trace::Routing> spare_routing;
  Recycler<trace::LogitsRecord> spare_logits;

  void clear() {
    spare_rows.give_back(step.rows);
    spare_routing.give_back(step.routing);
    spare_logits.give_back(step.logits);
    step.clear();
    rows.clear();
    logits.clear();
    arena.clear();
    logits_site_rows = -1;
  }
};

}  // namespace llmrr::recording::internal
