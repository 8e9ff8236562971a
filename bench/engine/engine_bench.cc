// Engine throughput (tokens/s), production vs invariant policy side by side:
//   decode  — B requests decoding together, one step = B tokens (steady state: the engine is
//             rebuilt every 128 steps so sequences stay short);
//   prefill — one prefill of a P-token prompt (score entry: every position's logits),
//             P tokens per iteration.
// A table of medians and the invariant / production ratio is printed at the end. With
// --threads 1 (default) rates are per CPU second of the benchmark thread; with more threads,
// per wall-clock second.
//
//   engine_bench [--threads N] [--smollm2] [--fp32-weights] [google benchmark flags]
// --fp32-weights dequantizes GGUF weights at load (the old path) instead of keeping them
// quantized, to compare the two on the same model.
// e.g. engine_bench --threads 2 --benchmark_repetitions=5
//        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/model.h"

namespace {

using namespace llmrr;

int g_threads = 1;
bool g_keep_quantized = true;

const LoadedModel* model(const std::string& spec) {
  static std::map<std::string, std::unique_ptr<LoadedModel>> cache;
  auto& slot = cache[spec];
  if (!slot) {
    auto m = load_model(spec, ModelLoadOptions{.keep_quantized = g_keep_quantized});
    if (!m.ok()) {
      std::fprintf(stderr, "engine_bench: %s\n", m.status().to_string().c_str());
      return nullptr;
    }
    slot = std::make_unique<LoadedModel>(std::move(m).value());
  }
  return slot.get();
}

std::shared_ptr<Policy> policy(bool invariant, const LoadedModel& m) {
  if (invariant) return make_invariant_policy(default_invariant_split_size(m.config.hidden));
  return make_production_policy();
}

std::unique_ptr<Engine> decode_engine(const LoadedModel& m, bool invariant, int batch) {
  EngineConfig cfg;
  cfg.threads = g_threads;
  cfg.scheduler.max_seqs = batch;
  cfg.scheduler.max_batch_tokens = 1024;
  auto e = std::move(Engine::create(m, cfg, policy(invariant, m))).value();
  for (int i = 0; i < batch; ++i) {
    RequestSpec r;
    r.id = i;
    for (int t = 0; t < 16; ++t) r.prompt.push_back(32 + (i * 7 + t * 13) % 90);
    r.max_tokens = 1 << 20;
    r.max_tokens = std::min<int32_t>(r.max_tokens, m.config.max_positions - 16);
    r.stop_at_eos = false;
    (void)e->add_request(r);
  }
  (void)e->step();  // all prefills (they fit one batch); decoding from here on
  return e;
}

void BM_Decode(benchmark::State& state, std::string spec, bool invariant) {
  const LoadedModel* m = model(spec);
  if (!m) {
    state.SkipWithError("model not available");
    return;
  }
  const int batch = static_cast<int>(state.range(0));
  std::unique_ptr<Engine> e = decode_engine(*m, invariant, batch);
  int steps = 0;
  for (auto _ : state) {
    if (++steps % 128 == 0) {
      state.PauseTiming();
      e = decode_engine(*m, invariant, batch);
      state.ResumeTiming();
    }
    auto more = e->step();
    if (!more.ok() || !*more) {
      state.SkipWithError("engine stopped");
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * batch), benchmark::Counter::kIsRate);
}

void BM_Prefill(benchmark::State& state, std::string spec, bool invariant) {
  const LoadedModel* m = model(spec);
  if (!m) {
    state.SkipWithError("model not available");
    return;
  }
  const int len = static_cast<int>(state.range(0));
  EngineConfig cfg;
  cfg.threads = g_threads;
  auto e = std::move(Engine::create(*m, cfg, policy(invariant, *m))).value();
  std::vector<int32_t> prompt;
  for (int t = 0; t < len; ++t) prompt.push_back(32 + (t * 31) % 90);
  for (auto _ : state) {
    auto l = e->score_prompt(prompt);
    benchmark::DoNotOptimize(l);
  }
  state.SetItemsProcessed(state.iterations() * len);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * len), benchmark::Counter::kIsRate);
}

