// TraceWriter's writer thread and file: taking queued frames in batches, encoding and
// compressing them, writing them and committing those whole on disk, close and the footer.
// Appending and the public wrappers are in writer/writer.cc, the shared state in
// writer/impl.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <climits>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <thread>

#include "codec.h"
#include "columns.h"
#include "convert.h"
#include "llmrr/format/container.h"
#include "impl.h"

namespace llmrr::trace {

namespace {

Status internal_error(const std::string& path, const char* what) {
  return make_error(ErrorCode::kInternal, path + ": " + what);
}

}  // namespace

TraceWriter::Impl::Impl(std::string path, WriterOptions opt, int fd, bool created)
    : path_(std::move(path)), opt_(opt), fd_(fd), created_(created) {
  struct stat st;
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) {
    regular_ = true;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
}

TraceWriter::Impl::~Impl() {
  if (worker_.joinable()) stop_worker();
  if (fd_ >= 0) ::close(fd_);
}

// After a failed start(): closes the file and removes it if this writer created it (it
// holds no trace, not even the file header).
void TraceWriter::Impl::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  remove_if_ours();
}

Status TraceWriter::Impl::start() {
  uint8_t hdr[kFileHeaderBytes];
  detail::encode_file_header(kFormatMajor, kFormatMinor, hdr);
  RETURN_IF_ERROR(write_at(hdr, sizeof hdr, 0, "writing the file header"));
  file_end_ = kFileHeaderBytes;
  worker_ = std::thread([this] { worker_loop(); });
  return Status::Ok();
}

Status TraceWriter::Impl::close() {
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

bool TraceWriter::Impl::run_header_on_disk() const {
  std::lock_guard<std::mutex> lk(mu_);
  return std::any_of(frames_.begin(), frames_.end(),
                     [](const FrameInfo& f) { return f.kind == FrameKind::kRunHeader; });
}

void TraceWriter::Impl::remove_if_ours() {
  if (created_ && regular_) ::unlink(path_.c_str());
}

// Replaces a footer that says the trace is whole with one that says lossy, because of
// `why` (an error after the footer was written). Returns whether it did.
bool TraceWriter::Impl::rewrite_footer(const Status& why) {
  if (footer_at_ == 0 || lossy_) return false;
  if (::ftruncate(fd_, static_cast<off_t>(footer_at_)) != 0) return false;
  file_end_ = footer_at_;
  return write_footer(why).ok();
}

void TraceWriter::Impl::stop_worker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

// Takes the queued jobs in batches, encodes them and appends them to the file in order.
// One batch at a time, on this thread or a helper's (busy_); it leaves once stopped with
// nothing queued or being written.
void TraceWriter::Impl::worker_loop() {
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
void TraceWriter::Impl::run_batch(std::vector<Job>& batch, uint32_t index, bool failed) {
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
Status TraceWriter::Impl::flush_last_chunk() {
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

// Appends encoded[0..infos.size()) at the end of the file with as few syscalls as the
// kernel allows, setting each frame's offset. On failure, cuts the file back to the end
// of its last whole frame (so it stays readable) and sets *written to the frames kept.
Status TraceWriter::Impl::write_frames(const std::vector<detail::Buffer>& encoded,
                                       std::vector<FrameInfo>& infos, uint32_t first_index,
                                       size_t* written) {
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
      while (whole < n && end + encoded[whole].size() <= at + done) end += encoded[whole++].size();
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
Status TraceWriter::Impl::encode(const Job& job, uint32_t index, detail::ZstdCompressor& zstd,
                                 detail::Buffer* frame, detail::Buffer* scratch, FrameInfo* info) {
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
  size_t body_raw = job.raw.size();  // bytes the stored body decodes to
  if (opt_.zstd_level > 0 && !job.raw.empty()) {
    const uint8_t* src = job.raw.data();
    codec = Codec::kZstd;
    const std::vector<detail::NoisySpan>* noisy = &job.noisy;
    std::vector<detail::NoisySpan> planes;
    if (job.kind == FrameKind::kTensorBlob && opt_.shuffle_blobs && job.elem_size > 1) {
      scratch->resize(job.raw.size());
      detail::shuffle_bytes(job.raw.data(), scratch->data(), job.raw.size(), job.elem_size);
      src = scratch->data();
      codec = Codec::kShuffleZstd;
    } else if (job.kind == FrameKind::kStepChunk && opt_.column_chunks &&
               detail::split_columns(job.raw.data(), job.raw.size(), scratch, &planes,
                                     opt_.summary_bits)) {
      // Fingerprints and top-K logits as byte-plane columns (format 1.3, columns.h): the
      // hashes and the random low planes are the noisy spans, the rest compresses.
      src = scratch->data();
      body_raw = scratch->size();
      codec = Codec::kColumnZstd;
      noisy = &planes;
    }
    // At level 1, near-random bytes (fingerprint hashes, low mantissa planes) go
    // into stored zstd frames: compressing them took most of the writer's time for a few
    // percent of size. The payload is still plain concatenated zstd frames.
    if (codec == Codec::kShuffleZstd && opt_.zstd_level <= detail::kMaxSpanLevel) {
      planes = detail::noisy_planes(src, job.raw.size() / job.elem_size, job.elem_size);
      noisy = &planes;
    }
    std::string err;
    const bool ok = opt_.zstd_level <= detail::kMaxSpanLevel && !noisy->empty()
                        ? zstd.compress_spans(src, body_raw, opt_.zstd_level, *noisy, frame, &err)
                        : zstd.compress(src, body_raw, opt_.zstd_level, frame, &err);
    if (!ok) return internal_error(path_, err.c_str());
    if (frame->size() - body_at >= job.raw.size()) {  // incompressible: store as is
      frame->resize(body_at);
      codec = Codec::kNone;
      body_raw = job.raw.size();
    }
  }
  if (codec == Codec::kNone) frame->insert(frame->end(), job.raw.begin(), job.raw.end());
  detail::FrameHeader h;
  h.kind = job.kind;
  h.codec = codec;
  const size_t raw = prefix + body_raw;
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

Status TraceWriter::Impl::write_at(const uint8_t* p, size_t n, uint64_t at, const char* what) {
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

Status TraceWriter::Impl::write_footer(const Status& earlier) {
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
                         counters_.tokens + counters_.finishes + counters_.ops +
                         counters_.step_overhead;
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
  if (counters_.ops > 0) f.kind_bytes.push_back({"ops", counters_.ops});  // 1.6, when present
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

}  // namespace llmrr::trace
