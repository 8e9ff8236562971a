// The MoE layer's device path (moe_layer_device.h) on a real fixture run: the CPU engine runs
// tiny-mixtral / tiny-qwen2moe / tiny-qwen3moe / tiny-deepseek / builtin tiny-moe (two
// requests, so steps batch prefill with decode), an
// observer takes, at one MoE layer of every step, the layer's input (`mlp_norm` rows), every
// plan the engine asked for (router, each expert's gate / up / down, shared expert, combine),
// the routing and the combine's rows; the grid runner then runs the device path on the
// fixture's layer weights with those inputs and plans, and must give the engine's routing and
// combine rows bit for bit. Invariant and production (atomics: arrival orders) policies,
// capacity with drop and reroute, fp32 and bf16 weights, bf16 activations, threads forward
// and reversed.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/policy.h"
#include "moe_layer_device.h"
#include "test_util.h"

namespace llmrr::kernels::cuda::testing {
namespace {

using kernels::testing::first_diff;

struct StepCapture {
  int64_t rows = 0;
  std::vector<float> h, out, gates;
  std::vector<int32_t> experts;
  std::vector<uint8_t> outcome;
  std::map<uint64_t, Plan> plans;  // by SiteId::packed()
};

struct LayerCapture : Observer {
  int16_t layer;
  std::map<int64_t, StepCapture> steps;
  explicit LayerCapture(int16_t l) : layer(l) {}
  bool wants_rows(SiteId s) override {
    return s.layer == layer && (s.kind == SiteKind::kMlpNorm || s.kind == SiteKind::kCombine);
  }
  void on_plan(int64_t step, SiteId s, const Plan& p) override {
    if (s.layer == layer) steps[step].plans[s.packed()] = p;
  }
  void on_rows(const RowsView& v) override {
    if (v.data == nullptr || v.batch_rows != nullptr) return;
    StepCapture& c = steps[v.step];
    std::vector<float>& dst = v.site.kind == SiteKind::kMlpNorm ? c.h : c.out;
    dst.clear();
    for (int64_t r = 0; r < v.rows; ++r) {
      dst.insert(dst.end(), v.data + r * v.ld, v.data + r * v.ld + v.cols);
    }
    c.rows = v.rows;
  }
  void on_routing(const RoutingView& v) override {
    if (v.layer != layer) return;
    StepCapture& c = steps[v.step];
    const size_t n = static_cast<size_t>(v.rows) * v.k;
    c.experts.assign(v.experts, v.experts + n);
    c.gates.assign(v.gates, v.gates + n);
    c.outcome.clear();
    for (size_t i = 0; i < n; ++i) c.outcome.push_back(static_cast<uint8_t>(v.outcome[i]));
  }
};

const std::vector<float>& tensor(const LoadedModel& m, const std::string& name) {
  static const std::vector<float> none;
  auto it = m.tensors.find(name);
  EXPECT_TRUE(it != m.tensors.end()) << name;
  return it == m.tensors.end() ? none : it->second.data;
}

// The layer's shape and weights as the engine reads them (ModelConfig, HF tensor names).
// The layer's MoE tensor prefix: Mixtral's block_sparse_moe., else mlp.
std::string moe_prefix(const LoadedModel& m, int layer) {
  const std::string l = "model.layers." + std::to_string(layer) + ".";
  return m.tensors.count(l + "block_sparse_moe.gate.weight") ? l + "block_sparse_moe." : l + "mlp.";
}

LayerShape shape_of(const ModelConfig& c, const LoadedModel& m, int layer) {
  const std::string p = moe_prefix(m, layer);
  LayerShape s{
      "fixture",
      c.hidden,
      c.moe_ffn,
      c.experts,
      c.top_k,
      c.scoring == RouterScoring::kSigmoid,
      c.n_group,
      c.topk_group,
      c.router_bias,
      GateRule{c.norm_topk_prob, c.routed_scaling, c.arch == Arch::kDeepseekV3 ? 1e-20f : 0.0f},
      0,
      m.tensors.count(p + "shared_expert_gate.weight") > 0};
  for (const char* sh : {"shared_expert.", "shared_experts."}) {
    auto it = m.tensors.find(p + sh + "up_proj.weight");
    if (it != m.tensors.end()) s.SF = it->second.shape[0];
  }
  return s;
}

Weights weights_of(const LoadedModel& m, const LayerShape& s, int layer) {
  const std::string p = moe_prefix(m, layer);
  const bool mixtral = p.ends_with("block_sparse_moe.");
  Weights w;
  w.router = tensor(m, p + "gate.weight");
  if (s.bias) w.bias = tensor(m, p + "gate.e_score_correction_bias");
  for (int32_t e = 0; e < s.E; ++e) {
    const std::string q = p + "experts." + std::to_string(e) + ".";
    w.gate.push_back(tensor(m, q + (mixtral ? "w1.weight" : "gate_proj.weight")));
    w.up.push_back(tensor(m, q + (mixtral ? "w3.weight" : "up_proj.weight")));
    w.down.push_back(tensor(m, q + (mixtral ? "w2.weight" : "down_proj.weight")));
  }
  if (s.SF) {
    const std::string q =
        p + (m.tensors.count(p + "shared_expert.up_proj.weight") ? "shared_expert."
                                                                 : "shared_experts.");
    w.sgate = tensor(m, q + "gate_proj.weight");
    w.sup = tensor(m, q + "up_proj.weight");
    w.sdown = tensor(m, q + "down_proj.weight");
    if (s.shared_gate) w.shared_gate = tensor(m, p + "shared_expert_gate.weight");
  }
  return w;
}

// The plans the engine used at this step (experts with no rows had none: unused).
Plans plans_of(const StepCapture& c, const LayerShape& s, int16_t layer) {
  auto get = [&](SiteKind kind, int16_t expert) {
    auto it = c.plans.find(SiteId{kind, layer, expert}.packed());
    return it == c.plans.end() ? Plan{} : it->second;
  };
  Plans p;
  p.router = get(SiteKind::kRouter, -1);
  p.sgate = get(SiteKind::kSharedGate, -1);
  p.sup = get(SiteKind::kSharedUp, -1);
  p.sdown = get(SiteKind::kSharedDown, -1);
  p.sscale = get(SiteKind::kSharedScale, -1);
  p.combine = get(SiteKind::kCombine, -1);
  for (int32_t e = 0; e < s.E; ++e) {
    p.gate.push_back(get(SiteKind::kExpertGate, static_cast<int16_t>(e)));
    p.up.push_back(get(SiteKind::kExpertUp, static_cast<int16_t>(e)));
    p.down.push_back(get(SiteKind::kExpertDown, static_cast<int16_t>(e)));
  }
  return p;
}

std::vector<int32_t> bytes_of(const std::string& text) {
  return std::vector<int32_t>(text.begin(), text.end());
}

struct FixtureCase {
  const char* dir;
  int16_t layer;
};

void PrintTo(const FixtureCase& c, std::ostream* os) {
  *os << c.dir << " L" << c.layer;
}

class MoeFixtureGridTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(MoeFixtureGridTest, DevicePathGivesTheEngineRoutingAndCombineBits) {
  const FixtureCase fc = GetParam();
  const std::string spec = std::string(fc.dir).starts_with("builtin:")
                               ? std::string(fc.dir)
                               : std::string(LLMRR_FIXTURES_DIR) + "/" + fc.dir;
  auto loaded = load_model(spec);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const LoadedModel& m = *loaded;
  const CapacityConfig caps[] = {
      {0.0, Overflow::kNone}, {0.75, Overflow::kDrop}, {0.75, Overflow::kReroute}};
  int checked_steps = 0, split_plans = 0, not_kept = 0;
  for (const auto& [wt, bf16_act] :
       {std::pair{WeightType::kF32, false}, std::pair{WeightType::kBF16, false},
        std::pair{WeightType::kBF16, true}}) {
    for (bool production : {false, true}) {
      for (const CapacityConfig& cap : caps) {
        EngineConfig cfg;
        cfg.capacity = cap;
        cfg.weight_type = wt;
        cfg.bf16_activations = bf16_act;
        std::shared_ptr<Policy> policy;
        if (production) {
          ProductionOptions po;
          po.atomics = true;
          policy = make_production_policy(po);
        } else {
          policy = make_invariant_policy();
        }
        auto e = Engine::create(m, cfg, policy);
        ASSERT_TRUE(e.ok()) << e.status().message();
        LayerCapture cap_obs(fc.layer);
        (*e)->add_observer(&cap_obs);
        RequestSpec a, b;
        a.id = 1;
        a.prompt = bytes_of("Expert capacity under load");
        a.max_tokens = 3;
        a.stop_at_eos = false;
        b.id = 2;
        b.prompt = bytes_of("A second request arrives");
        b.max_tokens = 3;
        b.arrival_step = 1;
        b.stop_at_eos = false;
        ASSERT_TRUE((*e)->add_request(a).ok());
        ASSERT_TRUE((*e)->add_request(b).ok());
        ASSERT_TRUE((*e)->run().ok());
        const LayerShape s = shape_of((*e)->model_config(), m, fc.layer);
        const Weights w = weights_of(m, s, fc.layer);
        for (const auto& [step, c] : cap_obs.steps) {
          SCOPED_TRACE(::testing::Message() << fc.dir << " L" << fc.layer << " step " << step
                                            << (wt == WeightType::kBF16 ? " bf16" : " f32")
                                            << (bf16_act ? " bf16-activations" : "")
                                            << (production ? " production" : " invariant") << " "
                                            << overflow_name(cap.overflow));
          ASSERT_EQ(c.h.size(), static_cast<size_t>(c.rows * s.H));
          ASSERT_EQ(c.out.size(), c.h.size());
          const Plans P = plans_of(c, s, fc.layer);
          for (const Plan& p : P.gate) split_plans += p.splits > 1;
          for (uint8_t o : c.outcome) not_kept += o != detail::kRouteKept;
          for (ThreadOrder order : kOrders) {
            const DeviceOut d = device_layer(s, w, wt, P, cap, c.h, c.rows, order, bf16_act);
            ASSERT_EQ(d.experts, c.experts);
            ASSERT_EQ(d.outcome, c.outcome);
            ASSERT_EQ(first_diff(d.gates.data(), c.gates.data(), c.gates.size()), -1);
            const int64_t diff = first_diff(d.out.data(), c.out.data(), c.out.size());
            ASSERT_EQ(diff, -1) << "first diff at " << diff << ": " << (diff >= 0 ? d.out[diff] : 0)
                                << " vs " << (diff >= 0 ? c.out[diff] : 0);
          }
          ++checked_steps;
        }
      }
    }
  }
  // The run must have given the comparison something to compare: steps, split plans from
  // the production policy, and slots that capacity dropped or rerouted.
  EXPECT_GE(checked_steps, 18 * 3);
  EXPECT_GT(split_plans, 0);
  EXPECT_GT(not_kept, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeFixtureGridTest,
                         ::testing::Values(FixtureCase{"tiny-mixtral", 1},
                                           FixtureCase{"tiny-qwen2moe", 2},
                                           FixtureCase{"tiny-qwen3moe", 2},
                                           FixtureCase{"tiny-deepseek", 1},
                                           FixtureCase{"builtin:tiny-moe", 1}),
                         [](const ::testing::TestParamInfo<FixtureCase>& info) {
                           std::string n = info.param.dir;
                           for (char& ch : n) ch = (ch == '-' || ch == ':') ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace llmrr::kernels::cuda::testing
