// TraceReader: reads .trace files, including untrusted and damaged ones.
//
//   ASSIGN_OR_RETURN(auto reader, TraceReader::open("run.trace"));
//   const RunHeader& h = reader->run_header();
//   StepCursor cur = reader->steps();              // sequential, bounded memory
//   StepRecord s;
//   while (true) {
//     ASSIGN_OR_RETURN(bool got, cur.next(&s));
//     if (!got) break;
//     ...
//   }
//   RETURN_IF_ERROR(reader->read_step(17, &s));    // random access through the index
//
// open() checks the file header (magic, version: a newer major is refused, a newer minor
// is read, ignoring what this build does not know), reads the run header (frame 0) and the
// footer's index. A file without a valid trailer (writer killed, disk full) is scanned frame
// by frame instead: a torn last frame is dropped with a warning and complete() is false.
// A trailer that is present but points at garbage is an error (kBadFooter).
//
// Every frame read is checked before use: header check, checksum of the stored bytes,
// sizes against the 16 MiB frame limit and the file size, zstd decoding to exactly the
// declared size, the FlatBuffers Verifier, and the references each record makes (plan
// indices, batch rows). No input makes the reader crash, hang, or allocate more than a
// few frames' worth of memory. verify() additionally reads every frame and checks the
// semantics across the whole file (steps increasing, request lifecycles, blob ids, the
// footer against the frames).
//
// Errors name the file, the frame index and its offset, what was expected and what was
// found: "run.trace: frame 4 (step chunk) at offset 8812: checksum mismatch: expected
// xxh3 0x1f..., found 0x3a...".
//
// Thread-safety: a TraceReader is not thread-safe (read_step and read_blob use a cache).
// StepCursors only read the reader's immutable index and the file (pread), so several
// cursors may run on different threads while the reader is alive and not otherwise used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/format/container.h"
#include "llmrr/format/records.h"
#include "llmrr/format/status.h"

namespace llmrr::trace {

class TraceReader;

struct ReaderOptions {
  // Without a footer: scan the frames (true) or refuse the file (false).
  bool scan_without_footer = true;
};

// Sequential iteration over steps [first, last]; holds one decoded chunk at a time.
class StepCursor {
 public:
  StepCursor() = default;
  StepCursor(StepCursor&&) noexcept;
  StepCursor& operator=(StepCursor&&) noexcept;
  ~StepCursor();

  // Reads the next step into *out (its lists are cleared first). Returns false at the end,
  // or an error for a damaged frame; after an error the cursor stays at the error.
  Result<bool> next(StepRecord* out);

  struct State;

 private:
  friend class TraceReader;
  std::unique_ptr<State> state_;
};

struct VerifyReport {
  int64_t frames = 0;
  int64_t steps = 0;
  int64_t blobs = 0;
  int64_t requests = 0;
  int64_t tokens = 0;
  int64_t kernel_records = 0;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  std::vector<std::string> warnings;
};

class TraceReader {
 public:
  static Result<std::unique_ptr<TraceReader>> open(const std::string& path,
                                                   ReaderOptions options = {});
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const std::string& path() const;
  uint64_t file_size() const;
  uint16_t format_major() const;  // the file's version
  uint16_t format_minor() const;

  // Footer present and the writer closed the trace normally.
  bool complete() const;
  bool has_footer() const;
  // Records the producer meant to write are missing (recorder stopped early, I/O error).
  bool lossy() const;
  const std::string& lossy_reason() const;
  // Non-fatal findings at open: torn last frame dropped, frames of a newer minor skipped.
  const std::vector<std::string>& warnings() const;

  const RunHeader& run_header() const;

  // The index: every frame but the footer, in file order.
  const std::vector<FrameInfo>& frames() const;
  int64_t step_count() const;
  int64_t first_step() const;  // -1 when there are no steps
  int64_t last_step() const;   // -1 when there are no steps
  int64_t token_count() const;
  int64_t blob_count() const;
  uint64_t raw_bytes() const;  // Σ raw frame sizes
  // Requests in arrival order, with their finish (from the footer, or gathered by the scan).
  const std::vector<RequestSummary>& requests() const;
  // Raw bytes per record kind (from the footer; empty for a trace without one).
  const std::vector<KindBytes>& kind_bytes() const;
  // Records in kernel-record frames (CUPTI activity), from the footer; -1 without one.
  int64_t kernel_record_count() const;
  // Activity records the producer lost (footer; 0 without one). Non-zero implies lossy().
  int64_t dropped_records() const;

  // Random access: the step numbered `step` (kNotFound when the trace has none). Keeps the
  // last decoded chunk, so nearby steps are cheap; to visit many steps in order, a
  // StepCursor is cheaper still.
  Status read_step(int64_t step, StepRecord* out);

  // Sequential iteration over the steps numbered in [first, last].
  StepCursor steps(int64_t first = std::numeric_limits<int64_t>::min(),
                   int64_t last = std::numeric_limits<int64_t>::max()) const;

  Result<BlobInfo> blob_info(int64_t id) const;
  // Decoded tensor bytes of blob `id`. An XOR-coded blob needs its reference: either the
  // reference's raw bytes (their hash must match the recorded one), or the reference trace
  // (its run_id must match), from which the reference blob is read.
  Status read_blob(int64_t id, std::vector<uint8_t>* out) const;
  Status read_blob(int64_t id, std::vector<uint8_t>* out, const void* reference,
                   size_t reference_bytes) const;
  Status read_blob(int64_t id, std::vector<uint8_t>* out, const TraceReader& reference) const;

  // Kernel records of the frame at index `frame` (which must be a kernel-records frame).
  Status read_kernels(int64_t frame, std::vector<KernelRecord>* out) const;

  // Low level: the decoded payload of frame `frame` (checked: header, checksum, codec,
  // size), for tools that report per-frame statistics.
  Status read_frame_payload(int64_t frame, std::vector<uint8_t>* out) const;

  // Reads every frame and checks everything (see above). Returns the first problem.
  Status verify(VerifyReport* report = nullptr) const;

  class Impl;

 private:
  explicit TraceReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrr::trace
