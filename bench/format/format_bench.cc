// Trace format benchmarks (bench/README.md, "Trace format"):
//   writer throughput at zstd levels 1 and 3 (raw bytes per second of wall time and per
//   CPU-second of the whole process: serialization on the caller's thread plus compression
//   on the writer's thread), reader and verify throughput, and the compression ratio of
//   fp32 / bf16 logit blobs with and without byte-plane shuffle and XOR against a reference
//   that differs in 2 % of its values; and the row fingerprints the recorder makes (xxh3-64
//   and mixsum64 with l2 / max), in floats per second.
//
// Data: a 16-layer MoE-like run, 32 requests decoding in one batch, fingerprints at 12 sites
// per layer for every row, plans at every site (unchanged from step to step, as in steady
// decode), routing per layer, top-32 logits per row; logit blobs of 32000 values drawn from
// a fixed-seed Gaussian with a softmax-like tail of large values (tests/format/sample_records.h).
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <zstd.h>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "sample_records.h"

namespace {

using namespace llmrr;
using namespace llmrr::trace;
using testing::logit_like;
using testing::sample_header;

std::string bench_path(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/llmrr_bench_" + std::to_string(::getpid()) + "_" +
         name + ".trace";
}

double cpu_seconds() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Steady-state decode steps of a 16-layer model with 32 requests in the batch.
std::vector<StepRecord>& decode_steps() {
  static std::vector<StepRecord> steps = [] {
    constexpr int kLayers = 16, kRows = 32, kSitesPerLayer = 12, kSteps = 256, kTopK = 32;
    std::mt19937_64 rng(7);
    std::vector<StepRecord> v;
    for (int s = 0; s < kSteps; ++s) {
      StepRecord st;
      st.step = s;
      for (int r = 0; r < kRows; ++r) {
        if (s == 0) {
          RequestRecord q;
          q.id = static_cast<uint64_t>(r);
          q.prompt.assign(64, 17);
          q.max_tokens = 1000;
          st.arrivals.push_back(q);
        }
        st.segments.push_back(
            {static_cast<uint64_t>(r), 64 + s, 1, 64 + s, SegmentKind::kDecode, true});
      }
      for (int l = 0; l < kLayers; ++l)
        for (int k = 0; k < kSitesPerLayer; ++k) {
          const uint64_t site = testing::site(k + 1, l);
          st.plans.push_back({site, testing::gemm_plan(k % 3 + 1)});
          SiteRows sr;
          sr.site = site;
          sr.cols = 2048;
          for (int r = 0; r < kRows; ++r)
            sr.rows.push_back(
                {rng(), 40.0f + testing::uniform01(rng), 3.0f + testing::uniform01(rng)});
          st.rows.push_back(std::move(sr));
        }
      for (int l = 0; l < kLayers; ++l) {
        Routing ro;
        ro.layer = l;
        ro.rows = kRows;
        ro.k = 2;
        ro.experts_total = 64;
        for (int r = 0; r < 2 * kRows; ++r) {
          const int e = static_cast<int>(rng() % 64);
          ro.chosen.push_back(e);
          ro.experts.push_back(e);
          ro.gates.push_back(0.5f + 0.1f * testing::gaussian(rng));
          ro.outcome.push_back(RouteOutcome::kKept);
        }
        st.routing.push_back(std::move(ro));
      }
      for (int r = 0; r < kRows; ++r) {
        LogitsRecord lr;
        lr.request = static_cast<uint64_t>(r);
        lr.position = 64 + s;
        lr.batch_row = r;
        lr.vocab = 32000;
        float v0 = 20.0f;
        for (int k = 0; k < kTopK; ++k) {
          lr.top_ids.push_back(static_cast<int32_t>(rng() % 32000));
          v0 -= 0.3f * testing::uniform01(rng);
          lr.top_values.push_back(v0);
        }
        lr.full = {rng(), 300.0f, 20.0f};
        lr.margin = lr.top_values[0] - lr.top_values[1];
        st.logits.push_back(std::move(lr));
        st.tokens.push_back(
            {static_cast<uint64_t>(r), 65 + s, static_cast<int32_t>(rng() % 32000), -1.0});
      }
      v.push_back(std::move(st));
    }
    return v;
  }();
  return steps;
}

const std::vector<float>& logits_f32() {
  static const std::vector<float> v = logit_like(32000 * 8, 42);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    out[i] = static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
  }
  return out;
}

