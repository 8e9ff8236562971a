// TraceWriter: streams records into a .trace file.
//
//   auto w = TraceWriter::open("run.trace");            // Result<std::unique_ptr<TraceWriter>>
//   RETURN_IF_ERROR((*w)->append_run_header(header));    // first, exactly once
//   RETURN_IF_ERROR((*w)->append_step(step));           // steps strictly increasing
//   ASSIGN_OR_RETURN(int64_t blob, (*w)->append_blob(spec));
//   RETURN_IF_ERROR((*w)->close());                      // footer + trailer
//
// Steps are batched into step-chunk frames (about chunk_target_bytes each); compression
// and writing happen on one background thread. At most max_bytes_in_flight bytes wait for
// it: an append that would exceed the bound blocks until the thread catches up
// (back-pressure), so memory stays bounded however fast the caller produces.
//
// Errors: nothing throws. Every method returns a Status. An I/O error on the background
// thread is sticky: it is returned by the next append (and by close()), the writer refuses
// every further append, and the file is cut back to its last whole frame so it stays
// readable. close() still tries to write a footer (marked lossy, with the error as reason).
//
// Thread-safety: one TraceWriter is used from one thread at a time (the recorder's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"

namespace llmrr::trace {

struct WriterOptions {
  int zstd_level = 1;  // 0 = store uncompressed; 1 = fastest (near-random spans stored); 2..19
  size_t max_bytes_in_flight = 64u << 20;  // raw bytes queued for the background thread
  size_t chunk_target_bytes = 1u << 20;    // close a step chunk once it reaches this
  int max_steps_per_chunk = 1024;          // ... or holds this many steps
  bool shuffle_blobs = true;               // byte-plane shuffle tensor blobs
  // Column-code step chunks (codec kColumnZstd, format 1.3): fingerprints and top-K logits
  // as byte-plane columns. false writes them as format 1.2 did (plain zstd), which every
  // reader since 1.0 reads; kept for benchmarks and compatibility tests.
  bool column_chunks = true;
  // Mantissa bits kept of the l2 and max_abs of SiteRows fingerprints in column-coded chunks
  // (rounded to nearest; 23 = exact, the default). The hashes, which locate a split, and the
  // logits' fingerprints stay exact; the summaries only say how far apart two rows are, and
  // their random low bits are most of their bytes. `llmrr record --summary-bits` sets it.
  int summary_bits = 23;
  // fsync before close() returns: errors a device reports only at write-back (EIO from a
  // failing disk, ENOSPC on thin-provisioned or network storage) then reach close()'s
  // status, and the footer is rewritten to say lossy.
  bool sync_on_close = false;
};

struct WriterStats {
  int64_t frames = 0;  // frames written so far (footer excluded)
  int64_t steps = 0;   // steps appended
  int64_t tokens = 0;
  int64_t blobs = 0;
  uint64_t raw_bytes = 0;   // Σ raw frame sizes written
  uint64_t file_bytes = 0;  // bytes on disk so far
  uint64_t bytes_in_flight = 0;
  uint64_t max_bytes_in_flight_seen = 0;
  int64_t backpressure_waits = 0;  // appends that had to wait for the background thread
};

class TraceWriter {
 public:
  // Creates (truncates) `path` and writes the file header. Fails with kIo / kNotFound /
  // kIsDirectory naming the path. A file this call created is removed again when nothing
  // readable reached it: the file header could not be written here, or the run header
  // frame failed before close().
  static Result<std::unique_ptr<TraceWriter>> open(const std::string& path,
                                                   WriterOptions options = {});

  ~TraceWriter();  // close() if not closed; its status is lost (call close() yourself)
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // First record, exactly once. format_major/minor are filled in by the writer.
  Status append_run_header(const RunHeader& header);

  // Steps must come after the run header with strictly increasing `step`. Rejected (with
  // kInvalidArgument and nothing written) when a record is malformed: duplicate sites,
  // values out of their stored range, a step too large for one frame.
  Status append_step(const StepRecord& step);

  // Stores a tensor as its own frame and returns its blob id (0, 1, 2, ... in call order),
  // which a LogitsRecord::blob can name. Data is copied (XOR-ed with the reference when one
  // is given) before this returns.
  Result<int64_t> append_blob(const BlobSpec& blob);

  // Kernel activity records (CUPTI). Stored in their own frame, in call order; allowed
  // between steps and in traces that have no steps at all (llmrr record-cuda). Rejected
  // (kInvalidArgument, nothing written) when a record breaks check_kernel_record.
  Status append_kernels(const std::vector<KernelRecord>& records);

  // Counts `n` activity records the producer lost (e.g. CUPTI had no buffer to put them
  // in) in the footer's dropped_records and marks the trace lossy with `reason`.
  void add_dropped_records(int64_t n, std::string reason);

  // Closes the current step chunk and waits until everything appended so far is on disk.
  // A crash after flush() loses nothing appended before it.
  Status flush();

  // Compresses and writes queued frames on the calling thread, if any are queued and no
  // other thread is at it; whether it did. Any thread, concurrently with the appends.
  bool help();
  // With `defer`, an append that queues a frame does not wake the writer's thread while
  // the queue is short (one frame): the producer has another thread that calls help() (an
  // engine's idle pool worker), and waking a sleeping thread costs the appending thread
  // as much as compressing a small chunk. The writer's thread is still woken for a second
  // frame, when appends wait for memory (max_bytes_in_flight), and by flush() and close().
  void defer_wakes(bool defer);

  // Marks the trace lossy (the footer says so, with `reason`): the producer dropped
  // records, e.g. a recorder that stopped after an error. The first reason wins.
  void mark_lossy(std::string reason);

  // Writes the last chunk, the footer (index, counts, flags) and the trailer, then closes
  // the file. Idempotent: later calls return the first result. When fsync (sync_on_close)
  // or close itself fails after a clean footer, the footer is rewritten to say lossy with
  // that error (the file is reopened after a failed close) and the error is returned.
  Status close();

  // The first error seen (ok while healthy).
  Status status() const;
  WriterStats stats() const;
  const std::string& path() const;

  class Impl;

 private:
  explicit TraceWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrr::trace
