// TraceWriter: appending records (the run header, steps into chunks, blobs, kernel records)
// and the public wrappers. The writer's thread, frame encoding, file I/O, close and the footer
// are in writer/io.cc, the shared state (TraceWriter::Impl) in writer/impl.h.
#include "llmrr/format/trace_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "check.h"
#include "convert.h"
#include "guarded.h"
#include "llmrr/format/container.h"
#include "impl.h"

namespace llmrr::trace {

namespace {

// Room kept for FlatBuffers' finishing bytes and the blob prefix.
constexpr size_t kFrameSlack = 4096;

}  // namespace

Status TraceWriter::Impl::append_run_header(const RunHeader& header) {
  RETURN_IF_ERROR(usable("append_run_header"));
  if (header_written_)
    return make_error(ErrorCode::kInvalidArgument,
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

Status TraceWriter::Impl::append_step(const StepRecord& step) {
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
  if (!why.empty()) return make_error(ErrorCode::kInvalidArgument, path_ + ": append_step: " + why);
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

Result<int64_t> TraceWriter::Impl::append_blob(const BlobSpec& b) {
  RETURN_IF_ERROR(usable("append_blob"));
  const std::string where = path_ + ": append_blob: blob " + std::to_string(next_blob_id_) + ": ";
  if (!header_written_)
    return make_error(ErrorCode::kInvalidArgument,
                      where + "expected append_run_header first, found a blob");
  const int es = dtype_size(b.dtype);
  if (es == 0)
    return make_error(ErrorCode::kInvalidArgument, where + "dtype: expected a known dtype, found " +
                                                       std::to_string(static_cast<int>(b.dtype)));
  if (b.data == nullptr && b.bytes > 0)
    return make_error(ErrorCode::kInvalidArgument, where + "data: expected a pointer, found null");
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

Status TraceWriter::Impl::append_kernels(const std::vector<KernelRecord>& records) {
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
    return make_error(ErrorCode::kResourceLimit,
                      path_ +
                          ": append_kernels: expected at most 16 MiB of records per call, found " +
                          std::to_string(job.raw.size()) + " bytes");
  kernel_raw_ += job.raw.size();
  job.cost = job.raw.size();
  return submit(std::move(job));
}

Status TraceWriter::Impl::flush() {
  RETURN_IF_ERROR(usable("flush"));
  RETURN_IF_ERROR(flush_chunk());
  std::unique_lock<std::mutex> lk(mu_);
  cv_.notify_all();  // a deferred frame may be waiting for a helper
  cv_.wait(lk, [&] { return (queue_.empty() && !busy_) || !error_.ok(); });
  return error_;
}

void TraceWriter::Impl::add_dropped_records(int64_t n, std::string reason) {
  if (n <= 0) return;
  dropped_records_ += n;
  mark_lossy(std::move(reason));
}

void TraceWriter::Impl::mark_lossy(std::string reason) {
  if (lossy_) return;
  lossy_ = true;
  lossy_reason_ = reason.empty() ? "records were dropped" : std::move(reason);
}

Status TraceWriter::Impl::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

WriterStats TraceWriter::Impl::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  WriterStats s = stats_;
  s.steps = checker_.steps();
  s.tokens = checker_.tokens();
  s.blobs = next_blob_id_;
  s.bytes_in_flight = in_flight_;
  s.file_bytes = file_end_;
  return s;
}

Status TraceWriter::Impl::usable(const char* op) {
  if (closed_)
    return make_error(ErrorCode::kInvalidArgument,
                      path_ + ": " + op + ": expected an open writer, found it closed");
  std::lock_guard<std::mutex> lk(mu_);
  if (!error_.ok())
    return error_.with_context(path_ + ": " + op + ": the writer stopped after an earlier error: ");
  return Status::Ok();
}

using detail::guarded;

Result<std::unique_ptr<TraceWriter>> TraceWriter::open(const std::string& path,
                                                       WriterOptions options) {
  return guarded(path, [&]() -> Result<std::unique_ptr<TraceWriter>> {
    if (options.zstd_level < 0 || options.zstd_level > 22)
      return make_error(ErrorCode::kInvalidArgument, path + ": zstd_level: expected 0..22, found " +
                                                         std::to_string(options.zstd_level));
    if (options.summary_bits < 0 || options.summary_bits > 23)
      return make_error(ErrorCode::kInvalidArgument,
                        path + ": summary_bits: expected 0..23, found " +
                            std::to_string(options.summary_bits));
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
      bool replaced = false;
      if (::lstat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode) &&
          ::access(path.c_str(), W_OK) == 0 && ::unlink(path.c_str()) == 0) {
        // Not `created`: the path named a file before, and stays (as before, when the
        // file was truncated) even if nothing readable reaches it.
        replaced = true;
        fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) (void)::fchmod(fd, old.st_mode & 07777);
      }
      // Something put at the path between the unlink and the open (a link planted there) is
      // never opened: written through, a link would truncate the file it names.
      if (fd < 0 && replaced && errno == EEXIST) {
        return make_error(ErrorCode::kIo, path + ": cannot create the trace: the path was "
                                                 "taken by something else while it was "
                                                 "replaced (expected the file removed)");
      }
      if (fd < 0 && !replaced)
        fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd < 0) {
      const int e = errno;
      if (e == ENOENT) {
        if (path.empty()) {
          return make_error(ErrorCode::kInvalidArgument,
                            "cannot create the trace: the output path is empty");
        }
        // ENOENT also comes from a directory that exists but takes no new files (/proc).
        const size_t slash = path.rfind('/');
        const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
        struct stat d;
        if (::stat(dir.c_str(), &d) == 0 && S_ISDIR(d.st_mode)) {
          return make_error(ErrorCode::kIo, path + ": cannot create the trace: the directory " +
                                                dir + " exists but takes no new files (" +
                                                errno_text(e) + ")");
        }
        return make_error(ErrorCode::kNotFound,
                          path + ": cannot create the trace: its directory does not exist");
      }
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
