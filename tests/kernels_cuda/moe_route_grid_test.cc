// MoE routing's device code (kernels/cuda/moe_route_phases.h, with select_phases.h's scoring
// and top-k) run by the CPU grid runner: scores, DeepSeek's group-limited choice, top-k,
// capacity with drop / reroute, and gates, bit for bit (ids, gates, outcomes) against
// runtime/src/moe_router.cc over a grid of shapes, threads forward and reversed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/moe_route_phases.h"
#include "cuda/select_phases.h"
#include "grid_runner.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/runtime/moe_router.h"
#include "moe_layer_device.h"
#include "test_util.h"

namespace llmrr::kernels::cuda::testing {
namespace {

using kernels::testing::first_diff;

struct RouteCase {
  int64_t rows;
  int32_t experts, k;
  bool sigmoid;
  int32_t n_group = 1, topk_group = 1;
  bool bias = false;
  GateRule rule;
};

std::string describe(const RouteCase& c, const CapacityConfig& cap) {
  return "rows=" + std::to_string(c.rows) + " E=" + std::to_string(c.experts) +
         " k=" + std::to_string(c.k) + (c.sigmoid ? " sigmoid" : " softmax") +
         " groups=" + std::to_string(c.n_group) + "/" + std::to_string(c.topk_group) +
         (c.bias ? " bias" : "") + " norm=" + std::to_string(c.rule.norm_topk_prob) +
         " scale=" + std::to_string(c.rule.scale) + " cap=" + std::to_string(cap.factor) + " " +
         overflow_name(cap.overflow);
}

// The device path, as the .cu launcher would run it: score, [group choice], top-k,
// [capacity], gates. Outputs are the Routing's arrays.
struct DeviceRouting {
  std::vector<float> scores, select;
  std::vector<int32_t> chosen, experts;
  std::vector<uint8_t> outcome;
  std::vector<float> gates;
};

DeviceRouting device_route(const std::vector<float>& logits, const std::vector<float>& bias,
                           const RouteCase& c, const CapacityConfig& cap, ThreadOrder order) {
  DeviceRouting d;
  const int64_t R = c.rows;
  const int32_t E = c.experts, K = c.k;
  d.scores = logits;
  detail::ScoreParams sp{d.scores.data(), E, R, E, !c.sigmoid};
  run_grid(detail::score_launch(sp), order, [&](HostBlock& b) { detail::score_block(b, sp); });
  const float* select = d.scores.data();
  if (c.n_group > 1 || c.bias) {
    d.select.assign(d.scores.size(), 0.0f);
    detail::GroupChoiceParams gp{
        d.scores.data(), c.bias ? bias.data() : nullptr, R, E, c.n_group, c.topk_group,
        d.select.data()};
    detail::Launch l;
    EXPECT_EQ(detail::group_choice_prepare(gp, l), "");
    run_grid(l, order, [&](HostBlock& b) { detail::group_choice_block(b, gp); });
    select = d.select.data();
  }
  d.chosen.assign(R * K, -7);
  std::vector<float> vals(R * K);
  detail::TopkParams tp{select, E, R, E, K, d.chosen.data(), vals.data()};
  detail::Launch tl;
  EXPECT_EQ(detail::topk_prepare(tp, tl), "");
  run_grid(tl, order, [&](HostBlock& b) { detail::topk_block(b, tp); });
  d.experts = d.chosen;
  d.outcome.assign(R * K, detail::kRouteKept);
  if (cap.enabled()) {
    d.experts.assign(R * K, -7);  // every slot must be written
    d.outcome.assign(R * K, 0xee);
    detail::CapacityParams cp{
        select,           d.chosen.data(), R, E, K, expert_capacity(R, K, E, cap.factor),
        d.experts.data(), d.outcome.data()};
    EXPECT_EQ(detail::capacity_check(cp), "");
    run_capacity(cp, cap.overflow, order);
  }
  d.gates.assign(R * K, 7.0f);
  detail::GatesParams gp{
      d.scores.data(), d.chosen.data(),  d.experts.data(), R, E, K, c.rule.norm_topk_prob,
      c.rule.scale,    c.rule.denom_eps, d.gates.data()};
  run_grid(detail::gates_launch(gp), order, [&](HostBlock& b) { detail::gates_block(b, gp); });
  return d;
}

// moe_router.cc's path, as Engine::Impl::route calls it.
Routing cpu_route(const std::vector<float>& logits, const std::vector<float>& bias,
                  const RouteCase& c, const CapacityConfig& cap, std::vector<float>* select_out) {
  const int64_t R = c.rows;
  const int32_t E = c.experts;
  std::vector<float> scores = logits;
  for (int64_t r = 0; r < R; ++r) {
    if (c.sigmoid) {
      sigmoid_inplace(scores.data() + r * E, E);
    } else {
      softmax_inplace(scores.data() + r * E, E);
    }
  }
  const float* select = scores.data();
  if (c.n_group > 1 || c.bias) {
    select_out->assign(scores.size(), 0.0f);
    group_limited_choice(scores.data(), R, E, c.bias ? bias.data() : nullptr, c.n_group,
                         c.topk_group, select_out->data());
    select = select_out->data();
  }
  Routing r;
  route_tokens(select, scores.data(), R, E, c.k, c.rule, cap, R, &r);
  return r;
}

// Logits with ties: quantized to a coarse grid so that equal scores (and equal group sums)
// occur, which the tie rules must settle as the CPU does.
std::vector<float> tied_logits(std::mt19937& rng, size_t n, bool coarse) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = coarse ? std::round(nd(rng) * 2.0f) / 2.0f : nd(rng);
  return v;
}

void check_case(const RouteCase& c, std::mt19937& rng) {
  const CapacityConfig caps[] = {
      {0.0, Overflow::kNone},     {0.5, Overflow::kDrop},    {1.0, Overflow::kDrop},
      {4.0, Overflow::kDrop},     {0.5, Overflow::kReroute}, {1.0, Overflow::kReroute},
      {1.25, Overflow::kReroute}, {4.0, Overflow::kReroute},
  };
  for (bool coarse : {false, true}) {
    const auto logits = tied_logits(rng, static_cast<size_t>(c.rows) * c.experts, coarse);
    std::vector<float> bias(c.experts);
    for (float& b : bias) b = std::round(std::normal_distribution<float>(0.0f, 0.3f)(rng) * 8) / 8;
    for (const CapacityConfig& cap : caps) {
      SCOPED_TRACE(describe(c, cap) + (coarse ? " ties" : ""));
      std::vector<float> want_select;
      const Routing want = cpu_route(logits, bias, c, cap, &want_select);
      for (ThreadOrder order : kOrders) {
        const DeviceRouting got = device_route(logits, bias, c, cap, order);
        if (!want_select.empty()) {
          ASSERT_EQ(first_diff(got.select.data(), want_select.data(), want_select.size()), -1);
        }
        ASSERT_EQ(got.chosen, want.chosen);
        ASSERT_EQ(got.experts, want.experts);
        for (size_t i = 0; i < got.outcome.size(); ++i) {
          ASSERT_EQ(got.outcome[i], static_cast<uint8_t>(want.outcome[i])) << "slot " << i;
        }
        ASSERT_EQ(first_diff(got.gates.data(), want.gates.data(), want.gates.size()), -1);
      }
    }
  }
}

TEST(MoeRouteGrid, SoftmaxAndSigmoidTopKCapacityGatesMatchTheCpuBits) {
  std::mt19937 rng(24);
  const int64_t rows[] = {1, 2, 3, 7, 16, 33, 64, 65};
  const int32_t experts[] = {4, 8, 16, 60, 64};
  const int32_t ks[] = {1, 2, 4, 6, 8};
  for (int64_t r : rows) {
    for (int32_t e : experts) {
      for (int32_t k : ks) {
        if (k > e) continue;
        RouteCase c{r, e, k, (r + e + k) % 2 == 1, 1, 1, false, GateRule{}};
        c.rule.norm_topk_prob = k > 1 && (r % 3 != 0);
        check_case(c, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// DeepSeek-V3: sigmoid scores, biased group-limited choice, gates from the unbiased scores
// normalized with eps 1e-20 and scaled.
TEST(MoeRouteGrid, DeepSeekGroupLimitedChoiceMatchesTheCpuBits) {
  std::mt19937 rng(25);
  struct G {
    int32_t experts, n_group, topk_group, k;
  };
  const G gs[] = {{8, 4, 2, 2},  {16, 4, 1, 2}, {16, 8, 3, 4}, {32, 8, 4, 8},
                  {64, 8, 4, 8}, {60, 4, 2, 6}, {4, 4, 4, 1},  {64, 16, 2, 6}};
  for (const G& g : gs) {
    for (int64_t r : {1, 5, 17, 65}) {
      for (bool bias : {false, true}) {
        RouteCase c{r,         g.experts,    g.k,  true,
                    g.n_group, g.topk_group, bias, GateRule{true, 2.5f, 1e-20f}};
        check_case(c, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
  // Bias alone (n_group 1) still goes through the choice kernel, and softmax with groups.
  RouteCase c{9, 16, 2, true, 1, 1, true, GateRule{}};
  check_case(c, rng);
  RouteCase s{9, 16, 3, false, 4, 2, false, GateRule{}};
  check_case(s, rng);
}

// The capacity grid above must actually drop and reroute (else it tests kept slots only).
TEST(MoeRouteGrid, TheGridDropsAndReroutes) {
  std::mt19937 rng(26);
  RouteCase c{64, 8, 2, false, 1, 1, false, GateRule{}};
  const auto logits = tied_logits(rng, 64 * 8, false);
  int dropped = 0, rerouted = 0;
  for (Overflow o : {Overflow::kDrop, Overflow::kReroute}) {
    const DeviceRouting d = device_route(logits, {}, c, {0.5, o}, ThreadOrder::kReverse);
    for (uint8_t v : d.outcome) {
      dropped += v == detail::kRouteDropped;
      rerouted += v == detail::kRouteRerouted;
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GT(rerouted, 0);
}

// DeepSeek's denominator eps (1e-20) only shows in the bits when the chosen scores are as
// small: sigmoid of logits near −48 sums to ~1e-20. There the device gates equal the CPU's,
// and differ from what eps 0 gives (so the eps reaches the device code).
TEST(MoeRouteGrid, DenominatorEpsReachesTheGates) {
  std::mt19937 rng(27);
  const RouteCase c{5, 16, 4, true, 4, 2, true, GateRule{true, 2.5f, 1e-20f}};
  RouteCase no_eps = c;
  no_eps.rule.denom_eps = 0.0f;
  std::vector<float> logits = tied_logits(rng, 5 * 16, false);
  for (float& v : logits) v = v * 0.5f - 48.0f;
  std::vector<float> bias(16, 0.0f);
  const CapacityConfig none{};
  std::vector<float> select;
  const Routing want = cpu_route(logits, bias, c, none, &select);
  const DeviceRouting got = device_route(logits, bias, c, none, ThreadOrder::kReverse);
  const DeviceRouting other = device_route(logits, bias, no_eps, none, ThreadOrder::kReverse);
  EXPECT_EQ(first_diff(got.gates.data(), want.gates.data(), want.gates.size()), -1);
  EXPECT_NE(first_diff(got.gates.data(), other.gates.data(), want.gates.size()), -1);
}

TEST(MoeRouteGrid, RefusesWhatTheKernelsDoNotTake) {
  detail::CapacityParams cp{};
  cp.experts = 4;
  cp.k = 5;
  EXPECT_NE(detail::capacity_check(cp), "");
  detail::GroupChoiceParams gp{};
  gp.n_group = 65;
  detail::Launch l;
  EXPECT_NE(detail::group_choice_prepare(gp, l), "");
}

}  // namespace
}  // namespace llmrr::kernels::cuda::testing
