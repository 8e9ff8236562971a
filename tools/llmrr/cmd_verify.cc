// llmrr verify TRACE: checks everything — every frame's checksum, the FlatBuffers Verifier,
// the semantics across the trace — and that the trace was closed. Exit 0, or 2 with the
// first problem on one line (offset, frame, what was expected, what was found).
#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "cli/trace_input.h"
#include "llmrr/format/trace_reader.h"

int run_verify_command(int argc, char** argv) {
  using namespace llmrr;
  using namespace llmrr::trace;
  CLI::App app{
      "Check a trace: frame checksums, FlatBuffers verification, semantics (steps\n"
      "increasing, references in range, sizes consistent) and completeness.",
      "verify"};
  std::string path;
  bool allow_incomplete = false, quiet = false;
  app.add_option("TRACE", path, "trace file (.trace), or a bundle (llmrr pack): its entries and traces")->required();
  app.add_flag("--allow-incomplete", allow_incomplete,
               "accept a trace without footer (recording killed) when its whole frames are valid");
  app.add_flag("-q,--quiet", quiet, "print nothing when the trace is valid");
  app.footer(
      "Examples:\n"
      "  llmrr verify run.trace && echo ok\n"
      "  llmrr verify --allow-incomplete crashed.trace\n"
      "\n"
      "Exit codes: 0 valid, 2 invalid or unreadable (the first problem is printed), 3 internal "
      "error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (replay::is_pack_file(path)) {
    // A bundle: every entry's hash, the manifest and the end record, then each trace in it.
    Result<cli::TraceInput> input = cli::open_trace_input(path);
    if (!input.ok()) return cli::report("verify", input.status());
    for (const std::string& t : input->traces) {
      auto r = TraceReader::open(t);
      Status st = r.ok() ? (*r)->verify() : r.status();
      if (!st.ok()) return cli::report("verify", st.with_context(path + " (a bundle): "));
    }
    if (!quiet) {
      std::printf("%s: ok: a bundle (llmrr pack) of %zu trace(s), every entry's hash and every "
                  "trace verified\n",
                  path.c_str(), input->traces.size());
    }
    return 0;
  }
  auto r = TraceReader::open(path);
  if (!r.ok()) return cli::report("verify", r.status());
  TraceReader& rd = **r;
  VerifyReport rep;
  Status st = rd.verify(&rep);
  if (!st.ok()) return cli::report("verify", st);
  if (!rd.has_footer() && !allow_incomplete) {
    std::string why =
        path +
        ": incomplete trace: expected a footer and trailer at the end, found none (the writer "
        "was killed or ran out of space); ";
    // The scan's findings say where the file ends: the torn frame, if any.
    // (Matched after the path, which may itself contain any word.)
    std::string detail;
    for (const std::string& w : rd.warnings()) {
      const std::string body = w.rfind(path, 0) == 0 ? w.substr(path.size()) : w;
      if (detail.empty() &&
          (body.find("torn") != std::string::npos || body.find("trailer") != std::string::npos))
        detail = w;
    }
    if (detail.empty() && !rd.warnings().empty()) detail = rd.warnings().back();
    why += detail.empty() ? "the frames before the end are valid" : detail;
    why += " (llmrr verify --allow-incomplete accepts it)";
    return cli::report("verify", make_error(ErrorCode::kTruncated, why));
  }
  if (!quiet) {
    for (const std::string& w : rd.warnings()) cli::warn("verify", w);
    std::printf(
        "%s: ok: format %u.%u, %s%s, %lld frames, %lld steps, %lld tokens, %lld requests, %lld "
        "blobs%s, "
        "raw %s, stored %s\n",
        path.c_str(), rd.format_major(), rd.format_minor(),
        rd.complete() ? "complete" : "incomplete",
        rd.lossy() ? (", lossy: " + rd.lossy_reason()).c_str() : "",
        static_cast<long long>(rep.frames), static_cast<long long>(rep.steps),
        static_cast<long long>(rep.tokens), static_cast<long long>(rep.requests),
        static_cast<long long>(rep.blobs),
        rep.kernel_records ? (", " + std::to_string(rep.kernel_records) + " kernel records").c_str()
                           : "",
        cli::human_bytes(rep.raw_bytes).c_str(), cli::human_bytes(rep.stored_bytes).c_str());
  }
  return 0;
}
