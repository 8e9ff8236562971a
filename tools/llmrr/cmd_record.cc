// llmrr record: run the engine like `llmrr run` and write everything it did into a trace.
// The target's text goes to stdout, a progress bar (when stderr is a terminal) and a closing
// summary to stderr.
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

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

struct RecordOptions {
  std::string output;
  std::string requests;
  std::string capture = "layers";
  std::string logits = "topk";
  int32_t logits_top_k = 32;
  std::string reference;
  int zstd_level = 1;
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
                          o.policy == "invariant" || o.attn_split > 0 ? attn_split : 0, o.seed,
                          o.load, o.gemm_split);
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
                        {"zstd_level", ro.zstd_level}};
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
      "\nExit: 0 ok, 2 bad input or usage (or the trace could not be written completely),\n"
      "3 internal error.");
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
  rec_opts.writer.zstd_level = ro.zstd_level;
  rec_opts.writer.sync_on_close = ro.sync;
  const bool from_file = !ro.requests.empty();
  if (from_file && (!o.prompt.empty() || !o.prompt_ids.empty())) {
    return usage_error("--requests excludes --prompt and --prompt-ids");
  }

  // Before any work: the trace is none of the inputs and its directory exists (a recording
  // is written in place, not renamed, so that a killed run leaves a readable prefix).
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
  if (s.config.device != Device::kCpu) {
    // The GPU the run is recorded on: a cuBLASLt plan replays bit for bit only on the same
    // GPU model and cuBLASLt version.
    Result<trace::DeviceInfo> dev = describe_device(s.config.device);
    if (!dev.ok()) return fail(dev.status());
    header.device = *dev;
  }
  Result<std::unique_ptr<TraceRecorder>> rec = TraceRecorder::open(ro.output, header, rec_opts);
  if (!rec.ok()) {
    // The recorder never costs the user the run: the text is generated and printed as
    // without recording, and the exit status (2) says no trace was written.
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

  Status run = e.run();
  e.remove_observer(&recorder);
  std::printf("\n");
  std::fflush(stdout);
  if (progress) progress->finish();
  Status closed = recorder.close();
  if (!run.ok()) {
    // The trace holds every step the engine finished; say so next to the engine's error.
    std::fprintf(stderr, "%s: the engine stopped; %s holds its first %" PRId64 " steps\n", kCmd,
                 ro.output.c_str(), recorder.stats().steps);
    return fail(run);
  }

  RecorderStats rs = recorder.stats();
  const EngineStats& es = e.stats();
  // What the file holds (after an I/O error, less than what was recorded; nothing when the
  // error came before the run header reached it: the writer then removed the file).
  std::unique_ptr<trace::TraceReader> back;
  if (!closed.ok() || !ro.quiet) {
    if (auto r = trace::TraceReader::open(ro.output); r.ok()) back = std::move(*r);
  }
  if (!closed.ok() && !back) {
    std::fprintf(stderr,
                 "%s: no trace is written (the error came before its run header reached the "
                 "file); the generated text is complete\n",
                 kCmd);
    return fail(closed);
  }
  if (!ro.quiet) {
    int64_t steps = rs.steps, tokens = rs.tokens;
    uint64_t bytes = rs.file_bytes;
    if (back) {
      steps = back->step_count();
      tokens = back->token_count();
      bytes = back->file_size();
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
                 kCmd, ro.output.c_str(), closed.ok() ? "" : " (LOSSY)", steps, tokens,
                 s.requests.size(), rs.fingerprints, extra.c_str(), bytes / 1024.0, per_token,
                 s.policy_name.c_str(), ro.capture.c_str(), ro.logits.c_str(),
                 es.seconds > 0 ? es.generated / es.seconds : 0.0);
  }
  if (!closed.ok()) {
    std::fprintf(stderr,
                 "%s: recording stopped early; %s is lossy (it holds the steps written before "
                 "the error); the generated text is complete\n",
                 kCmd, ro.output.c_str());
    return fail(closed);
  }
  return 0;
}
