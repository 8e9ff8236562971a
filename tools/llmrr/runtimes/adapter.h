// The runtimes llmrr records besides its own engine. Each is an adapter folder here
// (runtimes/<name>/: its record command and the verbs it re-executes in that runtime) and
// one row of the table in runtimes/table.cc; main.cc and the commands that take `--runtime`
// (replay, bisect, fuzz) read the table and nothing else. DESIGN.md, "Adding a runtime".
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace llmrr::runtimes {

// A verb run in a runtime: `command` is the subcommand's name ("replay"), argv its arguments
// (argv[0] the subcommand) with `--runtime NAME` taken out. Returns the exit code (0 same /
// ok, 1 differs, 2 bad input, 3 internal), or does not return (it execs the runtime's program).
using Verb = int (*)(const char* command, int argc, char** argv);

struct Adapter {
  const char* name;  // "vllm": `--runtime vllm`, `llmrr record-vllm`, $LLMRR_VLLM_TRACE
  // `llmrr record-<name> ... -- PROGRAM ARGS`: records a program of this runtime (null: none).
  int (*record)(int argc, char** argv);
  const char* record_help;  // its line in `llmrr --help`
  Verb replay;              // `llmrr replay --runtime <name>` (null: not supported)
  Verb bisect;
  Verb fuzz;
};

std::span<const Adapter* const> adapters();
const Adapter* find(std::string_view name);

// The environment scheme every recorder shares. A recorder is switched on in a process by
// LLMRR_<NAME>_TRACE=<path> (the runtime's name in capitals; a variable of another runtime
// never switches it on), and reads the settings common to all of them from LLMRR_CAPTURE
// (none | layers | all) and LLMRR_TOP_K (logits kept per sampled row); a runtime's own knobs
// are LLMRR_<NAME>_*. record_child's environment callbacks set them.
std::string trace_env(const Adapter& a);  // "LLMRR_VLLM_TRACE"
inline constexpr const char* kCaptureEnv = "LLMRR_CAPTURE";
inline constexpr const char* kTopKEnv = "LLMRR_TOP_K";

// `llmrr VERB --runtime NAME ...` (or --runtime=NAME): false when argv has no --runtime (the
// command goes on with llmrr's own engine); else true with the exit code in *rc: the
// adapter's verb's, or 2, said on stderr with the runtimes that have VERB, when NAME is no
// runtime or has no such verb.
bool dispatch(const char* verb, int argc, char** argv, int* rc);

}  // namespace llmrr::runtimes
