// GEMM y = x·Wᵀ: llmrr (fp32 and bf16 weights) vs OpenBLAS cblas_sgemm on the same fp32
// data, same thread count, one process. Each benchmark reports GFLOP/s (2·M·N·K per call);
// at exit a table of medians and ratios (ours / OpenBLAS) is printed to stdout.
//
//   gemm_bench --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//              --benchmark_report_aggregates_only=true --benchmark_min_time=0.2
//
// Extra flags (before the benchmark ones): --quick (fewer shapes), --ops (also RMSNorm and
// attention).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/sample.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using llmrr::OpKind;
using llmrr::Plan;
using namespace llmrr::kernels;

struct Data {
  std::vector<float> x, w, wt, y;  // wt = Wᵀ ([K, N]), for OpenBLAS's other layout
  PackedWeight f32, bf16;
};

// One data set per shape, built once (packing is not timed).
Data& data_for(int64_t m, int64_t n, int64_t k) {
  static std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<Data>> cache;
  auto& slot = cache[{m, n, k}];
  if (!slot) {
    slot = std::make_unique<Data>();
    std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 7 + k));
    std::normal_distribution<float> nd;
    slot->x.resize(m * k);
    slot->w.resize(n * k);
    slot->y.resize(m * n);
    for (auto& v : slot->x) v = nd(rng);
    for (auto& v : slot->w) v = nd(rng);
    slot->wt.resize(n * k);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) slot->wt[kk * n + j] = slot->w[j * k + kk];
    slot->f32 = PackedWeight::pack(slot->w.data(), n, k, WeightType::kF32);
    slot->bf16 = PackedWeight::pack(slot->w.data(), n, k, WeightType::kBF16);
  }
  return *slot;
}

ThreadPool& pool_for(int threads) {
  static ThreadPool p1(1), p2(2), p4(4);
  return threads <= 1 ? p1 : threads == 2 ? p2 : p4;
}

void set_flops(benchmark::State& st, int64_t m, int64_t n, int64_t k) {
  st.counters["GFLOPS"] =
      benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ours(benchmark::State& st, WeightType wt) {
  const int64_t m = st.range(0), n = st.range(1), k = st.range(2);
  const int threads = static_cast<int>(st.range(3));
  Data& d = data_for(m, n, k);
  const PackedWeight& w = wt == WeightType::kF32 ? d.f32 : d.bf16;
  Plan plan;
  plan.op = OpKind::kGemm;
  ThreadPool& pool = pool_for(threads);
  for (auto _ : st) {
    gemm(d.x.data(), k, m, w, d.y.data(), n, plan, pool);
    benchmark::ClobberMemory();
  }
  set_flops(st, m, n, k);
}

void BM_openblas(benchmark::State& st) {
  const int64_t m = st.range(0), n = st.range(1), k = st.range(2);
  openblas_set_num_threads(static_cast<int>(st.range(3)));
  Data& d = data_for(m, n, k);
  // y[m,n] = x[m,k] · W[n,k]ᵀ, row-major: the same product on the same fp32 data.
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, d.x.data(), static_cast<int>(k), d.w.data(),
                static_cast<int>(k), 0.0f, d.y.data(), static_cast<int>(n));
    benchmark::ClobberMemory();
  }
  set_flops(st, m, n, k);
}

// OpenBLAS given Wᵀ ([K, N] row-major, no transpose): the same product, the layout OpenBLAS
// may prefer; and, for M = 1, sgemv. The table's "best OpenBLAS" is the fastest of these.
void BM_openblas_kn(benchmark::State& st) {
  const int64_t m = st.range(0), n = st.range(1), k = st.range(2);
  openblas_set_num_threads(static_cast<int>(st.range(3)));
  Data& d = data_for(m, n, k);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, d.x.data(), static_cast<int>(k), d.wt.data(),
                static_cast<int>(n), 0.0f, d.y.data(), static_cast<int>(n));
    benchmark::ClobberMemory();
  }
  set_flops(st, m, n, k);
}