// Writes the decode steps `rounds` times over (renumbered; the first round's arrivals only),
// and `blobs` copies of 8 logit rows, to `path`; returns raw frame bytes. One writer for the
// whole stream, as a recorder has: buffers reach their steady size once.
constexpr int kRounds = 4;
uint64_t write_trace(const std::string& path, int level, bool steps, int blobs,
                     int rounds = kRounds) {
  WriterOptions opt;
  opt.zstd_level = level;
  auto w = TraceWriter::open(path, opt);
  if (!w.ok()) std::abort();
  (void)(*w)->append_run_header(sample_header());
  std::vector<StepRecord>& v = decode_steps();
  const std::vector<RequestRecord> arrivals = v[0].arrivals;
  for (int round = 0; steps && round < rounds; ++round) {
    v[0].arrivals = round == 0 ? arrivals : std::vector<RequestRecord>{};
    for (size_t i = 0; i < v.size(); ++i) {
      v[i].step = static_cast<int64_t>(round * v.size() + i);
      if (!(*w)->append_step(v[i]).ok()) std::abort();
    }
  }
  v[0].arrivals = arrivals;
  const std::vector<float>& l = logits_f32();
  for (int b = 0; b < blobs; ++b) {
    BlobSpec spec;
    spec.shape = {8, 32000};
    spec.data = l.data();
    spec.bytes = l.size() * 4;
    if (!(*w)->append_blob(spec).ok()) std::abort();
  }
  if (!(*w)->close().ok()) std::abort();
  auto r = TraceReader::open(path);
  return (*r)->raw_bytes();
}

void BM_WriteSteps(benchmark::State& state) {
  const int level = static_cast<int>(state.range(0));
  const std::string path = bench_path("write_steps");
  decode_steps();
  uint64_t raw = 0, file = 0;
  double cpu = 0;
  for (auto _ : state) {
    std::remove(path.c_str());  // freeing the last file's pages is not the writer's work
    const double c0 = cpu_seconds();
    raw += write_trace(path, level, true, 0);
    cpu += cpu_seconds() - c0;
  }
  auto r = TraceReader::open(path);
  file = (*r)->file_size();
  state.SetBytesProcessed(static_cast<int64_t>(raw));
  state.counters["raw_MB_per_cpu_s"] = static_cast<double>(raw) / 1e6 / cpu;
  state.counters["ratio"] = static_cast<double>((*r)->raw_bytes()) / static_cast<double>(file);
  state.counters["bytes_per_token"] =
      static_cast<double>(file) / static_cast<double>((*r)->token_count());
  std::remove(path.c_str());
}
BENCHMARK(BM_WriteSteps)->Arg(1)->Arg(2)->Arg(3)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_WriteLogitBlobs(benchmark::State& state) {
  const int level = static_cast<int>(state.range(0));
  const std::string path = bench_path("write_blobs");
  logits_f32();
  uint64_t raw = 0;
  double cpu = 0;
  for (auto _ : state) {
    std::remove(path.c_str());
    const double c0 = cpu_seconds();
    raw += write_trace(path, level, false, 32);
    cpu += cpu_seconds() - c0;
  }
  state.SetBytesProcessed(static_cast<int64_t>(raw));
  state.counters["raw_MB_per_cpu_s"] = static_cast<double>(raw) / 1e6 / cpu;
  std::remove(path.c_str());
}
BENCHMARK(BM_WriteLogitBlobs)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond)->UseRealTime();

// Plain zstd alone over whole step chunks (one frame per chunk at `level`): what the writer
// would pay for compression without coding fingerprint spans apart.
void BM_ZstdOnChunks(benchmark::State& state) {
  const int level = static_cast<int>(state.range(0));
  const std::string path = bench_path("zstd_chunks");
  write_trace(path, level, true, 0);
  auto r = TraceReader::open(path);
  std::vector<std::vector<uint8_t>> chunks;
  for (size_t i = 0; i < (*r)->frames().size(); ++i)
    if ((*r)->frames()[i].kind == FrameKind::kStepChunk) {
      std::vector<uint8_t> raw;
      if (!(*r)->read_frame_payload(static_cast<int64_t>(i), &raw).ok()) std::abort();
      chunks.push_back(std::move(raw));
    }
  std::remove(path.c_str());
  ZSTD_CCtx* ctx = ZSTD_createCCtx();
  std::vector<uint8_t> out(ZSTD_compressBound(kMaxFrameRawBytes));
  uint64_t raw = 0;
  for (auto _ : state)
    for (const auto& c : chunks) {
      benchmark::DoNotOptimize(
          ZSTD_compressCCtx(ctx, out.data(), out.size(), c.data(), c.size(), level));
      raw += c.size();
    }
  ZSTD_freeCCtx(ctx);
  state.SetBytesProcessed(static_cast<int64_t>(raw));
}
BENCHMARK(BM_ZstdOnChunks)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond);

