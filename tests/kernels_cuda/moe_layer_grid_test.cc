// A whole MoE layer's device path run by the CPU grid runner — router GEMM, scores,
// [group choice], top-k, capacity, gates (moe_route_phases.h), grouping by expert, the
// experts' gate / up GEMMs grouped by expert with one plan each, swiglu, the down GEMMs,
// combine, the shared expert (moe_experts_phases.h) — bit for bit against the CPU kernels the
// engine's moe_mlp (runtime/src/engine/moe.cc) runs on the same inputs in the same order,
// for the MoE fixtures' shapes, invariant and split plans, fp32 and bf16 weights, threads
// forward and reversed.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/threadpool.h"
#include "llmrr/runtime/moe_router.h"
#include "moe_layer_device.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr::kernels::cuda::testing {
namespace {

using kernels::testing::first_diff;
using kernels::testing::gemm_plan;
using kernels::testing::random_vec;

// The MoE fixtures' layer shapes (tests/fixtures/*/config.json) and one wider one.
const LayerShape kShapes[] = {
    {"tiny-mixtral", 64, 32, 4, 2, false, 1, 1, false, GateRule{true, 1.0f, 0.0f}, 0, false},
    {"tiny-qwen2moe", 64, 32, 4, 2, false, 1, 1, false, GateRule{false, 1.0f, 0.0f}, 48, true},
    {"tiny-qwen3moe", 64, 16, 16, 4, false, 1, 1, false, GateRule{true, 1.0f, 0.0f}, 0, false},
    {"tiny-deepseek", 64, 16, 16, 4, true, 4, 2, true, GateRule{true, 2.5f, 1e-20f}, 16, false},
    {"wide", 96, 80, 8, 2, false, 1, 1, false, GateRule{true, 1.0f, 0.0f}, 40, true},
};

Weights make_weights(const LayerShape& s, std::mt19937& rng) {
  Weights w;
  w.router = random_vec(rng, s.E * s.H, 0.3f);
  w.bias = random_vec(rng, s.E, 0.1f);
  for (int32_t e = 0; e < s.E; ++e) {
    w.gate.push_back(random_vec(rng, s.F * s.H, 0.2f));
    w.up.push_back(random_vec(rng, s.F * s.H, 0.2f));
    w.down.push_back(random_vec(rng, s.H * s.F, 0.2f));
  }
  if (s.SF) {
    w.sgate = random_vec(rng, s.SF * s.H, 0.2f);
    w.sup = random_vec(rng, s.SF * s.H, 0.2f);
    w.sdown = random_vec(rng, s.H * s.SF, 0.2f);
    w.shared_gate = random_vec(rng, s.H, 0.2f);
  }
  return w;
}

Plans invariant_plans(const LayerShape& s) {
  Plans p;
  p.router = p.sgate = p.sup = p.sdown = p.sscale = gemm_plan(1, 0);
  p.gate.assign(s.E, gemm_plan(1, 0));
  p.up = p.down = p.gate;
  p.combine.op = OpKind::kCombine;
  return p;
}

// Production-like: split-K, k-tiles and arrival orders differing from expert to expert and
// kind to kind, and a combine whose arrival order differs from row to row.
Plans split_plans(const LayerShape& s, int64_t rows) {
  const std::vector<Plan> menu = {
      gemm_plan(2, 16),
      gemm_plan(3, 0, {2, 0, 1}),
      gemm_plan(4, 16, {3, 1, 0, 2}),
      gemm_plan(1, 32),
      gemm_plan(5, 0),
      gemm_plan(8, 16),
      gemm_plan(2, 0, {1, 0}),
  };
  Plans p;
  p.router = menu[0];
  p.sgate = menu[1];
  p.sup = menu[2];
  p.sdown = menu[4];
  p.sscale = menu[6];
  for (int32_t e = 0; e < s.E; ++e) {
    p.gate.push_back(menu[e % menu.size()]);
    p.up.push_back(menu[(e + 3) % menu.size()]);
    p.down.push_back(menu[(e + 5) % menu.size()]);
  }
  p.combine.op = OpKind::kCombine;
  p.combine.order = CombineOrder::kArrival;
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < s.K; ++i) p.combine.arrival.push_back((i + r) % s.K);
  }
  return p;
}

