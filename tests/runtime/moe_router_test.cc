// MoE routing with capacity: the capacity formula, claim order (batch rows, then rank),
// drop and reroute outcomes, gates; DeepSeek-V3's biased, group-limited selection.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "llmrr/runtime/moe_router.h"

namespace llmrr {
namespace {

TEST(MoeRouter, CapacityFormula) {
  EXPECT_EQ(expert_capacity(10, 2, 8, 1.0), 3);   // ceil(2.5)
  EXPECT_EQ(expert_capacity(8, 2, 8, 1.0), 2);
  EXPECT_EQ(expert_capacity(8, 2, 8, 1.25), 3);   // ceil(2.5)
  EXPECT_EQ(expert_capacity(1, 1, 8, 1.0), 1);    // ceil(0.125)
}

// 4 tokens, 4 experts; every token ranks experts 0 > 1 > 2 > 3 (token-specific margins).
std::vector<float> same_preference() {
  return {0.4f, 0.3f, 0.2f, 0.1f,  0.5f, 0.25f, 0.15f, 0.1f,
          0.7f, 0.1f, 0.1f, 0.1f,  0.4f, 0.35f, 0.15f, 0.1f};
}

TEST(MoeRouter, DroplessKeepsTopK) {
  std::vector<float> s = same_preference();
  Routing r;
  route_tokens(s.data(), 4, 4, 2, true, CapacityConfig{}, 4, &r);
  EXPECT_EQ(r.capacity, 0);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(r.chosen[t * 2], 0);
    EXPECT_EQ(r.chosen[t * 2 + 1], 1);
    EXPECT_EQ(r.experts[t * 2], 0);
    EXPECT_EQ(r.outcome[t * 2], RouteOutcome::kKept);
  }
  // Renormalized gates of token 0: 0.4 / 0.7 and 0.3 / 0.7.
  EXPECT_FLOAT_EQ(r.gates[0], 0.4f / (0.4f + 0.3f));
  EXPECT_FLOAT_EQ(r.gates[1], 0.3f / (0.4f + 0.3f));
}

TEST(MoeRouter, DropInRowThenRankOrder) {
  std::vector<float> s = same_preference();
  Routing r;
  CapacityConfig cap{1.0, Overflow::kDrop};  // capacity = ceil(4 × 2 / 4 × 1) = 2
  route_tokens(s.data(), 4, 4, 2, true, cap, 4, &r);
  EXPECT_EQ(r.capacity, 2);
  // Tokens 0 and 1 fill experts 0 and 1; tokens 2 and 3 lose both slots.
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(r.outcome[t * 2], RouteOutcome::kKept);
    EXPECT_EQ(r.outcome[t * 2 + 1], RouteOutcome::kKept);
  }
  for (int t = 2; t < 4; ++t) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(r.outcome[t * 2 + i], RouteOutcome::kDropped);
      EXPECT_EQ(r.experts[t * 2 + i], -1);
      EXPECT_EQ(r.gates[t * 2 + i], 0.0f);
    }
    EXPECT_EQ(r.chosen[t * 2], 0);  // the router's choice stays visible
  }
}

TEST(MoeRouter, RerouteToNextBestWithRoom) {
  std::vector<float> s = same_preference();
  Routing r;
  CapacityConfig cap{1.0, Overflow::kReroute};
  route_tokens(s.data(), 4, 4, 2, true, cap, 4, &r);
  EXPECT_EQ(r.capacity, 2);
  // Token 2: experts 0 and 1 full → its rank-0 slot goes to 2 (next best, not its own 1),
  // rank-1 slot to 3.
  EXPECT_EQ(r.experts[4], 2);
  EXPECT_EQ(r.experts[5], 3);
  EXPECT_EQ(r.outcome[4], RouteOutcome::kRerouted);
  EXPECT_EQ(r.outcome[5], RouteOutcome::kRerouted);
  // Token 3 takes the last room of experts 2 and 3.
  EXPECT_EQ(r.outcome[6], RouteOutcome::kRerouted);
  EXPECT_EQ(r.outcome[7], RouteOutcome::kRerouted);
  EXPECT_EQ(r.experts[6], 2);
  EXPECT_EQ(r.experts[7], 3);
  // A rerouted slot weighs its new expert's score over the router's top-k sum.
  EXPECT_FLOAT_EQ(r.gates[4], 0.1f / (0.7f + 0.1f));
  // Per-expert load never exceeds the capacity.
  std::vector<int> load(4, 0);
  for (int32_t e : r.experts) {
    if (e >= 0) ++load[e];
  }
  for (int l : load) EXPECT_LE(l, 2);
}

