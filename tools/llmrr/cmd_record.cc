// llmrr record: run the engine like `llmrr run` and write everything it did into a trace.
// The target's text goes to stdout, a progress bar (when stderr is a terminal) and a closing
// summary to stderr.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/child.h"
#include "cli/cli.h"
#include "engine_options.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/recorder/requests_file.h"
#include "llmrr/safeio/json.h"
#include "llmrr/safeio/output.h"
#include "llmrr/recorder/trace_recorder.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/runtime/engine.h"

namespace {

using namespace llmrr;

constexpr const char* kCmd = "llmrr record";

std::string one_line(const Status& st) {
  std::string msg = st.to_string();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  return msg;
}

int fail(const Status& st) {
  std::fprintf(stderr, "%s: error: %s\n", kCmd, one_line(st).c_str());
  return exit_code_for(st);
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "%s: error: %s (see llmrr record --help)\n", kCmd, what.c_str());
  return 2;
}

// SIGINT, SIGTERM and SIGHUP stop the recording at the next step boundary: the trace is
// closed (lossy, "interrupted by SIGINT") and renamed into place, so a long capture stopped
// with Ctrl-C is kept. The handler is one-shot: a second signal ends the process at once,
// leaving the partial file as a crash would. SIGXFSZ is ignored, so a file-size limit shows
// as a write error (EFBIG) that the recorder reports, not as a silent death.
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) { g_stop_signal = sig; }

void install_stop_handlers() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old;
    // A signal the caller ignores (nohup) stays ignored.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
  std::signal(SIGXFSZ, SIG_IGN);
}

// A one-line progress bar on stderr, redrawn at most ten times a second; erased at the end.
class Progress : public Observer {
 public:
  Progress(int64_t token_budget, const TraceRecorder* rec) : budget_(token_budget), rec_(rec) {}
  void on_token(const TokenEvent&) override { ++tokens_; }
  void on_step_end(int64_t step) override {
    ++steps_;
    auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    draw(step);
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  void draw(int64_t step) {
    const int width = 30;
    double frac = budget_ > 0 ? static_cast<double>(tokens_) / static_cast<double>(budget_) : 0;
    if (frac > 1) frac = 1;
    int fill = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(width, '.');
    double secs = std::chrono::duration<double>(last_ - start_).count();
    std::fprintf(stderr,
                 "\r\033[K[%s] step %" PRId64 ", %" PRId64 "/%" PRId64
                 " tokens, %.0f tok/s, %.1f KiB",
                 bar.c_str(), step, tokens_, budget_, secs > 0 ? tokens_ / secs : 0.0,
                 rec_->stats().file_bytes / 1024.0);
    drawn_ = true;
  }

  int64_t budget_;
  const TraceRecorder* rec_;
  int64_t tokens_ = 0;
  int64_t steps_ = 0;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./:=,+@%") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Mantissa bits kept of the row summaries (l2, max |x|) at the sites: 5 significant digits,
// enough to say how far apart two rows are; the hashes that locate a split stay exact.
// With it SmolLM2's default capture stores under 1 KB per token (bench/README.md).
constexpr int kDefaultSummaryBits = 14;

struct RecordOptions {
  std::string output;
  std::string requests;
  std::string capture = "layers";
  std::string logits = "topk";
  int32_t logits_top_k = 32;
  std::string reference;
  int zstd_level = 1;
  int summary_bits = kDefaultSummaryBits;
  bool plain_chunks = false;
  std::string row_hash = "xxh3-64";
  bool sync = false;
  bool quiet = false;
};

// The run header: everything needed to rebuild the engine from the trace alone. The header's
// typed fields carry what the schema names; extra_config_json carries the rest under the
// keys the replayer reads (dtype, weight_type, bf16_activations, scoring, attn_split,
// overflow, capacity_factor) plus the exact command-line values ("engine_options").
trace::RunHeader make_header(const cli::EngineOptions& o, const RecordOptions& ro,
                             const cli::EngineSetup& s, int argc, char** argv,
                             const std::string& reference_run_id) {
  trace::RunHeader h = base_run_header();
  const LoadedModel& m = s.model;
  const int32_t attn_split =
      o.attn_split > 0 ? o.attn_split : default_invariant_split_size(m.config.hidden);
  // Model, engine config and the extra keys the replayer reads, as the replayer writes them.
  replay::fill_run_header(&h, m, s.config, s.policy_name, s.device,
                          s.policy_kind.fixed_split_sizes() || o.attn_split > 0 ? attn_split : 0,
                          o.seed, o.load, o.gemm_split);
  // fill_run_header's own object, read back under safeio's caps like any embedded JSON.
  Result<nlohmann::json> parsed = safeio::parse_json_object(
      h.extra_config_json, "run header: extra_config_json", ErrorCode::kInternal);
  nlohmann::json x = parsed.ok() ? std::move(parsed).value() : nlohmann::json::object();
  if (!o.dtype.empty()) x["dtype"] = o.dtype;
  const EngineConfig& c = s.config;
  x["chat_template"] = s.chat;
  x["engine_options"] = {
      {"model", o.model},
      {"policy", o.policy},
      {"atomics", o.atomics},
      {"load", o.load},
      {"arrival", o.arrival},
      {"seed", o.seed},
      {"max_tokens", o.max_tokens},
      {"temperature", o.temperature},
      {"top_k", o.top_k},
      {"top_p", o.top_p},
      {"capacity_factor", o.capacity_factor},
      {"overflow", o.overflow},
      {"threads", c.threads},
      {"max_batch_tokens", o.max_batch_tokens},
      {"max_seqs", o.max_seqs},
      {"prefill_chunk", o.prefill_chunk},
      {"kv_block", o.kv_block},
      {"sms", o.sms},
      {"blocks_per_sm", o.blocks_per_sm},
      {"attn_split", o.attn_split},
      {"gemm_split", o.gemm_split},
      {"dtype", o.dtype},
      {"scoring", o.scoring},
      {"chat", o.chat},
      {"raw", o.raw},
  };
  nlohmann::json rec = {{"capture", ro.capture},
                        {"logits", ro.logits},
                        {"logits_top_k", ro.logits_top_k},
                        {"zstd_level", ro.zstd_level},
                        {"summary_bits", ro.plain_chunks ? 23 : ro.summary_bits},
                        {"plain_chunks", ro.plain_chunks}};
  if (!ro.requests.empty()) rec["requests_file"] = ro.requests;
  if (!ro.reference.empty()) {
    rec["reference"] = ro.reference;
    rec["reference_run_id"] = reference_run_id;
  }
  x["recorder"] = rec;
  h.extra_config_json = x.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);

  std::string cmd = "llmrr";
  for (int i = 0; i < argc; ++i) cmd += " " + shell_quote(argv[i]);
  h.command_line = cmd;
  return h;
}

}  // namespace

