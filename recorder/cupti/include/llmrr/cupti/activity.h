// CUPTI activity capture, the parts that need no GPU: the parser of activity buffers, the
// step splitter, the bounded buffer pool and the sink that writes records through a
// TraceWriter. libllmrr_cupti.so (injection.cc) only adds the CUPTI calls around them, so
// everything here is unit-tested on the CPU with buffers built from the real CUPTI structs.
//
//   CUPTI buffer-completed thread:  bytes ──ActivityParser──▶ KernelRecord
//                                   ──ActivitySink (step from StepSplitter)──▶ TraceWriter
//   application threads:            sync / NVTX callbacks ──▶ StepSplitter boundaries
//
// Steps. A step boundary is a CUPTI correlation id: correlation ids come from one counter
// that every CUDA API call draws from in call order, and a kernel or copy carries the id of
// the call that launched it. So "kernels launched before this synchronisation" is
// "correlation id below the synchronisation's", whatever order the records arrive in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"

namespace llmrr::trace {
class TraceWriter;
}

namespace llmrr::cupti {

// "_Z6squarePfi" → "square(float*, int)"; a name that is not a mangled C++ name is returned
// as is.
std::string demangle(const char* name);

// Which activity record layouts this build parses (those of the CUPTI headers it was
// compiled against; CUPTI_API_VERSION 130001 uses CUpti_ActivityKernel10, Memcpy6, Marker2).
struct LayoutInfo {
  uint32_t cupti_api_version = 0;
  size_t kernel_record_bytes = 0;
  size_t memcpy_record_bytes = 0;
  size_t marker_record_bytes = 0;
};
LayoutInfo layout_info();

struct ParseStats {
  int64_t kernels = 0;
  int64_t memcpys = 0;
  int64_t ranges = 0;      // NVTX ranges closed (start + end records paired)
  int64_t skipped = 0;     // records of other kinds
  int64_t malformed = 0;   // truncated records, ends without a start, open ranges evicted
  int64_t bytes_left = 0;  // bytes after the last record the walker could step over
};

// Returns the record after `prev` (the first when `prev` is null) or null at the end.
// cuptiActivityGetNextRecord in the injection library; layout_walk here.
using RecordWalker = const void* (*)(const uint8_t* buffer, size_t valid, const void* prev,
                                     void* context);

// Steps over records as CUPTI lays them out: back to back, each the size of its kind's
// struct in the compiled headers. Stops (returns null) at an unknown kind.
const void* layout_walk(const uint8_t* buffer, size_t valid, const void* prev, void* context);

// Decodes CUPTI activity buffers into KernelRecords (step left at -1; the sink sets it).
// Keeps the NVTX ranges opened in one buffer and closed in a later one (bounded: at most
// kMaxOpenRanges, the oldest is dropped and counted as malformed). Not thread-safe: one
// parser per buffer-completed thread (CUPTI has one).
class ActivityParser {
 public:
  static constexpr size_t kMaxOpenRanges = 4096;
  static constexpr size_t kMaxNameCache = 1 << 16;

  // Decodes one record of `available` bytes; records of kinds it does not know are counted
  // as skipped.
  void decode(const void* record, size_t available, std::vector<trace::KernelRecord>* out,
              ParseStats* stats);
  // Every record of a buffer, walked by `walker` (layout_walk when null).
  ParseStats parse_buffer(const uint8_t* buffer, size_t valid,
                          std::vector<trace::KernelRecord>* out, RecordWalker walker = nullptr,
                          void* walker_context = nullptr);

