// Policies: the production rules follow the heuristics they imitate, the invariant policy
// ignores the batch, atomics draw valid arrival orders, forced plans come from their source;
// a PolicyKind is parsed from the names a user gives and builds its policy.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "llmrr/runtime/policy.h"

namespace llmrr {
namespace {

PlanQuery gemm_query(int64_t m, int64_t n, int64_t k) {
  PlanQuery q;
  q.op = OpKind::kGemm;
  q.site = SiteId{SiteKind::kDown, 0, -1};
  q.rows = m;
  q.n = n;
  q.k = k;
  q.batch_rows = m;
  return q;
}

TEST(ProductionPolicy, GemmKernelFamilyAndSplitKFollowM) {
  VirtualDevice d;
  // GEMV family at a handful of rows, small MMA tiles up to 64, large beyond.
  Plan p1 = production::gemm_plan(1, 256, 256, d);
  Plan p8 = production::gemm_plan(8, 256, 256, d);
  Plan p9 = production::gemm_plan(9, 256, 256, d);
  Plan p100 = production::gemm_plan(100, 256, 256, d);
  EXPECT_EQ(p1, p8);
  EXPECT_EQ(p1.k_tile, 0u);
  EXPECT_EQ(p1.splits, 8u);  // 4 tiles → 32 splits wanted, capped by K / 32
  EXPECT_EQ(p9.k_tile, 32u);
  EXPECT_EQ(p9.splits, 4u);  // capped by K / 64
  EXPECT_EQ(p100.k_tile, 64u);
  EXPECT_EQ(p100.splits, 2u);
  // A wide GEMM whose output tiles fill a wave needs no split-K (cuBLAS picks split-K only
  // for skinny problems).
  Plan big = production::gemm_plan(4096, 4096, 4096, d);
  EXPECT_EQ(big.splits, 1u);
  // Same shape, more SMs → more splits.
  VirtualDevice wide{1024, 2};
  EXPECT_GT(production::gemm_plan(512, 4096, 4096, wide).splits,
            production::gemm_plan(512, 4096, 4096, d).splits);
}

TEST(ProductionPolicy, MoeGemmConfigFromNearestKey) {
  // Nearest key, ties to the smaller key (vLLM: min(keys, key=|x - M|)).
  EXPECT_EQ(production::moe_gemm_plan(1, 1024), production::moe_gemm_plan(2, 1024));
  EXPECT_EQ(production::moe_gemm_plan(3, 1024), production::moe_gemm_plan(2, 1024));
  EXPECT_EQ(production::moe_gemm_plan(5, 1024), production::moe_gemm_plan(4, 1024));
  EXPECT_NE(production::moe_gemm_plan(4, 1024), production::moe_gemm_plan(2, 1024));
  EXPECT_EQ(production::moe_gemm_plan(100000, 1024), production::moe_gemm_plan(4096, 1024));
  // Splits never leave fewer than 32 k per split.
  EXPECT_EQ(production::moe_gemm_plan(1, 64).splits, 2u);
}

TEST(ProductionPolicy, RmsNormSplitsAtSmallBatchOnly) {
  VirtualDevice d;
  EXPECT_EQ(production::rmsnorm_plan(1, 256, d).splits, 8u);
  EXPECT_EQ(production::rmsnorm_plan(40, 256, d).splits, 2u);
  EXPECT_EQ(production::rmsnorm_plan(132, 256, d).splits, 1u);
  EXPECT_EQ(production::rmsnorm_plan(1, 32, d).splits, 1u);
}

TEST(ProductionPolicy, FlashAttentionNumSplitsHeuristic) {
  // Worked by hand from flash_api.cpp's rules.
  EXPECT_EQ(production::num_splits_heuristic(4, 132, 4, 128), 4);   // 3 is not eligible
  EXPECT_EQ(production::num_splits_heuristic(100, 132, 8, 128), 1); // 1 split is 85 % of best
  EXPECT_EQ(production::num_splits_heuristic(106, 132, 8, 128), 1); // ≥ 0.8 × SMs
  EXPECT_EQ(production::num_splits_heuristic(4, 132, 1, 128), 1);   // one KV block
}

TEST(ProductionPolicy, FlashInferDecodeSplitDependsOnEveryLength) {
  VirtualDevice d;  // max_grid = 264
  std::vector<AttnSeq> one{{1, 999, true}};  // 1000 positions = 63 pages of 16
  Plan solo = production::attention_plan(one, 8, 4, 32, 16, d);
  EXPECT_EQ(solo.mode, SplitMode::kSize);
  EXPECT_EQ(solo.split_size, 128u);  // the 128-position floor
  std::vector<AttnSeq> ten(10, AttnSeq{1, 999, true});
  Plan p10 = production::attention_plan(ten, 8, 4, 32, 16, d);
  EXPECT_EQ(p10.mode, SplitMode::kSize);
  EXPECT_EQ(p10.split_size, 11u * 16);  // smallest chunk with 10 × ceil(63/c) × 4 ≤ 264
  std::vector<AttnSeq> many(41, AttnSeq{1, 999, true});
  Plan p41 = production::attention_plan(many, 8, 4, 32, 16, d);
  EXPECT_EQ(p41.mode, SplitMode::kCount);
  EXPECT_EQ(p41.splits, 1u);
  // Another request's length changes the target's split.
  std::vector<AttnSeq> mixed = ten;
  mixed[9].cached = 3999;
  EXPECT_NE(production::attention_plan(mixed, 8, 4, 32, 16, d), p10);
}

TEST(ProductionPolicy, PrefillBatchesUseFlashAttentionAndSeparateCachedKv) {
  VirtualDevice d;
  std::vector<AttnSeq> fresh{{40, 0, false}, {1, 10, true}};
  Plan a = production::attention_plan(fresh, 8, 4, 32, 16, d);
  EXPECT_EQ(a.mode, SplitMode::kCount);
  EXPECT_FALSE(a.separate_new_kv);
  std::vector<AttnSeq> cont{{40, 64, false}, {1, 10, true}};
  EXPECT_TRUE(production::attention_plan(cont, 8, 4, 32, 16, d).separate_new_kv);
  // Long KV with few rows splits.
  std::vector<AttnSeq> longkv{{2, 3000, false}};
  EXPECT_GT(production::attention_plan(longkv, 8, 4, 32, 16, d).splits, 1u);
}

// --gemm-split: split-K by a fixed number of K columns. The split count is a function of K
// (ceil(K / size), at most 256), the same for every M and batch.
TEST(InvariantPolicy, GemmSplitFollowsKNeverM) {
  EXPECT_EQ(invariant_gemm_splits(576, 0), 1u);
  EXPECT_EQ(invariant_gemm_splits(576, 64), 9u);
  EXPECT_EQ(invariant_gemm_splits(576, 256), 3u);
  EXPECT_EQ(invariant_gemm_splits(1536, 256), 6u);
  EXPECT_EQ(invariant_gemm_splits(64, 256), 1u);    // K within one split
  EXPECT_EQ(invariant_gemm_splits(65, 64), 2u);
  EXPECT_EQ(invariant_gemm_splits(1 << 20, 16), kInvariantMaxGemmSplits);
  auto inv = make_invariant_policy(64, 128);
  for (int64_t k : {64, 128, 129, 576, 1536}) {
    std::set<std::string> seen;
    for (int64_t m : {1, 2, 7, 16, 64, 300}) {
      for (int64_t n : {1, 576, 49152}) {
        auto g = inv->plan(gemm_query(m, n, k));
        ASSERT_TRUE(g.ok());
        EXPECT_EQ(g->splits, invariant_gemm_splits(k, 128)) << "m " << m << " k " << k;
        EXPECT_EQ(g->k_tile, kInvariantKTile);
        EXPECT_EQ(g->order, CombineOrder::kFixed);
        EXPECT_EQ(plan_check(*g), "");
        if (n == 576) seen.insert(plan_to_string(*g));
      }
    }
    EXPECT_EQ(seen.size(), 1u) << "k " << k;
  }
  // Without a split size the invariant GEMM keeps its one split.
  EXPECT_EQ(make_invariant_policy(64)->plan(gemm_query(1, 576, 1536))->splits, 1u);
  EXPECT_EQ(gemm_split_check(0), "");
  EXPECT_EQ(gemm_split_check(256), "");
  EXPECT_NE(gemm_split_check(-16), "");
  EXPECT_NE(gemm_split_check(100), "");
  EXPECT_NE(gemm_split_check(int64_t{1} << 21), "");
}

TEST(InvariantPolicy, PlansIgnoreTheBatch) {
  auto inv = make_invariant_policy(64);
  std::set<std::string> gemms, norms, attns;
  for (int64_t m : {1, 2, 7, 64, 65, 300}) {
    auto g = inv->plan(gemm_query(m, 256, 256));
    ASSERT_TRUE(g.ok());
    gemms.insert(plan_to_string(*g));
    PlanQuery nq;
    nq.op = OpKind::kRmsNorm;
    nq.rows = m;
    nq.k = 256;
    norms.insert(plan_to_string(*inv->plan(nq)));
    std::vector<AttnSeq> seqs(static_cast<size_t>(m), AttnSeq{1, 100, true});
    if (m > 10) seqs[0] = AttnSeq{30, 40, false};
    PlanQuery aq;
    aq.op = OpKind::kAttention;
    aq.seqs = seqs;
    aq.heads = 8;
    aq.kv_heads = 4;
    aq.k = 32;
    aq.block_size = 16;
    Plan ap = *inv->plan(aq);
    EXPECT_FALSE(ap.separate_new_kv);
    attns.insert(plan_to_string(ap));
  }
  EXPECT_EQ(gemms.size(), 1u);
  EXPECT_EQ(*gemms.begin(), "split-K 1, k-tile 64");
  EXPECT_EQ(norms.size(), 1u);
  EXPECT_EQ(attns.size(), 1u);
  EXPECT_EQ(*attns.begin(), "split-KV 64 positions");
}

TEST(ProductionPolicy, AtomicsDrawValidPermutationsThatVary) {
  ProductionOptions o;
  o.atomics = true;
  auto p = make_production_policy(o);
  EXPECT_EQ(p->name(), "production+atomics");
  std::set<std::vector<uint16_t>> seen;
  for (int i = 0; i < 64; ++i) {
    Plan g = *p->plan(gemm_query(1, 256, 256));
    ASSERT_EQ(g.order, CombineOrder::kArrival);
    EXPECT_EQ(plan_check(g), "");
    seen.insert(g.arrival);
  }
  EXPECT_GT(seen.size(), 1u);  // 8! orders: 64 draws all equal would mean no randomness
  PlanQuery cq;
  cq.op = OpKind::kCombine;
  cq.rows = 5;
  cq.top_k = 2;
  Plan c = *p->plan(cq);
  EXPECT_EQ(c.order, CombineOrder::kArrival);
  EXPECT_EQ(plan_check(c, 5, 2), "");
  // A single split has nothing to order.
  Plan one = *p->plan(gemm_query(4096, 4096, 4096));
  EXPECT_EQ(one.order, CombineOrder::kFixed);
  // Without atomics: deterministic.
  auto det = make_production_policy();
  EXPECT_EQ(*det->plan(gemm_query(1, 256, 256)), *det->plan(gemm_query(1, 256, 256)));
  EXPECT_EQ(det->plan(cq)->order, CombineOrder::kFixed);
}

TEST(ForcedPolicy, TakesPlansFromTheSourceAndNamesWhatIsMissing) {
  PlanTable table;
  Plan want;
  want.op = OpKind::kGemm;
  want.splits = 3;
  want.k_tile = 16;
  table.set(7, SiteId{SiteKind::kDown, 0, -1}, want);
  auto forced = make_forced_policy(&table);
  PlanQuery q = gemm_query(1, 256, 256);
  q.step = 7;
  EXPECT_EQ(*forced->plan(q), want);
  q.step = 8;
  auto missing = forced->plan(q);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("step 8 site L0.mlp.down"), std::string::npos)
      << missing.status().message();
  // With a fallback, the gaps are filled by it.
  auto with_fallback = make_forced_policy(&table, make_invariant_policy());
  EXPECT_EQ(with_fallback->plan(q)->k_tile, kInvariantKTile);
  // A plan for another op is refused.
  q.step = 7;
  q.op = OpKind::kRmsNorm;
  EXPECT_FALSE(forced->plan(q).ok());
}

TEST(PolicyKind, ParsesTheNamesAUserGives) {
  Result<PolicyKind> p = PolicyKind::parse("production");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, PolicyKind::kProduction);
  EXPECT_EQ(p->name(), "production");
  Result<PolicyKind> i = PolicyKind::parse("invariant");
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(*i, PolicyKind::kInvariant);
  EXPECT_EQ(i->name(), "invariant");
}

