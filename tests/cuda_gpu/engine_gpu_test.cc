// The CUDA engine on a GPU: the exact family (invariant policy, forced plans) bit for bit
// against the CPU engine at every site of every step; record on CUDA -> replay on CUDA and on
// the CPU; the production family records cuBLASLt plans that replay on the GPU and that the
// CPU names and stops at. Skips without a device.
#include <gtest/gtest.h>

#include "llmrr/format/trace_reader.h"
#include "llmrr/kernels/cuda_ops.h"
#include "llmrr/replayer/replay.h"
#include "llmrr/runtime/device.h"
#include "llmrr/runtime/memory_trace.h"
#include "../common/test_paths.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

#define SKIP_WITHOUT_GPU()                              \
  if (!kernels::cuda::available())                      \
  GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount " \
                  "reports none)"

struct EngineRun {
  std::unique_ptr<MemoryTrace> mem;
  Status status;
};

EngineRun run_on(Device device, const LoadedModel& m, const std::string& policy, int32_t load) {
  EngineRun out;
  MemoryTrace::Options mo;
  mo.row_hashes = true;
  out.mem = std::make_unique<MemoryTrace>(mo);
  EngineConfig c;
  c.device = device;
  c.threads = 2;
  std::shared_ptr<Policy> p = policy == "invariant"
                                  ? std::shared_ptr<Policy>(make_invariant_policy(
                                        default_invariant_split_size(m.config.hidden)))
                                  : std::shared_ptr<Policy>(make_production_policy());
  auto e = Engine::create(m, c, p);
  if (!e.ok()) {
    out.status = e.status();
    return out;
  }
  (*e)->add_observer(out.mem.get());
  for (const RequestSpec& r : rtest::target_and_load(m, "On the device", 8, load)) {
    out.status = (*e)->add_request(r);
    if (!out.status.ok()) return out;
  }
  out.status = (*e)->run();
  return out;
}

void expect_same_run(const MemoryTrace& a, const MemoryTrace& b) {
  ASSERT_EQ(a.row_hashes().size(), b.row_hashes().size());
  auto ia = a.row_hashes().begin();
  auto ib = b.row_hashes().begin();
  for (; ia != a.row_hashes().end(); ++ia, ++ib) {
    ASSERT_EQ(ia->first, ib->first);
    ASSERT_EQ(ia->second, ib->second)
        << "step " << std::get<0>(ia->first) << ", site "
        << site_name(SiteId::unpack(std::get<1>(ia->first))) << ", row " << std::get<2>(ia->first);
  }
  for (const RequestSpec& r : a.arrivals()) EXPECT_EQ(a.tokens(r.id), b.tokens(r.id)) << r.id;
}

TEST(EngineGpu, ExactFamilyMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const char* model : {"tiny-dense", "tiny-llama-bf16"}) {
    const std::string spec = std::string(model) == "tiny-dense"
                                 ? "tiny-dense"
                                 : LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/tiny-llama-bf16";
    const LoadedModel& m = rtest::builtin(spec);
    EngineRun cpu = run_on(Device::kCpu, m, "invariant", 3);
    EngineRun gpu = run_on(Device::kCuda, m, "invariant", 3);
    ASSERT_TRUE(cpu.status.ok()) << cpu.status.to_string();
    ASSERT_TRUE(gpu.status.ok()) << gpu.status.to_string();
    expect_same_run(*cpu.mem, *gpu.mem);
  }
}

TEST(EngineGpu, RecordOnCudaReplayOnCudaAndCpu) {
  SKIP_WITHOUT_GPU();
  const LoadedModel& m = rtest::builtin("tiny-dense");
  for (const char* policy : {"invariant", "production"}) {
    rtest::RunSpec spec;
    spec.policy = policy;
    spec.config.device = Device::kCuda;
    spec.requests = rtest::target_and_load(m, "Recorded on the device", 6, 4);
    rtest::Recorded rec =
        rtest::record(m, spec, rtest::temp_path(std::string("gpu_") + policy + ".trace"));
    ASSERT_TRUE(rec.ok) << policy;
    auto reader = trace::TraceReader::open(rec.path);
    ASSERT_TRUE(reader.ok());
    replay::ReplayOptions o;
    o.device = Device::kCuda;
    Result<replay::ReplayReport> on_gpu = replay::replay_trace(**reader, m, o);
    ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().to_string();
    EXPECT_TRUE(on_gpu->bit_exact()) << replay::format_replay_report(*on_gpu);
    o.device = Device::kCpu;
    Result<replay::ReplayReport> on_cpu = replay::replay_trace(**reader, m, o);
    ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().to_string();
    if (std::string(policy) == "invariant") {
      EXPECT_TRUE(on_cpu->bit_exact()) << replay::format_replay_report(*on_cpu);
    } else {
      EXPECT_FALSE(on_cpu->mismatch) << replay::format_replay_report(*on_cpu);
      ASSERT_TRUE(on_cpu->unreproducible);
      EXPECT_EQ(on_cpu->unreproducible->site, "L0.attn.q");
    }
  }
}

TEST(EngineGpu, MoeModelsAreRefusedClearly) {
  SKIP_WITHOUT_GPU();
  EngineConfig c;
  c.device = Device::kCuda;
  auto e = Engine::create(rtest::builtin("tiny-moe"), c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(e.status().to_string().find("dense models"), std::string::npos);
}

}  // namespace
}  // namespace llmrr
