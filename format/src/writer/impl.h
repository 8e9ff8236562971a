// Internal to the TraceWriter sources: the writer's state (TraceWriter::Impl) and what its
// files share. writer/writer.cc appends records and builds step chunks (and holds the public
// wrappers); writer/io.cc runs the writer's thread: encoding, compression, writing
// frames, committing them, close and the footer. Members on the per-step, per-blob and
// per-frame paths stay defined in the class, inline, as they were before the split.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "check.h"
#include "codec.h"
#include "convert.h"
#include "llmrr/format/trace_writer.h"

namespace llmrr::trace {

namespace writer_internal {

struct Job {
  FrameKind kind = FrameKind::kStepChunk;
  std::vector<uint8_t> raw;   // payload to encode (for blobs: the tensor bytes)
  std::vector<uint8_t> meta;  // blobs: BlobMeta FlatBuffer
  uint8_t elem_size = 1;      // blobs: shuffle width
  // Step chunks: the fingerprint ranges of `raw` (stored rather than compressed at level 1
  // when near-random).
  std::vector<detail::NoisySpan> noisy;
  int64_t first = -1;
  int64_t last = -1;
  uint64_t cost = 0;  // bytes counted in flight
  // Step chunks: what the chunk holds, applied to the footer's counts once it is on disk.
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t kernels = 0;  // kernel-record frames: records held
  std::vector<RequestSummary> arrived;
  std::vector<RequestSummary> finished;  // id, finish_step, generated, reason
};

inline std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

}  // namespace writer_internal

using detail::ChunkBuilder;
using detail::KindCounters;
using writer_internal::errno_text;
using writer_internal::Job;

class TraceWriter::Impl {
 public:
  // Opening and the writer's thread: writer/io.cc.
  Impl(std::string path, WriterOptions opt, int fd, bool created);
  ~Impl();
  void discard();
  Status start();

  // Appending: writer/writer.cc.
  Status append_run_header(const RunHeader& header);
  Status append_step(const StepRecord& step);
  Result<int64_t> append_blob(const BlobSpec& b);
  Status append_kernels(const std::vector<KernelRecord>& records);
  Status flush();
  void add_dropped_records(int64_t n, std::string reason);
  void mark_lossy(std::string reason);

  Status close();  // writer/io.cc

  // Compresses and writes a batch of queued frames on the calling thread (a helper:
  // TraceWriter::help). Never blocks on the lock: an idle helper has better things to do.
  bool help() {
    std::vector<Job> batch;
    uint32_t index;
    bool failed;
    {
      std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
      if (!lk.owns_lock() || busy_ || !claim_batch(&batch, &index, &failed)) return false;
    }
    run_batch(batch, index, failed);
    cv_.notify_all();  // appends waiting for memory, flush(), close()
    return true;
  }

  void defer_wakes(bool defer) { defer_wakes_.store(defer, std::memory_order_relaxed); }

  Status status() const;      // writer/writer.cc
  WriterStats stats() const;  // writer/writer.cc

  const std::string& path() const { return path_; }

 private:
  Status usable(const char* op);  // writer/writer.cc

  std::vector<uint8_t> take_buffer() {
    std::lock_guard<std::mutex> lk(mu_);
    if (pool_.empty()) return {};
    std::vector<uint8_t> b = std::move(pool_.back());
    pool_.pop_back();
    return b;
  }

  Status flush_chunk() {
    if (chunk_.steps() == 0) return Status::Ok();
    return submit(chunk_job());
  }

  // The pending step chunk as a job (the chunk builder starts over).
  Job chunk_job() {
    Job job;
    job.kind = FrameKind::kStepChunk;
    job.first = chunk_.first_step();
    job.last = chunk_.last_step();
    job.raw = take_buffer();
    chunk_.finish(&job.raw, &job.noisy);
    chunk_raw_ += job.raw.size();
    job.steps = pending_steps_;
    job.tokens = pending_tokens_;
    job.arrived.swap(pending_arrived_);
    job.finished.swap(pending_finished_);
    pending_steps_ = pending_tokens_ = 0;
    pending_arrived_.clear();
    pending_finished_.clear();
    job.cost = job.raw.size();
    return job;
  }

