// A whole MoE layer's device path for the CPU grid runner (moe_layer_grid_test.cc,
// moe_fixture_grid_test.cc): router GEMM, scores, [group choice], top-k, capacity, gates
// (moe_route_phases.h), grouping by expert, the experts' gate / up GEMMs grouped by expert
// with one plan each, swiglu, the down GEMMs, combine and the shared expert
// (moe_experts_phases.h), each launched as its .cu wrapper would launch it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <vector>

#include "cuda/gemm_phases.h"
#include "cuda/moe_combine_phases.h"
#include "cuda/moe_experts_phases.h"
#include "cuda/moe_route_phases.h"
#include "cuda/select_phases.h"
#include "cuda/swiglu_phases.h"
#include "grid_runner.h"
#include "llmrr/kernels/numerics_hd.h"
#include "llmrr/kernels/plan.h"
#include "llmrr/runtime/moe_router.h"

namespace llmrr::kernels::cuda::testing {

// One MoE layer's shape and routing rule (a model config's MoE part).
struct LayerShape {
  const char* name;
  int64_t H, F;
  int32_t E, K;
  bool sigmoid = false;
  int32_t n_group = 1, topk_group = 1;
  bool bias = false;
  GateRule rule;
  int64_t SF = 0;  // shared expert's FFN width (0: none)
  bool shared_gate = false;
};

inline void PrintTo(const LayerShape& s, std::ostream* os) {
  *os << s.name;
}

struct Weights {
  std::vector<float> router, bias, shared_gate;
  std::vector<std::vector<float>> gate, up, down;  // per expert, [n, k] row-major
  std::vector<float> sgate, sup, sdown;            // shared expert (SF > 0)
};

// Every GEMM site's plan and the combine's, as the engine asks its plan source.
struct Plans {
  Plan router, sgate, sup, sdown, sscale, combine;
  std::vector<Plan> gate, up, down;  // per expert
};

// Device weights: K-major, fp32 or bf16 bits (what DeviceWeight holds).
struct DevW {
  std::vector<float> f;
  std::vector<uint16_t> b;
  const void* ptr(WeightType wt) const {
    return wt == WeightType::kBF16 ? static_cast<const void*>(b.data())
                                   : static_cast<const void*>(f.data());
  }
};
// Capacity with the overflow rule's device body (drop: a prefix count per expert; reroute:
// one block walking the rows in order), on the grid runner.
inline void run_capacity(const detail::CapacityParams& cp, Overflow overflow, ThreadOrder order) {
  if (overflow == Overflow::kDrop) {
    run_grid(detail::capacity_drop_launch(cp), order,
             [&](HostBlock& b) { detail::capacity_drop_block(b, cp); });
  } else {
    run_grid(detail::capacity_reroute_launch(cp), order,
             [&](HostBlock& b) { detail::capacity_reroute_block(b, cp); });
  }
}

inline DevW dev_weight(const std::vector<float>& v, int64_t n, int64_t k) {
  return DevW{detail::gemm_pack_f32(v.data(), n, k), detail::gemm_pack_bf16(v.data(), n, k)};
}

// One plain GEMM launch (gemm.cu's path).
inline void dev_gemm(const float* x, int64_t ldx, int64_t m, const DevW& w, WeightType wt,
                     int64_t n, int64_t k, float* y, int64_t ldy, const Plan& plan,
                     ThreadOrder order) {
  detail::GemmParams p{};
  detail::Launch l;
  std::vector<uint16_t> arrival;
  ASSERT_EQ(detail::gemm_prepare(plan, m, n, k, p, l, arrival), "");
  p.x = x;
  p.ldx = ldx;
  p.w = w.ptr(wt);
  p.bf16 = wt == WeightType::kBF16;
  p.y = y;
  p.ldy = ldy;
  p.order = arrival.empty() ? nullptr : arrival.data();
  run_grid(l, order, [&](HostBlock& b) { detail::gemm_block(b, p); });
}

// The grouped expert GEMM: per expert params from its plan and weight, one launch.
inline void dev_grouped_gemm(const float* x, int64_t ldx, const std::vector<DevW>& w, WeightType wt,
                             int64_t n, int64_t k, const std::vector<int64_t>& base,
                             const std::vector<int32_t>& erows, int64_t max_rows, float* y,
                             const std::vector<Plan>& plans, ThreadOrder order) {
  const int32_t E = static_cast<int32_t>(w.size());
  std::vector<detail::GemmParams> ps(E);
  std::vector<std::vector<uint16_t>> arrivals(E);
  for (int32_t e = 0; e < E; ++e) {
    detail::Launch unused;
    ASSERT_EQ(
        detail::gemm_prepare(plans[e], base[e + 1] - base[e], n, k, ps[e], unused, arrivals[e]),
        "");
    ps[e].x = x;
    ps[e].ldx = ldx;
    ps[e].w = w[e].ptr(wt);
    ps[e].bf16 = wt == WeightType::kBF16;
    ps[e].y = y;
    ps[e].ldy = n;
    ps[e].order = arrivals[e].empty() ? nullptr : arrivals[e].data();
  }
  detail::GroupedGemmParams g{ps.data(), E, base.data(), erows.data()};
  const detail::Launch l = detail::grouped_gemm_launch(ps.data(), E, n, max_rows);
  run_grid(l, order, [&](HostBlock& b) { detail::grouped_gemm_block(b, g); });
}

struct DeviceOut {
  std::vector<float> out, gates;
  std::vector<int32_t> experts, src;
  std::vector<uint8_t> outcome;
};

// bf16_act: the engine's bf16_activations. Its roundings after GEMMs, swiglu and the sigmoid
// gate are the CUDA engine's round_bf16 pass (not a phase body), done here on the host; the
// ones of the final sums are moe_finish_block's.
inline DeviceOut device_layer(const LayerShape& s, const Weights& w, WeightType wt, const Plans& P,
                              const CapacityConfig& cap, const std::vector<float>& h, int64_t R,
                              ThreadOrder order, bool bf16_act = false) {
  auto rnd = [&](std::vector<float>& v) {
    if (!bf16_act) return;
    for (float& x : v) x = numerics::hd::round_to_bf16(x);
  };
  DeviceOut d;
  const int64_t H = s.H, F = s.F;
  const int32_t E = s.E, K = s.K;
  // Routing.
  std::vector<float> scores(R * E, 7.0f);
  dev_gemm(h.data(), H, R, dev_weight(w.router, E, H), wt, E, H, scores.data(), E, P.router, order);
  rnd(scores);
  detail::ScoreParams sp{scores.data(), E, R, E, !s.sigmoid};
  run_grid(detail::score_launch(sp), order, [&](HostBlock& b) { detail::score_block(b, sp); });
  std::vector<float> choice;
  const float* select = scores.data();
  if (s.n_group > 1 || s.bias) {
    choice.assign(scores.size(), 7.0f);
    detail::GroupChoiceParams gp{
        scores.data(), s.bias ? w.bias.data() : nullptr, R, E, s.n_group, s.topk_group,
        choice.data()};
    detail::Launch l;
    EXPECT_EQ(detail::group_choice_prepare(gp, l), "");
    run_grid(l, order, [&](HostBlock& b) { detail::group_choice_block(b, gp); });
    select = choice.data();
  }
  std::vector<int32_t> chosen(R * K, -7);
  std::vector<float> vals(R * K);
  detail::TopkParams tp{select, E, R, E, K, chosen.data(), vals.data()};
  detail::Launch tl;
  EXPECT_EQ(detail::topk_prepare(tp, tl), "");
  run_grid(tl, order, [&](HostBlock& b) { detail::topk_block(b, tp); });
  d.experts = chosen;
  d.outcome.assign(R * K, detail::kRouteKept);
  if (cap.enabled()) {
    detail::CapacityParams cp{
        select,           chosen.data(),   R, E, K, expert_capacity(R, K, E, cap.factor),
        d.experts.data(), d.outcome.data()};
    run_capacity(cp, cap.overflow, order);
  }
  d.gates.assign(R * K, 7.0f);
  detail::GatesParams gp{
      scores.data(), chosen.data(),    d.experts.data(), R, E, K, s.rule.norm_topk_prob,
      s.rule.scale,  s.rule.denom_eps, d.gates.data()};
  run_grid(detail::gates_launch(gp), order, [&](HostBlock& b) { detail::gates_block(b, gp); });
  // Grouping and experts.
  std::vector<int64_t> base(E + 1, -7);
  std::vector<int32_t> erows(R * K, -7);
  d.src.assign(R * K, -7);
  detail::GroupByExpertParams bp{d.experts.data(), R,           E, K, base.data(),
                                 erows.data(),     d.src.data()};
  run_grid(detail::group_by_expert_launch(bp), order,
           [&](HostBlock& b) { detail::group_by_expert_block(b, bp); });
  std::vector<DevW> wg, wu, wd;
  for (int32_t e = 0; e < E; ++e) {
    wg.push_back(dev_weight(w.gate[e], F, H));
    wu.push_back(dev_weight(w.up[e], F, H));
    wd.push_back(dev_weight(w.down[e], H, F));
  }
  const int64_t M = R * K;  // gathered rows at most
  std::vector<float> eg(M * F, 7.0f), eu(M * F, 7.0f), ea(M * F, 7.0f), eo(M * H, 7.0f);
  dev_grouped_gemm(h.data(), H, wg, wt, F, H, base, erows, M, eg.data(), P.gate, order);
  dev_grouped_gemm(h.data(), H, wu, wt, F, H, base, erows, M, eu.data(), P.up, order);
  rnd(eg);
  rnd(eu);
  detail::SwigluParams sw{eg.data(), F, eu.data(), F, base[E], F, ea.data(), F};
  run_grid(detail::swiglu_launch(sw), order, [&](HostBlock& b) { detail::swiglu_block(b, sw); });
  rnd(ea);
  // The down GEMM reads the gathered activations in place: identity rows.
  std::vector<int32_t> ident(M);
  for (int64_t j = 0; j < M; ++j) ident[j] = static_cast<int32_t>(j);
  dev_grouped_gemm(ea.data(), F, wd, wt, H, F, base, ident, M, eo.data(), P.down, order);
  rnd(eo);
  // Shared expert.
  std::vector<float> sd, sscale;
  if (s.SF) {
    const int64_t SF = s.SF;
    std::vector<float> sg(R * SF, 7.0f), su(R * SF, 7.0f), sa(R * SF, 7.0f);
    sd.assign(R * H, 7.0f);
    dev_gemm(h.data(), H, R, dev_weight(w.sgate, SF, H), wt, SF, H, sg.data(), SF, P.sgate, order);
    dev_gemm(h.data(), H, R, dev_weight(w.sup, SF, H), wt, SF, H, su.data(), SF, P.sup, order);
    rnd(sg);
    rnd(su);
    detail::SwigluParams ss{sg.data(), SF, su.data(), SF, R, SF, sa.data(), SF};
    run_grid(detail::swiglu_launch(ss), order, [&](HostBlock& b) { detail::swiglu_block(b, ss); });
    rnd(sa);
    dev_gemm(sa.data(), SF, R, dev_weight(w.sdown, H, SF), wt, H, SF, sd.data(), H, P.sdown, order);
    rnd(sd);
    if (s.shared_gate) {
      sscale.assign(R, 7.0f);
      dev_gemm(h.data(), H, R, dev_weight(w.shared_gate, 1, H), wt, 1, H, sscale.data(), 1,
               P.sscale, order);
      rnd(sscale);
      detail::ScoreParams sg1{sscale.data(), 1, R, 1, false};
      run_grid(detail::score_launch(sg1), order,
               [&](HostBlock& b) { detail::score_block(b, sg1); });
      rnd(sscale);
    }
  }
  // Combine and the shared expert's sum.
  std::vector<float> comb(R * H, 7.0f);
  const std::vector<uint16_t> corder = detail::combine_order(P.combine, R, K);
  detail::CombineParams cp{eo.data(),
                           H,
                           d.src.data(),
                           d.gates.data(),
                           R,
                           K,
                           H,
                           comb.data(),
                           H,
                           corder.empty() ? nullptr : corder.data()};
  run_grid(detail::combine_launch(cp), order,
           [&](HostBlock& b) { detail::moe_combine_block(b, cp); });
  d.out.assign(R * H, 7.0f);
  detail::MoeFinishParams fp{comb.data(),
                             s.SF ? sd.data() : nullptr,
                             s.shared_gate ? sscale.data() : nullptr,
                             R,
                             H,
                             d.out.data(),
                             bf16_act};
  run_grid(detail::moe_finish_launch(fp), order,
           [&](HostBlock& b) { detail::moe_finish_block(b, fp); });
  return d;
}

}  // namespace llmrr::kernels::cuda::testing
