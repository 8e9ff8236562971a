// llmrr record-vllm [--capture LEVEL] -o x.trace -- CMD ARGS...: runs a vLLM program with the
// llmrr.vllm plugin switched on ($LLMRR_VLLM_TRACE), so each engine step is recorded from the
// process that runs the model (python/llmrr/vllm.py). The program's exit status is passed
// through (128 + signal when it was killed); afterwards the trace (and, with tensor
// parallelism, the other ranks' <trace>.rank<r>) is summarized.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/child.h"
#include "cli/cli.h"
#include "llmrr/format/trace_reader.h"

namespace {

using namespace llmrr;

bool is_file(const std::string& p) {
  struct stat st;
  return !p.empty() && ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return p;
  return std::string(cwd) + "/" + p;
}

}  // namespace

int run_record_vllm_command(int argc, char** argv) {
  CLI::App app{
      "Record a vLLM program's engine steps (batch composition, row fingerprints, logits,\n"
      "tokens) with the llmrr.vllm plugin, from the process that runs the model.",
      "record-vllm"};
  std::string out, capture = "layers";
  int top_k = 32;
  std::vector<std::string> command;
  app.add_option("-o,--output", out, "trace file to write")->required();
  app.add_option("--capture", capture,
                 "row fingerprints: none, layers (layer outputs, default) or all sites")
      ->check(CLI::IsMember({"none", "layers", "all"}));
  app.add_option("--top-k", top_k, "logits kept per sampled row (default 32)")
      ->check(CLI::Range(0, 65536));
  app.add_option("command", command, "the program and its arguments (after --)")->required();
  app.footer(
      "Examples:\n"
      "  llmrr record-vllm -o alone.trace -- python serve.py --prompt p.txt\n"
      "  llmrr record-vllm --capture all -o load.trace -- python serve.py --load 16\n"
      "  llmrr diff alone.trace load.trace\n"
      "\n"
      "The program's Python must have llmrr installed (pip install ./python): vLLM loads the\n"
      "plugin from the vllm.general_plugins entry point in every process it starts. Row\n"
      "fingerprints need enforce_eager=True; a compiled model is recorded at step level\n"
      "(batch, logits, tokens) and the trace's header and stderr say so. The same works\n"
      "without this command: LLMRR_VLLM_TRACE=x.trace python serve.py.\n"
      "\n"
      "Exit codes: the program's exit status (128 + signal if killed); 2 bad usage or no trace\n"
      "written; 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const std::string path = absolute(out);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return cli::report("record-vllm",
                       make_error(ErrorCode::kInvalidArgument,
                                  path + ": expected a trace file to write, found something that "
                                         "is not a regular file"));
  }
  // A stale trace from an earlier run must not be mistaken for this one's.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return cli::report("record-vllm", make_error(ErrorCode::kIo, path + ": cannot replace: " +
                                                                     std::strerror(errno)));

  Result<int> ran = cli::run_program("record-vllm", command, [&] {
    ::setenv("LLMRR_VLLM_TRACE", path.c_str(), 1);
    ::setenv("LLMRR_VLLM_CAPTURE", capture.c_str(), 1);
    ::setenv("LLMRR_VLLM_TOP_K", std::to_string(top_k).c_str(), 1);
  });
  if (!ran.ok()) return cli::report("record-vllm", ran.status());
  const int code = *ran;
  if (code == 127 && !is_file(path)) return 127;
  if (!is_file(path)) {
    cli::report("record-vllm",
                make_error(ErrorCode::kNotFound,
                           path + ": no trace written: the program ran no vLLM model step, or "
                                  "its Python lacks the llmrr package (pip install ./python; "
                                  "vLLM loads llmrr.vllm from the vllm.general_plugins entry "
                                  "point)"));
    return code != 0 ? code : cli::kExitBadInput;
  }
  std::vector<std::string> traces{path};
  for (int rank = 1; rank < 1024 && is_file(path + ".rank" + std::to_string(rank)); ++rank)
    traces.push_back(path + ".rank" + std::to_string(rank));
  for (const std::string& t : traces) {
    auto r = trace::TraceReader::open(t);
    if (!r.ok()) {
      cli::report("record-vllm", r.status());
      return code != 0 ? code : cli::exit_code(r.status());
    }
    const trace::TraceReader& rd = **r;
    std::fprintf(stderr,
                 "llmrr record-vllm: %s: %lld steps, %lld requests, row hash %s%s; program "
                 "exited with %d\n",
                 t.c_str(), static_cast<long long>(rd.step_count()),
                 static_cast<long long>(rd.requests().size()),
                 trace::fingerprint_kind(rd.run_header().engine).c_str(),
                 !rd.complete() ? " (no footer: the worker was killed; recovered up to its last "
                                  "whole step)"
                 : rd.lossy()   ? (", LOSSY: " + rd.lossy_reason()).c_str()
                                : "",
                 code);
  }
  return code;
}
