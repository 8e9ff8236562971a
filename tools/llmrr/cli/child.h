// Running other programs from the CLI: one fork / exec / wait (run_child), and on it the
// recording commands' whole life of a child under a recorder (record_child): the output
// policy, the partial trace, signals, reading the trace back and putting it at -o.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "llmrr/format/status.h"

namespace llmrr::cli {

struct Child {
  // argv[0] is looked up on PATH unless it holds a '/'.
  std::vector<std::string> argv;
  // Runs in the forked child before exec (set its environment there; setenv is safe: the
  // CLI is single-threaded).
  std::function<void()> in_child;
  // Non-null: the child's stdout is read into it.
  std::string* out = nullptr;
  // SIGINT, SIGTERM and SIGHUP sent to this process are passed on to the child while it
  // runs (once each time they come), so stopping `llmrr record-* -- server` by its pid stops
  // the server the same way; this process does not die of them and returns the child's
  // status. A signal from the terminal (Ctrl-C: the kernel sends it to the whole foreground
  // process group, the child included) is not passed on a second time.
  bool forward_signals = true;
  // > 0: when the child is still running this long after a signal was forwarded (or came
  // from the terminal), the signal is sent to it once more. A server that waits on its
  // open connections at a first SIGINT / SIGTERM takes a second one as "exit now" through
  // exit() (llama-server), which runs the recorder's exit hooks: the trace is closed.
  int repeat_signal_after_ms = 0;
  // Non-empty: SIGUSR1 sent to this process appends a line to this file (the flight
  // recorder's snapshot trigger, which the child's recorder watches) instead of being
  // passed on.
  std::string snapshot_trigger;
};

// "SIGINT", "SIGTERM" or "SIGHUP" (the signals a recording is stopped by), else "a signal".
const char* signal_name(int sig);

// The child's exit status, 128 + signal when it was killed, 127 when it could not be
// started (said on stderr as "llmrr <tool>: error: <argv0>: cannot run: ...").
Result<int> run_child(const char* tool, Child child);

// Replaces this process with `argv` (argv[0] looked up on PATH unless it holds a '/'), with
// $LLMRR_BIN set to this binary unless set (for the program's own llmrr calls). Returns 2,
// said on stderr as "llmrr <tool>: error: cannot run <argv0>: <why>", only when it cannot.
int exec_program(const char* tool, std::vector<std::string> argv);

// What a recording command hands record_child.
struct RecordedChild {
  const char* tool = "";                // "record-vllm": its name in messages
  std::string output;                   // -o as given
  std::vector<std::string> command;     // the program and its arguments
  // The child's environment, given the path it writes the trace to (<-o>.partial-XXXXXX).
  std::function<void(const std::string& trace_path)> environment;
  // Why a program may have written no trace ("the program ran no vLLM model step, ...").
  std::string no_trace_hint;
  // Tensor parallelism: ranks r > 0 write <trace_path>.rank<r>, put at <-o>.rank<r>.
  bool rank_files = false;
  // Reads one written trace (path: where it is now) and returns the line to print about it
  // (after "llmrr <tool>: <-o>: "); an error keeps the trace under its partial name.
  // Default: steps, requests, row hash, complete / lossy (an engine-step trace).
  std::function<Result<std::string>(const std::string& path)> summarize;
  // Child::repeat_signal_after_ms for the program (0: a signal is passed on once).
  int repeat_signal_after_ms = 0;
  // Child::snapshot_trigger ("": SIGUSR1 is not taken).
  std::string snapshot_trigger;
};

// The -o policy of every recording command: a FIFO or a device as -o is refused (exit 2); the
// child writes <-o>.partial-XXXXXX (created O_EXCL here), which is renamed over -o only when
// the program has ended and the trace reads back, so an earlier trace at -o stays whole until
// then and a stale one is never taken for this run's; a trace that does not read is kept
// under its partial name and -o left as it was; after kill -9 of this command the partial
// file is the readable prefix. Returns the program's exit status (128 + signal if killed),
// or 2 / 3 when no trace could be written or read. A flight recorder's segments left by a
// program that was killed (<partial>.ring/) are joined into the trace first.
int record_child(const RecordedChild& spec);

// A flight recorder's segments at <trace>.ring/ (a program killed before its recorder joined
// them): joined into `trace` when it is empty, then removed; said on stderr. No-op otherwise.
void recover_ring(const char* tool, const std::string& trace);

// The default summary line of a trace of engine steps (record-vllm, record-llamacpp).
Result<std::string> summarize_steps(const std::string& path);

// Paths the recording commands hand to a child: this binary (/proc/self/exe; "" when it cannot
// be read), its directory, `p` made absolute against the working directory (as it is when that
// cannot be read), and whether `p` names a regular file (with bytes in it: has_bytes).
std::string self_exe();
std::string self_dir();
std::string absolute_path(const std::string& p);
bool is_file(const std::string& p);
bool has_bytes(const std::string& p);

// Prepends `path` to the colon-separated variable `name` (LD_PRELOAD, PYTHONPATH) in this
// process's environment (call it in Child::in_child).
void prepend_env(const char* name, const std::string& path);

}  // namespace llmrr::cli