int run_record_command(int argc, char** argv) {
  CLI::App app{"llmrr record: run the engine (as llmrr run) and record every step into a trace"};
  app.name("record");
  app.footer(
      "\nExamples:\n"
      "  llmrr record --model builtin:tiny-moe --prompt 'The quick brown fox' -o solo.trace\n"
      "  llmrr record --model builtin:tiny-moe --prompt 'The quick brown fox' --load 8 \\\n"
      "      --capture all -o loaded.trace\n"
      "  llmrr record --model builtin:tiny-moe --requests reqs.jsonl --logits full \\\n"
      "      --reference solo.trace -o run.trace\n"
      "\nRequests file: one JSON object a line with id, prompt or prompt_ids, max_tokens,\n"
      "temperature, top_k, top_p, seed, arrival_step, label, stop_at_eos (all but the prompt\n"
      "optional; defaults from the options). The target (stdout) is the request labelled\n"
      "\"target\", else the first.\n"
      "\nA progress bar is drawn on stderr when it is a terminal and stdout is not (stdout then\n"
      "streams the target's text); -q turns it and the summary off.\n"
      "\nThe trace is written to <OUTPUT>.partial-XXXXXX beside -o and renamed over -o when the\n"
      "run ends: -o is replaced only by a whole trace. SIGINT / SIGTERM / SIGHUP stop the run at\n"
      "a step boundary and keep what was recorded (lossy: interrupted; a second signal kills).\n"
      "A trace that cannot be written (disk full, file-size limit) is removed, -o untouched.\n"
      "\nExit: 0 ok, 2 bad input or usage (or the trace could not be written completely),\n"
      "3 internal error, 128+N stopped by signal N (the trace kept).");
  cli::EngineOptions o;
  RecordOptions ro;
  cli::add_engine_options(app, o);
  app.add_option("--requests", ro.requests, "requests file, one JSON object a line (.jsonl)");
  app.add_option("--capture", ro.capture,
                 "row fingerprints: none | layers (one per layer output, default) | all");
  app.add_option("--logits", ro.logits,
                 "topk (top-K ids and values + fingerprint, default) | full (also every "
                 "sampled row as a tensor blob)");
  app.add_option("--logits-top-k", ro.logits_top_k,
                 "logit entries kept per sampled row (default 32; --top-k is the sampler's)");
  app.add_option("--reference", ro.reference,
                 "store full-logit blobs as XOR against this trace's (near-identical runs "
                 "then cost almost nothing)");
  app.add_option("--zstd-level", ro.zstd_level,
                 "trace compression: 0 none, 1 fastest (default; near-random fingerprint bytes "
                 "stored), 2-19 zstd on everything (2: ~10 % smaller)");
  app.add_option("--summary-bits", ro.summary_bits,
                 "mantissa bits kept of each site row's l2 and max |x| (0-23, default 14: ~5 "
                 "significant digits; 23 = exact). Row hashes and the logits stay exact");
  app.add_option("--row-hash", ro.row_hash,
                 "how site rows are hashed: xxh3-64 (default) or mixsum64, the hash llama.cpp's "
                 "and vLLM's recorders use (then `llmrr diff` names the first site where this "
                 "engine and theirs differ)")
      ->check(CLI::IsMember({"xxh3-64", "mixsum64"}));
  app.add_flag("--plain-chunks", ro.plain_chunks,
               "write step chunks as format 1.2 did (no columns, exact summaries): readable by "
               "llmrr builds before format 1.3, ~30 % larger");
  app.add_flag("--sync", ro.sync,
               "fsync the trace before exiting: a failing or full device that reports errors "
               "only at write-back (EIO, ENOSPC) then makes the trace lossy and the exit 2, "
               "instead of going unnoticed");
  app.add_flag("-q,--quiet", ro.quiet, "no progress bar and no summary");
  app.add_option("-o,--output", ro.output, "trace file to write")->required();
  // One line on stderr and exit 2 for a usage error, --help on stdout.
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;

  RecorderOptions rec_opts;
  if (ro.capture == "none") {
    rec_opts.capture = trace::CaptureLevel::kNone;
  } else if (ro.capture == "layers") {
    rec_opts.capture = trace::CaptureLevel::kLayers;
  } else if (ro.capture == "all") {
    rec_opts.capture = trace::CaptureLevel::kAll;
  } else {
    return usage_error("--capture must be none, layers or all (got '" + ro.capture + "')");
  }
  if (ro.logits == "topk") {
    rec_opts.logits = trace::LogitsMode::kTopK;
  } else if (ro.logits == "full") {
    rec_opts.logits = trace::LogitsMode::kFull;
  } else {
    return usage_error("--logits must be topk or full (got '" + ro.logits + "')");
  }
  if (ro.logits_top_k < 0 || ro.logits_top_k > 65536) {
    return usage_error("--logits-top-k must be in [0, 65536]");
  }
  if (ro.zstd_level < 0 || ro.zstd_level > 19)
    return usage_error("--zstd-level must be in [0, 19]");
  rec_opts.top_k = ro.logits_top_k;
  if (ro.summary_bits < 0 || ro.summary_bits > 23)
    return usage_error("--summary-bits must be in [0, 23]");
  rec_opts.writer.zstd_level = ro.zstd_level;
  rec_opts.writer.summary_bits = ro.plain_chunks ? 23 : ro.summary_bits;
  rec_opts.writer.column_chunks = !ro.plain_chunks;
  rec_opts.writer.sync_on_close = ro.sync;
  rec_opts.warn_on_stop = false;  // reported below, with what happens to the trace
  const bool from_file = !ro.requests.empty();
  if (from_file && (!o.prompt.empty() || !o.prompt_ids.empty())) {
    return usage_error("--requests excludes --prompt and --prompt-ids");
  }

  // Before any work: the trace is none of the inputs, not a FIFO or a device, and its
  // directory exists. It is written to a partial file beside it and renamed over it when
  // the run ends (below).
  if (Status st = safeio::check_output_file(ro.output, "-o", {o.model, ro.requests, ro.reference});
      !st.ok()) {
    return fail(st);
  }
  Result<cli::EngineSetup> setup = cli::make_engine_setup(o, /*need_prompt=*/!from_file);
  if (!setup.ok()) return fail(setup.status());
  cli::EngineSetup& s = *setup;

  if (from_file) {
    RequestDefaults d;
    d.max_tokens = o.max_tokens;
    d.sampling.temperature = static_cast<float>(o.temperature);
    d.sampling.top_k = o.top_k;
    d.sampling.top_p = static_cast<float>(o.top_p);
    d.sampling.seed = o.seed;
    RequestsFileContext ctx;
    ctx.model = &s.model.config;
    ctx.tokenizer = s.model.tokenizer.get();
    ctx.tokenizer_note = s.model.tokenizer_note;
    if (o.chat && !(ctx.tokenizer && ctx.tokenizer->has_chat_template())) {
      return fail(make_error(ErrorCode::kInvalidArgument,
                             "--chat: " + s.model.source + " has no chat template"));
    }
    ctx.chat = !o.raw && ctx.tokenizer && ctx.tokenizer->has_chat_template();
    s.chat = ctx.chat;
    Result<std::vector<RequestSpec>> reqs = read_requests_file(ro.requests, d, ctx);
    if (!reqs.ok()) return fail(reqs.status());
    RequestId next_id = 0;
    s.target = reqs->front().id;
    bool labelled = false;
    for (const RequestSpec& r : *reqs) {
      if (r.id >= next_id) next_id = r.id + 1;
      if (!labelled && r.label == "target") {
        s.target = r.id;
        labelled = true;
      }
    }
    // The synthetic load takes the ids after the file's.
    std::vector<RequestSpec> load = cli::make_load_for(s.model, o.load, o.seed, next_id);
    s.requests = std::move(*reqs);
    s.requests.insert(s.requests.end(), load.begin(), load.end());
  }

  std::unique_ptr<trace::TraceReader> reference;
  if (!ro.reference.empty()) {
    Result<std::unique_ptr<trace::TraceReader>> r = trace::TraceReader::open(ro.reference);
    if (!r.ok()) return fail(r.status().with_context("--reference: "));
    reference = std::move(*r);
    rec_opts.reference = reference.get();
    if (rec_opts.logits != trace::LogitsMode::kFull) {
      std::fprintf(stderr,
                   "%s: warning: --reference codes full-logit blobs only; without --logits full "
                   "it changes nothing\n",
                   kCmd);
    }
  }

  Result<std::unique_ptr<Engine>> engine = Engine::create(s.model, s.config, s.policy);
  if (!engine.ok()) return fail(engine.status());
  Engine& e = **engine;
  int64_t token_budget = 0;
  for (const RequestSpec& r : s.requests) {
    Status st = e.add_request(r);
    if (!st.ok()) return fail(st);
    token_budget += r.max_tokens;
  }

  trace::RunHeader header =
      make_header(o, ro, s, argc, argv, reference ? reference->run_header().run_id : "");
  if (ro.row_hash == trace::kFingerprintMixsum) header.engine.fingerprint = trace::kFingerprintMixsum;
  if (s.config.device != Device::kCpu) {
    // The GPU the run is recorded on: a cuBLASLt plan replays bit for bit only on the same
    // GPU model and cuBLASLt version.
    Result<trace::DeviceInfo> dev = describe_device(s.config.device);
    if (!dev.ok()) return fail(dev.status());
    header.device = *dev;
  }
  // The trace goes to "<-o>.partial-XXXXXX" beside -o (a name nobody else has, created
  // O_EXCL) and is renamed over -o when the run ends: an earlier trace at -o stays whole
  // until a new one replaces it; a record killed outright leaves the partial file, which
  // `llmrr verify --allow-incomplete` reads.
  install_stop_handlers();
  Result<safeio::OutputFile> partial =
      safeio::OutputFile::create(ro.output, "-o", safeio::OutputFile::Kind::kPartial);
  Result<std::unique_ptr<TraceRecorder>> rec =
      partial.ok() ? TraceRecorder::open(partial->write_path(), header, rec_opts)
                   : Result<std::unique_ptr<TraceRecorder>>(partial.status());
  if (!rec.ok()) {
    // The recorder never costs the user the run: the text is generated and printed as
    // without recording, and the exit status (2) says no trace was written.
    if (partial.ok()) partial->discard();
    std::fprintf(stderr, "%s: error: %s\n%s: no trace is written; the run goes on without it\n",
                 kCmd, one_line(rec.status()).c_str(), kCmd);
    cli::TextStream stream(s.model.tokenizer.get(), s.target, e.model_config().eos);
    e.add_observer(&stream);
    Status run = e.run();
    std::printf("\n");
    std::fflush(stdout);
    if (!run.ok()) return fail(run);
    return exit_code_for(rec.status());
  }
  TraceRecorder& recorder = **rec;
  const std::string partial_path = partial->write_path();
  if (!ro.quiet) {
    std::fprintf(stderr, "%s: recording into %s (renamed to %s when the run ends)\n", kCmd,
                 partial_path.c_str(), ro.output.c_str());
  }

  // The engine's idle pool workers complete the recorder's steps in the engine's serial
  // phases (when the engine's threads fill the cores); removed below before the recorder
  // goes.
  e.add_observer(&recorder, /*lend_idle_threads=*/true);
  cli::TextStream stream(s.model.tokenizer.get(), s.target, e.model_config().eos);
  e.add_observer(&stream);
  std::unique_ptr<Progress> progress;
  // With stdout on a terminal too, the streaming text is the progress (a bar on the same
  // screen would break its lines).
  if (!ro.quiet && isatty(STDERR_FILENO) && !isatty(STDOUT_FILENO)) {
    progress = std::make_unique<Progress>(token_budget, &recorder);
    e.add_observer(progress.get());
  }

  // Step by step: a stop signal ends the run at a step boundary. A recording error does not
  // (the recorder never costs the user the run): the text is generated to its end, and the
  // trace that could not be written is removed below.
  Status run = Status::Ok();
  while (g_stop_signal == 0) {
    Result<bool> more = e.step();
    if (!more.ok()) {
      run = more.status();
      break;
    }
    if (!*more) break;
  }
  const int stopped_by = g_stop_signal;
  if (stopped_by != 0) recorder.mark_lossy(std::string("interrupted by ") + cli::signal_name(stopped_by));
  e.remove_observer(&recorder);
  std::printf("\n");
  std::fflush(stdout);
  if (progress) progress->finish();
  Status closed = recorder.close();
  if (!closed.ok()) {
    // Not written whole (disk full, a file-size limit, an I/O error): the partial file goes
    // and -o keeps what it held.
    partial->discard();
    std::fprintf(stderr,
                 "%s: error: %s\n%s: the trace could not be written; no trace is kept and %s "
                 "is left as it was\n",
                 kCmd, one_line(closed).c_str(), kCmd, ro.output.c_str());
    return exit_code_for(closed);
  }
  if (!run.ok()) {
    // The engine broke off: the trace holds every step it finished, kept under the partial
    // name (it is not the run that was asked for, so it does not replace -o).
    const std::string kept = partial->keep();
    std::fprintf(stderr, "%s: the engine stopped; %s holds its first %" PRId64 " steps (%s is left "
                 "as it was)\n", kCmd, kept.c_str(), recorder.stats().steps, ro.output.c_str());
    return fail(run);
  }
  if (Status st = partial->commit(); !st.ok()) {
    std::fprintf(stderr, "%s: error: %s\n%s: no trace is kept and %s is left as it was\n", kCmd,
                 one_line(st).c_str(), kCmd, ro.output.c_str());
    return exit_code_for(st);
  }

  RecorderStats rs = recorder.stats();
  const EngineStats& es = e.stats();
  if (!ro.quiet) {
    int64_t steps = rs.steps, tokens = rs.tokens;
    uint64_t bytes = rs.file_bytes;
    if (auto back = trace::TraceReader::open(ro.output); back.ok()) {
      steps = (*back)->step_count();
      tokens = (*back)->token_count();
      bytes = (*back)->file_size();
    }
    double per_token = tokens > 0 ? static_cast<double>(bytes) / tokens : 0.0;
    std::string extra;
    if (rs.blobs > 0) {
      extra = ", " + std::to_string(rs.blobs) + " logit blobs";
      if (rs.xor_blobs > 0) extra += " (" + std::to_string(rs.xor_blobs) + " XOR-coded)";
    }
    std::fprintf(stderr,
                 "%s: %s%s: %" PRId64 " steps, %" PRId64 " tokens, %zu requests, %" PRId64
                 " fingerprints%s | %.1f KiB, %.1f bytes/token | %s, capture %s, logits %s | "
                 "%.1f tokens/s\n",
                 kCmd, ro.output.c_str(), stopped_by != 0 ? " (INTERRUPTED)" : "", steps, tokens,
                 s.requests.size(), rs.fingerprints, extra.c_str(), bytes / 1024.0, per_token,
                 s.policy_name.c_str(), ro.capture.c_str(), ro.logits.c_str(),
                 es.seconds > 0 ? es.generated / es.seconds : 0.0);
  }
  if (stopped_by != 0) {
    // Stopped on request: the trace is kept (lossy: "interrupted by SIGINT"), and the exit
    // status is the shell's for that signal.
    std::fprintf(stderr,
                 "%s: interrupted by %s; %s holds the %" PRId64 " steps recorded before it "
                 "(marked lossy: interrupted)\n",
                 kCmd, cli::signal_name(stopped_by), ro.output.c_str(), rs.steps);
    return 128 + stopped_by;
  }
  return 0;
}
