// The one plan lookup both forwards share (runtime/src/get_plan.h): the CPU forward calls it
// with no device heuristic, the CUDA forward with cuBLASLt's; here a stand-in heuristic plays
// cuBLASLt, so no GPU is needed.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "get_plan.h"
#include "llmrr/kernels/cublaslt_plan.h"
#include "llmrr/runtime/policy.h"
#include "step_batch.h"

namespace llmrr {
namespace {

// A step of three requests (a prefill chunk and two decodes), with the query of every op the
// forwards ask (step_batch.h's builders, as both forwards call them).
struct Step {
  StepBatch b;
  ModelConfig c;
  std::vector<PlanQuery> queries;
  Step() {
    b.step = 7;
    b.full_rows = 10;
    b.attn_seqs = {{8, 0, false}, {1, 40, true}, {1, 300, true}};
    c.hidden = 256;
    c.heads = 8;
    c.kv_heads = 2;
    c.head_dim = 32;
    queries = {
        gemm_plan_query(b, SiteId{SiteKind::kQ, 0, -1}, 10, 256, 256),
        gemm_plan_query(b, SiteId{SiteKind::kDown, 1, -1}, 10, 256, 1024),
        gemm_plan_query(b, SiteId{SiteKind::kExpertDown, 1, 3}, 4, 256, 128, /*expert=*/true),
        norm_plan_query(b, SiteId{SiteKind::kAttnNorm, 0, -1}, 10, 256),
        attention_plan_query(b, c, SiteId{SiteKind::kAttn, 0, -1}, 16),
        combine_plan_query(b, SiteId{SiteKind::kCombine, 1, -1}, 2),
    };
  }
};

// A cuBLASLt algorithm as the CUDA forward makes it a plan (any well-formed one will do).
Plan lt_plan(int32_t algo_id) {
  CublasLtAlgo a = cublaslt::matmul_types(kernels::WeightType::kF32);
  a.algo_id = algo_id;
  a.tile = 21;
  a.stages = 15;
  return cublaslt::to_plan(a);
}

// What the CUDA forward passes: it runs cuBLASLt plans, and its GEMM heuristic (here a
// stand-in that counts its calls) answers for a policy that defers GEMMs to the device.
struct CudaLike {
  int asked = 0;
  PlanDevice device;
  CudaLike() {
    device.runs_cublaslt = true;
    device.gemm = [this](const PlanQuery& q) -> Result<Plan> {
      ++asked;
      return lt_plan(static_cast<int32_t>(q.rows));
    };
  }
};

std::vector<std::shared_ptr<Policy>> exact_policies(PlanTable* table) {
  PolicyOptions split;
  split.attn_split_size = 64;
  split.gemm_split_size = 128;
  return {make_policy(PolicyKind::kInvariant, {}), make_policy(PolicyKind::kInvariant, split),
          make_policy(PolicyKind::kProduction, {}),
          make_forced_policy(table, make_production_policy())};
}

TEST(GetPlan, TheCpuAndCudaForwardsGetTheSamePlans) {
  Step s;
  PlanTable table;  // the forced policy's: one recorded plan, the rest from its fallback
  Plan recorded;
  recorded.op = OpKind::kGemm;
  recorded.splits = 3;
  recorded.k_tile = 32;
  table.set(7, s.queries[0].site, recorded);
  for (const std::shared_ptr<Policy>& policy : exact_policies(&table)) {
    for (PlanQuery q : s.queries) {
      q.step = -1;  // get_plan asks for the batch's step
      const PlanDevice cpu;
      CudaLike cuda;
      Result<Plan> on_cpu = get_plan(s.b, *policy, q, cpu);
      ASSERT_TRUE(on_cpu.ok()) << policy->name() << " " << site_name(q.site) << ": "
                               << on_cpu.status().message();
      PlanQuery want = q;
      want.step = 7;
      EXPECT_EQ(*on_cpu, *policy->plan(want)) << policy->name() << " " << site_name(q.site);
      // The CUDA forward's call without a weight (a norm, attention): no device heuristic.
      CudaLike no_gemm;
      no_gemm.device.gemm = nullptr;
      EXPECT_EQ(*get_plan(s.b, *policy, q, no_gemm.device), *on_cpu);
      // With its heuristic: only the production policy's GEMMs ask it.
      Result<Plan> on_cuda = get_plan(s.b, *policy, q, cuda.device);
      ASSERT_TRUE(on_cuda.ok()) << on_cuda.status().message();
      if (policy->gemm_from_device() && q.op == OpKind::kGemm) {
        EXPECT_EQ(cuda.asked, 1);
        ASSERT_TRUE(on_cuda->cublaslt.has_value());
        EXPECT_EQ(on_cuda->cublaslt->algo_id, q.rows);
      } else {
        EXPECT_EQ(cuda.asked, 0) << policy->name() << " " << site_name(q.site);
        EXPECT_EQ(*on_cuda, *on_cpu) << policy->name() << " " << site_name(q.site);
      }
    }
  }
  EXPECT_EQ(*get_plan(s.b, *exact_policies(&table)[3], s.queries[0], PlanDevice{}), recorded);
}

TEST(GetPlan, ACublasLtPlanRunsOnCudaOnly) {
  Step s;
  PlanTable table;
  const Plan lt = lt_plan(3);
  table.set(7, s.queries[1].site, lt);
  auto forced = make_forced_policy(&table);
  Result<Plan> cpu = get_plan(s.b, *forced, s.queries[1], PlanDevice{});
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(cpu.status().message(), "step 7, site " + site_name(s.queries[1].site) + ": " +
                                        plan_to_string(lt) +
                                        " is a tensor-core GEMM; only --device cuda runs it");
  CudaLike cuda;
  Result<Plan> gpu = get_plan(s.b, *forced, s.queries[1], cuda.device);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  EXPECT_EQ(*gpu, lt);
  EXPECT_EQ(cuda.asked, 0);  // a forced plan is never re-chosen
}

TEST(GetPlan, AMalformedPlanIsRefusedOnBothDevices) {
  Step s;
  PlanTable table;
  Plan bad;
  bad.op = OpKind::kGemm;
  bad.splits = 2;
  bad.order = CombineOrder::kArrival;
  bad.arrival = {0, 0};  // not a permutation
  table.set(7, s.queries[0].site, bad);
  auto forced = make_forced_policy(&table);
  CudaLike cuda;
  const PlanDevice cpu;
  for (const PlanDevice* d : {&cpu, static_cast<const PlanDevice*>(&cuda.device)}) {
    Result<Plan> r = get_plan(s.b, *forced, s.queries[0], *d);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kSemantic);
    EXPECT_EQ(r.status().message().rfind("step 7, site " + site_name(s.queries[0].site) +
                                             ": bad plan (" + plan_to_string(bad) + "): ",
                                         0),
              0u)
        << r.status().message();
  }
}

}  // namespace
}  // namespace llmrr
