// cuBLASLt algorithm <-> Plan <-> trace record <-> file: pure data, so tested on the CPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/kernels/cublaslt_plan.h"
#include "llmrr/recorder/convert.h"

namespace llmrr {
namespace {

// An algorithm as an H100/H200 heuristic returns it for a skinny bf16 GEMM (split-K with a
// reduction), every field away from its default so a dropped field shows.
CublasLtAlgo sample_algo() {
  CublasLtAlgo a = cublaslt::matmul_types(kernels::WeightType::kBF16);
  a.algo_id = 66;
  a.tile = 21;
  a.stages = 15;
  a.splitk = 4;
  a.reduction = cublaslt::kReductionComputeType;
  a.swizzle = 1;
  a.custom = 3;
  a.inner_shape = 4;
  a.cluster_shape = 2;
  a.workspace = 1 << 20;
  return a;
}

std::string temp_trace(const std::string& name) {
  return "/tmp/llmrr_cuda_plan_" + std::to_string(::getpid()) + "_" + name + ".trace";
}

TEST(CublasLtPlan, MatmulTypesFollowTheWeights) {
  CublasLtAlgo bf = cublaslt::matmul_types(kernels::WeightType::kBF16);
  EXPECT_EQ(bf.a_type, cublaslt::kR16BF);
  EXPECT_EQ(bf.b_type, cublaslt::kR16BF);
  EXPECT_EQ(bf.c_type, cublaslt::kR32F);
  EXPECT_EQ(bf.compute_type, cublaslt::kCompute32F);
  CublasLtAlgo f = cublaslt::matmul_types(kernels::WeightType::kF32);
  EXPECT_EQ(f.a_type, cublaslt::kR32F);
  EXPECT_EQ(f.compute_type, cublaslt::kCompute32FFastTF32);
  EXPECT_EQ(cublaslt::check(bf), "");
  EXPECT_EQ(cublaslt::check(f), "");
}

TEST(CublasLtPlan, AlgoToPlanAndBack) {
  const CublasLtAlgo a = sample_algo();
  Plan p = cublaslt::to_plan(a);
  EXPECT_EQ(p.op, OpKind::kGemm);
  EXPECT_EQ(p.splits, 4u);
  EXPECT_TRUE(cublaslt::is_cublaslt(p));
  EXPECT_EQ(plan_check(p), "");
  CublasLtAlgo back;
  EXPECT_EQ(cublaslt::from_plan(p, &back), "");
  EXPECT_EQ(back, a);
  // The description names what a diff needs to tell two algorithms apart.
  const std::string s = plan_to_string(p);
  EXPECT_NE(s.find("cuBLASLt algo 66"), std::string::npos) << s;
  EXPECT_NE(s.find("tile 21"), std::string::npos) << s;
  EXPECT_NE(s.find("stages 15"), std::string::npos) << s;
  EXPECT_NE(s.find("split-K 4"), std::string::npos) << s;
  EXPECT_NE(s.find("reduction compute type"), std::string::npos) << s;
  EXPECT_NE(s.find("bf16 x bf16 -> f32"), std::string::npos) << s;
  // Two algorithms differing in one field are different plans.
  CublasLtAlgo other = a;
  other.tile = 22;
  EXPECT_FALSE(cublaslt::to_plan(other) == p);
  other = a;
  other.cluster_shape = 3;
  EXPECT_FALSE(cublaslt::to_plan(other) == p);
}

TEST(CublasLtPlan, ExactPlansAreNotCublasLt) {
  Plan exact;
  exact.splits = 2;
  EXPECT_FALSE(cublaslt::is_cublaslt(exact));
  CublasLtAlgo out = sample_algo();
  std::string why = cublaslt::from_plan(exact, &out);
  EXPECT_NE(why.find("not a cuBLASLt plan"), std::string::npos) << why;
  EXPECT_EQ(out, sample_algo());  // untouched
}

TEST(CublasLtPlan, BadValuesAreRejectedWithTheirField) {
  struct Case {
    const char* name;
    void (*edit)(CublasLtAlgo&);
    const char* expect;
  };
  const Case cases[] = {
      {"negative algo", [](CublasLtAlgo& a) { a.algo_id = -1; }, "algo id"},
      {"split-K 0", [](CublasLtAlgo& a) { a.splitk = 0; }, "split-K"},
      {"split-K huge", [](CublasLtAlgo& a) { a.splitk = 5000; }, "split-K"},
      {"reduction 3", [](CublasLtAlgo& a) { a.reduction = 3; }, "reduction scheme"},
      {"reduction without split",
       [](CublasLtAlgo& a) {
         a.splitk = 1;
         a.reduction = cublaslt::kReductionInplace;
       },
       "reduction scheme: expected none"},
      {"swizzle 2", [](CublasLtAlgo& a) { a.swizzle = 2; }, "CTA swizzling"},
      {"workspace", [](CublasLtAlgo& a) { a.workspace = uint64_t{1} << 40; }, "workspace"},
      {"compute", [](CublasLtAlgo& a) { a.compute_type = 3; }, "compute type"},
      {"scale", [](CublasLtAlgo& a) { a.scale_type = cublaslt::kR16BF; }, "scale type"},
      {"A type", [](CublasLtAlgo& a) { a.a_type = 99; }, "A type"},
      {"B type", [](CublasLtAlgo& a) { a.b_type = 99; }, "B type"},
      {"C type", [](CublasLtAlgo& a) { a.c_type = 99; }, "C type"},
  };
  for (const Case& c : cases) {
    CublasLtAlgo a = sample_algo();
    c.edit(a);
    const std::string why = cublaslt::check(a);
    EXPECT_NE(why.find(c.expect), std::string::npos) << c.name << ": " << why;
    Plan p = cublaslt::to_plan(a);
    if (a.splitk >= 1) p.splits = static_cast<uint32_t>(a.splitk);
    EXPECT_NE(plan_check(p), "") << c.name;
    CublasLtAlgo out;
    EXPECT_NE(cublaslt::from_plan(p, &out), "") << c.name;
  }
}

TEST(CublasLtPlan, PlanShapeMustFitAnAlgorithm) {
  Plan p = cublaslt::to_plan(sample_algo());
  CublasLtAlgo out;
  Plan q = p;
  q.op = OpKind::kRmsNorm;
  EXPECT_NE(cublaslt::from_plan(q, &out).find("non-GEMM"), std::string::npos);
  q = p;
  q.k_tile = 64;
  EXPECT_NE(cublaslt::from_plan(q, &out).find("k-tile"), std::string::npos);
  q = p;
  q.order = CombineOrder::kArrival;
  q.arrival = {0, 1, 2, 3};
  EXPECT_NE(cublaslt::from_plan(q, &out).find("arrival"), std::string::npos);
  q = p;
  q.splits = 2;
  EXPECT_NE(cublaslt::from_plan(q, &out).find("split-K"), std::string::npos);
  EXPECT_NE(plan_check(q), "");
}

TEST(CublasLtPlan, PlanRecordRoundTrip) {
  const Plan p = cublaslt::to_plan(sample_algo());
  trace::PlanRecord r = to_plan_record(p);
  ASSERT_TRUE(r.cublaslt.has_value());
  EXPECT_EQ(r.cublaslt->algo_id, 66);
  EXPECT_EQ(r.cublaslt->cluster_shape, 2);
  EXPECT_EQ(r.cublaslt->workspace, uint64_t{1} << 20);
  EXPECT_EQ(to_plan(r), p);
  // An exact plan carries no algorithm either way.
  Plan exact;
  exact.splits = 3;
  EXPECT_FALSE(to_plan_record(exact).cublaslt.has_value());
  EXPECT_EQ(to_plan(to_plan_record(exact)), exact);
}

trace::RunHeader cuda_header() {
  trace::RunHeader h;
  h.tool_version = "test";
  h.run_id = "gpu-run";
  h.device.kind = "cuda";
  h.device.name = "NVIDIA H200";
  h.device.compute_capability = "9.0";
  h.device.driver = "13.0";
  h.device.runtime = "13.0";
  h.device.cublaslt = "13.1.0";
  h.device.sm_count = 132;
  h.device.memory_bytes = int64_t{141} << 30;
  return h;
}

TEST(CublasLtPlan, TraceRoundTripKeepsAlgorithmsAndGpuFields) {
  const std::string path = temp_trace("roundtrip");
  const Plan lt = cublaslt::to_plan(sample_algo());
  CublasLtAlgo a2 = sample_algo();
  a2.splitk = 1;
  a2.reduction = 0;
  a2.tile = 30;
  const Plan lt2 = cublaslt::to_plan(a2);
  Plan exact;
  exact.splits = 2;
  {
    auto w = trace::TraceWriter::open(path);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    ASSERT_TRUE((*w)->append_run_header(cuda_header()).ok());
    for (int64_t step = 0; step < 3; ++step) {
      trace::StepRecord s;
      s.step = step;
      // Step 1 changes one site's algorithm: the delta encoding must carry it.
      s.plans.push_back({1, to_plan_record(step == 1 ? lt2 : lt)});
      s.plans.push_back({2, to_plan_record(exact)});
      s.plans.push_back({3, to_plan_record(lt2)});
      Status st = (*w)->append_step(s);
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    ASSERT_TRUE((*w)->close().ok());
  }
  auto r = trace::TraceReader::open(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->format_minor(), trace::kFormatMinor);
  EXPECT_GE(trace::kFormatMinor, 1);
  const trace::RunHeader& h = (*r)->run_header();
  EXPECT_EQ(h.device.runtime, "13.0");
  EXPECT_EQ(h.device.cublaslt, "13.1.0");
  EXPECT_EQ(h.device.name, "NVIDIA H200");
  EXPECT_EQ(h.device.sm_count, 132);
  EXPECT_TRUE((*r)->verify().ok());
  trace::StepCursor c = (*r)->steps();
  trace::StepRecord s;
  for (int64_t step = 0; step < 3; ++step) {
    auto more = c.next(&s);
    ASSERT_TRUE(more.ok() && *more) << step;
    ASSERT_EQ(s.plans.size(), 3u);
    EXPECT_EQ(to_plan(*s.find_plan(1)), step == 1 ? lt2 : lt) << step;
    EXPECT_EQ(to_plan(*s.find_plan(2)), exact) << step;
    EXPECT_EQ(to_plan(*s.find_plan(3)), lt2) << step;
  }
  std::remove(path.c_str());
}

TEST(CublasLtPlan, WriterRefusesMalformedAlgorithms) {
  const std::string path = temp_trace("refuse");
  auto w = trace::TraceWriter::open(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(cuda_header()).ok());
  struct Case {
    const char* name;
    void (*edit)(trace::PlanRecord&);
    const char* expect;
  };
  const Case cases[] = {
      {"on rmsnorm", [](trace::PlanRecord& p) { p.op = trace::OpKind::kRmsNorm; }, "only on gemm"},
      {"splits differ", [](trace::PlanRecord& p) { p.splits = 9; }, "split-K"},
      {"split-K 0",
       [](trace::PlanRecord& p) {
         p.cublaslt->splitk = 0;
         p.splits = 0;
       },
       "splits"},
      {"reduction", [](trace::PlanRecord& p) { p.cublaslt->reduction = 5; }, "reduction"},
      {"swizzle", [](trace::PlanRecord& p) { p.cublaslt->swizzle = 7; }, "swizzle"},
      {"type", [](trace::PlanRecord& p) { p.cublaslt->a_type = 40; }, "cudaDataType"},
      {"k_tile", [](trace::PlanRecord& p) { p.k_tile = 32; }, "k_tile 0"},
  };
  int64_t step = 0;
  for (const Case& c : cases) {
    trace::PlanRecord p = to_plan_record(cublaslt::to_plan(sample_algo()));
    c.edit(p);
    trace::StepRecord s;
    s.step = step++;
    s.plans.push_back({1, p});
    Status st = (*w)->append_step(s);
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_NE(st.to_string().find(c.expect), std::string::npos) << c.name << ": " << st.to_string();
  }
  ASSERT_TRUE((*w)->close().ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace llmrr
