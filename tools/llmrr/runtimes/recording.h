// What the record-<runtime> commands share: the -o / --capture / --top-k / -- PROGRAM options,
// and the environment scheme (adapter.h) that hands them to the runtime's recorder.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "runtimes/adapter.h"

namespace llmrr::runtimes {

struct RecordingOptions {
  std::string out;
  std::string capture = "layers";
  int top_k = 32;
  std::vector<std::string> command;
};

// Adds -o, --capture (`all_help`: what all adds for this runtime) and --top-k
// when `capture` is true, and the program after --.
void add_recording_options(CLI::App& app, RecordingOptions* o, bool capture,
                           const char* all_help);

// In the child: $LLMRR_<NAME>_TRACE=trace, and LLMRR_CAPTURE / LLMRR_TOP_K from `o`.
void set_recording_env(const Adapter& a, const RecordingOptions& o, const std::string& trace);

}  // namespace llmrr::runtimes
