// Recorder overhead: the same engine workload with and without a TraceRecorder attached,
// side by side in one process (repetitions interleaved, the order rotating), reported as
// medians and ratios: record off, record on (the default pipeline: steps completed off the
// engine's thread, by the recorder's thread or the engine's idle pool workers, which the
// bench lends as `llmrr record` does) and record on inline (everything on the engine's
// thread, as before the pipeline); then the trace's bytes per generated token for each
// record kind.
//
//   recorder_bench [--models builtin:tiny-moe,smollm2] [--reps 5] [--load 8]
//                  [--max-tokens 32] [--threads 2] [--capture none|layers|all]
//                  [--logits topk|full] [--zstd-level 1] [--chunk-kib N] [--dir /tmp]
//                  [--keep DIR]  (keep the last recorded trace of each model in DIR)
//                  [--summary-bits 23]  (mantissa bits of the row summaries, format 1.3)
//
// "smollm2" names the cached SmolLM2-135M (tools/setup/smollm2); it is skipped with a note
// when absent. Throughput = tokens generated / wall time of engine->run() plus the
// recorder's close() (the last chunk's compression and the footer are part of the cost).
// Engine creation (weight packing) is outside the timing.
#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/format/trace_reader.h"
#include "llmrr/kernels/isa.h"
#include "llmrr/recorder/trace_recorder.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/load.h"
#include "llmrr/runtime/model.h"

namespace {

using namespace llmrr;

struct Args {
  std::vector<std::string> models = {"builtin:tiny-moe", "smollm2"};
  int reps = 5;
  int load = 8;
  int max_tokens = 32;
  int threads = 2;
  std::string capture = "layers";
  std::string logits = "topk";
  int zstd_level = 1;
  int chunk_kib = 0;  // 0 = the writer's default step-chunk target
  std::string dir = "/tmp";
  std::string keep;       // keep the last recorded traces of each model in this directory
  int summary_bits = 23;  // WriterOptions::summary_bits of the column-coded modes
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

std::vector<RequestSpec> workload(const LoadedModel& m, const Args& a) {
  RequestSpec t;
  t.id = 0;
  t.label = "target";
  t.max_tokens = a.max_tokens;
  const std::string text = "The quick brown fox jumps over the lazy dog";
  if (m.tokenizer) {
    t.prompt = m.tokenizer->encode(text);
  } else {
    for (unsigned char c : text) t.prompt.push_back(c % m.config.vocab);
  }
  std::vector<RequestSpec> r = {t};
  LoadOptions lo;
  lo.count = a.load;
  lo.seed = 1;
  lo.vocab = m.config.vocab;
  lo.max_positions = m.config.max_positions;
  lo.min_new = a.max_tokens / 2;
  lo.max_new = a.max_tokens;
  lo.max_arrival = 4;
  if (m.config.vocab <= 258) {
    lo.token_lo = 32;
    lo.token_hi = 127;
  }
  for (const RequestSpec& q : make_load_requests(lo)) r.push_back(q);
  return r;
}

struct RunResult {
  double seconds = 0;
  double cpu_seconds = 0;       // process CPU time (all threads)
  double close_seconds = 0;     // the recorder's close() (last chunk, footer)
  double callback_seconds = 0;  // time inside the recorder's callbacks (engine thread)
  std::map<std::string, double> by_callback;
  int64_t tokens = 0;
  int64_t steps = 0;         // steps the recorder appended
  int64_t inline_steps = 0;  // of which the engine's thread completed (nobody took them in time)
  int64_t idle_steps = 0;    // of which the engine's idle pool workers completed
  std::vector<std::vector<int32_t>> outputs;
};

double cpu_now() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Forwards to the recorder and adds up the time spent in it on the engine's thread.
class Timed : public Observer {
 public:
  explicit Timed(Observer* inner) : in_(inner) {}
  double seconds = 0;
  std::map<std::string, double> by_callback;
  bool wants_rows(SiteId s) override {
    return time("wants_rows", [&] { return in_->wants_rows(s); });
  }
  void on_arrival(int64_t st, const RequestSpec& r) override {
    time("on_arrival", [&] { return (in_->on_arrival(st, r), 0); });
  }
  void on_step(const StepInfo& s) override {
    time("on_step", [&] { return (in_->on_step(s), 0); });
  }
  void on_plan(int64_t st, SiteId s, const Plan& p) override {
    time("on_plan", [&] { return (in_->on_plan(st, s, p), 0); });
  }
  void on_rows(const RowsView& v) override {
    time("on_rows", [&] { return (in_->on_rows(v), 0); });
  }
  void on_routing(const RoutingView& v) override {
    time("on_routing", [&] { return (in_->on_routing(v), 0); });
  }
  void on_logits(const LogitsView& v) override {
    time("on_logits", [&] { return (in_->on_logits(v), 0); });
  }
  void on_token(const TokenEvent& t) override {
    time("on_token", [&] { return (in_->on_token(t), 0); });
  }
  void on_finish(const RequestFinish& f) override {
    time("on_finish", [&] { return (in_->on_finish(f), 0); });
  }
  void on_step_end(int64_t st) override {
    time("on_step_end", [&] { return (in_->on_step_end(st), 0); });
  }
  // On a pool worker's thread: not the engine's time.
  bool on_idle(const kernels::JobSignal& s) override { return in_->on_idle(s); }

