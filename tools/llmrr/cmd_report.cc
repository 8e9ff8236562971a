// llmrr report A.trace [B.trace] -o report.html: one self-contained HTML page (inline SVG and
// CSS, no network) a maintainer can read in a minute: the runs side by side, where and why
// each common request split, margins, fingerprint distance per layer, batches, plans,
// routing, and the two continuations with the split token highlighted. Bundles (llmrr pack)
// are taken directly; a bundle of two traces gives both.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/trace_input.h"
#include "llmrr/replayer/report.h"
#include "llmrr/runtime/model.h"
#include "llmrr/safeio/input.h"
#include "llmrr/safeio/output.h"

int run_report_command(int argc, char** argv) {
  using namespace llmrr;
  CLI::App app{"Write a self-contained HTML report of one trace or of two runs' split.", "report"};
  std::vector<std::string> inputs;
  std::string out;
  replay::ReportOptions o;
  app.add_option("TRACES", inputs, "one or two traces (or a bundle from llmrr pack)")
      ->required()
      ->expected(1, 2);
  app.add_option("-o,--output", out, "the HTML file to write")->required();
  app.add_option("--model", o.model,
                 "model whose tokenizer decodes token text (default: as recorded; 'none' shows "
                 "ids)");
  app.add_option("--max-requests", o.max_requests, "requests drawn in detail (default 12)")
      ->check(CLI::Range(1, 10000));
  app.add_option("--positions", o.max_positions,
                 "heatmap columns from the first differing position (default 96)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--title", o.title, "page title");
  app.footer(
      "Examples:\n"
      "  llmrr report alone.trace loaded.trace -o split.html\n"
      "  llmrr report run.trace -o run.html\n"
      "  llmrr report bug.llmrr -o bug.html\n"
      "\n"
      "Exit codes: 0 written, 2 bad input, 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  // Before any work: the page is none of the inputs, and is written whole or not at all.
  std::vector<std::string> read = inputs;
  if (!o.model.empty()) read.push_back(o.model);
  if (Status st = safeio::check_output_file(out, "-o", read); !st.ok()) {
    return cli::report("report", st);
  }
  // A --model given by hand must exist (a missing recorded model only costs the token text,
  // as a note on the page).
  if (!o.model.empty() && o.model != "none") {
    Status st = o.model.rfind("builtin:", 0) == 0
                    ? load_model(o.model).status()
                    : safeio::require_file_or_directory(o.model, "model");
    if (!st.ok()) return cli::report("report", st.with_context("--model: "));
  }
  Result<safeio::OutputFile> file = safeio::OutputFile::create(out, "-o");
  if (!file.ok()) return cli::report("report", file.status());
  std::vector<cli::TraceInput> held;
  std::vector<std::string> paths;
  for (const std::string& in : inputs) {
    Result<cli::TraceInput> t = cli::open_trace_input(in);
    if (!t.ok()) return cli::report("report", t.status());
    paths.insert(paths.end(), t->traces.begin(), t->traces.end());
    if (o.model.empty() && !t->model.empty()) o.model = t->model;
    held.push_back(std::move(*t));
  }
  if (paths.size() > 2) {
    return cli::report("report", make_error(ErrorCode::kInvalidArgument,
                                            "expected one or two traces, the inputs hold " +
                                                std::to_string(paths.size())));
  }
  Result<std::string> html = replay::render_report(paths, o);
  if (!html.ok()) return cli::report("report", html.status());
  if (Status st = file->write(*html); !st.ok()) return cli::report("report", st);
  if (Status st = file->commit(); !st.ok()) return cli::report("report", st);
  std::fprintf(stderr, "wrote %s (%s)\n", out.c_str(), cli::human_bytes(html->size()).c_str());
  return 0;
}
