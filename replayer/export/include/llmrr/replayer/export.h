// `llmrr export`: a trace in the formats other tools read.
//
// Perfetto / Chrome trace-event JSON (open in ui.perfetto.dev or chrome://tracing). Traces
// record no wall-clock time per step, so steps are laid out on a logical clock: step N
// starts at N ms and lasts 1 ms. Process 1 ("llmrr run ...") has a track "steps" (one
// slice per step: rows, requests, prefill/decode segments, plans that changed) and one
// track per request (one slice per step it is in: "prefill [a, b)" or "decode p", with the
// sampled token and margin), plus counters "batch rows", "batch requests" and "margin rR"
// (one per request, at each sampled position). Kernel records (CUPTI, when the trace has
// them) go to process 2, one track per stream, on their own recorded clock (ns, shifted to
// start at 0), each slice naming its step, grid and block.
//
// .npy files (NumPy format 1.0) in a directory, with manifest.json describing them:
//   fingerprints.hash.npy     <u8 [N]       xxh3-64 of each recorded row
//   fingerprints.summary.npy  <f4 [N, 2]    (l2, max|x|)
//   fingerprints.index.npy    <i8 [N, 4]    (step, request, position, site index); request
//                                           and position -1 when the step has no segments
//   sites.json                              site index -> name ("L3.mlp.down", ...)
//   logits.top_ids.npy        <i4 [M, K]    top-K ids, descending (-1 padding)
//   logits.top_values.npy     <f4 [M, K]    their values (NaN padding)
//   logits.margin.npy         <f4 [M]       top1 - top2
//   logits.index.npy          <i8 [M, 3]    (step, request, position)
//   routing.chosen.npy        <i4 [R, k]    router top-k per token per MoE layer
//   routing.experts.npy       <i4 [R, k]    experts used after capacity (-1 dropped)
//   routing.gates.npy         <f4 [R, k]
//   routing.outcome.npy       <i4 [R, k]    0 kept, 1 rerouted, 2 dropped
//   routing.index.npy         <i8 [R, 4]    (step, layer, request, position)
// Routing files are written only for traces that hold routing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"

namespace llmrr::replay {

struct PerfettoSummary {
  int64_t events = 0;
  int64_t step_slices = 0;
  int64_t request_slices = 0;
  int64_t counters = 0;
  int64_t kernels = 0;
};

// Writes the trace-event JSON to `out` (streamed: memory does not grow with the trace).
Result<PerfettoSummary> export_perfetto(const trace::TraceReader& reader, const std::string& out);

struct NpyExportSummary {
  std::vector<std::string> files;
  int64_t fingerprints = 0;
  int64_t logits = 0;
  int64_t routing_rows = 0;
};

// Writes the .npy files above into `dir` (created if absent).
Result<NpyExportSummary> export_npy(const trace::TraceReader& reader, const std::string& dir);

}  // namespace llmrr::replay
