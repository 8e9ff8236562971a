// DeepSeek-V3 in the engine (builtin:tiny-deepseek): the MLA sites and their plans in
// forward order, the attention planned over the latent cache (one KV head of kv_lora +
// rope), group-limited routing (only experts of the kept groups), capacity outcomes, and
// --device cuda refused before any device is probed. Conformance against transformers is in
// tests/conformance; the properties every model shares (score vs generation, threads, forced
// replay, request-alone replay) run on tiny-deepseek in engine_test.cc.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/memory_trace.h"
#include "test_util.h"

namespace llmrr {
namespace {

using testing::builtin;
using testing::bytes;
using testing::request;

struct SiteLog : Observer {
  std::vector<SiteId> sites;  // plans of step 0, in callback order
  std::vector<std::string> errors;
  int64_t groups_checked = 0;
  int32_t n_group = 4, topk_group = 2, per = 4;
  void on_plan(int64_t step, SiteId s, const Plan&) override {
    if (step == 0) sites.push_back(s);
  }
  void on_routing(const RoutingView& v) override {
    // Every row's router choice lies in at most topk_group groups.
    for (int64_t r = 0; r < v.rows; ++r) {
      std::set<int32_t> groups;
      for (int i = 0; i < v.k; ++i) groups.insert(v.chosen[r * v.k + i] / per);
      if (static_cast<int32_t>(groups.size()) > topk_group)
        errors.push_back("row " + std::to_string(r) + " of layer " + std::to_string(v.layer) +
                         " chose experts in " + std::to_string(groups.size()) + " groups");
      ++groups_checked;
    }
  }
};

TEST(EngineDeepseek, MlaSitesInForwardOrderAndGroupLimitedRouting) {
  const LoadedModel& m = builtin("tiny-deepseek");
  ASSERT_TRUE(m.config.mla);
  SiteLog log;
  auto e = Engine::create(m, EngineConfig{}, testing::production());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  MemoryTrace trace;
  (*e)->add_observer(&log);
  (*e)->add_observer(&trace);
  ASSERT_TRUE((*e)->add_request(request(0, bytes("Latent attention"), 4)).ok());
  ASSERT_TRUE((*e)->add_request(request(1, bytes("and sixteen experts"), 4)).ok());
  ASSERT_TRUE((*e)->run().ok());
  EXPECT_TRUE(log.errors.empty()) << log.errors.front();
  EXPECT_GT(log.groups_checked, 0);
  for (size_t i = 1; i < log.sites.size(); ++i)
    EXPECT_LT(log.sites[i - 1], log.sites[i]) << site_name(log.sites[i]);
  // Layer 0 (dense): the MLA chain, then the dense MLP.
  std::vector<std::string> l0;
  for (SiteId s : log.sites)
    if (s.layer == 0) l0.push_back(site_name(s));
  EXPECT_EQ(l0, (std::vector<std::string>{
                    "L0.attn_norm", "L0.attn.q_a", "L0.attn.q_a_norm", "L0.attn.q",
                    "L0.attn.kv_a", "L0.attn.kv_a_norm", "L0.attn.q_absorb", "L0.attn.core",
                    "L0.attn.v_up", "L0.attn.o", "L0.mlp_norm", "L0.mlp.gate", "L0.mlp.up",
                    "L0.mlp.down"}));
  // Layer 1 (MoE): router, experts, the shared expert, combine.
  std::set<std::string> l1;
  for (SiteId s : log.sites)
    if (s.layer == 1) l1.insert(site_name(s));
  for (const char* want : {"L1.attn.q_absorb", "L1.moe.router", "L1.moe.shared.gate",
                           "L1.moe.shared.up", "L1.moe.shared.down", "L1.moe.combine"})
    EXPECT_TRUE(l1.count(want)) << want;
  // Plans: the attention runs over the latent cache, the low-rank norms are RMSNorms, the
  // absorption GEMMs are GEMMs.
  const Plan* attn = trace.plans().find(0, *parse_site("L2.attn.core"));
  const Plan* kvn = trace.plans().find(0, *parse_site("L2.attn.kv_a_norm"));
  const Plan* uk = trace.plans().find(0, *parse_site("L2.attn.q_absorb"));
  const Plan* uv = trace.plans().find(0, *parse_site("L2.attn.v_up"));
  ASSERT_TRUE(attn && kvn && uk && uv);
  EXPECT_EQ(attn->op, OpKind::kAttention);
  EXPECT_EQ(kvn->op, OpKind::kRmsNorm);
  EXPECT_EQ(uk->op, OpKind::kGemm);
  EXPECT_EQ(uv->op, OpKind::kGemm);
}

// The attention plan is asked for the latent cache's shape: one KV head of kv_lora + rope.
struct QueryLog : Policy {
  std::shared_ptr<Policy> inner = testing::invariant();
  std::vector<PlanQuery> attention;
  std::string name() const override { return "query-log"; }
  Result<Plan> plan(const PlanQuery& q) override {
    if (q.op == OpKind::kAttention) attention.push_back(q);
    return inner->plan(q);
  }
};

TEST(EngineDeepseek, AttentionIsPlannedOverTheLatentCache) {
  const LoadedModel& m = builtin("tiny-deepseek");
  auto policy = std::make_shared<QueryLog>();
  auto e = Engine::create(m, EngineConfig{}, policy);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE((*e)->score_prompt(bytes("latent")).ok());
  ASSERT_EQ(policy->attention.size(), static_cast<size_t>(m.config.layers));
  for (const PlanQuery& q : policy->attention) {
    EXPECT_EQ(q.kv_heads, 1);
    EXPECT_EQ(q.heads, m.config.heads);
    EXPECT_EQ(q.k, m.config.kv_lora_rank + m.config.qk_rope_dim);
  }
}

TEST(EngineDeepseek, CudaIsRefusedNamingMla) {
  const LoadedModel& m = builtin("tiny-deepseek");
  EngineConfig cfg;
  cfg.device = Device::kCuda;
  auto e = Engine::create(m, cfg, testing::invariant());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(e.status().message().find("MLA"), std::string::npos) << e.status().to_string();
}

}  // namespace
}  // namespace llmrr