// Reader and verify read a trace written once at level 1.
const std::string& level1_trace() {
  static const std::string path = [] {
    std::string p = bench_path("read");
    write_trace(p, 1, true, 8);
    return p;
  }();
  return path;
}

void BM_ReadSteps(benchmark::State& state) {
  const std::string& path = level1_trace();
  uint64_t raw = 0;
  StepRecord s;
  for (auto _ : state) {
    auto r = TraceReader::open(path);
    StepCursor c = (*r)->steps();
    int64_t n = 0;
    for (;;) {
      auto more = c.next(&s);
      if (!more.ok()) std::abort();
      if (!*more) break;
      ++n;
    }
    benchmark::DoNotOptimize(n);
    for (const FrameInfo& f : (*r)->frames())
      if (f.kind == FrameKind::kStepChunk) raw += f.raw_size;
  }
  state.SetBytesProcessed(static_cast<int64_t>(raw));
}
BENCHMARK(BM_ReadSteps)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ReadBlobs(benchmark::State& state) {
  const std::string& path = level1_trace();
  uint64_t raw = 0;
  std::vector<uint8_t> out;
  for (auto _ : state) {
    auto r = TraceReader::open(path);
    for (int64_t b = 0; b < (*r)->blob_count(); ++b) {
      if (!(*r)->read_blob(b, &out).ok()) std::abort();
      raw += out.size();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(raw));
}
BENCHMARK(BM_ReadBlobs)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Verify(benchmark::State& state) {
  const std::string& path = level1_trace();
  uint64_t raw = 0;
  for (auto _ : state) {
    auto r = TraceReader::open(path);
    VerifyReport rep;
    if (!(*r)->verify(&rep).ok()) std::abort();
    raw += rep.raw_bytes;
  }
  state.SetBytesProcessed(static_cast<int64_t>(raw));
}
BENCHMARK(BM_Verify)->Unit(benchmark::kMillisecond)->UseRealTime();

// Row fingerprints as the recorder makes them, one call per row over rows x cols floats (a
// decode step's 8 rows, a prefill step's 280; 576 and 1536 are SmolLM2's hidden and MLP
// widths). Arg 0: which fingerprint (0 fingerprint_row: xxh3-64 + l2/max, the engine's;
// 1 mixsum64 alone; 2 fingerprint_row_mixsum64: mixsum64 + l2/max in one pass, what
// llmrr.vllm / llmrr.torch rows get). Counters: floats per second.
void BM_FingerprintRows(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  std::vector<float> data(static_cast<size_t>(rows * cols));
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (float& v : data) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int32_t>(x >> 32)) * 1e-9f;
  }
  uint64_t sink = 0;
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = data.data() + r * cols;
      if (kind == 0) {
        sink += fingerprint_row(row, cols).hash;
      } else if (kind == 1) {
        sink += mixsum64(row, cols);
      } else {
        sink += fingerprint_row_mixsum64(row, cols).hash;
      }
    }
    benchmark::DoNotOptimize(sink);
  }
  state.counters["floats/s"] = benchmark::Counter(
      static_cast<double>(rows * cols) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FingerprintRows)
    ->ArgNames({"kind", "rows", "cols"})
    ->ArgsProduct({{0, 1, 2}, {8, 280}, {576, 1536}})
    ->Unit(benchmark::kMicrosecond);

