// llmrr replay TRACE: re-execute a recorded run from the trace and the model alone, with the
// recorded schedule, plans (arrival orders included) and routing forced, and check every
// fingerprint, logit record and token. Exit 0 bit-exact, 1 at the first mismatch (printed
// with step, request, position, site, expected vs found), 2 bad input (wrong model: the
// weight hashes differ), 3 internal error.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli.h"
#include "cli/trace_input.h"
#include "runtimes/adapter.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/replay.h"
#include "llmrr/safeio/output.h"

int run_replay_command(int argc, char** argv) {
  using namespace llmrr;
  // `--runtime NAME`: re-executed in that runtime (tools/llmrr/runtimes/NAME).
  if (int rc = 0; runtimes::dispatch("replay", argc, argv, &rc)) return rc;
  CLI::App app{"Replay a trace bit for bit and check everything it recorded.", "replay"};
  std::string path;
  replay::ReplayOptions o;
  int64_t request = -1;
  std::vector<std::string> materialize;
  bool json = false;
  std::string device = "cpu";
  app.add_option("TRACE", path, "trace file (.trace) or bundle (llmrr pack)")->required();
  app.add_option("--device", device,
                 "cpu | cuda (default cpu). A trace recorded on CUDA with the exact or invariant "
                 "policy replays bit for bit on the CPU; a production (cuBLASLt) one is checked "
                 "up to its first tensor-core GEMM (exit 2, the sites are named)");
  app.add_option("--model", o.model,
                 "model (builtin:<name>, safetensors directory, .gguf); default: as recorded");
  app.add_option("--threads", o.threads,
                 "CPU threads (never changes a result; default: cores, "
                 "at most 8)");
  app.add_option("--request", request,
                 "replay this request alone: only its rows are computed, from the recorded plans "
                 "and routing (no other request's prompt is needed)");
  app.add_option("--materialize", materialize,
                 "regenerate full tensors as .npy: SITE@STEP (every row of the site at that step, "
                 "e.g. L3.moe.combine@17) or logits@STEP (full logits of the sampled rows); "
                 "repeatable");
  app.add_option("-o,--output", o.out_dir, "directory for --materialize files");
  app.add_flag("--check-routing", o.check_routing,
               "recompute routing instead of forcing it; report the first token whose experts "
               "differ");
  app.add_flag("--json", json, "print the report as one JSON object");
  app.footer(
      "Examples:\n"
      "  llmrr replay run.trace\n"
      "  LLMRR_ISA=avx2 llmrr replay run.trace --threads 1\n"
      "  llmrr replay run.trace --request 0\n"
      "  llmrr replay bug.llmrr              # a bundle: its model, its kept request\n"
      "  llmrr replay run.trace --materialize L1.moe.combine@3 --materialize logits@3 -o out/\n"
      "  llmrr replay gpu.trace --device cpu      # a trace recorded with --device cuda\n"
      "  llmrr replay --runtime vllm run.trace --model DIR       # a vLLM trace, in vLLM\n"
      "  llmrr replay --runtime vllm run.trace --model DIR --alone 3   # a counterfactual\n"
      "  (--runtime vllm: python -m llmrr.campaigns.vllm_replay replay --help lists its options)\n"
      "\n"
      "Exit codes: 0 bit-exact, 1 mismatch, 2 bad input (unreadable trace, wrong model, a "
      "device this build or machine lacks, or plans this device cannot run: then everything "
      "before the first of them was checked), 3 internal error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (app.count("--request") > 0) {
    if (request < 0) {
      return cli::report("replay", make_error(ErrorCode::kInvalidArgument,
                                              "--request " + std::to_string(request) +
                                                  ": expected a request id (an integer >= 0)"));
    }
    o.request = static_cast<RequestId>(request);
  }
  Result<cli::TraceInput> input = cli::open_trace_input(path);
  if (!input.ok()) return cli::report("replay", input.status());
  if (Status st = cli::use_bundle_for_replay(*input, &path, &o.model, &o.request); !st.ok()) {
    return cli::report("replay", st);
  }
  if (std::optional<Device> d = parse_device(device)) {
    o.device = *d;
  } else {
    return cli::report("replay", make_error(ErrorCode::kInvalidArgument,
                                            "--device must be cpu or cuda (got '" + device + "')"));
  }
  for (const std::string& m : materialize) {
    Result<replay::MaterializeSpec> spec = replay::parse_materialize(m);
    if (!spec.ok()) return cli::report("replay", spec.status());
    o.materialize.push_back(*spec);
  }
  if (!materialize.empty() && o.out_dir.empty()) {
    return cli::report("replay",
                       make_error(ErrorCode::kInvalidArgument, "--materialize needs -o DIR"));
  }
  // The --materialize files are written into a staging directory and land in -o DIR only
  // when the replay wrote every one of them: a failure midway leaves nothing behind.
  std::optional<safeio::OutputDir> out_dir;
  if (!materialize.empty()) {
    Result<safeio::OutputDir> d = safeio::OutputDir::create(o.out_dir, "-o", {path, o.model});
    if (!d.ok()) return cli::report("replay", d.status());
    out_dir = std::move(*d);
  }
  if (materialize.empty() && !o.out_dir.empty()) {
    cli::warn("replay", "-o without --materialize: nothing will be written");
  }
  if (o.threads < 0) {
    return cli::report("replay", make_error(ErrorCode::kInvalidArgument, "--threads must be >= 0"));
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  if (tty && !json) {
    o.progress = [](int64_t step, int64_t done) {
      if (done % 16 == 0)
        std::fprintf(stderr, "\rreplaying step %lld", static_cast<long long>(step));
    };
  }
  // A trace killed before its first step chunk holds nothing to re-execute: saying
  // "bit-exact" of it would claim a check that did not happen.
  if (auto rd = trace::TraceReader::open(path); rd.ok() && (*rd)->step_count() == 0) {
    return cli::report("replay", make_error(ErrorCode::kSemantic,
                                            path + ": holds no whole step (the recording "
                                                   "stopped before its first step chunk): "
                                                   "nothing to replay"));
  }
  if (out_dir) o.out_dir = out_dir->write_path();
  Result<replay::ReplayReport> r = replay::replay_trace(path, o);
  if (tty && !json) std::fprintf(stderr, "\r\033[K");
  if (!r.ok()) {
    return cli::report("replay", out_dir ? out_dir->in_final_terms(r.status()) : r.status());
  }
  // Every file asked for was written (a replay that stopped at a difference or at a plan
  // this device cannot run writes none: the staging directory goes).
  if (out_dir && !r->written.empty()) {
    for (std::string& w : r->written) w = out_dir->final_path(w);
    if (Status st = out_dir->commit(); !st.ok()) return cli::report("replay", st);
  }
  if (json) {
    std::printf("%s\n", replay::replay_report_json(*r).c_str());
  } else {
    std::fputs(replay::format_replay_report(*r).c_str(), stdout);
  }
  if (r->mismatch || r->routing_mismatch) return 1;
  return r->unreproducible ? 2 : 0;
}
