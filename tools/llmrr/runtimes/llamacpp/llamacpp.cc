// llama.cpp: `llmrr record-llamacpp` runs a program that links libllama (llama-server,
// llama-cli, llama-cpp-python, your own) with the llmrr shim preloaded (libllmrr_llamacpp.so,
// llamacpp/shim), so each llama_decode of its context is recorded as a step; replay re-runs a
// trace's batches in libllama (replay.cc); fuzz drives llama-server from the stdlib-only
// script python/llmrr/campaigns/llamacpp_fuzz.py.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/child.h"
#include "cli/cli.h"
#include "llmrr/format/trace_reader.h"
#include "runtimes/adapter.h"
#include "runtimes/llamacpp/llamacpp.h"
#include "runtimes/recording.h"

namespace llmrr::runtimes::llamacpp {

extern const Adapter kAdapter;

std::string find_part(const char* env, const char* name, std::vector<std::string>* tried) {
  if (const char* e = std::getenv(env); e != nullptr && *e != '\0') {
    tried->push_back(e);
    return cli::is_file(e) ? cli::absolute_path(e) : "";
  }
  const std::string dir = cli::self_dir();
  for (const std::string& c : {dir + "/" + name, dir + "/../lib/" + name}) {
    tried->push_back(c);
    if (cli::is_file(c)) return cli::absolute_path(c);
  }
  return "";
}

Result<uint64_t> id_in_replay(const trace::TraceReader& replay, uint64_t prompt_hash,
                              const std::string& label, uint64_t guess) {
  const trace::RequestSummary* first = nullptr;
  for (const trace::RequestSummary& q : replay.requests()) {
    if (q.prompt_hash != prompt_hash || q.label != label) continue;
    if (q.id == guess) return guess;
    if (first == nullptr) first = &q;
  }
  if (first != nullptr) return first->id;
  return make_error(ErrorCode::kInternal, replay.path() + ": no request with the recorded "
                                              "request's prompt and label ('" + label + "')");
}

Result<uint64_t> id_in_replay(const std::string& replay_trace, uint64_t prompt_hash,
                              const std::string& label, uint64_t guess) {
  auto r = trace::TraceReader::open(replay_trace);
  if (!r.ok()) return r.status();
  return id_in_replay(**r, prompt_hash, label, guess);
}

std::string missing_part(const std::vector<std::string>& tried, const char* env) {
  std::string where;
  for (const std::string& t : tried) where += (where.empty() ? "" : ", ") + t;
  return "looked at " + where + ": build llmrr with llama.cpp present (tools/setup/llamacpp, "
         "then reconfigure), or set " + env;
}

namespace {

int record(int argc, char** argv) {
  CLI::App app{
      "Record a program that links libllama (llama-server, llama-cli, ...): every decode of\n"
      "its context as a step (batch rows, sequences, positions), layer fingerprints, the logits\n"
      "of every row that wants them, the sampled tokens, and the context's settings.",
      "record-llamacpp"};
  RecordingOptions o;
  add_recording_options(app, &o, true, "also attention and FFN nodes");
  app.footer(
      "Examples:\n"
      "  llmrr record-llamacpp -o run.trace -- llama-server -m model.gguf -np 4 --kv-unified\n"
      "  llmrr verify run.trace\n"
      "\n"
      "The program gets LD_PRELOAD=libllmrr_llamacpp.so (appended to any LD_PRELOAD it has) and\n"
      "LLMRR_LLAMACPP_TRACE (LLMRR_CAPTURE, LLMRR_TOP_K as the options); the same works without\n"
      "this command. The program must use a shared libllama (tools/setup/llamacpp builds one).\n"
      "Stop a server with SIGINT or SIGTERM to this command: it is passed on, and the server\n"
      "closes the trace as it exits; if it still runs 3 s later (llama-server waits on open\n"
      "connections), the signal is passed on again, which llama-server takes as 'exit now'.\n"
      "\n"
      "Exit codes: the program's exit status (128 + signal if killed); 2 bad usage or no trace\n"
      "written; 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  std::vector<std::string> tried;
  const std::string shim = find_part("LLMRR_LLAMACPP_SHIM", "libllmrr_llamacpp.so", &tried);
  if (shim.empty()) {
    return cli::report("record-llamacpp",
                       make_error(ErrorCode::kNotFound, "no libllmrr_llamacpp.so (" +
                                                            missing_part(tried, "LLMRR_LLAMACPP_SHIM") +
                                                            ")"));
  }
  cli::RecordedChild spec;
  spec.tool = "record-llamacpp";
  spec.output = o.out;
  spec.command = o.command;
  spec.snapshot_trigger = snapshot_trigger(o);
  // llama-server waits on its open connections at a first SIGINT / SIGTERM (a streamed
  // completion held it 30 s); a second one exits at once through exit(), where the shim
  // closes the trace.
  spec.repeat_signal_after_ms = 3000;
  spec.no_trace_hint =
      "the program decoded nothing with a shared libllama (a statically linked llama.cpp "
      "cannot be recorded)";
  spec.environment = [&o, &shim](const std::string& trace) {
    std::string preload = shim;
    if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0')
      preload = std::string(old) + ":" + shim;
    ::setenv("LD_PRELOAD", preload.c_str(), 1);
    set_recording_env(kAdapter, o, trace);
  };
  return cli::record_child(spec);
}

// python3 from PATH running the checkout's python/llmrr/campaigns/llamacpp_fuzz.py (python/
// beside this binary's build folder; run as a file, so the package's numpy-using __init__ is
// not imported) with the arguments and $LLMRR_BIN set to this binary; 2, said, when it cannot.
int fuzz(const char* command, int argc, char** argv) {
  namespace fs = std::filesystem;
  const std::string self = cli::self_exe();
  if (self.empty()) {
    std::fprintf(stderr, "llmrr %s: error: --runtime llamacpp: cannot find this binary's path\n",
                 command);
    return 2;
  }
  // build/<preset>/tools/llmrr -> the checkout's python/llmrr/campaigns/llamacpp_fuzz.py
  const std::string path = (fs::path(self).parent_path().parent_path().parent_path().parent_path() /
                            "python" / "llmrr" / "campaigns/llamacpp_fuzz.py")
                               .string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    std::fprintf(stderr,
                 "llmrr %s: error: --runtime llamacpp needs %s, not found (a checkout's build)\n",
                 command, path.c_str());
    return 2;
  }
  std::vector<std::string> all = {"python3", path};
  for (int i = 1; i < argc; ++i) all.push_back(argv[i]);
  return cli::exec_program(command, std::move(all));
}

}  // namespace

const Adapter kAdapter{"llamacpp", record,
                       "record a program that links libllama (llama-server, ...): its decodes",
                       replay, bisect, fuzz};

}  // namespace llmrr::runtimes::llamacpp
