// The flight recorder: a bound on what a long recording keeps (Options::ring), and closed
// snapshots taken while it runs (Options::snapshot).
//
// With a ring the recorder writes its trace as segments, <trace>.ring/seg-NNNNNN.trace, each a
// whole trace of its own (the run header, steps, a footer). A segment is closed and the next
// one begun once it holds 1/8 of the bound (bytes) or of the time (a duration); whole
// segments are then removed from the front while the rest would pass the bound. Every new
// segment's first step carries in the requests still alive (their prompt, sampling and the
// tokens they generated so far: RequestRecord::carried / history), so a segment reads on its
// own. close() joins the segments kept into the trace's path (trace::join_traces), marked
// lossy when steps were dropped, and removes the folder; a recording killed leaves the
// segments, which `llmrr record-*` joins the same way.
//
// A snapshot trigger is a file: whenever it appears or changes (`touch FILE`; llmrr
// record-* touches it on SIGUSR1), the recorder writes a closed trace of what it holds
// (the segments kept, or the whole trace without a ring) to <output>.snapshot-N (the next
// free N) and goes on recording. The trigger is looked at after a step, at most every 100 ms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmrr/format/status.h"

namespace llmrr::recording {

struct RingOptions {
  uint64_t bytes = 0;    // keep at most this many bytes of segments (0: no size bound)
  int64_t seconds = 0;   // keep the steps of the last this many seconds (0: no time bound)
  bool enabled() const { return bytes > 0 || seconds > 0; }
};

// "64M", "512K", "2G", "100000" (bytes; K/M/G are powers of 1024, "MiB"/"MB" accepted; at
// least 64K) or "30s", "10min", "2h" (a duration). Errors name the spec and what was expected.
Result<RingOptions> parse_ring(const std::string& spec);
// "64 MiB", "10 min", ... (for messages and the lossy reason).
std::string describe_ring(const RingOptions& ring);

// Where a ring keeps the segments of the trace at `trace`: <trace>.ring/seg-NNNNNN.trace.
std::string ring_folder(const std::string& trace);
std::string ring_segment(const std::string& trace, int64_t index);
// The segments found in that folder, in recording order (empty when there is none).
std::vector<std::string> ring_segments(const std::string& trace);

struct SnapshotOptions {
  std::string trigger;  // the file whose appearance or change asks for a snapshot ("": none)
  std::string output;   // snapshots go to <output>.snapshot-N ("": the trace's path)
};

}  // namespace llmrr::recording
