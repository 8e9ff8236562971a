// llmrr cut TRACE --request ID -o slice.trace: one request's life cut out of a (served) run,
// with every co-request's rows in those steps and the requests alive before it carried in
// (llmrr/format/splice.h). ID is llmrr's request id or the runtime's own (the label: vLLM's
// request id, e.g. the OpenAI "cmpl-..." id; llama.cpp's "llamacpp seq=N").
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "llmrr/format/splice.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/safeio/output.h"

namespace {

using namespace llmrr;

// The request `id` names: a number that is a request id, else a label equal to it, else the
// one label that starts with it.
Result<uint64_t> find_request(const trace::TraceReader& r, const std::string& id) {
  if (!id.empty() && id.find_first_not_of("0123456789") == std::string::npos && id.size() < 20) {
    const uint64_t n = std::stoull(id);
    for (const trace::RequestSummary& q : r.requests())
      if (q.id == n) return n;
  }
  std::vector<const trace::RequestSummary*> exact, prefix;
  for (const trace::RequestSummary& q : r.requests()) {
    if (q.label == id) exact.push_back(&q);
    else if (!id.empty() && q.label.rfind(id, 0) == 0) prefix.push_back(&q);
  }
  if (exact.size() == 1) return exact[0]->id;
  if (exact.empty() && prefix.size() == 1) return prefix[0]->id;
  const std::vector<const trace::RequestSummary*>& many = exact.size() > 1 ? exact : prefix;
  if (many.size() > 1) {
    std::string ids;
    for (size_t i = 0; i < many.size() && i < 8; ++i)
      ids += (i ? ", " : "") + std::to_string(many[i]->id) + " (" + many[i]->label + ")";
    return make_error(ErrorCode::kInvalidArgument,
                      "--request " + id + ": " + std::to_string(many.size()) +
                          " requests match: " + ids + "; give llmrr's id");
  }
  std::string known;
  for (size_t i = 0; i < r.requests().size() && i < 8; ++i) {
    const trace::RequestSummary& q = r.requests()[i];
    known += (i ? ", " : "") + std::to_string(q.id) + (q.label.empty() ? "" : " (" + q.label + ")");
  }
  if (r.requests().size() > 8) known += ", ...";
  return make_error(ErrorCode::kNotFound, "--request " + id + ": " + r.path() +
                                              " has no request with that id or label (it has " +
                                              known + ")");
}

}  // namespace

int run_cut_command(int argc, char** argv) {
  CLI::App app{"Cut one request's life out of a trace: the steps from its arrival to its\n"
               "finish, every request's rows in them, the requests already running carried in.",
               "cut"};
  std::string in, out, id;
  int64_t before = 0, after = 0;
  app.add_option("TRACE", in, "the trace (a served run, a flight recorder's snapshot)")->required();
  app.add_option("--request", id,
                 "llmrr's request id, or the runtime's (its label: vLLM's request id such as the "
                 "OpenAI 'cmpl-...' id, or a unique prefix of it; llama.cpp's 'llamacpp seq=N')")
      ->required();
  app.add_option("-o,--output", out, "the slice to write (a new trace)")->required();
  app.add_option("--before", before, "steps kept before the request's arrival (default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--after", after, "steps kept after its finish (default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  bool whole_lives = false;
  app.add_flag("--whole-lives", whole_lives,
               "start early enough that no request is carried in: back to the arrival of every "
               "request running at the start (a slice llmrr replay --runtime re-executes)");
  app.footer(
      "Examples:\n"
      "  llmrr cut serve.trace --request cmpl-3f2a -o bug.trace\n"
      "  llmrr cut serve.trace --request 'llamacpp seq=2' --whole-lives -o bug.trace\n"
      "  llmrr replay --runtime llamacpp bug.trace --model m.gguf\n"
      "  llmrr pack bug.trace -o bug.llmrr\n"
      "\n"
      "The slice is marked lossy ('a cut: steps A..B of C..D'): requests that arrived before\n"
      "its first step are carried in (RequestRecord carried, with the tokens they had\n"
      "generated), their earlier steps are not in it, and a runtime's replay refuses such a\n"
      "slice (their KV caches were built outside it); --whole-lives starts where none is.\n"
      "Every step kept is whole: every row, plan, logits row and token of every request.\n"
      "\n"
      "Exit codes: 0 written, 2 bad input (no such request, a damaged trace, -o refused),\n"
      "3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (Status st = safeio::check_output_file(out, "-o", {in}); !st.ok()) return cli::report("cut", st);
  Result<std::unique_ptr<trace::TraceReader>> r = trace::TraceReader::open(in);
  if (!r.ok()) return cli::report("cut", r.status());
  Result<uint64_t> request = find_request(**r, id);
  if (!request.ok()) return cli::report("cut", request.status());
  r->reset();
  Result<safeio::OutputFile> f = safeio::OutputFile::create(out, "-o");
  if (!f.ok()) return cli::report("cut", f.status());
  trace::CutSpec spec;
  spec.request = *request;
  spec.before = before;
  spec.after = after;
  spec.whole_lives = whole_lives;
  Result<trace::SpliceReport> rep = trace::cut_request(in, spec, f->write_path());
  if (!rep.ok()) return cli::report("cut", f->in_final_terms(rep.status()));
  if (Status st = f->commit(); !st.ok()) return cli::report("cut", st);
  std::printf("%s: request %llu, steps %lld..%lld (%lld steps), %lld requests (%lld carried in), "
              "%lld tokens\n",
              out.c_str(), static_cast<unsigned long long>(*request),
              static_cast<long long>(rep->first_step), static_cast<long long>(rep->last_step),
              static_cast<long long>(rep->steps), static_cast<long long>(rep->requests),
              static_cast<long long>(rep->carried), static_cast<long long>(rep->tokens));
  return 0;
}
