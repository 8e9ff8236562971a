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
  std::string ring;  // --ring SIZE|DURATION ("": the whole run)
  std::vector<std::string> command;
};

// Adds -o, --capture (`all_help`: what all adds for this runtime) and --top-k
// when `capture` is true, and the program after --.
void add_recording_options(CLI::App& app, RecordingOptions* o, bool capture,
                           const char* all_help);

// In the child: $LLMRR_<NAME>_TRACE=trace, LLMRR_CAPTURE / LLMRR_TOP_K from `o`, LLMRR_RING
// with --ring, and the snapshot trigger and output (snapshot_trigger(o), <-o>).
void set_recording_env(const Adapter& a, const RecordingOptions& o, const std::string& trace);

// The file whose change asks the recorder for a snapshot: <-o>.snap (absolute); SIGUSR1 to
// the recording command appends to it.
std::string snapshot_trigger(const RecordingOptions& o);

}  // namespace llmrr::runtimes
