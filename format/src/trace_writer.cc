#include "llmrr/format/trace_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <climits>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>

#include "check.h"
#include "codec.h"
#include "convert.h"
#include "guarded.h"
#include "llmrr/format/container.h"

namespace llmrr::trace {

using detail::ChunkBuilder;
using detail::KindCounters;

namespace {

// Room kept for FlatBuffers' finishing bytes and the blob prefix.
constexpr size_t kFrameSlack = 4096;

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

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

Status internal_error(const std::string& path, const char* what) {
  return make_error(ErrorCode::kInternal, path + ": " + what);
}

}  // namespace

class TraceWriter::Impl {
 public:
  Impl(std::string path, WriterOptions opt, int fd, bool created)
      : path_(std::move(path)), opt_(opt), fd_(fd), created_(created) {
    struct stat st;
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) {
      regular_ = true;
      dev_ = st.st_dev;
      ino_ = st.st_ino;
    }
  }
  ~Impl() {
    if (worker_.joinable()) stop_worker();
    if (fd_ >= 0) ::close(fd_);
  }

  // After a failed start(): closes the file and removes it if this writer created it (it
  // holds no trace, not even the file header).
  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    remove_if_ours();
  }

  Status start() {
    uint8_t hdr[kFileHeaderBytes];
    detail::encode_file_header(kFormatMajor, kFormatMinor, hdr);
    RETURN_IF_ERROR(write_at(hdr, sizeof hdr, 0, "writing the file header"));
    file_end_ = kFileHeaderBytes;
    worker_ = std::thread([this] { worker_loop(); });
    return Status::Ok();
  }

  Status append_run_header(const RunHeader& header) {
    RETURN_IF_ERROR(usable("append_run_header"));
    if (header_written_)
      return make_error(
          ErrorCode::kInvalidArgument,
          path_ + ": append_run_header: expected one run header, found a second call");
    if (header.tool_version.empty())
      return make_error(
          ErrorCode::kInvalidArgument,
          path_ + ": append_run_header: tool_version: expected a version string, found \"\"");
    RunHeader h = header;
    h.format_major = kFormatMajor;
    h.format_minor = kFormatMinor;
    Job job;
    job.kind = FrameKind::kRunHeader;
    detail::build_run_header(h, &job.raw);
    if (job.raw.size() > kMaxFrameRawBytes - kFrameSlack)
      return make_error(ErrorCode::kResourceLimit,
                        path_ + ": append_run_header: expected at most 16 MiB, found " +
                            std::to_string(job.raw.size()) + " bytes");
    header_raw_ = job.raw.size();
    job.cost = job.raw.size();
    RETURN_IF_ERROR(submit(std::move(job)));
    header_written_ = true;
    return Status::Ok();
  }

  Status append_step(const StepRecord& step) {
    RETURN_IF_ERROR(usable("append_step"));
    if (!header_written_)
      return make_error(ErrorCode::kInvalidArgument,
                        path_ + ": append_step: expected append_run_header first, found a step");
    const size_t bound = detail::step_size_bound(step);
    if (bound > kMaxFrameRawBytes - kFrameSlack)
      return make_error(
          ErrorCode::kResourceLimit,
          path_ + ": append_step: step " + std::to_string(step.step) +
              ": expected a record that fits one 16 MiB frame, found one needing up to " +
              std::to_string(bound) + " bytes");
    std::string why = checker_.check_step(step, next_blob_id_);
    if (!why.empty())
      return make_error(ErrorCode::kInvalidArgument, path_ + ": append_step: " + why);
    // In the same chunk the step's plan delta may also remove every site of the previous
    // step (16 bytes each); a new chunk starts from a full assignment instead.
    if (chunk_.steps() > 0 &&
        chunk_.size() + bound + 16 * chunk_.assignment_size() > kMaxFrameRawBytes - kFrameSlack)
      RETURN_IF_ERROR(flush_chunk());
    chunk_.add_step(step, &counters_);
    ++pending_steps_;
    pending_tokens_ += static_cast<int64_t>(step.tokens.size());
    for (const RequestRecord& r : step.arrivals)
      pending_arrived_.push_back(arrival_summary(r, step.step));
    for (const FinishRecord& f : step.finishes) {
      RequestSummary sum;
      sum.id = f.request;
      apply_finish(sum, f, step.step);
      pending_finished_.push_back(std::move(sum));
    }
    if (chunk_.size() >= opt_.chunk_target_bytes || chunk_.steps() >= opt_.max_steps_per_chunk ||
        chunk_.plan_cost() >= detail::kWriterPlanCost ||
        chunk_.arrival_cost() >= detail::kWriterArrivalCost)
      RETURN_IF_ERROR(flush_chunk());
    return Status::Ok();
  }

  Result<int64_t> append_blob(const BlobSpec& b) {
    RETURN_IF_ERROR(usable("append_blob"));
    const std::string where = path_ + ": append_blob: blob " + std::to_string(next_blob_id_) + ": ";
    if (!header_written_)
      return make_error(ErrorCode::kInvalidArgument,
                        where + "expected append_run_header first, found a blob");
    const int es = dtype_size(b.dtype);
    if (es == 0)
      return make_error(ErrorCode::kInvalidArgument, where +
                                                         "dtype: expected a known dtype, found " +
                                                         std::to_string(static_cast<int>(b.dtype)));
    if (b.data == nullptr && b.bytes > 0)
      return make_error(ErrorCode::kInvalidArgument,
                        where + "data: expected a pointer, found null");
    uint64_t elems = 1;
    for (int64_t d : b.shape) {
      if (d < 0 || (d > 0 && elems > (uint64_t{1} << 40) / static_cast<uint64_t>(d)))
        return make_error(
            ErrorCode::kInvalidArgument,
            where + "shape: expected non-negative dimensions of a tensor under 16 MiB, found " +
                std::to_string(d));
      elems *= static_cast<uint64_t>(d);
    }
    if (elems * static_cast<uint64_t>(es) != b.bytes)
      return make_error(ErrorCode::kInvalidArgument,
                        where + "expected bytes = product(shape) x " + std::to_string(es) + " = " +
                            std::to_string(elems * es) + ", found " + std::to_string(b.bytes));
    detail::BlobMetaFields m;
    m.id = next_blob_id_;
    m.dtype = b.dtype;
    m.elem_size = static_cast<uint8_t>(es);
    m.shape = b.shape;
    m.nbytes = b.bytes;
    m.name = b.name;
    m.step = b.step;
    m.site = b.site;
    m.request = b.request;
    m.xor_coded = b.xor_reference != nullptr;
    m.reference_trace = b.reference_trace;
    m.reference_blob = b.reference_blob;
    Job job;
    job.kind = FrameKind::kTensorBlob;
    job.elem_size = static_cast<uint8_t>(es);
    detail::build_blob_meta(m, &job.meta);  // sized before the data is copied
    if (b.bytes + job.meta.size() + 16 > kMaxFrameRawBytes - 64)
      return make_error(ErrorCode::kResourceLimit,
                        where + "expected at most " +
                            std::to_string(kMaxFrameRawBytes - 64 - job.meta.size() - 16) +
                            " bytes (one 16 MiB frame), found " + std::to_string(b.bytes));
    job.raw = take_buffer();
    const uint8_t* src = static_cast<const uint8_t*>(b.data);
    job.raw.assign(src, src + b.bytes);  // assign, not resize: no zero-fill first
    if (m.xor_coded) {
      const uint8_t* ref = static_cast<const uint8_t*>(b.xor_reference);
      m.reference_hash = detail::xxh3(ref, b.bytes);
      uint8_t* p = job.raw.data();
      size_t i = 0;
      for (; i + 8 <= b.bytes; i += 8) {
        uint64_t x, y;
        std::memcpy(&x, p + i, 8);
        std::memcpy(&y, ref + i, 8);
        x ^= y;
        std::memcpy(p + i, &x, 8);
      }
      for (; i < b.bytes; ++i) p[i] ^= ref[i];
      detail::build_blob_meta(m, &job.meta);  // now with the reference hash
    }
    job.first = job.last = m.id;
    job.cost = job.raw.size() + job.meta.size();
    blob_raw_ += b.bytes;
    RETURN_IF_ERROR(submit(std::move(job)));
    return next_blob_id_++;
  }

  Status append_kernels(const std::vector<KernelRecord>& records) {
    RETURN_IF_ERROR(usable("append_kernels"));
    if (!header_written_)
      return make_error(
          ErrorCode::kInvalidArgument,
          path_ + ": append_kernels: expected append_run_header first, found kernel records");
    for (size_t i = 0; i < records.size(); ++i)
      if (std::string e = check_kernel_record(records[i]); !e.empty())
        return make_error(ErrorCode::kInvalidArgument,
                          path_ + ": append_kernels: record " + std::to_string(i) + ": " + e);
    Job job;
    job.kind = FrameKind::kKernelRecords;
    job.kernels = static_cast<int64_t>(records.size());
    detail::build_kernel_chunk(records, &job.raw);
    if (job.raw.size() > kMaxFrameRawBytes - kFrameSlack)
      return make_error(
          ErrorCode::kResourceLimit,
          path_ + ": append_kernels: expected at most 16 MiB of records per call, found " +
              std::to_string(job.raw.size()) + " bytes");
    kernel_raw_ += job.raw.size();
    job.cost = job.raw.size();
    return submit(std::move(job));
  }

  Status flush() {
    RETURN_IF_ERROR(usable("flush"));
    RETURN_IF_ERROR(flush_chunk());
    std::unique_lock<std::mutex> lk(mu_);
    cv_.notify_all();  // a deferred frame may be waiting for a helper
    cv_.wait(lk, [&] { return (queue_.empty() && !busy_) || !error_.ok(); });
    return error_;
  }

  void add_dropped_records(int64_t n, std::string reason) {
    if (n <= 0) return;
    dropped_records_ += n;
    mark_lossy(std::move(reason));
  }

  void mark_lossy(std::string reason) {
    if (lossy_) return;
    lossy_ = true;
    lossy_reason_ = reason.empty() ? "records were dropped" : std::move(reason);
  }

  Status close() {
    if (closed_) return close_status_;
    closed_ = true;
    Status st = Status::Ok();
    {
      std::lock_guard<std::mutex> lk(mu_);
      st = error_;
    }
    if (st.ok()) st = flush_last_chunk();
    if (!closing_inline_) stop_worker();  // else the destructor stops it
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_.ok()) st = error_;
    }
    if (!st.ok() && !run_header_on_disk()) {
      // The error came before the run header reached the file: nothing in it is readable,
      // and a footer would not change that. The file goes (when this writer created it).
      discard();
      close_status_ = st;
      return st;
    }
    Status footer = write_footer(st);
    if (st.ok()) st = footer;
    // A failing device often reports a write only at write-back: fsync (or, on network file
    // systems, close) is where the error surfaces. The footer, written as if all were well,
    // is then rewritten to say lossy and why.
    if (st.ok() && opt_.sync_on_close && ::fsync(fd_) != 0) {
      st = make_error(ErrorCode::kIo, path_ + ": fsync: " + errno_text(errno) +
                                          "; the trace may not be on the disk whole");
      if (rewrite_footer(st)) (void)::fsync(fd_);
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && st.ok()) {
      st = make_error(ErrorCode::kIo, path_ + ": close: " + errno_text(errno) +
                                          "; the trace may not be on the disk whole");
      // The descriptor is gone either way; reopen the same file to rewrite the footer.
      fd_ = regular_ ? ::open(path_.c_str(), O_WRONLY | O_CLOEXEC) : -1;
      struct stat again;
      if (fd_ >= 0 && ::fstat(fd_, &again) == 0 && again.st_dev == dev_ && again.st_ino == ino_ &&
          rewrite_footer(st) && opt_.sync_on_close)
        (void)::fsync(fd_);
      if (fd_ >= 0) ::close(fd_);
      fd_ = -1;
    }
    close_status_ = st;
    return st;
  }

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

  Status status() const {
    std::lock_guard<std::mutex> lk(mu_);
    return error_;
  }

  WriterStats stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    WriterStats s = stats_;
    s.steps = checker_.steps();
    s.tokens = checker_.tokens();
    s.blobs = next_blob_id_;
    s.bytes_in_flight = in_flight_;
    s.file_bytes = file_end_;
    return s;
  }

  const std::string& path() const { return path_; }

 private:
  Status usable(const char* op) {
    if (closed_)
      return make_error(ErrorCode::kInvalidArgument,
                        path_ + ": " + op + ": expected an open writer, found it closed");
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_.ok())
      return error_.with_context(path_ + ": " + op +
                                 ": the writer stopped after an earlier error: ");
    return Status::Ok();
  }

  bool run_header_on_disk() const {
    std::lock_guard<std::mutex> lk(mu_);
    return std::any_of(frames_.begin(), frames_.end(),
                       [](const FrameInfo& f) { return f.kind == FrameKind::kRunHeader; });
  }

  void remove_if_ours() {
    if (created_ && regular_) ::unlink(path_.c_str());
  }

  // Replaces a footer that says the trace is whole with one that says lossy, because of
  // `why` (an error after the footer was written). Returns whether it did.
  bool rewrite_footer(const Status& why) {
    if (footer_at_ == 0 || lossy_) return false;
    if (::ftruncate(fd_, static_cast<off_t>(footer_at_)) != 0) return false;
    file_end_ = footer_at_;
    return write_footer(why).ok();
  }

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

  void stop_worker() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

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

  // Takes the queued jobs in batches, encodes them and appends them to the file in order.
  // One batch at a time, on this thread or a helper's (busy_); it leaves once stopped with
  // nothing queued or being written.
  void worker_loop() {
    std::vector<Job> batch;
    for (;;) {
      bool failed;
      uint32_t index;
      batch.clear();
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return !busy_ && (!queue_.empty() || stop_); });
        if (!claim_batch(&batch, &index, &failed)) return;  // stopped, nothing left
      }
      run_batch(batch, index, failed);
      cv_.notify_all();
    }
  }

  // Encodes the batch's frames (first index `index`), appends them, commits those whole on
  // disk and clears busy_. Runs on whichever thread set busy_: the writer's, a helper's, or
  // close()'s.
  void run_batch(std::vector<Job>& batch, uint32_t index, bool failed) {
    Status st = Status::Ok();
    size_t written = 0;  // jobs whose frames are whole on disk
    if (encoded_.size() < batch.size()) encoded_.resize(batch.size());
    infos_.assign(batch.size(), FrameInfo());
    if (!failed) {
      try {
        for (size_t k = 0; k < batch.size() && st.ok(); ++k)
          st = encode(batch[k], index + static_cast<uint32_t>(k), zstd_, &encoded_[k], &scratch_,
                      &infos_[k]);
        if (st.ok()) st = write_frames(encoded_, infos_, index, &written);
      } catch (const std::bad_alloc&) {
        st = make_error(ErrorCode::kResourceLimit,
                        path_ + ": out of memory encoding frame " + std::to_string(index));
      } catch (const std::exception& e) {
        st = make_error(ErrorCode::kInternal, path_ + ": " + e.what());
      }
    }
    std::lock_guard<std::mutex> lk(mu_);
    busy_ = false;
    for (size_t k = 0; k < batch.size(); ++k) {
      Job& job = batch[k];
      in_flight_ -= job.cost;
      if (!failed && k < written) commit(job, infos_[k]);
      // Hand large payload buffers back for reuse (their capacity is what we keep): fresh
      // megabyte allocations cost page faults on every frame.
      if (job.raw.capacity() >= (64u << 10) && pool_.size() < 8) {
        job.raw.clear();
        pool_.push_back(std::move(job.raw));
      }
    }
    if (!failed && !st.ok() && error_.ok()) error_ = st;
  }

  // close(): the last chunk. When the writer's thread is idle with nothing queued, this
  // thread encodes and writes it (waking that thread would cost a futex call and, on a
  // virtual machine, an interprocessor interrupt, then its wake-up latency); else it is
  // queued behind the rest.
  Status flush_last_chunk() {
    if (chunk_.steps() == 0) return Status::Ok();
    Job job = chunk_job();
    uint32_t index = 0;
    bool mine = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (queue_.empty() && !busy_ && error_.ok() && worker_.joinable()) {
        busy_ = true;  // the writer's thread stays asleep; nothing is submitted after close
        closing_inline_ = true;
        mine = true;
        in_flight_ += job.cost;
        index = static_cast<uint32_t>(frames_.size());
      }
    }
    if (!mine) return submit(std::move(job));
    std::vector<Job> batch;
    batch.push_back(std::move(job));
    run_batch(batch, index, /*failed=*/false);
    std::lock_guard<std::mutex> lk(mu_);
    return error_;
  }

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

  // Appends encoded[0..infos.size()) at the end of the file with as few syscalls as the
  // kernel allows, setting each frame's offset. On failure, cuts the file back to the end
  // of its last whole frame (so it stays readable) and sets *written to the frames kept.
  Status write_frames(const std::vector<detail::Buffer>& encoded, std::vector<FrameInfo>& infos,
                      uint32_t first_index, size_t* written) {
    uint64_t at;
    {
      std::lock_guard<std::mutex> lk(mu_);
      at = file_end_;
    }
    const size_t n = infos.size();
    std::vector<struct iovec> iov(n);
    uint64_t total = 0;
    for (size_t k = 0; k < n; ++k) {
      iov[k].iov_base = const_cast<uint8_t*>(encoded[k].data());
      iov[k].iov_len = encoded[k].size();
      infos[k].offset = at + total;
      total += encoded[k].size();
    }
    uint64_t done = 0;
    size_t first = 0;  // first iovec not fully written
    while (done < total) {
      const int cnt = static_cast<int>(std::min<size_t>(n - first, IOV_MAX));
      ssize_t w = ::pwritev(fd_, iov.data() + first, cnt, static_cast<off_t>(at + done));
      if (w <= 0) {
        const int e = w < 0 ? errno : 0;
        if (w < 0 && e == EINTR) continue;
        // Keep the frames that made it whole; cut the torn one.
        size_t whole = 0;
        uint64_t end = at;
        while (whole < n && end + encoded[whole].size() <= at + done)
          end += encoded[whole++].size();
        if (::ftruncate(fd_, static_cast<off_t>(end)) != 0) { /* the reader drops a torn frame */
        }
        {
          std::lock_guard<std::mutex> lk(mu_);
          file_end_ = end;
        }
        *written = whole;
        const size_t bad = std::min(whole, n - 1);
        return make_error(ErrorCode::kIo,
                          path_ + ": writing frame " + std::to_string(first_index + bad) + " (" +
                              frame_kind_name(infos[bad].kind) + ", " +
                              std::to_string(encoded[bad].size()) + " bytes) at offset " +
                              std::to_string(at + done) + ": " +
                              (e ? errno_text(e) : std::string("the device accepted no bytes")));
      }
      done += static_cast<uint64_t>(w);
      // Advance past fully written iovecs; trim a partially written one.
      size_t left = static_cast<size_t>(w);
      while (first < n && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (first < n && left > 0) {
        iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    std::lock_guard<std::mutex> lk(mu_);
    file_end_ = at + total;
    *written = n;
    return Status::Ok();
  }

  // Encodes `job` as frame `index` into *frame (header + stored payload).
  Status encode(const Job& job, uint32_t index, detail::ZstdCompressor& zstd, detail::Buffer* frame,
                detail::Buffer* scratch, FrameInfo* info) {
    frame->assign(kFrameHeaderBytes, 0);
    size_t prefix = 0;
    if (job.kind == FrameKind::kTensorBlob) {
      const size_t padded = (job.meta.size() + 7) & ~size_t{7};
      frame->resize(kFrameHeaderBytes + 8 + padded, 0);
      detail::store_u32(frame->data() + kFrameHeaderBytes, static_cast<uint32_t>(padded));
      std::memcpy(frame->data() + kFrameHeaderBytes + 8, job.meta.data(), job.meta.size());
      prefix = 8 + padded;
    }
    Codec codec = Codec::kNone;
    const size_t body_at = frame->size();
    if (opt_.zstd_level > 0 && !job.raw.empty()) {
      const uint8_t* src = job.raw.data();
      codec = Codec::kZstd;
      if (job.kind == FrameKind::kTensorBlob && opt_.shuffle_blobs && job.elem_size > 1) {
        scratch->resize(job.raw.size());
        detail::shuffle_bytes(job.raw.data(), scratch->data(), job.raw.size(), job.elem_size);
        src = scratch->data();
        codec = Codec::kShuffleZstd;
      }
      // At level 1, near-random bytes (fingerprint hashes, low mantissa planes) go
      // into stored zstd frames: compressing them took most of the writer's time for a few
      // percent of size. The payload is still plain concatenated zstd frames.
      const std::vector<detail::NoisySpan>* noisy = &job.noisy;
      std::vector<detail::NoisySpan> planes;
      if (codec == Codec::kShuffleZstd && opt_.zstd_level <= detail::kMaxSpanLevel) {
        planes = detail::noisy_planes(src, job.raw.size() / job.elem_size, job.elem_size);
        noisy = &planes;
      }
      std::string err;
      const bool ok =
          opt_.zstd_level <= detail::kMaxSpanLevel && !noisy->empty()
              ? zstd.compress_spans(src, job.raw.size(), opt_.zstd_level, *noisy, frame, &err)
              : zstd.compress(src, job.raw.size(), opt_.zstd_level, frame, &err);
      if (!ok) return internal_error(path_, err.c_str());
      if (frame->size() - body_at >= job.raw.size()) {  // incompressible: store as is
        frame->resize(body_at);
        codec = Codec::kNone;
      }
    }
    if (codec == Codec::kNone) frame->insert(frame->end(), job.raw.begin(), job.raw.end());
    detail::FrameHeader h;
    h.kind = job.kind;
    h.codec = codec;
    const size_t raw = prefix + job.raw.size();
    const size_t stored = frame->size() - kFrameHeaderBytes;
    if (raw > kMaxFrameRawBytes || stored > kMaxFrameStoredBytes)
      return internal_error(path_, "frame over the 16 MiB limit");
    h.raw_size = static_cast<uint32_t>(raw);
    h.stored_size = static_cast<uint32_t>(stored);
    h.checksum = detail::xxh3(frame->data() + kFrameHeaderBytes, stored);
    h.index = index;
    detail::encode_frame_header(h, frame->data());
    info->kind = job.kind;
    info->codec = codec;
    info->raw_size = h.raw_size;
    info->stored_size = h.stored_size;
    info->first = job.first;
    info->last = job.last;
    return Status::Ok();
  }

  Status write_at(const uint8_t* p, size_t n, uint64_t at, const char* what) {
    size_t done = 0;
    while (done < n) {
      ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(at + done));
      if (w < 0) {
        if (errno == EINTR) continue;
        return make_error(ErrorCode::kIo, path_ + ": " + what + " at offset " +
                                              std::to_string(at + done) + ": " + errno_text(errno));
      }
      if (w == 0)
        return make_error(ErrorCode::kIo, path_ + ": " + what + " at offset " +
                                              std::to_string(at + done) +
                                              ": the device accepted no bytes");
      done += static_cast<size_t>(w);
    }
    return Status::Ok();
  }

  Status write_footer(const Status& earlier) {
    detail::FooterFields f;
    f.complete = true;
    f.lossy = lossy_ || !earlier.ok();
    f.lossy_reason = !earlier.ok() && !lossy_ ? earlier.to_string() : lossy_reason_;
    f.frames = frames_;
    // Counts describe what is on disk (after an I/O error, frames that never made it are
    // not counted, so the footer still agrees with the file).
    f.steps = durable_steps_;
    f.tokens = durable_tokens_;
    f.first_step = durable_first_;
    f.last_step = durable_last_;
    f.requests = durable_requests_;
    f.kernel_records = durable_kernels_;
    f.dropped_records = dropped_records_;
    f.stored_bytes = file_end_;
    f.blobs = 0;
    for (const FrameInfo& fi : frames_) {
      f.raw_bytes += fi.raw_size;
      if (fi.kind == FrameKind::kTensorBlob) ++f.blobs;
    }
    uint64_t kinds_total = counters_.arrivals + counters_.segments + counters_.plans +
                           counters_.fingerprints + counters_.routing + counters_.logits +
                           counters_.tokens + counters_.finishes + counters_.step_overhead;
    f.kind_bytes = {
        {"run_header", header_raw_},
        {"arrivals", counters_.arrivals},
        {"segments", counters_.segments},
        {"plans", counters_.plans},
        {"fingerprints", counters_.fingerprints},
        {"routing", counters_.routing},
        {"logits", counters_.logits},
        {"tokens", counters_.tokens},
        {"finishes", counters_.finishes},
        {"step_overhead",
         counters_.step_overhead + (chunk_raw_ > kinds_total ? chunk_raw_ - kinds_total : 0)},
        {"blobs", blob_raw_},
        {"kernels", kernel_raw_},
    };
    Job job;
    job.kind = FrameKind::kFooter;
    detail::build_footer(f, &job.raw);
    if (job.raw.size() > kMaxFrameRawBytes)
      return make_error(ErrorCode::kResourceLimit,
                        path_ + ": footer: expected at most 16 MiB, found " +
                            std::to_string(job.raw.size()) +
                            " bytes; the trace has no footer and reads by scanning");
    // The frame encoder the batches used: nobody writes a batch any more (the writer's
    // thread and any helper are done), and a fresh compression context would cost its
    // allocation and page faults on close's path.
    detail::Buffer frame;
    FrameInfo info;
    RETURN_IF_ERROR(
        encode(job, static_cast<uint32_t>(frames_.size()), zstd_, &frame, &scratch_, &info));
    const uint64_t at = file_end_;
    uint8_t trailer[kTrailerBytes];
    detail::encode_trailer(at, trailer);
    frame.insert(frame.end(), trailer, trailer + kTrailerBytes);
    Status st = write_at(frame.data(), frame.size(), at, "writing the footer");
    if (!st.ok()) {
      if (::ftruncate(fd_, static_cast<off_t>(at)) != 0) { /* reader drops the torn footer */
      }
      return st;
    }
    file_end_ = at + frame.size();
    footer_at_ = at;
    return Status::Ok();
  }

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

using detail::guarded;

Result<std::unique_ptr<TraceWriter>> TraceWriter::open(const std::string& path,
                                                       WriterOptions options) {
  return guarded(path, [&]() -> Result<std::unique_ptr<TraceWriter>> {
    if (options.zstd_level < 0 || options.zstd_level > 22)
      return make_error(ErrorCode::kInvalidArgument, path + ": zstd_level: expected 0..22, found " +
                                                         std::to_string(options.zstd_level));
    if (options.max_steps_per_chunk < 1) options.max_steps_per_chunk = 1;
    if (options.chunk_target_bytes > kMaxFrameRawBytes / 2)
      options.chunk_target_bytes = kMaxFrameRawBytes / 2;
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      return make_error(ErrorCode::kIsDirectory,
                        path + ": expected a file to write, found a directory");
    // Whether the file is new decides whether a trace that never got its run header may
    // be removed again (never a file that was there before: /dev/stdout, say).
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const bool created = fd >= 0;
    if (fd < 0 && errno == EEXIST) {
      // A writable regular file (an earlier trace) is replaced by a new file rather than
      // truncated: a reader that has the old trace open goes on reading it whole, and ext4
      // does not flush the new file's data at close, as it does for a file truncated to
      // zero (0.1 ms of close() on the bench machine). Anything else (/dev/null, a FIFO,
      // a symlink, a file this directory does not let us remove) is written through.
      struct stat old;
      if (::lstat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode) &&
          ::access(path.c_str(), W_OK) == 0 && ::unlink(path.c_str()) == 0) {
        // Not `created`: the path named a file before, and stays (as before, when the
        // file was truncated) even if nothing readable reaches it.
        fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) (void)::fchmod(fd, old.st_mode & 07777);
      }
      if (fd < 0) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd < 0) {
      const int e = errno;
      if (e == ENOENT)
        return make_error(ErrorCode::kNotFound,
                          path + ": cannot create the trace: its directory does not exist");
      if (e == EISDIR)
        return make_error(ErrorCode::kIsDirectory,
                          path + ": expected a file to write, found a directory");
      return make_error(ErrorCode::kIo, path + ": cannot create the trace: " + errno_text(e));
    }
    auto impl = std::make_unique<Impl>(path, options, fd, created);
    if (Status st = impl->start(); !st.ok()) {
      impl->discard();
      return st;
    }
    return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(impl)));
  });
}

