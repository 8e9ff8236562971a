// GPU -> CPU replay, on the CPU: a trace that says it was recorded on CUDA replays on the
// CPU bit for bit when its plans are exact; one whose plans name cuBLASLt algorithms (the
// production family on CUDA) is checked up to the first of them, and the report names the
// sites the CPU cannot reproduce. The traces are real CPU recordings whose header (and, for
// the fast family, GEMM plans from some step on) are rewritten as a CUDA recording has them.
#include <gtest/gtest.h>

#include <string>

#include "llmrr/format/trace_reader.h"
#include "llmrr/kernels/cublaslt_plan.h"
#include "llmrr/recorder/convert.h"
#include "llmrr/replayer/replay.h"
#include "llmrr/runtime/device.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::builtin;
using rtest::run_command;
using rtest::temp_path;

constexpr int64_t kFirstFastStep = 2;

void as_cuda_header(trace::RunHeader& h) {
  h.device.kind = "cuda";
  h.device.name = "NVIDIA H200";
  h.device.compute_capability = "9.0";
  h.device.sm_count = 132;
  h.device.driver = "13.0";
  h.device.runtime = "13.0";
  h.device.cublaslt = "13.1.0";
}

// The algorithm a fast GPU run would have recorded for a GEMM (any well-formed one will do:
// the CPU must refuse it, whatever it is).
trace::PlanRecord fast_plan(int32_t algo_id) {
  CublasLtAlgo a = cublaslt::matmul_types(kernels::WeightType::kF32);
  a.algo_id = algo_id;
  a.tile = 21;
  a.stages = 15;
  return to_plan_record(cublaslt::to_plan(a));
}

struct Traces {
  std::string exact;  // recorded "on CUDA" with the invariant policy: exact plans only
  std::string fast;   // the same with cuBLASLt GEMM plans from kFirstFastStep on
  int64_t steps = 0;
  int64_t tokens = 0;
};

const Traces& traces() {
  static const Traces t = [] {
    Traces t;
    const LoadedModel& m = builtin("tiny-dense");
    rtest::RunSpec spec;
    spec.policy = "invariant";
    spec.requests = rtest::target_and_load(m, "Recorded on a GPU", 6, 2);
    rtest::Recorded rec = rtest::record(m, spec, temp_path("gpu_cpu_src.trace"));
    EXPECT_TRUE(rec.ok);
    t.exact = temp_path("gpu_cpu_exact.trace");
    t.fast = temp_path("gpu_cpu_fast.trace");
    Status st = rtest::rewrite_trace(rec.path, t.exact, as_cuda_header, nullptr);
    EXPECT_TRUE(st.ok()) << st.to_string();
    st = rtest::rewrite_trace(rec.path, t.fast, as_cuda_header, [](trace::StepRecord& s) {
      if (s.step < kFirstFastStep) return;
      int32_t id = 1;
      for (trace::SitePlan& sp : s.plans) {
        if (sp.plan.op == trace::OpKind::kGemm) sp.plan = fast_plan(id++);
      }
    });
    EXPECT_TRUE(st.ok()) << st.to_string();
    auto r = trace::TraceReader::open(t.exact);
    EXPECT_TRUE(r.ok());
    if (r.ok()) {
      t.steps = (*r)->step_count();
      t.tokens = (*r)->token_count();
    }
    return t;
  }();
  return t;
}

Result<replay::ReplayReport> replay_on_cpu(const std::string& path) {
  ASSIGN_OR_RETURN(auto reader, trace::TraceReader::open(path));
  replay::ReplayOptions o;
  o.device = Device::kCpu;
  return replay::replay_trace(*reader, builtin("tiny-dense"), o);
}

TEST(GpuToCpuReplay, ExactTraceReplaysBitForBit) {
  Result<replay::ReplayReport> r = replay_on_cpu(traces().exact);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->bit_exact()) << replay::format_replay_report(*r);
  EXPECT_FALSE(r->unreproducible);
  EXPECT_EQ(r->steps, traces().steps);
  EXPECT_EQ(r->tokens, traces().tokens);
  const std::string text = replay::format_replay_report(*r);
  EXPECT_NE(text.find("recorded on NVIDIA H200, replayed on the CPU"), std::string::npos) << text;
  EXPECT_NE(text.find(": bit-exact"), std::string::npos) << text;
}