// Collects tokens/s per benchmark (the median when repeated) for the closing table.
class TableReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const bool agg = r.run_type == Run::RT_Aggregate;
      if (agg && r.aggregate_name != "median") continue;
      auto it = r.counters.find("tokens/s");
      if (it == r.counters.end()) continue;
      std::string name = r.run_name.str();
      const std::string rt = "/real_time";
      if (name.size() > rt.size() && name.compare(name.size() - rt.size(), rt.size(), rt) == 0) {
        name.resize(name.size() - rt.size());
      }
      if (!agg && seen_median_.count(name)) continue;
      if (agg) seen_median_.insert(name);
      rate_[Key{name}] = it->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n| model | workload | production tok/s | invariant tok/s | invariant / production |\n");
    std::printf("|---|---|---:|---:|---:|\n");
    for (const auto& [key, rate] : rate_) {
      const std::string& name = key.name;
      const std::string tag = "/production";
      size_t at = name.find(tag);
      if (at == std::string::npos) continue;
      std::string inv = name.substr(0, at) + "/invariant" + name.substr(at + tag.size());
      auto it = rate_.find(Key{inv});
      if (it == rate_.end()) continue;
      // name: BM_<Kind>/<model>/production/<arg>
      std::string head = name.substr(0, at);
      size_t slash = head.find('/');
      std::string kind = head.substr(3, slash - 3);
      std::string mdl = head.substr(slash + 1);
      std::string arg = name.substr(at + tag.size() + 1);
      std::string what = kind == "Decode" ? "decode, batch " + arg : "prefill, " + arg + " tokens";
      std::printf("| %s | %s | %.0f | %.0f | %.2f |\n", mdl.c_str(), what.c_str(), rate,
                  it->second, it->second / rate);
    }
  }

 private:
  // Ordered by model, then workload, then the numeric argument.
  struct Key {
    std::string name;
    bool operator<(const Key& o) const { return sort_key(name) < sort_key(o.name); }
    static std::tuple<std::string, std::string, long, std::string> sort_key(const std::string& n) {
      size_t a = n.find('/'), b = n.find('/', a + 1), c = n.find('/', b + 1);
      std::string kind = n.substr(0, a), mdl = n.substr(a + 1, b - a - 1);
      long arg = c == std::string::npos ? 0 : std::atol(n.c_str() + c + 1);
      return {mdl, kind, arg, n};
    }
  };
  std::map<Key, double> rate_;
  std::set<std::string> seen_median_;
};

}  // namespace

int main(int argc, char** argv) {
  bool smollm2 = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      g_threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--smollm2") == 0) {
      smollm2 = true;
    } else if (std::strcmp(argv[i], "--fp32-weights") == 0) {
      g_keep_quantized = false;
    } else {
      args.push_back(argv[i]);
    }
  }
  std::vector<std::string> specs = {"builtin:tiny-dense", "builtin:tiny-moe"};
  std::string smol = find_smollm2();
  if (smollm2 && !smol.empty()) specs.push_back(smol);
  for (const std::string& spec : specs) {
    const bool big = spec == smol;
    std::string short_name = big ? "smollm2" : spec.substr(8);
    for (bool inv : {false, true}) {
      const char* pol = inv ? "invariant" : "production";
      auto* d = benchmark::RegisterBenchmark(
          ("BM_Decode/" + short_name + "/" + pol).c_str(),
          [spec, inv](benchmark::State& s) { BM_Decode(s, spec, inv); });
      auto* p = benchmark::RegisterBenchmark(
          ("BM_Prefill/" + short_name + "/" + pol).c_str(),
          [spec, inv](benchmark::State& s) { BM_Prefill(s, spec, inv); });
      d->Unit(benchmark::kMillisecond);
      p->Unit(benchmark::kMillisecond);
      // One thread: rates by CPU time, much less sensitive to a shared machine's load than
      // wall time; with more threads only wall time counts them all.
      if (g_threads > 1) {
        d->UseRealTime();
        p->UseRealTime();
      }
      if (big) {
        d->Arg(1)->Arg(8);
        p->Arg(64);
      } else {
        d->Arg(1)->Arg(8)->Arg(32);
        p->Arg(128)->Arg(512);
      }
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