TraceWriter::TraceWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceWriter::~TraceWriter() {
  if (impl_) (void)guarded(impl_->path(), [&] { return impl_->close(); });
}

Status TraceWriter::append_run_header(const RunHeader& header) {
  return guarded(impl_->path(), [&] { return impl_->append_run_header(header); });
}
Status TraceWriter::append_step(const StepRecord& step) {
  return guarded(impl_->path(), [&] { return impl_->append_step(step); });
}
Result<int64_t> TraceWriter::append_blob(const BlobSpec& blob) {
  return guarded(impl_->path(), [&] { return impl_->append_blob(blob); });
}
Status TraceWriter::append_kernels(const std::vector<KernelRecord>& records) {
  return guarded(impl_->path(), [&] { return impl_->append_kernels(records); });
}
Status TraceWriter::flush() {
  return guarded(impl_->path(), [&] { return impl_->flush(); });
}
void TraceWriter::add_dropped_records(int64_t n, std::string reason) {
  try {
    impl_->add_dropped_records(n, std::move(reason));
  } catch (...) {
  }
}
void TraceWriter::mark_lossy(std::string reason) {
  try {
    impl_->mark_lossy(std::move(reason));
  } catch (...) {
  }
}
bool TraceWriter::help() {
  try {
    return impl_->help();
  } catch (...) {
    return false;
  }
}
void TraceWriter::defer_wakes(bool defer) {
  impl_->defer_wakes(defer);
}
Status TraceWriter::close() {
  return guarded(impl_->path(), [&] { return impl_->close(); });
}
Status TraceWriter::status() const {
  return impl_->status();
}
WriterStats TraceWriter::stats() const {
  return impl_->stats();
}
const std::string& TraceWriter::path() const {
  return impl_->path();
}

}  // namespace llmrr::trace