// The CPU: engine/moe.cc's moe_mlp with the engine's kernels, in its order.
std::vector<float> cpu_layer(const LayerShape& s, const Weights& w, WeightType wt, const Plans& P,
                             const CapacityConfig& cap, const std::vector<float>& h, int64_t R,
                             Routing* routing) {
  ThreadPool pool(1);
  const int64_t H = s.H, F = s.F;
  const int32_t E = s.E, K = s.K;
  auto pack = [&](const std::vector<float>& v, int64_t n, int64_t k) {
    return PackedWeight::pack(v.data(), n, k, wt);
  };
  std::vector<float> scores(R * E);
  gemm(h.data(), H, R, pack(w.router, E, H), scores.data(), E, P.router, pool);
  for (int64_t r = 0; r < R; ++r) {
    if (s.sigmoid) {
      sigmoid_inplace(scores.data() + r * E, E);
    } else {
      softmax_inplace(scores.data() + r * E, E);
    }
  }
  std::vector<float> choice;
  const float* select = scores.data();
  if (s.n_group > 1 || s.bias) {
    choice.resize(scores.size());
    group_limited_choice(scores.data(), R, E, s.bias ? w.bias.data() : nullptr, s.n_group,
                         s.topk_group, choice.data());
    select = choice.data();
  }
  route_tokens(select, scores.data(), R, E, K, s.rule, cap, R, routing);
  std::vector<int64_t> count(E + 1, 0), base(E + 1, 0);
  for (int32_t e : routing->experts) {
    if (e >= 0) ++count[e];
  }
  for (int32_t e = 0; e < E; ++e) base[e + 1] = base[e] + count[e];
  const int64_t total = base[E];
  std::vector<int32_t> src(R * K, -1), erows(total);
  std::vector<int64_t> fill(base.begin(), base.end() - 1);
  for (int32_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < R; ++r) {
      for (int i = 0; i < K; ++i) {
        if (routing->experts[r * K + i] != e) continue;
        const int64_t j = fill[e]++;
        erows[j] = static_cast<int32_t>(r);
        src[r * K + i] = static_cast<int32_t>(j);
      }
    }
  }
  const int64_t T1 = std::max<int64_t>(total, 1);
  std::vector<float> eb(T1 * H), eg(T1 * F), eu(T1 * F), ea(T1 * F), eo(T1 * H);
  for (int64_t j = 0; j < total; ++j) {
    std::copy_n(h.data() + erows[j] * H, H, eb.data() + j * H);
  }
  for (int32_t e = 0; e < E; ++e) {
    if (!count[e]) continue;
    gemm(eb.data() + base[e] * H, H, count[e], pack(w.gate[e], F, H), eg.data() + base[e] * F, F,
         P.gate[e], pool);
  }
  for (int32_t e = 0; e < E; ++e) {
    if (!count[e]) continue;
    gemm(eb.data() + base[e] * H, H, count[e], pack(w.up[e], F, H), eu.data() + base[e] * F, F,
         P.up[e], pool);
  }
  if (total > 0) swiglu(eg.data(), F, eu.data(), F, total, F, ea.data(), F, pool);
  for (int32_t e = 0; e < E; ++e) {
    if (!count[e]) continue;
    gemm(ea.data() + base[e] * F, F, count[e], pack(w.down[e], H, F), eo.data() + base[e] * H, H,
         P.down[e], pool);
  }
  std::vector<float> sd;
  if (s.SF) {
    const int64_t SF = s.SF;
    std::vector<float> sg(R * SF), su(R * SF), sa(R * SF);
    sd.resize(R * H);
    gemm(h.data(), H, R, pack(w.sgate, SF, H), sg.data(), SF, P.sgate, pool);
    gemm(h.data(), H, R, pack(w.sup, SF, H), su.data(), SF, P.sup, pool);
    swiglu(sg.data(), SF, su.data(), SF, R, SF, sa.data(), SF, pool);
    gemm(sa.data(), SF, R, pack(w.sdown, H, SF), sd.data(), H, P.sdown, pool);
    if (s.shared_gate) {
      std::vector<float> sscale(R);
      gemm(h.data(), H, R, pack(w.shared_gate, 1, H), sscale.data(), 1, P.sscale, pool);
      sigmoid_inplace(sscale.data(), R);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t j = 0; j < H; ++j) sd[r * H + j] = sscale[r] * sd[r * H + j];
      }
    }
  }
  std::vector<float> comb(R * H);
  moe_combine(eo.data(), H, src.data(), routing->gates.data(), R, K, H, comb.data(), H, P.combine,
              pool);
  if (s.SF) {
    for (int64_t i = 0; i < R * H; ++i) comb[i] = comb[i] + sd[i];
  }
  return comb;
}