TEST(PolicyKind, AnUnknownNameIsOneLineListingTheValidOnes) {
  for (const char* name : {"forced", "Production", "production+atomics", "", " invariant"}) {
    Result<PolicyKind> k = PolicyKind::parse(name);
    ASSERT_FALSE(k.ok()) << name;
    EXPECT_EQ(k.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(k.status().message(),
              std::string("--policy must be production or invariant (got '") + name + "')");
  }
  EXPECT_EQ(PolicyKind::parse("x", "policy").status().message(),
            "policy must be production or invariant (got 'x')");
}

TEST(PolicyKind, Capabilities) {
  const PolicyKind p = PolicyKind::kProduction, i = PolicyKind::kInvariant;
  EXPECT_TRUE(p.batch_dependent());
  EXPECT_TRUE(p.uses_virtual_device());
  EXPECT_TRUE(p.supports_atomics());
  EXPECT_FALSE(p.fixed_split_sizes());
  EXPECT_FALSE(i.batch_dependent());
  EXPECT_FALSE(i.uses_virtual_device());
  EXPECT_FALSE(i.supports_atomics());
  EXPECT_TRUE(i.fixed_split_sizes());
}

// make_policy builds what the factories of each kind build from their fields of the options.
TEST(PolicyKind, MakePolicyTakesEachKindsOwnOptions) {
  PolicyOptions o;
  o.device.sms = 16;
  o.atomics = true;
  o.attn_split_size = 32;
  o.gemm_split_size = 64;
  auto prod = make_policy(PolicyKind::kProduction, o);
  EXPECT_EQ(prod->name(), "production+atomics");
  EXPECT_FALSE(prod->gemm_from_device());  // cuBLASLt has no arrival order
  o.atomics = false;
  prod = make_policy(PolicyKind::kProduction, o);
  EXPECT_EQ(prod->name(), "production");
  EXPECT_TRUE(prod->gemm_from_device());
  auto inv = make_policy(PolicyKind::kInvariant, o);
  EXPECT_EQ(inv->name(), "invariant");
  EXPECT_FALSE(inv->gemm_from_device());

  PlanQuery g;
  g.op = OpKind::kGemm;
  g.site = SiteId{SiteKind::kDown, 0, -1};
  g.rows = g.batch_rows = 2;
  g.n = 256;
  g.k = 256;
  EXPECT_EQ(*prod->plan(g), production::gemm_plan(2, 256, 256, o.device));
  EXPECT_EQ(*inv->plan(g), *make_invariant_policy(32, 64)->plan(g));
  PlanQuery a;
  a.op = OpKind::kAttention;
  a.site = SiteId{SiteKind::kAttn, 0, -1};
  EXPECT_EQ(inv->plan(a)->split_size, 32u);
  EXPECT_FALSE(make_forced_policy(nullptr)->gemm_from_device());
}

}  // namespace
}  // namespace llmrr
