// Helpers of the recorder tests: run the engine with a TraceRecorder and a MemoryTrace side
// by side, so that every record read back from the file can be checked against what the
// engine actually did.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "llmrr/format/trace_reader.h"
#include "llmrr/recorder/trace_recorder.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/memory_trace.h"
#include "llmrr/runtime/model.h"
#include "test_common.h"

namespace llmrr::rectest {

using test::builtin;  // a builtin name ("tiny-moe") or a model path, loaded once per process
using test::bytes;

// A fresh path under the test's temporary directory, removed at exit.
std::string temp_path(const std::string& stem);
// Removes the files temp_path named so far (a death test's child calls it before _Exit).
void remove_temp_files();

RequestSpec request(RequestId id, const std::string& prompt, int32_t max_tokens,
                    int64_t arrival = 0);
// `count` synthetic load requests (printable prompts), ids from first_id.
std::vector<RequestSpec> load_requests(const LoadedModel& model, int32_t count, uint64_t seed,
                                       RequestId first_id);

// What MemoryTrace does not keep: the router's choice before capacity, gates, sampler draws,
// the step of each arrival, and the full fingerprints of rows.
class DetailObserver : public Observer {
 public:
  explicit DetailObserver(bool rows) : rows_(rows) {}
  bool wants_rows(SiteId) override { return rows_; }
  void on_arrival(int64_t step, const RequestSpec& r) override { arrival_step[r.id] = step; }
  void on_rows(const RowsView& v) override;
  void on_routing(const RoutingView& v) override;
  void on_token(const TokenEvent& t) override {
    uniform[{t.request, t.position}] = t.sample.uniform;
  }

  std::map<RequestId, int64_t> arrival_step;
  std::map<std::pair<int64_t, int32_t>, RoutingView> routing_views;  // pointers dropped
  std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>> chosen;
  std::map<std::pair<int64_t, int32_t>, std::vector<float>> gates;
  std::map<std::pair<RequestId, int32_t>, double> uniform;
  std::map<std::tuple<int64_t, uint64_t, int64_t>, trace::Fingerprint> fingerprints;
  std::map<std::pair<int64_t, uint64_t>, int64_t> cols;

 private:
  bool rows_;
};

struct RunSpec {
  std::string model = "tiny-moe";
  std::string policy = "production";  // production | atomics | invariant
  EngineConfig config;
  std::vector<RequestSpec> requests;
  RecorderOptions recorder;
  std::string path;  // "" = a fresh temp path
};

struct RecordedRun {
  std::string path;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<MemoryTrace> memory;
  std::unique_ptr<DetailObserver> detail;
  Status run_status;
  Status close_status;
  RecorderStats stats;
};

std::shared_ptr<Policy> make_policy(const std::string& name);

// Runs `spec` with a TraceRecorder, a MemoryTrace (row hashes and logits) and a
// DetailObserver attached; closes the recorder. Failures are test failures.
RecordedRun record_run(const RunSpec& spec);

// Runs `spec` with only a MemoryTrace attached (the unobserved reference).
std::unique_ptr<MemoryTrace> plain_run(const RunSpec& spec);

std::unique_ptr<trace::TraceReader> open_reader(const std::string& path);

// Every step of a trace, in order.
std::vector<trace::StepRecord> read_steps(trace::TraceReader& reader);

}  // namespace llmrr::rectest
