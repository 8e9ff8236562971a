// TraceRecorder: the engine's Observer that writes a run into a .trace file (DESIGN, data
// flow "record"). An adapter: each callback converts the engine's types to the trace's
// records (llmrr/recorder/convert.h) and hands them to the recording SDK's StepRecorder
// (recording/, llmrr/recording/step_recorder.h), which owns the step pipeline, the
// fingerprints, the logits' top-K and blobs, and the never-crash-the-engine rule.
//
//   ASSIGN_OR_RETURN(auto rec, TraceRecorder::open("run.trace", header, options));
//   engine->add_observer(rec.get(), /*lend_idle_threads=*/true);
//   Status run = engine->run();
//   engine->remove_observer(rec.get());  // lent workers call the recorder until then
//   Status closed = rec->close();        // footer; the first recording error, if any
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"
#include "llmrr/recording/step_recorder.h"
#include "llmrr/runtime/observer.h"

namespace llmrr {

using RecorderOptions = recording::Options;
using RecorderStats = recording::Stats;

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
  // With the engine's idle pool workers lent (Engine::add_observer(rec, true)) and no core
  // left free for the recorder's thread: a worker completes and appends the step in
  // flight, so the engine's serial phases absorb the work (never blocks on the engine).
  bool on_idle(const kernels::JobSignal& signal) override;

  // StepRecorder's: close (idempotent; the first recording error), mark_lossy,
  // discard_step, status, stats, pipelined, path.
  Status close() { return steps_->close(); }
  void mark_lossy(const std::string& reason) { steps_->mark_lossy(reason); }
  void discard_step() { steps_->discard_step(); }
  Status status() const { return steps_->status(); }
  bool in_step() const { return steps_->in_step(); }
  bool recording() const { return steps_->recording(); }
  RecorderStats stats() const { return steps_->stats(); }
  bool pipelined() const { return steps_->pipelined(); }
  const std::string& path() const { return steps_->path(); }
  // The SDK recorder underneath.
  recording::StepRecorder& steps() { return *steps_; }

 private:
  explicit TraceRecorder(std::unique_ptr<recording::StepRecorder> steps);
  std::unique_ptr<recording::StepRecorder> steps_;
};

// recording::base_run_header() with host.isa set to the engine's kernel ISA in use.
trace::RunHeader base_run_header();

}  // namespace llmrr