 private:
  const std::string& kernel_name(const char* mangled);
  struct OpenRange {
    std::string name;
    int64_t start_ns = 0;
    uint64_t order = 0;
  };
  std::unordered_map<uint32_t, OpenRange> open_;
  uint64_t opened_ = 0;
  struct NameHash {
    using is_transparent = void;  // lookups by string_view: no allocation per record
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::string, NameHash, std::equal_to<>> names_;
  std::string empty_;
};

// Maps correlation ids to steps. Boundaries come from application threads (inside CUPTI
// callbacks), lookups from the buffer-completed thread; each call holds a small mutex for a
// few hundred nanoseconds, never across I/O.
//
//   sync mode:  step n = records launched after the n-th synchronisation (0 before the
//               first): step_of(c) = number of sync boundaries below c.
//   range mode: step n = records launched inside the n-th outermost NVTX range of the
//               chosen name; records outside every such range get -1.
//
// Memory is bounded: past max_boundaries the oldest half is forgotten (their count kept),
// so a record older than every remembered boundary would get a too-small step; with the
// default 2^20 boundaries that is a record delivered a million synchronisations late.
class StepSplitter {
 public:
  enum class Mode : uint8_t { kSync, kRange };
  explicit StepSplitter(Mode mode, size_t max_boundaries = size_t{1} << 20);

  Mode mode() const { return mode_; }
  void sync(uint64_t correlation);              // sync mode
  int64_t range_begin(uint64_t correlation);    // range mode; returns the step it opens
  void range_end(uint64_t correlation);         // range mode
  int64_t step_of(uint64_t correlation) const;  // -1: outside every step (range mode)
  int64_t boundaries() const;                   // seen so far (including forgotten ones)

 private:
  struct Boundary {
    uint64_t correlation;
    int64_t step;  // sync: boundaries up to and including this one; range: opened step or -1
  };
  void insert(Boundary b);
  const Mode mode_;
  const size_t max_;
  mutable std::mutex mu_;
  std::vector<Boundary> b_;  // sorted by correlation
  int64_t forgotten_ = 0;    // sync mode: boundaries dropped from the front
  int64_t total_ = 0;
  int64_t ranges_ = 0;
};

// A fixed set of equally sized, 8-byte aligned buffers handed to CUPTI. acquire() never
// allocates after construction and never waits: with every buffer in CUPTI's hands or
// waiting to be parsed it returns null, which makes CUPTI drop records instead of growing
// memory or stalling the application. Thread-safe.
class BufferPool {
 public:
  BufferPool(size_t buffers, size_t buffer_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  uint8_t* acquire();  // null when exhausted (counted in refused())
  void release(uint8_t* buffer);
  size_t buffer_bytes() const { return bytes_; }
  size_t capacity() const { return all_.size(); }
  size_t available() const;
  int64_t refused() const;

 private:
  const size_t bytes_;
  std::vector<uint8_t*> all_;
  mutable std::mutex mu_;
  std::vector<uint8_t*> free_;
  int64_t refused_ = 0;
};

struct SinkCounts {
  int64_t kernels = 0, memcpys = 0, ranges = 0;
  int64_t frames = 0;           // kernel-record frames handed to the writer
  int64_t dropped = 0;          // records lost (CUPTI drops, write errors)
  int64_t refused_buffers = 0;  // buffer requests the pool could not serve
  int64_t malformed = 0;        // parser findings
  int64_t last_step = -1;       // highest step a record was assigned to
};

// Receives parsed records, gives them their step and writes them in frames of
// batch_records. consume() and finish() run on the buffer-completed thread (serialized by
// the sink's lock; the writer is used by one thread at a time); add_range() may be called
// from any thread and only takes a short separate lock. After the writer fails, records
// are counted as dropped and the trace is marked lossy.
class ActivitySink {
 public:
  ActivitySink(trace::TraceWriter* writer, const StepSplitter* splitter,
               size_t batch_records = 4096);

  void consume(std::vector<trace::KernelRecord>* records, const ParseStats& stats);
  void add_range(trace::KernelRecord range);  // step already set by the caller
  void add_dropped(int64_t records);          // CUPTI's count for a completed buffer
  void add_refused_buffers(int64_t n);
  Status finish();  // writes what is pending and the drop counts; idempotent
  SinkCounts counts() const;

 private:
  Status write_pending();  // under mu_
  trace::TraceWriter* const writer_;
  const StepSplitter* const splitter_;
  const size_t batch_;
  mutable std::mutex mu_;
  std::vector<trace::KernelRecord> pending_;
  SinkCounts counts_;
  Status error_;
  bool finished_ = false;
  std::mutex ranges_mu_;
  std::vector<trace::KernelRecord> ranges_;
  int64_t ranges_dropped_ = 0;
};

}  // namespace llmrr::cupti