class MoeLayerGridTest : public ::testing::TestWithParam<LayerShape> {};

TEST_P(MoeLayerGridTest, DevicePathMatchesTheCpuLayerBits) {
  const LayerShape s = GetParam();
  std::mt19937 rng(2024);
  const Weights w = make_weights(s, rng);
  const CapacityConfig caps[] = {
      {0.0, Overflow::kNone}, {0.75, Overflow::kDrop}, {0.75, Overflow::kReroute}};
  for (int64_t R : {1, 3, 17}) {
    const std::vector<float> h = random_vec(rng, R * s.H);
    for (bool split : {false, true}) {
      const Plans P = split ? split_plans(s, R) : invariant_plans(s);
      for (WeightType wt : {WeightType::kF32, WeightType::kBF16}) {
        for (const CapacityConfig& cap : caps) {
          SCOPED_TRACE(::testing::Message()
                       << s.name << " rows=" << R << (split ? " split" : " invariant")
                       << (wt == WeightType::kBF16 ? " bf16 " : " f32 ")
                       << overflow_name(cap.overflow));
          Routing want_r;
          const std::vector<float> want = cpu_layer(s, w, wt, P, cap, h, R, &want_r);
          for (ThreadOrder order : kOrders) {
            const DeviceOut got = device_layer(s, w, wt, P, cap, h, R, order);
            ASSERT_EQ(got.experts, want_r.experts);
            for (size_t i = 0; i < got.outcome.size(); ++i) {
              ASSERT_EQ(got.outcome[i], static_cast<uint8_t>(want_r.outcome[i]));
            }
            ASSERT_EQ(first_diff(got.gates.data(), want_r.gates.data(), got.gates.size()), -1);
            const int64_t d = first_diff(got.out.data(), want.data(), want.size());
            ASSERT_EQ(d, -1) << "first diff at " << d << ": " << (d >= 0 ? got.out[d] : 0) << " vs "
                             << (d >= 0 ? want[d] : 0);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeLayerGridTest, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<LayerShape>& info) {
                           std::string n = info.param.name;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// The plans reach the device code: the split plans give other bits than the invariant ones
// (so the comparison above is not between two runs that ignore their plans).
TEST(MoeLayerGrid, SplitPlansChangeBits) {
  const LayerShape s = kShapes[4];
  std::mt19937 rng(7);
  const Weights w = make_weights(s, rng);
  const int64_t R = 9;
  const std::vector<float> h = random_vec(rng, R * s.H);
  const CapacityConfig none{};
  const DeviceOut a =
      device_layer(s, w, WeightType::kF32, invariant_plans(s), none, h, R, ThreadOrder::kForward);
  const DeviceOut b =
      device_layer(s, w, WeightType::kF32, split_plans(s, R), none, h, R, ThreadOrder::kForward);
  EXPECT_NE(first_diff(a.out.data(), b.out.data(), a.out.size()), -1);
}

}  // namespace
}  // namespace llmrr::kernels::cuda::testing
