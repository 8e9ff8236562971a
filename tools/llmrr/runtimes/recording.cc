#include "runtimes/recording.h"

#include <cstdlib>

#include "cli/child.h"
#include "llmrr/recording/ring.h"

namespace llmrr::runtimes {

void add_recording_options(CLI::App& app, RecordingOptions* o, bool capture,
                           const char* all_help) {
  app.add_option("-o,--output", o->out,
                 "trace file to write (an earlier one there is replaced only by a whole trace)")
      ->required();
  if (capture) {
    app.add_option("--capture", o->capture,
                   std::string("row fingerprints: none, layers (layer outputs and logits, "
                               "default) or all (") + all_help + ")")
        ->check(CLI::IsMember({"none", "layers", "all"}));
    app.add_option("--top-k", o->top_k, "logits kept per sampled row (default 32)")
        ->check(CLI::Range(0, 65536));
  }
  app.add_option("--ring", o->ring,
                 "flight recorder: keep only the last SIZE (64M, 1G) or DURATION (30s, 10min, "
                 "2h) of steps, in segments joined at the end; requests still alive are kept")
      ->check([](const std::string& v) {
        Result<recording::RingOptions> r = recording::parse_ring(v);
        return r.ok() ? std::string() : r.status().message();
      });
  app.add_option("command", o->command, "the program and its arguments (after --)")->required();
}

void set_recording_env(const Adapter& a, const RecordingOptions& o, const std::string& trace) {
  ::setenv(trace_env(a).c_str(), trace.c_str(), 1);
  ::setenv(kCaptureEnv, o.capture.c_str(), 1);
  ::setenv(kTopKEnv, std::to_string(o.top_k).c_str(), 1);
  if (!o.ring.empty()) ::setenv("LLMRR_RING", o.ring.c_str(), 1);
  ::setenv("LLMRR_SNAPSHOT_TRIGGER", snapshot_trigger(o).c_str(), 1);
  ::setenv("LLMRR_SNAPSHOT_OUTPUT", cli::absolute_path(o.out).c_str(), 1);
}

std::string snapshot_trigger(const RecordingOptions& o) {
  return cli::absolute_path(o.out) + ".snap";
}

}  // namespace llmrr::runtimes
