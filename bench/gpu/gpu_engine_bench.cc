// GPU engine throughput: decode tokens/s of SmolLM2 on CUDA for three plan families side by
// side, batch 1 and 16, with the recorder off and on:
//   exact     — the production policy's plans (virtual device) on the exact CUDA kernels;
//   fast      — the production policy on CUDA: cuBLASLt tensor-core GEMMs, algorithm recorded;
//   invariant — the batch-invariant plans on the exact kernels;
//   invariant/gsN — the same with split-K by a fixed N columns of K (`--gemm-split N,...`,
//               the invariant policy's --gemm-split): one row per N given.
// Each configuration runs `--reps` times (interleaved); the table shows medians and the
// ratios to `fast` at the same batch and recording. Exits 0 with a note when there is no GPU
// or no SmolLM2 (tools/setup/smollm2).
//
//   gpu_engine_bench [--reps 3] [--tokens 64] [--model path.gguf] [--gemm-split 64,128,256]
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/recorder/trace_recorder.h"
#include "llmrr/runtime/device.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/load.h"

namespace {

using namespace llmrr;

// The production policy's plans from a wrapper: the CUDA engine asks cuBLASLt only for a
// policy whose gemm_from_device() says so (the production policy itself), so these plans
// run on the exact kernels.
class ExactProduction final : public Policy {
 public:
  ExactProduction() : inner_(make_production_policy()) {}
  std::string name() const override { return "production-exact"; }
  Result<Plan> plan(const PlanQuery& q) override { return inner_->plan(q); }

 private:
  std::unique_ptr<Policy> inner_;
};

std::shared_ptr<Policy> make_policy(const std::string& family, const LoadedModel& m) {
  if (family == "exact") return std::make_shared<ExactProduction>();
  if (family == "fast") return make_production_policy();
  const int32_t gs = family.rfind("invariant/gs", 0) == 0 ? std::atoi(family.c_str() + 12) : 0;
  return make_invariant_policy(default_invariant_split_size(m.config.hidden), gs);
}

// Tokens per second of one run: `batch` greedy requests of `tokens` tokens each.
double run_once(const LoadedModel& m, const std::string& family, int batch, int tokens,
                bool record) {
  EngineConfig c;
  c.device = Device::kCuda;
  c.scheduler.max_seqs = batch;
  c.scheduler.max_batch_tokens = 2048;
  c.weight_type = kernels::WeightType::kBF16;
  c.bf16_activations = true;
  auto e = Engine::create(m, c, make_policy(family, m));
  if (!e.ok()) {
    std::fprintf(stderr, "gpu_engine_bench: %s\n", e.status().to_string().c_str());
    std::exit(1);
  }
  std::unique_ptr<TraceRecorder> rec;
  const std::string path = "/tmp/gpu_engine_bench_" + std::to_string(::getpid()) + ".trace";
  if (record) {
    trace::RunHeader h = base_run_header();
    RecorderOptions ro;
    ro.capture = trace::CaptureLevel::kLayers;
    auto r = TraceRecorder::open(path, h, ro);
    if (!r.ok()) {
      std::fprintf(stderr, "gpu_engine_bench: %s\n", r.status().to_string().c_str());
      std::exit(1);
    }
    rec = std::move(r).value();
    (*e)->add_observer(rec.get());
  }
  for (int i = 0; i < batch; ++i) {
    RequestSpec s;
    s.id = static_cast<RequestId>(i);
    s.prompt = {1, 504, 3458 + i, 314, 260, 5865};  // short prompts: decode dominates
    s.max_tokens = tokens;
    s.stop_at_eos = false;
    (void)(*e)->add_request(s);
  }
  auto t0 = std::chrono::steady_clock::now();
  Status st = (*e)->run();
  if (rec) st = st.ok() ? rec->close() : st;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (record) std::remove(path.c_str());
  if (!st.ok()) {
    std::fprintf(stderr, "gpu_engine_bench: %s\n", st.to_string().c_str());
    std::exit(1);
  }
  return static_cast<double>((*e)->stats().generated) / s;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3, tokens = 64;
  std::string model_path;
  std::vector<std::string> families = {"exact", "fast", "invariant"};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc)
      tokens = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--model") && i + 1 < argc)
      model_path = argv[++i];
    else if (!std::strcmp(argv[i], "--gemm-split") && i + 1 < argc) {
      const std::string list = argv[++i];
      for (size_t a = 0; a < list.size();) {
        size_t z = list.find(',', a);
        if (z == std::string::npos) z = list.size();
        const std::string item = list.substr(a, z - a);
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v <= 0 || !gemm_split_check(v).empty()) {
          std::fprintf(stderr,
                       "gpu_engine_bench: --gemm-split: '%s' is not a positive multiple of 16 "
                       "(at most 1048576)\n",
                       item.c_str());
          return 2;
        }
        families.push_back("invariant/gs" + item);
        a = z + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: gpu_engine_bench [--reps N] [--tokens N] [--model F.gguf] "
                   "[--gemm-split N,...]\n");
      return 2;
    }
  }
  if (Status st = check_device(Device::kCuda); !st.ok()) {
    std::printf("gpu_engine_bench: skipped: %s\n", st.to_string().c_str());
    return 0;
  }
  if (model_path.empty()) {
    const char* dir = std::getenv("LLMRR_MODEL_DIR");
    const char* home = std::getenv("HOME");
    model_path = std::string(dir ? dir : std::string(home ? home : ".") + "/.cache/llmrr/models") +
                 "/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  if (access(model_path.c_str(), R_OK) != 0) {
    std::printf("gpu_engine_bench: skipped: no SmolLM2 at %s (tools/setup/smollm2)\n",
                model_path.c_str());
    return 0;
  }
  auto m = load_model(model_path);
  if (!m.ok()) {
    std::fprintf(stderr, "gpu_engine_bench: %s\n", m.status().to_string().c_str());
    return 1;
  }
  std::map<std::tuple<std::string, int, bool>, std::vector<double>> rates;
  run_once(*m, "fast", 1, 4, false);  // warm-up: context, cuBLASLt, first allocations
  for (int r = 0; r < reps; ++r) {
    for (int batch : {1, 16}) {
      for (bool record : {false, true}) {
        for (const std::string& f : families) {
          rates[{f, batch, record}].push_back(run_once(*m, f, batch, tokens, record));
        }
      }
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("SmolLM2-135M on CUDA, bf16, %d tokens per request, median of %d\n", tokens, reps);
  std::printf("%-16s %5s %6s %12s %10s\n", "family", "batch", "record", "tokens/s", "vs fast");
  for (int batch : {1, 16}) {
    for (bool record : {false, true}) {
      const double fast = median(rates[{"fast", batch, record}]);
      for (const std::string& f : families) {
        const double v = median(rates[{f, batch, record}]);
        std::printf("%-16s %5d %6s %12.1f %9.2fx\n", f.c_str(), batch, record ? "on" : "off", v,
                    v / fast);
      }
    }
  }
  return 0;
}
