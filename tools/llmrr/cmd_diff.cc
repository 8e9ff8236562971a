// llmrr diff A.trace B.trace: where two runs of the same requests split and why. Requests
// are aligned by prompt hash and sampling params (or --align, --request), positions by position; for
// each common request the story says: identical, numerical split only, or visible split,
// the first step and site where the rows differ, and the recorded factor that differs there
// (batch composition, the plans of the ops feeding that site, expert routing, arrival-order
// reductions). Exit 0 identical, 1 differ, 2 bad input, 3 internal error.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/trace_input.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/runtime/model.h"
#include "llmrr/safeio/input.h"

int run_diff_command(int argc, char** argv) {
  using namespace llmrr;
  CLI::App app{"Find where two runs split: the first token, the first layer and op, and why.",
               "diff"};
  std::string a, b, request;
  replay::DiffOptions o;
  bool json = false;
  int explained = 8;
  app.add_option("A", a, "first trace, or a bundle (llmrr pack) holding both")->required();
  app.add_option("B", b, "second trace (or bundle)");
  std::string align = "params";
  app.add_option("--align", align,
                 "pair requests by 'params' (prompt hash + the sampling params that can change "
                 "the output; the default), 'prompt' (prompt hash alone), 'ids' (request id) or "
                 "'tokens' (prompt + completion: a rollout against a trainer's forward over the "
                 "same tokens, compared position by position whatever the steps)")
      ->check(CLI::IsMember({"params", "prompt", "ids", "tokens"}));
  app.add_option("--request", request,
                 "compare one request: R (the same id in both) or RA:RB (explicit ids)");
  app.add_option("--model", o.model,
                 "model whose tokenizer decodes the text at a split (default: as recorded; "
                 "'none' prints token ids)");
  app.add_option("--tokens", o.continuation, "tokens of each continuation to show (default 12)");
  app.add_option("--explain", explained, "split requests explained in detail (default 8)")
      ->check(CLI::Range(0, 1000000));
  app.add_flag("--json", json, "print the report as one JSON object");
  app.footer(
      "Examples:\n"
      "  llmrr diff alone.trace loaded.trace\n"
      "  llmrr diff a.trace b.trace --request 3 --json\n"
      "  llmrr diff a.trace b.trace --align ids   # request k of A against request k of B\n"
      "  llmrr diff rollout.trace trainer.trace --align tokens  # same tokens, any steps\n"
      "  llmrr diff bug.llmrr                     # a bundle of two traces\n"
      "\n"
      "Exit codes: 0 identical, 1 the runs differ, 2 bad input or nothing in common (the\n"
      "message says which alignment keys differed), 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (!request.empty()) {
    Result<std::pair<uint64_t, uint64_t>> pair = cli::parse_request_pair(request);
    if (!pair.ok()) return cli::report("diff", pair.status());
    o.request = *pair;
  }
  o.align = align == "ids"      ? replay::AlignBy::kIds
            : align == "prompt" ? replay::AlignBy::kPrompt
            : align == "tokens" ? replay::AlignBy::kTokens
                                : replay::AlignBy::kPromptAndParams;
  if (o.continuation < 0 || o.continuation > 4096) {
    return cli::report("diff",
                       make_error(ErrorCode::kInvalidArgument, "--tokens must be in [0, 4096]"));
  }
  // A --model given by hand must exist and be a file or a directory, before any work: it is
  // read only at a visible split, and its failure there would be a note, not an error.
  if (!o.model.empty() && o.model != "none") {
    Status st = o.model.rfind("builtin:", 0) == 0
                    ? load_model(o.model).status()
                    : safeio::require_file_or_directory(o.model, "model");
    if (!st.ok()) return cli::report("diff", st.with_context("--model: "));
  }
  // Bundles: A's traces then B's; a bundle of two traces alone gives both.
  Result<cli::TraceInput> in_a = cli::open_trace_input(a);
  if (!in_a.ok()) return cli::report("diff", in_a.status());
  std::vector<std::string> paths = in_a->traces;
  Result<cli::TraceInput> in_b = cli::TraceInput();
  if (!b.empty()) {
    in_b = cli::open_trace_input(b);
    if (!in_b.ok()) return cli::report("diff", in_b.status());
    paths.insert(paths.end(), in_b->traces.begin(), in_b->traces.end());
  }
  if (paths.size() != 2) {
    return cli::report("diff", make_error(ErrorCode::kInvalidArgument,
                                          "expected two traces (A B, or one bundle of two), got " +
                                              std::to_string(paths.size())));
  }
  if (o.model.empty() && !in_a->model.empty()) o.model = in_a->model;
  Result<replay::DiffReport> r = replay::diff_traces(paths[0], paths[1], o);
  if (!r.ok()) return cli::report("diff", r.status());
  std::fputs(replay::render_diff(*r, json, explained).c_str(), stdout);
  return r->identical() ? 0 : 1;
}
