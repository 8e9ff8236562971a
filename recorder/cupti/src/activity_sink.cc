// StepSplitter, BufferPool and ActivitySink: the bookkeeping between CUPTI's callbacks and
// the TraceWriter. Pure C++ (no CUDA headers), tested on the CPU.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#include "llmrr/cupti/activity.h"
#include "llmrr/format/trace_writer.h"

namespace llmrr::cupti {

// --- StepSplitter -------------------------------------------------------------------------

StepSplitter::StepSplitter(Mode mode, size_t max_boundaries)
    : mode_(mode), max_(std::max<size_t>(max_boundaries, 2)) {}

void StepSplitter::insert(Boundary b) {
  // Boundaries arrive nearly in order (one counter, a few threads): insert from the back.
  auto it = std::upper_bound(b_.begin(), b_.end(), b.correlation,
                             [](uint64_t c, const Boundary& x) { return c < x.correlation; });
  b_.insert(it, b);
  ++total_;
  if (b_.size() > max_) {
    const size_t drop = b_.size() / 2;
    if (mode_ == Mode::kSync) forgotten_ += static_cast<int64_t>(drop);
    b_.erase(b_.begin(), b_.begin() + static_cast<std::ptrdiff_t>(drop));
  }
}

void StepSplitter::sync(uint64_t correlation) {
  std::lock_guard<std::mutex> lk(mu_);
  insert({correlation, 0});
}

int64_t StepSplitter::range_begin(uint64_t correlation) {
  std::lock_guard<std::mutex> lk(mu_);
  const int64_t step = ranges_++;
  insert({correlation, step});
  return step;
}

void StepSplitter::range_end(uint64_t correlation) {
  std::lock_guard<std::mutex> lk(mu_);
  insert({correlation, -1});
}

int64_t StepSplitter::step_of(uint64_t correlation) const {
  std::lock_guard<std::mutex> lk(mu_);
  // Boundaries strictly below the record's correlation id were crossed before its launch.
  auto it = std::lower_bound(b_.begin(), b_.end(), correlation,
                             [](const Boundary& x, uint64_t c) { return x.correlation < c; });
  if (mode_ == Mode::kSync) return forgotten_ + static_cast<int64_t>(it - b_.begin());
  if (it == b_.begin()) return -1;
  return std::prev(it)->step;
}

int64_t StepSplitter::boundaries() const {
  std::lock_guard<std::mutex> lk(mu_);
  return total_;
}

// --- BufferPool ---------------------------------------------------------------------------

BufferPool::BufferPool(size_t buffers, size_t buffer_bytes)
    : bytes_((std::max<size_t>(buffer_bytes, 4096) + 7) / 8 * 8) {
  all_.reserve(buffers);
  for (size_t i = 0; i < buffers; ++i) {
    void* p = std::aligned_alloc(8, bytes_);
    if (p == nullptr) break;  // fewer buffers: more drops, never a crash in the application
    all_.push_back(static_cast<uint8_t*>(p));
  }
  free_ = all_;
}

BufferPool::~BufferPool() {
  for (uint8_t* p : all_) std::free(p);
}

uint8_t* BufferPool::acquire() {
  std::lock_guard<std::mutex> lk(mu_);
  if (free_.empty()) {
    ++refused_;
    return nullptr;
  }
  uint8_t* p = free_.back();
  free_.pop_back();
  return p;
}

void BufferPool::release(uint8_t* buffer) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lk(mu_);
  // Only our own buffers go back (CUPTI hands back exactly what it was given).
  if (std::find(all_.begin(), all_.end(), buffer) != all_.end() &&
      std::find(free_.begin(), free_.end(), buffer) == free_.end())
    free_.push_back(buffer);
}

size_t BufferPool::available() const {
  std::lock_guard<std::mutex> lk(mu_);
  return free_.size();
}

int64_t BufferPool::refused() const {
  std::lock_guard<std::mutex> lk(mu_);
  return refused_;
}