void BM_openblas_gemv(benchmark::State& st) {
  const int64_t m = st.range(0), n = st.range(1), k = st.range(2);
  openblas_set_num_threads(static_cast<int>(st.range(3)));
  Data& d = data_for(m, n, k);
  for (auto _ : st) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(k), 1.0f,
                d.w.data(), static_cast<int>(k), d.x.data(), 1, 0.0f, d.y.data(), 1);
    benchmark::ClobberMemory();
  }
  set_flops(st, m, n, k);
}

// --- other kernels (--ops) ---------------------------------------------------------------

void BM_rmsnorm(benchmark::State& st) {
  const int64_t rows = st.range(0), dim = st.range(1);
  std::vector<float> x(rows * dim, 0.5f), w(dim, 1.0f), y(rows * dim);
  Plan plan;
  plan.op = OpKind::kRmsNorm;
  plan.splits = static_cast<uint32_t>(st.range(2));
  for (auto _ : st) {
    rmsnorm(x.data(), dim, rows, dim, w.data(), 1e-5f, y.data(), dim, plan, pool_for(1));
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(st.iterations() * rows * dim * 8);
}

// Decode attention: `rows` sequences of `len` positions, 32 heads / 8 KV heads, head_dim 128.
void BM_attention_decode(benchmark::State& st) {
  const int32_t rows = static_cast<int32_t>(st.range(0)), len = static_cast<int32_t>(st.range(1));
  const AttnShape shape{32, 8, 128, 1.0f / std::sqrt(128.0f)};
  const int32_t bs = 16;
  const int64_t per_pos = static_cast<int64_t>(shape.kv_heads) * shape.head_dim;
  std::vector<float> k(static_cast<size_t>(len) * per_pos, 0.01f), v(k.size(), 0.02f);
  std::vector<const float*> kb, vb;
  for (int32_t b = 0; b < (len + bs - 1) / bs; ++b) {
    kb.push_back(k.data() + b * bs * per_pos);
    vb.push_back(v.data() + b * bs * per_pos);
  }
  KvSeqView view{kb.data(), vb.data(), bs};
  std::vector<float> q(rows * 32 * 128, 0.1f), out(q.size());
  std::vector<AttnRow> rs(rows);
  for (int32_t i = 0; i < rows; ++i)
    rs[i] = {q.data() + i * 4096, out.data() + i * 4096, &view, len - 1, len - 1};
  Plan plan;
  plan.op = OpKind::kAttention;
  plan.splits = static_cast<uint32_t>(st.range(2));
  for (auto _ : st) {
    attention(rs, shape, plan, pool_for(1));
    benchmark::ClobberMemory();
  }
  // Bytes of K and V read per call.
  st.SetBytesProcessed(st.iterations() * rows * static_cast<int64_t>(len) * per_pos * 8);
}

// Sampling from a SmolLM2-sized vocabulary (49152) at T = 0.8, with and without top-k.
void BM_sample(benchmark::State& st) {
  const int64_t vocab = st.range(0);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(vocab);
  for (auto& v : logits) v = nd(rng);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = static_cast<int32_t>(st.range(1));
  p.top_p = 0.95f;
  int64_t pos = 0;
  for (auto _ : st) benchmark::DoNotOptimize(sample(logits.data(), vocab, p, 0, pos++));
}

// --- table of medians ---------------------------------------------------------------------

class TableReporter : public benchmark::ConsoleReporter {
 public:
  TableReporter() : ConsoleReporter(OO_Tabular) {}  // no colour codes: output goes to files
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      auto it = r.counters.find("GFLOPS");
      if (it == r.counters.end()) continue;
      // Non-aggregate runs (no repetitions) also count; a median overrides them.
      const std::string name = r.run_name.str();
      if (r.run_type == Run::RT_Aggregate || !medians_.count(name))
        medians_[name] = it->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    struct Row {
      long t, m, n, k;
      std::string args;
    };
    std::vector<Row> rows;
    for (const auto& [name, gf] : medians_) {
      if (name.rfind("openblas/", 0) != 0) continue;
      Row r;
      r.args = name.substr(std::strlen("openblas/"));
      if (std::sscanf(r.args.c_str(), "%ld/%ld/%ld/%ld", &r.m, &r.n, &r.k, &r.t) != 4) continue;
      rows.push_back(r);
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return std::tie(a.t, a.m, a.n, a.k) < std::tie(b.t, b.m, b.n, b.k);
    });
    std::printf(
        "\n| threads | M | N | K | OpenBLAS sgemm | best OpenBLAS | ours fp32 | ratio | ratio vs "
        "best | ours bf16 | ratio |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
      const double ob = value("openblas/" + r.args);
      double best = ob;
      for (const char* alt : {"openblas_kn/", "openblas_gemv/"}) {
        const double v = value(alt + r.args);
        if (v == v && v > best) best = v;
      }
      const double f = value("ours_f32/" + r.args), b = value("ours_bf16/" + r.args);
      std::printf("| %ld | %ld | %ld | %ld | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f | %.2f |\n",
                  r.t, r.m, r.n, r.k, ob, best, f, f / ob, f / best, b, b / ob);
    }
    std::fflush(stdout);
  }

 private:
  double value(const std::string& name) const {
    auto it = medians_.find(name);
    return it == medians_.end() ? std::nan("") : it->second;
  }
  std::map<std::string, double> medians_;
};

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS's idle threads spin (sched_yield) for a while after each call and would steal
  // a core from whatever runs next; make them sleep at once. The variable is read when the
  // library loads, so set it and start again.
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr) {
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    execv("/proc/self/exe", argv);
  }
  bool quick = false, ops = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--ops") == 0) {
      ops = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rargc = static_cast<int>(rest.size());
  std::vector<std::vector<int64_t>> shapes;
  const std::vector<int64_t> decode_m =
      quick ? std::vector<int64_t>{1, 64} : std::vector<int64_t>{1, 4, 16, 64};
  const std::vector<std::pair<int64_t, int64_t>> nk =
      quick ? std::vector<std::pair<int64_t, int64_t>>{{4096, 4096}}
            : std::vector<std::pair<int64_t, int64_t>>{
                  {1024, 1024}, {4096, 1024}, {1024, 4096}, {4096, 4096}};
  for (int64_t m : decode_m)
    for (auto [n, k] : nk) shapes.push_back({m, n, k});
  for (int64_t m : quick ? std::vector<int64_t>{256} : std::vector<int64_t>{256, 512}) {
    shapes.push_back({m, 1024, 1024});
    shapes.push_back({m, 4096, 4096});
  }
  for (int64_t threads : {1, 2}) {
    for (const auto& s : shapes) {
      const std::vector<int64_t> args = {s[0], s[1], s[2], threads};
      benchmark::RegisterBenchmark("openblas", BM_openblas)->Args(args)->UseRealTime();
      benchmark::RegisterBenchmark("openblas_kn", BM_openblas_kn)->Args(args)->UseRealTime();
      if (s[0] == 1) {
        benchmark::RegisterBenchmark("openblas_gemv", BM_openblas_gemv)->Args(args)->UseRealTime();
      }
      benchmark::RegisterBenchmark("ours_f32", BM_ours, WeightType::kF32)
          ->Args(args)
          ->UseRealTime();
      benchmark::RegisterBenchmark("ours_bf16", BM_ours, WeightType::kBF16)
          ->Args(args)
          ->UseRealTime();
    }
  }
  if (ops) {
    for (int64_t splits : {1, 4}) {
      benchmark::RegisterBenchmark("rmsnorm", BM_rmsnorm)->Args({64, 4096, splits});
      benchmark::RegisterBenchmark("attention_decode", BM_attention_decode)
          ->Args({8, 1024, splits});
    }
    for (int64_t top_k : {0, 40}) {
      benchmark::RegisterBenchmark("sample", BM_sample)->Args({49152, top_k});
    }
  }
  benchmark::Initialize(&rargc, rest.data());
  std::printf("isa: %s\n", isa_name(active_isa()));
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
