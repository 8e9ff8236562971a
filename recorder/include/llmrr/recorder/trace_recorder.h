// TraceRecorder: the runtime Observer that writes a run into a .trace file through
// TraceWriter (DESIGN, data flow "record").
//
//   ASSIGN_OR_RETURN(auto rec, TraceRecorder::open("run.trace", header, options));
//   engine->add_observer(rec.get());
//   Status run = engine->run();
//   Status closed = rec->close();       // footer; the first recording error, if any
//
// Per step it records the batch composition, the plan of every op at every site (the
// writer deduplicates), fingerprints of the rows of the sites the capture level selects,
// routing per MoE layer, logits per sampled row (top-K ids and values, full-vocab
// fingerprint, top1 − top2 margin, and with LogitsMode::kFull the whole row as a shuffled
// tensor blob), chosen tokens with the sampler's draw, arrivals and finishes.
//
// The recorder never takes down the engine it observes: the first error (I/O, a record the
// writer refuses, an allocation failure) stops recording, marks the trace lossy with the
// reason, and every later callback returns at once; the engine runs on. close() then
// writes what it can and returns that first error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/runtime/observer.h"

namespace llmrr {

struct RecorderOptions {
  trace::CaptureLevel capture = trace::CaptureLevel::kLayers;
  trace::LogitsMode logits = trace::LogitsMode::kTopK;
  int32_t top_k = 32;
  // Store full-logit blobs as XOR against the blob of the same (request prompt, position)
  // in this trace, when it has one of the same size (--reference). Not owned.
  const trace::TraceReader* reference = nullptr;
  trace::WriterOptions writer;
};

struct RecorderStats {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t fingerprints = 0;
  int64_t blobs = 0;
  int64_t xor_blobs = 0;  // blobs stored as XOR against the reference
  uint64_t file_bytes = 0;
};

class TraceRecorder final : public Observer {
 public:
  // Opens the file and writes the run header. header.engine.capture / logits_mode / top_k
  // are overwritten from `options` so the header always says what was captured.
  static Result<std::unique_ptr<TraceRecorder>> open(const std::string& path,
                                                     trace::RunHeader header,
                                                     RecorderOptions options = {});
  ~TraceRecorder() override;

  bool wants_rows(SiteId site) override;
  void on_arrival(int64_t step, const RequestSpec& request) override;
  void on_step(const StepInfo& step) override;
  void on_plan(int64_t step, SiteId site, const Plan& plan) override;
  void on_rows(const RowsView& rows) override;
  void on_routing(const RoutingView& routing) override;
  void on_logits(const LogitsView& logits) override;
  void on_token(const TokenEvent& token) override;
  void on_finish(const RequestFinish& finish) override;
  void on_step_end(int64_t step) override;

  // Writes the footer and closes the file. Returns the first error seen while recording
  // (the trace is then marked lossy) or the close error. Idempotent.
  Status close();

  // Marks the trace lossy without stopping: records the producer meant to write were
  // dropped (e.g. a C ABI call with bad arguments). The first reason wins.
  void mark_lossy(const std::string& reason);

  // The first recording error (ok while healthy).
  const Status& status() const { return status_; }
  bool in_step() const { return in_step_; }
  bool recording() const { return status_.ok() && !closed_; }
  RecorderStats stats() const;
  const std::string& path() const { return path_; }

 private:
  TraceRecorder() = default;
  // Records the first error, marks the trace lossy; recording stops.
  void fail(Status status);
  void record_full_logits(const LogitsView& v, trace::LogitsRecord& rec);

  std::string path_;
  RecorderOptions options_;
  std::unique_ptr<trace::TraceWriter> writer_;
  Status status_;
  bool closed_ = false;
  bool in_step_ = false;
  trace::StepRecord step_;
  std::vector<trace::RequestRecord> pending_arrivals_;
  // Prompt hash per request (XOR reference lookup) and the reference's blobs by
  // (prompt hash, position).
  std::unordered_map<uint64_t, uint64_t> prompt_hashes_;  // request → prompt hash
  std::map<std::pair<uint64_t, int32_t>, int64_t> reference_blobs_;
  std::vector<uint8_t> reference_bytes_;
  RecorderStats stats_;
};

// The parts of a run header the recorder can fill on its own: tool version, creation time,
// a fresh run id, host (name, OS, CPU, cores, the kernel ISA in use) and device (cpu).
trace::RunHeader base_run_header();

}  // namespace llmrr
