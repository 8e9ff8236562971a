// llmrr join PART... -o run.trace: consecutive parts of one run (a flight recorder's ring
// segments, <trace>.ring/seg-*.trace, left by a recording that was killed) joined into one
// trace (llmrr/format/splice.h).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "llmrr/format/splice.h"
#include "llmrr/safeio/output.h"

int run_join_command(int argc, char** argv) {
  using namespace llmrr;
  CLI::App app{"Join consecutive parts of one run (a flight recorder's ring segments) into one\n"
               "trace.",
               "join"};
  std::vector<std::string> parts;
  std::string out;
  app.add_option("PART", parts, "the parts, in recording order (seg-000000.trace, ...)")
      ->required();
  app.add_option("-o,--output", out, "the trace to write")->required();
  app.footer(
      "Examples:\n"
      "  llmrr join serve.trace.partial-x1Yz.ring/seg-*.trace -o serve.trace\n"
      "\n"
      "The parts must share one run id; a request carried into a later part that an earlier\n"
      "one holds is kept once. A part without a footer (the recording was killed) is read to\n"
      "its last whole frame, and the trace says so (lossy).\n"
      "\n"
      "Exit codes: 0 written, 2 bad input (parts of different runs, a damaged part, -o\n"
      "refused), 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (Status st = safeio::check_output_file(out, "-o", parts); !st.ok()) return cli::report("join", st);
  Result<safeio::OutputFile> f = safeio::OutputFile::create(out, "-o");
  if (!f.ok()) return cli::report("join", f.status());
  Result<trace::SpliceReport> rep = trace::join_traces(parts, f->write_path(), "");
  if (!rep.ok()) return cli::report("join", f->in_final_terms(rep.status()));
  if (Status st = f->commit(); !st.ok()) return cli::report("join", st);
  std::printf("%s: %zu parts, steps %lld..%lld (%lld steps), %lld requests (%lld carried in)%s\n",
              out.c_str(), parts.size(), static_cast<long long>(rep->first_step),
              static_cast<long long>(rep->last_step), static_cast<long long>(rep->steps),
              static_cast<long long>(rep->requests), static_cast<long long>(rep->carried),
              rep->incomplete_input ? "; a part had no footer (recovered)" : "");
  return 0;
}
