// Diff of kernel sequences: where two recordings of GPU activity (llmrr record-cuda, CUPTI
// kernel-record frames) first launch different work.
//
//   ASSIGN_OR_RETURN(KernelDiffReport d, diff_kernel_traces("m1.trace", "m64.trace"));
//   std::cout << format_kernel_diff(d);
//
// Each trace's kernel and memcpy records are grouped by step (NVTX step range or the span
// between synchronisations) and ordered by correlation id, i.e. launch order; empty steps do
// not count, so step k of A is compared with step k of B by their place among the steps that
// launched something. Two launches are the same when kind, demangled name, grid, block,
// static and dynamic shared memory (kernels) or copy kind and bytes (memcpys) are equal;
// timings and streams are not compared. The report names the first step whose sequences
// differ, the first launch where they do, and how (a kernel present in one run only — e.g.
// cuBLAS's split-K reduction —, a different kernel, the same kernel with another launch
// configuration), and the kernels of that step that only one run launched.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"

namespace llmrr::trace {
class TraceReader;
}

namespace llmrr::replay {

// What a trace holds, as far as this diff cares.
struct KernelTraceSummary {
  std::string path;
  int64_t kernels = 0, memcpys = 0, ranges = 0;
  int64_t steps = 0;          // steps that launched at least one kernel or copy
  int64_t outside_steps = 0;  // kernels and copies outside every step (NVTX range mode)
  int64_t dropped = 0;        // footer: activity records the recorder lost
  bool lossy = false;
  int64_t engine_steps = 0;  // llmrr engine step records (0 for record-cuda traces)
  std::string step_source;   // "synchronisations", "nvtx range decode" (run header), or ""
};

// From the footer/index alone: whether the trace has kernel-record frames and engine steps.
struct TraceContent {
  bool kernel_records = false;
  bool engine_steps = false;
};
TraceContent trace_content(const trace::TraceReader& reader);

// Reads every kernel-record frame.
Result<KernelTraceSummary> summarize_kernel_trace(const std::string& path);

enum class KernelDifference : uint8_t {
  kNone = 0,
  kOnlyInA,  // A launches something B does not launch at this point
  kOnlyInB,
  kConfig,     // same kernel, different grid / block / shared memory (or copy size)
  kDifferent,  // a different kernel
  kStepCount,  // every common step identical, one trace has more steps
};
// "identical", "present in A only", "present in B only", "launch configuration differs",
// "different kernel", "different number of steps".
const char* kernel_difference_name(KernelDifference d);

struct KernelDiffReport {
  KernelTraceSummary a, b;
  int64_t steps_compared = 0;
  int64_t steps_differing = 0;
  // The first differing step.
  KernelDifference difference = KernelDifference::kNone;
  int64_t ordinal = -1;  // its place among non-empty steps (0-based)
  int64_t step_a = -1, step_b = -1;
  int64_t launches_a = 0, launches_b = 0;                 // in that step
  int64_t index = -1;                                     // first differing launch within the step
  std::optional<trace::KernelRecord> kernel_a, kernel_b;  // the launches at `index`
  std::optional<trace::KernelRecord> previous;            // the last common launch before it
  std::vector<std::string> only_a, only_b;  // kernel names launched in the step by one run only
  std::vector<std::string> notes;
  bool identical() const { return difference == KernelDifference::kNone; }
};

Result<KernelDiffReport> diff_kernel_traces(const std::string& a_path, const std::string& b_path);
// The same over two open traces (diff_traces reads each trace through one reader).
Result<KernelDiffReport> diff_kernel_traces(const trace::TraceReader& a,
                                            const trace::TraceReader& b);

// "kernel gemv2T_kernel<...> grid [1,1,1] block [128,1,1] shared 0+512" or
// "memcpy DtoH 4096 B"; names longer than max_name are cut with "...".
std::string launch_text(const trace::KernelRecord& k, size_t max_name = 160);
std::string format_kernel_diff(const KernelDiffReport& report);
std::string kernel_diff_json(const KernelDiffReport& report);  // one JSON object

}  // namespace llmrr::replay