// Compression ratio of one 8 x 32000 logit blob. Args: dtype (0 f32, 1 bf16), shuffle,
// XOR against a reference differing in 2 % of the values, zstd level.
void BM_BlobRatio(benchmark::State& state) {
  const bool bf16 = state.range(0) == 1, shuffle = state.range(1) == 1,
             xor_ref = state.range(2) == 1;
  const int level = static_cast<int>(state.range(3));
  const std::vector<float>& ref = logits_f32();
  std::vector<float> cur = ref;
  if (xor_ref)
    for (size_t i = 0; i < cur.size(); i += 50)
      cur[i] = cur[i] * 1.0009765625f + 0.001f;  // 2 % differ
  std::vector<uint16_t> ref16 = to_bf16(ref), cur16 = to_bf16(cur);
  const void* data = bf16 ? static_cast<const void*>(cur16.data()) : cur.data();
  const void* refp = bf16 ? static_cast<const void*>(ref16.data()) : ref.data();
  const size_t bytes = cur.size() * (bf16 ? 2 : 4);
  const std::string path = bench_path("ratio");
  double ratio = 0;
  uint64_t raw = 0;
  for (auto _ : state) {
    WriterOptions opt;
    opt.zstd_level = level;
    opt.shuffle_blobs = shuffle;
    auto w = TraceWriter::open(path, opt);
    (void)(*w)->append_run_header(sample_header());
    BlobSpec spec;
    spec.dtype = bf16 ? DType::kBF16 : DType::kF32;
    spec.shape = {8, 32000};
    spec.data = data;
    spec.bytes = bytes;
    if (xor_ref) {
      spec.xor_reference = refp;
      spec.reference_trace = "ref";
      spec.reference_blob = 0;
    }
    if (!(*w)->append_blob(spec).ok()) std::abort();
    if (!(*w)->close().ok()) std::abort();
    auto r = TraceReader::open(path);
    const FrameInfo& f = (*r)->frames()[1];
    ratio = static_cast<double>(bytes) / static_cast<double>(f.stored_size + kFrameHeaderBytes);
    raw += bytes;
  }
  state.SetBytesProcessed(static_cast<int64_t>(raw));
  state.counters["ratio"] = ratio;
  std::remove(path.c_str());
}
BENCHMARK(BM_BlobRatio)
    ->ArgNames({"bf16", "shuffle", "xor", "level"})
    ->Args({0, 0, 0, 1})
    ->Args({0, 1, 0, 1})
    ->Args({1, 0, 0, 1})
    ->Args({1, 1, 0, 1})
    ->Args({0, 1, 1, 1})
    ->Args({1, 1, 1, 1})
    ->Args({0, 1, 0, 3})
    ->Args({1, 1, 0, 3})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The writer on recorded steps: LLMRR_BENCH_TRACE=run.trace (e.g. from `llmrr record
// --capture all`) re-writes that trace's steps, once per repetition, at `level`.
void BM_WriteRecordedSteps(benchmark::State& state, std::vector<StepRecord>* steps,
                           RunHeader header) {
  const int level = static_cast<int>(state.range(0));
  const std::string path = bench_path("write_recorded");
  uint64_t raw = 0;
  double cpu = 0;
  for (auto _ : state) {
    std::remove(path.c_str());
    const double c0 = cpu_seconds();
    WriterOptions opt;
    opt.zstd_level = level;
    auto w = TraceWriter::open(path, opt);
    if (!w.ok() || !(*w)->append_run_header(header).ok()) std::abort();
    for (const StepRecord& s : *steps)
      if (!(*w)->append_step(s).ok()) std::abort();
    if (!(*w)->close().ok()) std::abort();
    cpu += cpu_seconds() - c0;
    raw += (*TraceReader::open(path))->raw_bytes();
  }
  auto r = TraceReader::open(path);
  state.SetBytesProcessed(static_cast<int64_t>(raw));
  state.counters["raw_MB_per_cpu_s"] = static_cast<double>(raw) / 1e6 / cpu;
  state.counters["ratio"] =
      static_cast<double>((*r)->raw_bytes()) / static_cast<double>((*r)->file_size());
  state.counters["bytes_per_token"] =
      static_cast<double>((*r)->file_size()) / static_cast<double>((*r)->token_count());
  std::remove(path.c_str());
}

void register_recorded_trace() {
  const char* path = std::getenv("LLMRR_BENCH_TRACE");
  if (path == nullptr || *path == '\0') return;
  auto r = TraceReader::open(path);
  if (!r.ok()) {
    std::fprintf(stderr, "LLMRR_BENCH_TRACE: %s\n", r.status().to_string().c_str());
    std::exit(2);
  }
  static std::vector<StepRecord> steps;
  for (auto c = (*r)->steps();;) {
    StepRecord s;
    auto more = c.next(&s);
    if (!more.ok()) {
      std::fprintf(stderr, "LLMRR_BENCH_TRACE: %s\n", more.status().to_string().c_str());
      std::exit(2);
    }
    if (!*more) break;
    steps.push_back(std::move(s));
  }
  benchmark::RegisterBenchmark("BM_WriteRecordedSteps", BM_WriteRecordedSteps, &steps,
                               (*r)->run_header())
      ->Arg(1)
      ->Arg(2)
      ->Arg(3)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_recorded_trace();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::remove(level1_trace().c_str());
  return 0;
}
