// Replay: re-execute a trace bit for bit and check it (DESIGN, data flow "replay").
//
//   ASSIGN_OR_RETURN(ReplayReport r, replay_trace("run.trace", options));
//   if (!r.bit_exact()) ... r.mismatch->step, ->site, ->expected, ->found
//
// The engine is rebuilt from the run header (model checked against the recorded weight
// hash, engine config, virtual device), its policy is forced to the recorded plans
// (arrival permutations included), its schedule to the recorded batches and its routing to
// the recorded experts (or recomputed and compared, `check_routing`). A verifying Observer
// compares everything the trace holds with what the replay produces: the plan of every op,
// the fingerprint of every captured row, routing (experts, outcomes, gates), logits (full
// fingerprint, top-K ids and values, margin), every token and sampler draw, every finish.
// The first difference, in the engine's forward order, stops the replay.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/runtime/device.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/model.h"
#include "llmrr/format/site.h"

namespace llmrr::replay {

// "L3.mlp.down@17" (every row of that site at step 17) or "logits@17" (the full logits of
// the rows sampled at step 17).
struct MaterializeSpec {
  SiteId site;
  int64_t step = 0;
};
Result<MaterializeSpec> parse_materialize(std::string_view text);
// "L3.mlp.down@17" → "L3.mlp.down@17.npy" (and "...@17.rows.npy" for the batch rows).
std::string materialize_file_name(const MaterializeSpec& spec);

struct ReplayOptions {
  std::string model;                 // model spec overriding the recorded one ("" = as recorded)
  int32_t threads = 0;               // 0: the host's cores, at most 8 (never changes a result)
  std::optional<RequestId> request;  // request-alone replay (invariant 3)
  // Recompute routing and compare instead of forcing it. With `request` and expert capacity
  // the recomputation sees only that request's rows competing for capacity, so it may
  // differ from the recording where other requests took capacity: use it on whole replays.
  bool check_routing = false;
  std::vector<MaterializeSpec> materialize;
  std::string out_dir;            // where materialized .npy files go
  int64_t last_step = INT64_MAX;  // stop after this step (tests, partial replays)
  // Where to re-execute. kCpu replays a trace recorded on CUDA too: bit for bit when its
  // plans are exact (exact / invariant policy); a fast-family trace (cuBLASLt plans) is
  // checked up to its first tensor-core GEMM and the report says which sites the CPU
  // cannot reproduce (`unreproducible`). kCuda needs a CUDA build and a GPU.
  Device device = Device::kCpu;
  // Called after every replayed step.
  std::function<void(int64_t step, int64_t steps_done)> progress;
};

// The first thing the replay produced that the trace does not say.
struct Mismatch {
  int64_t step = -1;
  RequestId request = 0;
  int32_t position = -1;  // -1 when not tied to one row
  int64_t batch_row = -1;
  std::string site;      // "L3.mlp.down", "logits", "token", "routing L2", "batch", ...
  std::string what;      // "fingerprint", "plan", "experts", "token", ...
  std::string expected;  // as recorded
  std::string found;     // as replayed
};

// GPU -> CPU replay of a fast-family trace: the first plan the CPU cannot run.
struct Unreproducible {
  int64_t step = -1;
  std::string site;                // the first such site in forward order, e.g. "L0.attn.q"
  std::string plan;                // its plan ("cuBLASLt algo 66, tile 21, ...")
  std::vector<std::string> sites;  // every cuBLASLt site of that step, in forward order
};

struct ReplayReport {
  std::string trace;
  std::string model;         // the model spec that was loaded
  int64_t steps = 0;         // steps replayed
  int64_t tokens = 0;        // tokens checked
  int64_t rows_checked = 0;  // row fingerprints compared
  int64_t logits_checked = 0;
  int64_t plans_checked = 0;
  int64_t routings_checked = 0;
  int64_t logit_blobs_checked = 0;  // full logits stored as blobs (--logits full)
  int64_t trace_steps = 0;          // steps the trace holds
  int64_t trace_tokens = 0;
  bool trace_complete = true;  // false: no footer (recording cut short)
  int64_t last_whole_step = -1;
  std::optional<RequestId> request;
  bool check_routing = false;
  std::vector<std::string> notes;  // truncated / lossy trace, no weight hash, ...
  std::optional<Mismatch> mismatch;
  std::optional<RoutingMismatch> routing_mismatch;  // check_routing only
  std::vector<std::string> written;                 // materialized files
  // Set when the replay stopped at a plan this device cannot run (everything before it
  // was checked and matched, unless `mismatch` says otherwise).
  std::optional<Unreproducible> unreproducible;
  bool bit_exact() const { return !mismatch && !routing_mismatch && !unreproducible; }
};

// Replays a trace file. Errors (unreadable trace, model not found or not the recorded one —
// kWeightMismatch —, a bad option) are Statuses; a replay that runs but differs is a report
// with `mismatch` set.
Result<ReplayReport> replay_trace(const std::string& trace_path, const ReplayOptions& options);

// Same with an open reader and a loaded model (tests load a model once). The model's
// weights are checked against the header all the same.
Result<ReplayReport> replay_trace(const trace::TraceReader& reader, const LoadedModel& model,
                                  const ReplayOptions& options);

// "replayed 41 steps, 96 tokens: bit-exact" plus notes; or the mismatch, several lines.
std::string format_replay_report(const ReplayReport& report);
// The report as a JSON object (one line).
std::string replay_report_json(const ReplayReport& report);

}  // namespace llmrr::replay