TEST(MoeRouter, RerouteDropsWhenNothingHasRoom) {
  // 3 tokens, 2 experts, k 1, capacity ceil(3 / 2 × 0.5) = 1.
  std::vector<float> s = {0.9f, 0.1f, 0.8f, 0.2f, 0.7f, 0.3f};
  Routing r;
  route_tokens(s.data(), 3, 2, 1, false, CapacityConfig{0.5, Overflow::kReroute}, 3, &r);
  EXPECT_EQ(r.capacity, 1);
  EXPECT_EQ(r.experts[0], 0);
  EXPECT_EQ(r.experts[1], 1);
  EXPECT_EQ(r.outcome[1], RouteOutcome::kRerouted);
  EXPECT_EQ(r.experts[2], -1);
  EXPECT_EQ(r.outcome[2], RouteOutcome::kDropped);
  // Without renormalization the gate is the raw score.
  EXPECT_EQ(r.gates[0], 0.9f);
  EXPECT_EQ(r.gates[1], 0.2f);
}

TEST(MoeRouter, ForcedExpertsRecomputeGates) {
  std::vector<float> s = same_preference();
  Routing r;
  route_tokens(s.data(), 4, 4, 2, true, CapacityConfig{}, 4, &r);
  r.experts[0] = 3;
  r.experts[1] = -1;
  compute_gates(s.data(), 4, 4, true, &r);
  EXPECT_FLOAT_EQ(r.gates[0], 0.1f / 0.7f);
  EXPECT_EQ(r.gates[1], 0.0f);
}

// DeepSeek-V3 (noaux_tc): 8 experts in 4 groups of 2, 2 groups kept, top-2. The bias moves
// expert 5 above expert 4 and group 1 above group 0; the gates use the unbiased scores.
TEST(MoeRouter, GroupLimitedSelectionWithBias) {
  //                       group 0      group 1      group 2      group 3
  const std::vector<float> s = {0.90f, 0.10f, 0.50f, 0.48f, 0.60f, 0.55f, 0.20f, 0.10f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.1f, 0.0f, 0.0f};
  std::vector<float> sel(8);
  group_limited_choice(s.data(), 1, 8, bias.data(), 4, 2, sel.data());
  // Group sums of the two best biased scores: 1.0, 0.98, 1.25, 0.30 → groups 2 and 0.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sel[0], 0.90f);
  EXPECT_EQ(sel[1], 0.10f);
  EXPECT_EQ(sel[2], -inf);  // group 1 (0.98) loses to group 0 (1.0) although 0.50 > 0.10
  EXPECT_EQ(sel[3], -inf);
  EXPECT_EQ(sel[4], 0.60f);
  EXPECT_EQ(sel[5], 0.55f + 0.1f);
  EXPECT_EQ(sel[6], -inf);
  Routing r;
  GateRule rule;
  rule.norm_topk_prob = true;
  rule.scale = 2.5f;
  rule.denom_eps = 1e-20f;
  route_tokens(sel.data(), s.data(), 1, 8, 2, rule, CapacityConfig{}, 1, &r);
  EXPECT_EQ(r.chosen, (std::vector<int32_t>{0, 5}));  // 5 (0.65 biased) before 4 (0.60)
  // Gates from the unbiased scores 0.90 and 0.55, renormalized, × 2.5.
  EXPECT_EQ(r.gates[0], 0.90f / (0.90f + 0.55f + 1e-20f) * 2.5f);
  EXPECT_EQ(r.gates[1], 0.55f / (0.90f + 0.55f + 1e-20f) * 2.5f);
  // Without groups or bias the selection is the scores themselves.
  group_limited_choice(s.data(), 1, 8, nullptr, 1, 1, sel.data());
  EXPECT_EQ(sel, s);
}

// Rerouting under capacity follows the selection scores (masked groups last), and the
// rerouted slot's gate is its new expert's unbiased score.
TEST(MoeRouter, GroupLimitedRerouteFollowsSelection) {
  // Two tokens with the same preference; capacity 1 per expert.
  const std::vector<float> s = {0.9f, 0.1f, 0.8f, 0.7f, 0.9f, 0.1f, 0.8f, 0.7f};
  std::vector<float> sel(8);
  group_limited_choice(s.data(), 2, 4, nullptr, 2, 1, sel.data());  // groups {0,1} {2,3}
  // Group scores 1.0 vs 1.5: group 1 kept, experts 2 and 3 chosen by both tokens.
  Routing r;
  route_tokens(sel.data(), s.data(), 2, 4, 1, GateRule{false, 1.0f, 0.0f},
               CapacityConfig{0.5, Overflow::kReroute}, 2, &r);
  EXPECT_EQ(r.capacity, 1);
  EXPECT_EQ(r.chosen, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3}));  // token 1: next in selection order
  EXPECT_EQ(r.outcome[1], RouteOutcome::kRerouted);
  EXPECT_EQ(r.gates[1], 0.7f);
}

}  // namespace
}  // namespace llmrr