TEST(GpuToCpuReplay, FastTraceIsCheckedUpToItsFirstTensorCoreGemm) {
  ASSERT_GT(traces().steps, kFirstFastStep);
  Result<replay::ReplayReport> r = replay_on_cpu(traces().fast);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->mismatch) << replay::format_replay_report(*r);
  EXPECT_FALSE(r->bit_exact());
  ASSERT_TRUE(r->unreproducible);
  const replay::Unreproducible& u = *r->unreproducible;
  EXPECT_EQ(u.step, kFirstFastStep);
  EXPECT_EQ(u.site, "L0.attn.q");  // the first GEMM in forward order
  EXPECT_NE(u.plan.find("cuBLASLt algo"), std::string::npos) << u.plan;
  // Every GEMM of tiny-dense: q, k, v, o, gate, up, down per layer, plus logits.
  const LoadedModel& m = builtin("tiny-dense");
  EXPECT_EQ(u.sites.size(), static_cast<size_t>(7 * m.config.layers + 1));
  EXPECT_EQ(u.sites.front(), "L0.attn.q");
  EXPECT_EQ(u.sites.back(), "logits");
  // Steps before it were checked whole, and its sites before L0.attn.q (embed, attn_norm).
  EXPECT_EQ(r->steps, kFirstFastStep);
  Result<replay::ReplayReport> whole = replay_on_cpu(traces().exact);
  ASSERT_TRUE(whole.ok());
  EXPECT_GT(r->rows_checked, 0);
  EXPECT_LT(r->rows_checked, whole->rows_checked);
  EXPECT_GT(r->tokens, 0);
  const std::string text = replay::format_replay_report(*r);
  EXPECT_NE(text.find("stopped at step 2, site L0.attn.q"), std::string::npos) << text;
  EXPECT_NE(text.find("the CPU cannot reproduce"), std::string::npos) << text;
  EXPECT_NE(text.find("cuBLASLt sites of step 2"), std::string::npos) << text;
  EXPECT_NE(replay::replay_report_json(*r).find("\"unreproducible\":{"), std::string::npos);
}

TEST(GpuToCpuReplay, AMismatchBeforeTheFirstFastGemmIsStillFound) {
  // A damaged fingerprint at step 0 comes before any cuBLASLt plan: reported as a mismatch.
  const std::string bad = temp_path("gpu_cpu_fast_bad.trace");
  Status st = rtest::rewrite_trace(traces().fast, bad, nullptr, [](trace::StepRecord& s) {
    if (s.step == 0 && !s.rows.empty()) s.rows[0].rows[0].hash ^= 1;
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  Result<replay::ReplayReport> r = replay_on_cpu(bad);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->mismatch) << replay::format_replay_report(*r);
  EXPECT_EQ(r->mismatch->step, 0);
  EXPECT_FALSE(r->unreproducible);
}

TEST(GpuToCpuReplay, CpuEngineRefusesACublasLtPlan) {
  // Without the replayer's gate, the engine itself refuses to run such a plan on the CPU.
  PlanTable table;
  CublasLtAlgo a = cublaslt::matmul_types(kernels::WeightType::kF32);
  table.set(0, *parse_site("L0.attn.q"), cublaslt::to_plan(a));
  EngineConfig c;
  auto engine =
      Engine::create(builtin("tiny-dense"), c, make_forced_policy(&table, make_invariant_policy()));
  ASSERT_TRUE(engine.ok());
  RequestSpec r;
  r.prompt = test::bytes("hello");
  r.max_tokens = 2;
  ASSERT_TRUE((*engine)->add_request(r).ok());
  Result<bool> step = (*engine)->step();
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(step.status().to_string().find("L0.attn.q"), std::string::npos);
  EXPECT_NE(step.status().to_string().find("tensor-core GEMM"), std::string::npos);
}

TEST(GpuToCpuReplay, CommandLine) {
  std::string out;
  int rc = run_command(rtest::llmrr_binary() + " replay --device cpu " + traces().exact, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(": bit-exact"), std::string::npos) << out;
  rc = run_command(rtest::llmrr_binary() + " replay " + traces().fast, &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("stopped at step 2, site L0.attn.q"), std::string::npos) << out;
  rc = run_command(rtest::llmrr_binary() + " replay --device gpu " + traces().exact, &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--device must be cpu or cuda"), std::string::npos) << out;
}

TEST(GpuToCpuReplay, DeviceCudaWithoutCudaSaysSo) {
  if (cuda_engine_built()) GTEST_SKIP() << "this build has CUDA (the gpu tests cover it)";
  std::string out;
  int rc =
      run_command(rtest::llmrr_binary() + " replay --device cuda " + traces().exact, &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("built without CUDA"), std::string::npos) << out;
  // (record's -o is a new path: a device such as /dev/null is refused as an output.)
  for (const std::string& cmd : {std::string("run"), "record -o " + temp_path("nocuda.trace")}) {
    rc = run_command(
        rtest::llmrr_binary() + " " + cmd + " --model builtin:tiny-dense --prompt hi --device cuda",
        &out, true);
    EXPECT_EQ(rc, 2) << cmd << ": " << out;
    EXPECT_NE(out.find("built without CUDA"), std::string::npos) << cmd << ": " << out;
  }
  Status st = check_device(Device::kCuda);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_TRUE(check_device(Device::kCpu).ok());
  EXPECT_EQ(parse_device("cuda"), Device::kCuda);
  EXPECT_FALSE(parse_device("gpu"));
}

}  // namespace
}  // namespace llmrr
