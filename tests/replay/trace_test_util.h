// Helpers of the replay and diff tests: recording runs of the builtin models into trace
// files (with TraceRecorder, optionally forcing schedule, plans and routing to plant a
// divergence), rewriting traces record by record (tampering), and temp paths.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"
#include "llmrr/recorder/trace_recorder.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/memory_trace.h"
#include "llmrr/runtime/model.h"
#include "test_common.h"

namespace llmrr::rtest {

using test::builtin;  // loaded once per process
using test::bytes;

// A fresh directory for this test process (removed at exit); paths inside it.
std::string temp_path(const std::string& name);

// The target (id 0, `prompt`) plus `load` synthetic requests (ids 1..load), all greedy,
// stop_at_eos false (so that forced schedules never meet a finished request).
std::vector<RequestSpec> target_and_load(const LoadedModel& model, const std::string& prompt,
                                         int32_t max_tokens, int32_t load, uint64_t seed = 7);

struct RunSpec {
  EngineConfig config;                // threads default 2 (set in the constructor)
  std::string policy = "production";  // production | invariant | forced
  bool atomics = false;
  std::vector<RequestSpec> requests;
  trace::CaptureLevel capture = trace::CaptureLevel::kAll;
  trace::LogitsMode logits = trace::LogitsMode::kTopK;
  int max_steps_per_chunk = 1024;
  // Forcing (planted divergences); not owned.
  ScheduleSource* schedule = nullptr;
  PlanSource* plans = nullptr;
  RoutingSource* routing = nullptr;
  RunSpec() { config.threads = 2; }
};

struct Recorded {
  std::string path;
  std::unique_ptr<MemoryTrace> mem;  // the same run in memory (plans, schedule, routing)
  bool ok = false;
};

// Runs `spec` on `model`, recording into `path` (and into a MemoryTrace). Fails the test on
// any error.
Recorded record(const LoadedModel& model, const RunSpec& spec, const std::string& path);

// A RoutingSource from a table, for planting routing changes.
class TableRouting : public RoutingSource {
 public:
  std::map<std::pair<int64_t, int32_t>, ForcedRouting> table;
  const ForcedRouting* routing(int64_t step, int32_t layer) override {
    auto it = table.find({step, layer});
    return it == table.end() ? nullptr : &it->second;
  }
};

// A ScheduleSource from a list of steps.
class ListSchedule : public ScheduleSource {
 public:
  std::vector<ScheduledStep> steps;
  size_t next_index = 0;
  Result<std::optional<ScheduledStep>> next() override {
    if (next_index >= steps.size()) return std::optional<ScheduledStep>();
    return std::optional<ScheduledStep>(steps[next_index++]);
  }
};

// Copies trace `in` to `out` through TraceReader/TraceWriter, letting `edit` change the run
// header and every step.
Status rewrite_trace(const std::string& in, const std::string& out,
                     const std::function<void(trace::RunHeader&)>& edit_header,
                     const std::function<void(trace::StepRecord&)>& edit_step);

// The file's bytes; writing bytes.
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);

// Runs a shell command, returning its exit status and stdout (stderr appended when asked).
int run_command(const std::string& command, std::string* out, bool with_stderr = false);

// The llmrr binary: $LLMRR_BINARY, else LLMRR_BINARY as CMake set it.
std::string llmrr_binary();

}  // namespace llmrr::rtest
