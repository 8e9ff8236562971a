// vLLM: `llmrr record-vllm` runs a vLLM program with the llmrr.runtimes.vllm plugin switched
// on ($LLMRR_VLLM_TRACE), so each engine step is recorded from the process that runs the model
// (python/llmrr/runtimes/vllm/); replay, bisect and fuzz run in vLLM's Python, by modules of
// the llmrr package (llmrr.campaigns.vllm_replay, llmrr.campaigns.vllm_fuzz), which this
// binary execs.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/child.h"
#include "cli/cli.h"
#include "runtimes/adapter.h"
#include "runtimes/recording.h"

namespace llmrr::runtimes::vllm {

extern const Adapter kAdapter;

namespace {

int record(int argc, char** argv) {
  CLI::App app{
      "Record a vLLM program's engine steps (batch composition, row fingerprints, logits,\n"
      "tokens) with the llmrr.runtimes.vllm plugin, from the process that runs the model.",
      "record-vllm"};
  RecordingOptions o;
  add_recording_options(app, &o, true, "every site the plugin hooks");
  app.footer(
      "Examples:\n"
      "  llmrr record-vllm -o alone.trace -- python serve.py --prompt p.txt\n"
      "  llmrr record-vllm --capture all -o load.trace -- python serve.py --load 16\n"
      "  llmrr diff alone.trace load.trace\n"
      "\n"
      "The program's Python must have llmrr installed (pip install ./python): vLLM loads the\n"
      "plugin from the vllm.general_plugins entry point in every process it starts. Rows are\n"
      "recorded in eager and in compiled mode (the llmrr::site_rows op). The same works\n"
      "without this command: LLMRR_VLLM_TRACE=x.trace python serve.py (LLMRR_CAPTURE,\n"
      "LLMRR_TOP_K as the options). SIGINT, SIGTERM and SIGHUP sent to this command are passed\n"
      "on to the program; with tensor parallelism rank r > 0 is written to <-o>.rank<r>.\n"
      "\n"
      "Exit codes: the program's exit status (128 + signal if killed); 2 bad usage or no trace\n"
      "written; 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  cli::RecordedChild spec;
  spec.tool = "record-vllm";
  spec.output = o.out;
  spec.command = o.command;
  spec.snapshot_trigger = snapshot_trigger(o);
  spec.rank_files = true;
  spec.no_trace_hint =
      "the program ran no vLLM model step, or its Python lacks the llmrr package (pip install "
      "./python; vLLM loads llmrr.runtimes.vllm from the vllm.general_plugins entry point)";
  spec.environment = [&o](const std::string& trace) { set_recording_env(kAdapter, o, trace); };
  return cli::record_child(spec);
}

// Replaces this process with vLLM's Python running `args` — $LLMRR_VLLM_PYTHON, else
// build/venv-vllm/bin/python beside this binary's build folder (tools/setup/vllm makes it),
// with $LLMRR_BIN set to this binary for the module's own calls; returns 2, said, when it
// cannot.
int exec_vllm_python(const char* command, const std::vector<std::string>& args) {
  std::string py;
  if (const char* e = std::getenv("LLMRR_VLLM_PYTHON"); e != nullptr && *e != '\0') {
    py = e;
  } else if (const std::string self = cli::self_exe(); !self.empty()) {
    namespace fs = std::filesystem;
    py = (fs::path(self).parent_path().parent_path().parent_path() / "venv-vllm" / "bin" /
          "python")
             .string();
  }
  if (py.empty() || ::access(py.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "llmrr %s: error: --runtime vllm needs the vLLM python: none at '%s' (run "
                 "tools/setup/vllm, or set $LLMRR_VLLM_PYTHON)\n",
                 command, py.c_str());
    return 2;
  }
  std::vector<std::string> all = {py};
  all.insert(all.end(), args.begin(), args.end());
  return cli::exec_program(command, std::move(all));
}

int run_module(const char* command, std::vector<std::string> module_args, int argc,
               char** argv) {
  for (int i = 1; i < argc; ++i) module_args.push_back(argv[i]);
  return exec_vllm_python(command, module_args);
}

int replay(const char* command, int argc, char** argv) {
  return run_module(command, {"-m", "llmrr.campaigns.vllm_replay", "replay"}, argc, argv);
}

int bisect(const char* command, int argc, char** argv) {
  return run_module(command, {"-m", "llmrr.campaigns.vllm_replay", "bisect"}, argc, argv);
}

int fuzz(const char* command, int argc, char** argv) {
  return run_module(command, {"-m", "llmrr.campaigns.vllm_fuzz"}, argc, argv);
}

}  // namespace

const Adapter kAdapter{"vllm", record,
                       "record a vLLM program's engine steps (the llmrr.runtimes.vllm plugin)",
                       replay, bisect, fuzz};

}  // namespace llmrr::runtimes::vllm