 private:
  template <typename F>
  auto time(const char* what, F&& f) -> decltype(f()) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = f();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += dt;
    by_callback[what] += dt;
    return r;
  }
  Observer* in_;
};

// One run; `trace_path` empty = no recorder. `background`: the recorder completes steps on
// its own thread (the default) or inline on the engine's thread.
RunResult run_once(const LoadedModel& m, const Args& a, const std::vector<RequestSpec>& reqs,
                   const std::string& trace_path, bool timed = false, bool background = true,
                   bool columns = true) {
  RunResult res;
  EngineConfig cfg;
  cfg.threads = a.threads;
  auto e = Engine::create(m, cfg, make_production_policy());
  if (!e.ok()) {
    std::fprintf(stderr, "engine: %s\n", e.status().to_string().c_str());
    std::exit(3);
  }
  for (const RequestSpec& r : reqs) {
    Status st = (*e)->add_request(r);
    if (!st.ok()) {
      std::fprintf(stderr, "request: %s\n", st.to_string().c_str());
      std::exit(3);
    }
  }
  std::unique_ptr<TraceRecorder> rec;
  if (!trace_path.empty()) {
    RecorderOptions o;
    o.capture = a.capture == "none"  ? trace::CaptureLevel::kNone
                : a.capture == "all" ? trace::CaptureLevel::kAll
                                     : trace::CaptureLevel::kLayers;
    o.logits = a.logits == "full" ? trace::LogitsMode::kFull : trace::LogitsMode::kTopK;
    o.writer.zstd_level = a.zstd_level;
    if (a.chunk_kib > 0) o.writer.chunk_target_bytes = static_cast<size_t>(a.chunk_kib) << 10;
    o.background = background;
    o.writer.column_chunks = columns;
    if (columns) o.writer.summary_bits = a.summary_bits;
    trace::RunHeader h = base_run_header();
    h.model.name = m.identity;
    h.engine.threads = a.threads;  // the recorder plans its thread by the cores left free
    auto r = TraceRecorder::open(trace_path, h, o);
    if (!r.ok()) {
      std::fprintf(stderr, "recorder: %s\n", r.status().to_string().c_str());
      std::exit(3);
    }
    rec = std::move(r).value();
  }
  std::unique_ptr<Timed> timer;
  if (rec && timed) {
    timer = std::make_unique<Timed>(rec.get());
    (*e)->add_observer(timer.get(), true);
  } else if (rec) {
    (*e)->add_observer(rec.get(), true);
  }
  const double c0 = cpu_now();
  auto t0 = std::chrono::steady_clock::now();
  Status st = (*e)->run();
  auto t1 = std::chrono::steady_clock::now();
  if (timer) (*e)->remove_observer(timer.get());
  if (rec) (*e)->remove_observer(rec.get());
  Status closed = rec ? rec->close() : Status::Ok();
  res.close_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.cpu_seconds = cpu_now() - c0;
  if (timer) {
    res.callback_seconds = timer->seconds;
    res.by_callback = timer->by_callback;
  }
  if (!st.ok() || !closed.ok()) {
    std::fprintf(stderr, "run: %s %s\n", st.to_string().c_str(), closed.to_string().c_str());
    std::exit(3);
  }
  if (rec) {
    res.steps = rec->stats().steps;
    res.inline_steps = rec->stats().inline_steps;
    res.idle_steps = rec->stats().idle_steps;
  }
  res.tokens = (*e)->stats().generated;
  for (const RequestSpec& r : reqs) res.outputs.push_back((*e)->request(r.id)->generated);
  return res;
}

// Bytes per generated token by record kind. Raw: the FlatBuffer bytes the footer counts per
// kind. Stored: estimated at the step chunks' ratio (stored over Σ raw record bytes: a
// column-coded chunk's frame also counts the columns it moved, so the frames' raw size is
// not the denominator); blobs and the whole file as stored.
struct KindSizes {
  std::vector<std::pair<std::string, std::pair<double, double>>> kinds;  // raw, stored
  double raw = 0, stored = 0;
  std::string format;
};

KindSizes bytes_per_kind(const std::string& path, int64_t tokens) {
  KindSizes out;
  auto r = trace::TraceReader::open(path);
  if (!r.ok()) {
    std::printf("  (cannot read %s: %s)\n", path.c_str(), r.status().to_string().c_str());
    return out;
  }
  const trace::TraceReader& t = **r;
  out.format = std::to_string(t.format_major()) + "." + std::to_string(t.format_minor());
  uint64_t chunk_stored = 0, blob_stored = 0, record_raw = 0;
  bool columns = false;
  for (const trace::FrameInfo& f : t.frames()) {
    if (f.kind == trace::FrameKind::kStepChunk) {
      chunk_stored += f.stored_size + trace::kFrameHeaderBytes;
      columns = columns || f.codec == trace::Codec::kColumnZstd;
    } else if (f.kind == trace::FrameKind::kTensorBlob) {
      blob_stored += f.stored_size + trace::kFrameHeaderBytes;
    }
  }
  out.format += columns ? " columns" : " plain chunks";
  for (const trace::KindBytes& k : t.kind_bytes())
    if (k.kind != "run_header" && k.kind != "blobs" && k.kind != "kernels")
      record_raw += k.raw_bytes;
  const double ratio = record_raw ? static_cast<double>(chunk_stored) / record_raw : 1.0;
  for (const trace::KindBytes& k : t.kind_bytes()) {
    const double raw = static_cast<double>(k.raw_bytes) / tokens;
    double stored = raw * ratio;
    if (k.kind == "blobs") stored = static_cast<double>(blob_stored) / tokens;
    if (k.kind == "run_header") stored = raw;  // its own frame; tiny either way
    out.kinds.push_back({k.kind, {raw, stored}});
  }
  out.raw = static_cast<double>(record_raw) / tokens;
  out.stored = static_cast<double>(t.file_size()) / tokens;
  return out;
}

void print_kinds(const KindSizes& a, const KindSizes& b) {
  std::printf(
      "  | record kind | raw B/token | stored B/token (est.), format %s | stored B/token "
      "(est.), format %s |\n",
      a.format.c_str(), b.format.c_str());
  std::printf("  |---|---:|---:|---:|\n");
  for (size_t i = 0; i < a.kinds.size(); ++i) {
    double sb = 0;
    for (const auto& k : b.kinds)
      if (k.first == a.kinds[i].first) sb = k.second.second;
    std::printf("  | %s | %.1f | %.1f | %.1f |\n", a.kinds[i].first.c_str(),
                a.kinds[i].second.first, a.kinds[i].second.second, sb);
  }
  std::printf("  | **whole file** | %.1f | **%.1f** | **%.1f** |\n", a.raw, a.stored, b.stored);
}

int bench_model(const std::string& spec, const Args& a) {
  std::string path = spec;
  if (spec == "smollm2") {
    path = find_smollm2();
    if (path.empty()) {
      std::printf("\n## smollm2: not in %s (tools/setup/smollm2); skipped\n",
                  model_cache_dir().c_str());
      return 0;
    }
  }
  Result<LoadedModel> m = load_model(path);
  if (!m.ok()) {
    std::fprintf(stderr, "%s: %s\n", spec.c_str(), m.status().to_string().c_str());
    return 2;
  }
  const std::vector<RequestSpec> reqs = workload(*m, a);
  const std::string trace_path = a.dir + "/recorder_bench_" + std::to_string(getpid()) + ".trace";

  // Warm-up (page cache, allocator, weight packing paths) of every mode.
  RunResult warm_off = run_once(*m, a, reqs, "");
  RunResult warm_on = run_once(*m, a, reqs, trace_path);
  RunResult warm_inline = run_once(*m, a, reqs, trace_path, false, /*background=*/false);
  RunResult warm_12 = run_once(*m, a, reqs, trace_path + ".1.2", false, true, /*columns=*/false);
  if (warm_off.outputs != warm_on.outputs || warm_off.outputs != warm_inline.outputs ||
      warm_off.outputs != warm_12.outputs) {
    std::fprintf(stderr, "%s: recording changed the generated tokens\n", spec.c_str());
    return 3;
  }
  // Four modes: 0 record off, 1 record on (the recorder's thread), 2 record on, inline,
  // 3 record on with format 1.2's step chunks (plain zstd, no columns; its own file).
  const std::string trace_12 = trace_path + ".1.2";
  constexpr int kModes = 4;
  const char* names[kModes] = {"record off", "record on (pipelined, default)",
                               "record on (inline on the engine thread)",
                               "record on (pipelined, format 1.2 step chunks)"};
  std::vector<double> tps[kModes], cpu[kModes], paired[kModes], close_ms[kModes];
  int64_t steps_on = 0, inline_on = 0, idle_on = 0;
  int64_t tokens = warm_off.tokens;
  for (int rep = 0; rep < a.reps; ++rep) {
    // Rotate the order so that no mode always runs first on a warmer or quieter machine.
    double t[kModes] = {0, 0, 0, 0};
    for (int k = 0; k < kModes; ++k) {
      const int mode = (k + rep) % kModes;
      const std::string path = mode == 0 ? std::string() : mode == 3 ? trace_12 : trace_path;
      RunResult r = run_once(*m, a, reqs, path, false, mode != 2, mode != 3);
      t[mode] = r.tokens / r.seconds;
      tps[mode].push_back(t[mode]);
      cpu[mode].push_back(r.cpu_seconds);
      close_ms[mode].push_back(1e3 * r.close_seconds);
      if (mode == 1) {
        steps_on += r.steps;
        inline_on += r.inline_steps;
        idle_on += r.idle_steps;
      }
    }
    for (int mode = 1; mode < kModes; ++mode) paired[mode].push_back(t[mode] / t[0]);
  }
  std::printf("\n## %s (%s; %d layers, hidden %d, vocab %d)\n", spec.c_str(), m->identity.c_str(),
              m->config.layers, m->config.hidden, m->config.vocab);
  std::printf(
      "workload: target + load %d, max_tokens %d, %d threads, production policy, "
      "%" PRId64 " tokens per run; recorder: capture %s, logits %s, zstd %d, summary bits %d\n",
      a.load, a.max_tokens, a.threads, tokens, a.capture.c_str(), a.logits.c_str(), a.zstd_level,
      a.summary_bits);
  std::printf("  | mode | tokens/s (median of %d) | min | max | on/off (median of pairs) | "
              "process CPU ms | close() ms |\n", a.reps);
  std::printf("  |---|---:|---:|---:|---:|---:|---:|\n");
  for (int mode = 0; mode < kModes; ++mode) {
    const std::vector<double>& v = tps[mode];
    char ratio[32] = "";
    if (mode > 0) std::snprintf(ratio, sizeof ratio, "%.3f", median(paired[mode]));
    std::printf("  | %s | %.1f | %.1f | %.1f | %s | %.0f | %.2f |\n", names[mode], median(v),
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
                ratio, 1e3 * median(cpu[mode]), median(close_ms[mode]));
  }
  const double r_on = median(paired[1]);
  std::printf("  ratio on/off (default recorder): %.3f (medians), %.3f (median of pairs) -> %s "
              "(target >= 0.97)\n",
              median(tps[1]) / median(tps[0]), r_on, r_on >= 0.97 ? "met" : "MISSED");
  std::printf("  record on (pipelined): of %" PRId64 " steps, %" PRId64
              " completed by the engine's idle pool workers, %" PRId64
              " by the engine's thread (nobody had taken them by the next step's end), the "
              "rest by the recorder's thread\n",
              steps_on, idle_on, inline_on);
  RunResult prof = run_once(*m, a, reqs, trace_path, /*timed=*/true);
  std::printf(
      "  where the time goes: %.1f ms per run inside the recorder's callbacks on the "
      "engine thread (%.2f %% of a %.0f ms run)\n",
      1e3 * prof.callback_seconds, 100.0 * prof.callback_seconds / prof.seconds, 1e3 * prof.seconds);
  std::printf("  by callback (ms):");
  for (const auto& [name, secs] : prof.by_callback)
    std::printf(" %s %.2f", name.c_str(), 1e3 * secs);
  std::printf("\n");
  std::printf("bytes per generated token by record kind (last recorded run):\n");
  print_kinds(bytes_per_kind(trace_path, tokens), bytes_per_kind(trace_12, tokens));
  if (!a.keep.empty()) {
    std::string name = spec.substr(spec.find(':') == std::string::npos ? 0 : spec.find(':') + 1);
    for (const auto& [from, to] : {std::pair{trace_path, a.keep + "/" + name + ".trace"},
                                   std::pair{trace_12, a.keep + "/" + name + "-1.2.trace"}}) {
      if (std::rename(from.c_str(), to.c_str()) == 0) {
        std::printf("  trace kept as %s\n", to.c_str());
      } else {
        std::fprintf(stderr, "cannot keep the trace as %s: %s\n", to.c_str(), std::strerror(errno));
      }
    }
  }
  std::remove(trace_12.c_str());
  std::remove(trace_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--models") {
      a.models.clear();
      std::string v = val();
      size_t p = 0;
      while (p <= v.size()) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        if (q > p) a.models.push_back(v.substr(p, q - p));
        p = q + 1;
      }
    } else if (k == "--reps") {
      a.reps = std::atoi(val().c_str());
    } else if (k == "--load") {
      a.load = std::atoi(val().c_str());
    } else if (k == "--max-tokens") {
      a.max_tokens = std::atoi(val().c_str());
    } else if (k == "--threads") {
      a.threads = std::atoi(val().c_str());
    } else if (k == "--capture") {
      a.capture = val();
    } else if (k == "--logits") {
      a.logits = val();
    } else if (k == "--zstd-level") {
      a.zstd_level = std::atoi(val().c_str());
    } else if (k == "--chunk-kib") {
      a.chunk_kib = std::atoi(val().c_str());
    } else if (k == "--dir") {
      a.dir = val();
    } else if (k == "--keep") {
      a.keep = val();
    } else if (k == "--summary-bits") {
      a.summary_bits = std::atoi(val().c_str());
    } else {
      std::fprintf(stderr,
                   "usage: recorder_bench [--models M,M] [--reps N] [--load N] [--max-tokens N] "
                   "[--threads N] [--capture none|layers|all] [--logits topk|full] "
                   "[--zstd-level L] [--chunk-kib N] [--dir DIR] [--keep DIR] "
                   "[--summary-bits B]\n");
      return 2;
    }
  }
  if (a.reps < 1 || a.threads < 1 || a.max_tokens < 1 || a.load < 0) {
    std::fprintf(stderr, "recorder_bench: bad option value\n");
    return 2;
  }
  std::printf("# recorder overhead (isa %s)\n", kernels::isa_name(kernels::active_isa()));
  int rc = 0;
  for (const std::string& m : a.models) rc = std::max(rc, bench_model(m, a));
  return rc;
}