// --- ActivitySink -------------------------------------------------------------------------

ActivitySink::ActivitySink(trace::TraceWriter* writer, const StepSplitter* splitter,
                           size_t batch_records)
    : writer_(writer), splitter_(splitter), batch_(std::max<size_t>(batch_records, 1)) {}

Status ActivitySink::write_pending() {
  if (pending_.empty()) return Status::Ok();
  if (error_.ok()) {
    Status st = writer_->append_kernels(pending_);
    if (st.ok()) {
      ++counts_.frames;
    } else {
      error_ = st;
    }
  }
  if (!error_.ok()) counts_.dropped += static_cast<int64_t>(pending_.size());
  pending_.clear();
  return error_;
}

void ActivitySink::consume(std::vector<trace::KernelRecord>* records, const ParseStats& stats) {
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) {
    counts_.dropped += static_cast<int64_t>(records->size());
    records->clear();
    return;
  }
  counts_.malformed += stats.malformed;
  {
    // NVTX ranges recorded by the callbacks ride along with the activity records.
    std::lock_guard<std::mutex> rl(ranges_mu_);
    for (trace::KernelRecord& r : ranges_) pending_.push_back(std::move(r));
    counts_.ranges += static_cast<int64_t>(ranges_.size());
    counts_.dropped += ranges_dropped_;
    ranges_dropped_ = 0;
    ranges_.clear();
  }
  for (trace::KernelRecord& r : *records) {
    if (r.kind == trace::ActivityKind::kRange) {
      ++counts_.ranges;  // MARKER activity (every NVTX range): no launch, no step
    } else {
      r.step = splitter_ ? splitter_->step_of(r.correlation) : -1;
      if (r.kind == trace::ActivityKind::kKernel)
        ++counts_.kernels;
      else
        ++counts_.memcpys;
    }
    counts_.last_step = std::max(counts_.last_step, r.step);
    pending_.push_back(std::move(r));
    if (pending_.size() >= batch_) (void)write_pending();
  }
  records->clear();
}

void ActivitySink::add_range(trace::KernelRecord range) {
  std::lock_guard<std::mutex> rl(ranges_mu_);
  // Bounded like everything else: ranges are few (one per step), but a program that opens
  // ranges with no GPU work in between must not grow this without limit.
  if (ranges_.size() >= batch_ * 4) {
    ++ranges_dropped_;
    return;
  }
  ranges_.push_back(std::move(range));
}

void ActivitySink::add_dropped(int64_t records) {
  if (records <= 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  counts_.dropped += records;
}

void ActivitySink::add_refused_buffers(int64_t n) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  counts_.refused_buffers += n;
}

Status ActivitySink::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) return error_;
  finished_ = true;
  {
    std::lock_guard<std::mutex> rl(ranges_mu_);
    for (trace::KernelRecord& r : ranges_) {
      counts_.last_step = std::max(counts_.last_step, r.step);
      pending_.push_back(std::move(r));
    }
    counts_.ranges += static_cast<int64_t>(ranges_.size());
    counts_.dropped += ranges_dropped_;
    ranges_dropped_ = 0;
    ranges_.clear();
  }
  (void)write_pending();
  if (counts_.dropped > 0 || counts_.refused_buffers > 0) {
    std::string why = std::to_string(counts_.dropped) + " activity records dropped";
    if (counts_.refused_buffers > 0)
      why += ", " + std::to_string(counts_.refused_buffers) +
             " CUPTI buffer requests refused (pool full: raise LLMRR_CUPTI_BUFFERS or "
             "LLMRR_CUPTI_BUFFER_MB)";
    if (!error_.ok()) why += "; writer: " + error_.to_string();
    writer_->add_dropped_records(counts_.dropped, why);
    if (counts_.dropped == 0) writer_->mark_lossy(why);
  }
  return error_;
}

SinkCounts ActivitySink::counts() const {
  std::lock_guard<std::mutex> lk(mu_);
  return counts_;
}

}  // namespace llmrr::cupti
