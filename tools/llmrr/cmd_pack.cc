// llmrr pack A.trace [B.trace] [--redact --keep R] [--with-model] -o bug.llmrr: one file to
// attach to a bug report (the bundle layout is in replayer/bundle/include/llmrr/replayer/pack.h). With --redact only the
// kept requests stay whole; every other request is reduced to its shape, and the kept one
// still replays bit for bit from the bundle (`llmrr replay bug.llmrr`).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "llmrr/replayer/pack.h"

int run_pack_command(int argc, char** argv) {
  using namespace llmrr;
  CLI::App app{"Bundle traces (optionally redacted to the requests you keep) into one file.",
               "pack"};
  replay::PackOptions o;
  std::string out;
  std::vector<uint64_t> keep;
  bool quiet = false;
  app.add_option("TRACES", o.traces, "trace files (.trace), one or two")->required()->expected(1, 2);
  app.add_option("-o,--output", out, "the bundle to write (e.g. bug.llmrr)")->required();
  app.add_flag("--redact", o.redact,
               "keep only the --keep requests whole: every other request loses its token ids, "
               "text, fingerprints, logits, tokens and routing; its lengths, arrival and finish "
               "stay");
  app.add_option("--keep", keep, "with --redact: a request id that stays whole (repeatable)");
  app.add_flag("--with-model", o.with_model,
               "add the model files (a .gguf file or a safetensors directory; builtin models need "
               "none)");
  app.add_option("--model", o.model, "the model to bundle (default: as the first trace records)");
  app.add_option("--level", o.zstd_level, "zstd level of the bundle (default 6)")
      ->check(CLI::Range(1, 19));
  app.add_flag("-q,--quiet", quiet, "print nothing on success");
  app.footer(
      "Examples:\n"
      "  llmrr pack alone.trace loaded.trace -o bug.llmrr\n"
      "  llmrr pack loaded.trace --redact --keep 0 -o bug.llmrr   # share request 0 only\n"
      "  llmrr replay bug.llmrr                                   # replays request 0 alone\n"
      "  llmrr pack run.trace --with-model -o bug.llmrr\n"
      "\n"
      "Exit codes: 0 written, 2 bad input (unreadable trace, unknown --keep id), 3 internal "
      "error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  for (uint64_t k : keep) o.keep.push_back(static_cast<RequestId>(k));
  Result<replay::PackSummary> s = replay::write_pack(out, o);
  if (!s.ok()) return cli::report("pack", s.status());
  if (!quiet) {
    for (const replay::PackEntry& e : s->entries) {
      std::printf("  %-40s %s\n", e.name.c_str(), cli::human_bytes(e.size).c_str());
    }
    for (size_t i = 0; i < s->redactions.size(); ++i) {
      const replay::RedactReport& r = s->redactions[i];
      std::printf(
          "redacted %s: kept %zu request(s) whole, %zu reduced to their shape (%lld prompt "
          "ids, %lld row fingerprints, %lld logits, %lld tokens, %lld blobs removed)\n",
          o.traces[i].c_str(), r.kept.size(), r.redacted.size(),
          static_cast<long long>(r.prompt_tokens_removed),
          static_cast<long long>(r.row_fingerprints_removed),
          static_cast<long long>(r.logits_removed), static_cast<long long>(r.tokens_removed),
          static_cast<long long>(r.blobs_removed));
    }
    std::printf("wrote %s (%s)\n", out.c_str(), cli::human_bytes(s->file_bytes).c_str());
  }
  return 0;
}
