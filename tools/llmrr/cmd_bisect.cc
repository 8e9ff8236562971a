// llmrr bisect A.trace B.trace: replay A's request alone while swapping in B's factors
// (R's schedule, the plan of one step and site, the routing of one step and layer), and
// delta-debug to the smallest set that reproduces B's numerical split bit for bit and,
// separately, B's visible split (replayer/bisect/include/llmrr/replayer/bisect.h).
// Exit 0 no split, 1 a cause found, 2 bad input, 3 internal error (or not explained).
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/cli.h"
#include "runtimes/adapter.h"
#include "cli/trace_input.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/bisect.h"

namespace {

// One line on stderr, redrawn at most ten times a second, erased at the end.
class Bar {
 public:
  void draw(const std::string& phase, int64_t replays, int64_t candidates) {
    auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr,
                 "\r\033[K[bisect %s split] %" PRId64 " replays, %" PRId64
                 " factors in the current candidate, %.1f s",
                 phase.c_str(), replays, candidates, secs);
    drawn_ = true;
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

}  // namespace

int run_bisect_command(int argc, char** argv) {
  using namespace llmrr;
  // `--runtime NAME`: the run is re-executed in that runtime (tools/llmrr/runtimes/NAME).
  if (int rc = 0; runtimes::dispatch("bisect", argc, argv, &rc)) return rc;
  CLI::App app{
      "Find the smallest set of B's factors (schedule, plans, routing) that reproduces "
      "B's split when replaying A's request alone.",
      "bisect"};
  std::string a, b, request;
  replay::BisectOptions o;
  bool json = false, quiet = false;
  std::string search = "both";
  app.add_option("A", a, "the reference trace (e.g. the request alone), or a bundle of one")
      ->required();
  app.add_option("B", b, "the trace whose split is explained (e.g. under load), or a bundle of one")
      ->required();
  app.add_option("--request", request,
                 "bisect one request: R (the same id in both) or RA:RB (explicit ids); default: "
                 "the first request that splits");
  app.add_option("--model", o.model, "model spec overriding the recorded one");
  app.add_option("-j,--jobs", o.jobs, "replays run in parallel (default 1)");
  app.add_option("--threads", o.threads,
                 "engine threads per replay (default: the host's cores / jobs, at most 8)");
  app.add_option("--max-replays", o.max_replays,
                 "replays each search may run (default 0: no limit); at the limit the search "
                 "reports the reproducing set it has narrowed to");
  app.add_option("--search", search,
                 "which splits to search: both (default), numerical or visible");
  app.add_flag("--json", json, "print the report as one JSON object");
  app.add_flag("-q,--quiet", quiet, "no progress bar");
  app.footer(
      "Factors are the points where A and B differ for the request, up to its split: the plan\n"
      "of one op at one step (steps aligned by the request's positions), the request's routing\n"
      "at one step and layer (only when expert capacity decided it; otherwise routing is\n"
      "recomputed), and the request's own schedule (chunk boundaries). Each candidate set is a\n"
      "request-alone replay of A with those factors taken from B; ddmin finds a 1-minimal set\n"
      "for the numerical split (B's logits at the first differing position, bit for bit) and\n"
      "for the visible split (B's token where the text first differs).\n"
      "\n"
      "Examples:\n"
      "  llmrr bisect alone.trace loaded.trace\n"
      "  llmrr bisect --runtime vllm run.trace --model DIR --request 3   # vLLM: which\n"
      "        co-requests split request 3 (python -m llmrr.campaigns.vllm_replay bisect --help)\n"
      "  llmrr bisect alone.trace loaded.trace --request 0 --jobs 2\n"
      "  llmrr bisect a.trace b.trace --request 3:7 --json | jq .visible.minimal\n"
      "  llmrr bisect production.trace invariant.trace --search visible --max-replays 300\n"
      "\n"
      "A progress bar is drawn on stderr when it is a terminal (-q turns it off).\n"
      "Exit codes: 0 no split, 1 a cause found, 2 bad input (different models, unknown\n"
      "request, unreadable trace, a trace with no whole step, a bundle of several traces),\n"
      "3 internal error or a split no factor set explains.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (!request.empty()) {
    Result<std::pair<uint64_t, uint64_t>> pair = cli::parse_request_pair(request);
    if (!pair.ok()) return cli::report("bisect", pair.status());
    o.request = *pair;
  }
  if (o.jobs < 1 || o.jobs > 64) {
    return cli::report("bisect",
                       make_error(ErrorCode::kInvalidArgument, "--jobs must be in [1, 64]"));
  }
  if (o.max_replays < 0) {
    return cli::report("bisect", make_error(ErrorCode::kInvalidArgument,
                                            "--max-replays must be 0 (no limit) or more, got " +
                                                std::to_string(o.max_replays)));
  }
  if (search == "both") {
    o.searches = replay::BisectOptions::Searches::kBoth;
  } else if (search == "numerical") {
    o.searches = replay::BisectOptions::Searches::kNumerical;
  } else if (search == "visible") {
    o.searches = replay::BisectOptions::Searches::kVisible;
  } else {
    return cli::report("bisect", make_error(ErrorCode::kInvalidArgument,
                                            "--search must be both, numerical or visible, got '" +
                                                search + "'"));
  }
  if (o.threads < 0 || o.threads > 64) {
    return cli::report("bisect",
                       make_error(ErrorCode::kInvalidArgument, "--threads must be in [0, 64]"));
  }
  if (app.count("--model") > 0 && o.model.empty()) {
    return cli::report("bisect", make_error(ErrorCode::kInvalidArgument,
                                            "--model: the spec is empty, expected builtin:<name>, "
                                            "a safetensors directory or a .gguf file"));
  }
  // A bundle of one trace is bisected as its trace (with its bundled model unless --model
  // names one); each trace must hold a whole step, or there is no run to compare.
  cli::TraceInput inputs[2];
  std::string* paths[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    Result<cli::TraceInput> in = cli::open_trace_input(*paths[i]);
    if (!in.ok()) return cli::report("bisect", in.status());
    if (in->from_pack) {
      if (in->traces.size() != 1 || in->redacted) {
        return cli::report(
            "bisect", make_error(ErrorCode::kInvalidArgument,
                                 *paths[i] + ": a bundle of " + std::to_string(in->traces.size()) +
                                     (in->redacted ? " redacted" : "") +
                                     " trace(s), expected one whole trace: extract it (llmrr "
                                     "unpack) and bisect the traces"));
      }
      if (o.model.empty()) o.model = in->model;
      *paths[i] = in->traces[0];
    }
    inputs[i] = std::move(*in);
    Result<std::unique_ptr<trace::TraceReader>> rd = trace::TraceReader::open(*paths[i]);
    if (!rd.ok()) return cli::report("bisect", rd.status());
    if ((*rd)->step_count() == 0) {
      return cli::report("bisect", make_error(ErrorCode::kSemantic,
                                              *paths[i] + ": holds no whole step (the recording "
                                                          "stopped before its first step chunk): "
                                                          "nothing to bisect"));
    }
  }
  Bar bar;
  const bool draw = !quiet && isatty(STDERR_FILENO);
  if (draw) {
    o.progress = [&](const std::string& phase, int64_t replays, int64_t candidates) {
      bar.draw(phase, replays, candidates);
    };
  }
  Result<replay::BisectReport> r = replay::bisect_traces(a, b, o);
  bar.finish();
  if (!r.ok()) return cli::report("bisect", r.status());
  if (json) {
    std::printf("%s\n", replay::bisect_report_json(*r).c_str());
  } else {
    std::fputs(replay::format_bisect_report(*r).c_str(), stdout);
  }
  if (!r->split()) return cli::kExitOk;
  return r->explained() ? cli::kExitDiffer : cli::kExitInternal;
}
