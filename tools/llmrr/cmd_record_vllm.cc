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
#include <functional>
#include <string>
#include <vector>

#include "cli/child.h"
#include "cli/cli.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/safeio/output.h"

namespace {

using namespace llmrr;
using cli::absolute_path;
using cli::has_bytes;
using cli::is_file;

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
  const std::string path = absolute_path(out);
  // The plugin writes "<-o>.partial-XXXXXX" (created O_EXCL here; rank r > 0 writes
  // "<partial>.rank<r>"), renamed over -o (and -o.rank<r>) when the program is done and the
  // traces read: an earlier trace at -o stays whole until then, and a stale one is never
  // mistaken for this run's. A FIFO or a device as -o is refused.
  if (Status st = safeio::check_output_file(path, "-o", {}); !st.ok()) {
    return cli::report("record-vllm", st);
  }
  Result<safeio::OutputFile> partial =
      safeio::OutputFile::create(path, "-o", safeio::OutputFile::Kind::kPartial);
  if (!partial.ok()) return cli::report("record-vllm", partial.status());
  const std::string written = partial->write_path();
  auto rank_files = [&written] {
    std::vector<std::string> ranks;
    for (int rank = 1; rank < 1024 && is_file(written + ".rank" + std::to_string(rank)); ++rank)
      ranks.push_back(written + ".rank" + std::to_string(rank));
    return ranks;
  };
  struct RankCleanup {  // rank files of a partial trace that was not renamed into place
    std::function<std::vector<std::string>()> list;
    bool armed = true;
    ~RankCleanup() {
      if (armed)
        for (const std::string& r : list()) ::unlink(r.c_str());
    }
  } rank_cleanup{rank_files};

  Result<int> ran = cli::run_program("record-vllm", command, [&] {
    ::setenv("LLMRR_VLLM_TRACE", written.c_str(), 1);
    ::setenv("LLMRR_VLLM_CAPTURE", capture.c_str(), 1);
    ::setenv("LLMRR_VLLM_TOP_K", std::to_string(top_k).c_str(), 1);
  });
  if (!ran.ok()) return cli::report("record-vllm", ran.status());
  const int code = *ran;
  // The partial file was created empty: nothing in it means no trace (it is removed).
  if (code == 127 && !has_bytes(written)) return 127;
  if (!has_bytes(written)) {
    cli::report("record-vllm",
                make_error(ErrorCode::kNotFound,
                           path + ": no trace written: the program ran no vLLM model step, or "
                                  "its Python lacks the llmrr package (pip install ./python; "
                                  "vLLM loads llmrr.vllm from the vllm.general_plugins entry "
                                  "point)"));
    return code != 0 ? code : cli::kExitBadInput;
  }
  const std::vector<std::string> ranks = rank_files();
  std::vector<std::string> written_traces{written};
  written_traces.insert(written_traces.end(), ranks.begin(), ranks.end());
  for (const std::string& t : written_traces) {
    if (auto r = trace::TraceReader::open(t); !r.ok()) {
      // Kept under their own names for a look; -o is left as it was.
      rank_cleanup.armed = false;
      const std::string kept = partial->keep();
      cli::report("record-vllm", r.status());
      std::fprintf(stderr, "llmrr record-vllm: %s is kept; %s is left as it was\n",
                   kept.c_str(), path.c_str());
      return code != 0 ? code : cli::exit_code(r.status());
    }
  }
  std::vector<std::string> traces{path};
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::string target = path + ".rank" + std::to_string(i + 1);
    if (::rename(ranks[i].c_str(), target.c_str()) != 0) {
      return cli::report("record-vllm", make_error(ErrorCode::kIo, target + ": cannot write: " +
                                                                       std::strerror(errno)));
    }
    traces.push_back(target);
  }
  if (Status st = partial->commit(); !st.ok()) return cli::report("record-vllm", st);
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