  Status submit(Job&& job) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!error_.ok()) return error_;
    if (in_flight_ > 0 && in_flight_ + job.cost > opt_.max_bytes_in_flight) {
      ++stats_.backpressure_waits;
      cv_.notify_all();  // deferred frames: the writer's thread, not a helper, frees memory
      cv_.wait(lk, [&] {
        return !error_.ok() || in_flight_ == 0 || in_flight_ + job.cost <= opt_.max_bytes_in_flight;
      });
      if (!error_.ok()) return error_;
    }
    in_flight_ += job.cost;
    if (in_flight_ > stats_.max_bytes_in_flight_seen) stats_.max_bytes_in_flight_seen = in_flight_;
    queue_.push_back(std::move(job));
    if (!defer_wakes_.load(std::memory_order_relaxed) || queue_.size() > 1) cv_.notify_all();
    return Status::Ok();
  }

  // The writer's thread, encoding, the file and its footer: writer/io.cc, but for the
  // inline pieces here.
  bool run_header_on_disk() const;
  void remove_if_ours();
  bool rewrite_footer(const Status& why);
  void stop_worker();

  // Under mu_, with no batch being written (busy_ false): moves the queue's first jobs into
  // `batch` (many small blobs cost one lock round trip and one pwritev instead of one
  // each), sets busy_ for the caller, and says the batch's first frame index and whether
  // the writer has already failed. False (nothing taken) when the queue is empty.
  bool claim_batch(std::vector<Job>* batch, uint32_t* index, bool* failed) {
    constexpr size_t kMaxBatchJobs = 64;
    constexpr uint64_t kMaxBatchRaw = 4u << 20;
    if (queue_.empty()) return false;
    uint64_t raw = 0;
    while (!queue_.empty() && batch->size() < kMaxBatchJobs &&
           (batch->empty() || raw + queue_.front().cost <= kMaxBatchRaw)) {
      raw += queue_.front().cost;
      batch->push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    busy_ = true;
    *failed = !error_.ok();
    *index = static_cast<uint32_t>(frames_.size());
    return true;
  }

  void worker_loop();
  void run_batch(std::vector<Job>& batch, uint32_t index, bool failed);
  Status flush_last_chunk();

  // Records a frame that is whole on disk (under mu_).
  void commit(Job& job, const FrameInfo& info) {
    frames_.push_back(info);
    ++stats_.frames;
    stats_.raw_bytes += info.raw_size;
    durable_kernels_ += job.kernels;
    if (job.kind != FrameKind::kStepChunk) return;
    durable_steps_ += job.steps;
    durable_tokens_ += job.tokens;
    if (durable_first_ < 0) durable_first_ = job.first;
    durable_last_ = job.last;
    for (RequestSummary& r : job.arrived) {
      durable_index_[r.id] = durable_requests_.size();
      durable_requests_.push_back(std::move(r));
    }
    for (const RequestSummary& f : job.finished) {
      auto it = durable_index_.find(f.id);
      if (it == durable_index_.end()) continue;
      RequestSummary& r = durable_requests_[it->second];
      r.finish_step = f.finish_step;
      r.generated = f.generated;
      r.reason = f.reason;
    }
  }

  Status write_frames(const std::vector<detail::Buffer>& encoded, std::vector<FrameInfo>& infos,
                      uint32_t first_index, size_t* written);
  Status encode(const Job& job, uint32_t index, detail::ZstdCompressor& zstd, detail::Buffer* frame,
                detail::Buffer* scratch, FrameInfo* info);
  Status write_at(const uint8_t* p, size_t n, uint64_t at, const char* what);
  Status write_footer(const Status& earlier);

  const std::string path_;
  const WriterOptions opt_;
  int fd_ = -1;
  const bool created_;    // open() created the file (it did not exist before)
  bool regular_ = false;  // a regular file (not /dev/full, a pipe, ...): dev_ and ino_ name it
  dev_t dev_ = 0;
  ino_t ino_ = 0;

  // Caller thread only.
  uint64_t footer_at_ = 0;  // offset of the footer written by close(), 0 before
  bool header_written_ = false;
  bool closed_ = false;
  Status close_status_;
  ChunkBuilder chunk_;
  KindCounters counters_;
  detail::SemanticChecker checker_;
  int64_t next_blob_id_ = 0;
  bool lossy_ = false;
  std::string lossy_reason_;
  int64_t dropped_records_ = 0;
  uint64_t header_raw_ = 0, blob_raw_ = 0, kernel_raw_ = 0, chunk_raw_ = 0;
  int64_t pending_steps_ = 0, pending_tokens_ = 0;
  std::vector<RequestSummary> pending_arrived_, pending_finished_;

  // Shared with the worker, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  bool busy_ = false;
  bool closing_inline_ = false;  // close() wrote the last chunk itself (the thread idles)
  std::atomic<bool> defer_wakes_{false};
  // Frame encoding state, used by the thread that set busy_.
  detail::ZstdCompressor zstd_;
  std::vector<detail::Buffer> encoded_;
  detail::Buffer scratch_;
  std::vector<FrameInfo> infos_;
  uint64_t in_flight_ = 0;
  Status error_;
  std::vector<FrameInfo> frames_;
  std::vector<std::vector<uint8_t>> pool_;  // payload buffers to reuse
  uint64_t file_end_ = 0;
  WriterStats stats_;
  int64_t durable_steps_ = 0, durable_tokens_ = 0, durable_first_ = -1, durable_last_ = -1;
  int64_t durable_kernels_ = 0;
  std::vector<RequestSummary> durable_requests_;
  std::unordered_map<uint64_t, size_t> durable_index_;
  std::thread worker_;
};

}  // namespace llmrr::trace
