// MoE layers: the router, routing (computed, forced from a trace, or computed and checked
// against it: RoutingSource), the experts grouped by expert, the shared expert, and the
// combine (its arrival order sliced to the computed rows).
#include <algorithm>
#include <cstring>

#include "impl.h"

namespace llmrr {

Status Engine::Impl::route(StepBatch& b, int32_t l) {
  const ModelConfig& c = w.cfg;
  const int64_t R = b.rows();
  const int32_t E = c.experts, K = c.top_k;
  const RouterScoring scoring = cfg.scoring.value_or(c.scoring);
  scores = router_logits;
  for (int64_t r = 0; r < R; ++r) {
    if (scoring == RouterScoring::kSigmoid) {
      kernels::sigmoid_inplace(scores.data() + r * E, E);
    } else {
      kernels::softmax_inplace(scores.data() + r * E, E);
    }
  }
  // DeepSeek-V3: experts are selected by the biased, group-limited scores; gates come from
  // the unbiased ones (moe_router.h).
  const float* select = scores.data();
  if (c.n_group > 1 || c.router_bias) {
    const std::vector<float>& bias = w.layers[l].router_bias;
    choice.resize(scores.size());
    group_limited_choice(scores.data(), R, E, bias.empty() ? nullptr : bias.data(), c.n_group,
                         c.topk_group, choice.data());
    select = choice.data();
  }
  GateRule rule;
  rule.norm_topk_prob = c.norm_topk_prob;
  rule.scale = c.routed_scaling;
  rule.denom_eps = c.arch == Arch::kDeepseekV3 ? 1e-20f : 0.0f;
  const ForcedRouting* forced = nullptr;
  if (routing_mode != RoutingMode::kCompute && routing_src && b.step >= 0) {
    forced = routing_src->routing(b.step, l);
    if (forced && (forced->k != K || forced->rows != b.full_rows ||
                   forced->experts.size() != static_cast<size_t>(forced->rows) * K ||
                   forced->outcome.size() != forced->experts.size())) {
      return make_error(ErrorCode::kSemantic,
                        step_str(b.step) + ", layer " + std::to_string(l) +
                            ": recorded routing has " + std::to_string(forced->rows) +
                            " rows x k " + std::to_string(forced->k) + ", the batch has " +
                            std::to_string(b.full_rows) + " rows x k " + std::to_string(K));
    }
  }
  if (routing_mode == RoutingMode::kForce) {
    if (!forced) {
      return make_error(ErrorCode::kSemantic, step_str(b.step) + ", layer " +
                                                  std::to_string(l) +
                                                  ": no recorded routing to force");
    }
    routing.resize(R, K);
    std::vector<float> vals(K);
    for (int64_t r = 0; r < R; ++r) {
      kernels::topk(select + r * E, E, K, routing.chosen.data() + r * K, vals.data());
      const int64_t o = b.orig[r];
      for (int i = 0; i < K; ++i) {
        int32_t e = forced->experts[o * K + i];
        RouteOutcome oc = forced->outcome[o * K + i];
        if (e < -1 || e >= E || ((e == -1) != (oc == RouteOutcome::kDropped))) {
          return make_error(ErrorCode::kSemantic,
                            step_str(b.step) + ", layer " + std::to_string(l) + ", row " +
                                std::to_string(o) + ": recorded expert " + std::to_string(e) +
                                " does not fit outcome " +
                                std::to_string(static_cast<int>(oc)) + " (experts: " +
                                std::to_string(E) + ")");
        }
        routing.experts[r * K + i] = e;
        routing.outcome[r * K + i] = oc;
      }
    }
    routing.capacity = forced->capacity;
    compute_gates(scores.data(), R, E, rule, &routing);
  } else {
    route_tokens(select, scores.data(), R, E, K, rule, cfg.capacity, b.full_rows, &routing);
    if (routing_mode == RoutingMode::kCheck && forced && !mismatch) {
      for (int64_t r = 0; r < R && !mismatch; ++r) {
        const int64_t o = b.orig[r];
        if (!std::equal(routing.experts.begin() + r * K, routing.experts.begin() + (r + 1) * K,
                        forced->experts.begin() + o * K)) {
          RoutingMismatch m;
          m.step = b.step;
          m.layer = l;
          m.batch_row = o;
          const ActiveSeg& s = b.segs[b.row_seg[r]];
          m.request = s.seg.request;
          m.position = b.positions[r];
          m.expected.assign(forced->experts.begin() + o * K,
                            forced->experts.begin() + (o + 1) * K);
          m.found.assign(routing.experts.begin() + r * K, routing.experts.begin() + (r + 1) * K);
          mismatch = std::move(m);
        }
      }
    }
  }
  if (b.notify && !obs.empty()) {
    RoutingView view;
    view.step = b.step;
    view.layer = l;
    view.rows = R;
    view.k = K;
    view.experts_total = E;
    view.capacity = routing.capacity;
    view.chosen = routing.chosen.data();
    view.experts = routing.experts.data();
    view.gates = routing.gates.data();
    view.outcome = routing.outcome.data();
    view.batch_rows = b.row_map();
    for (Observer* o : obs) o->on_routing(view);
  }
  return Status::Ok();
}

Status Engine::Impl::moe_mlp(StepBatch& b, int32_t l) {
  const ModelConfig& c = w.cfg;
  const int64_t R = b.rows(), H = c.hidden, F = c.moe_ffn;
  const int32_t E = c.experts, K = c.top_k;
  const LayerWeights& L = w.layers[l];
  const int32_t* map = b.row_map();
  const int16_t ll = static_cast<int16_t>(l);
  auto site = [&](SiteKind kind) { return SiteId{kind, ll, -1}; };

  router_logits.resize(static_cast<size_t>(R) * E);
  RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kRouter), h.data(), H, R, b.full_rows, L.router,
                            router_logits.data(), E, nullptr, false, map));
  RETURN_IF_ERROR(route(b, l));

  // Group the slots by expert (experts in index order, rows in batch order within one).
  std::vector<int64_t> count(E + 1, 0), base(E + 1, 0);
  for (int32_t e : routing.experts) {
    if (e >= 0) ++count[e];
  }
  for (int32_t e = 0; e < E; ++e) base[e + 1] = base[e] + count[e];
  const int64_t total = base[E];
  src.assign(static_cast<size_t>(R) * K, -1);
  erows.assign(total, 0);
  emap.assign(total, 0);
  {
    std::vector<int64_t> fill(base.begin(), base.end() - 1);
    for (int32_t e = 0; e < E; ++e) {
      for (int64_t r = 0; r < R; ++r) {
        for (int i = 0; i < K; ++i) {
          if (routing.experts[r * K + i] != e) continue;
          int64_t j = fill[e]++;
          erows[j] = static_cast<int32_t>(r);
          emap[j] = b.orig[r];
          src[r * K + i] = static_cast<int32_t>(j);
        }
      }
    }
  }
  eb.resize(static_cast<size_t>(std::max<int64_t>(total, 1)) * H);
  eg.resize(static_cast<size_t>(std::max<int64_t>(total, 1)) * F);
  eu.resize(eg.size());
  ea.resize(eg.size());
  eo.resize(eb.size());
  for (int64_t j = 0; j < total; ++j) {
    std::memcpy(eb.data() + j * H, h.data() + static_cast<int64_t>(erows[j]) * H,
                H * sizeof(float));
  }
  // Kind-major over experts (all gate GEMMs, then all up, ...): the sites' forward order.
  auto esite = [&](SiteKind kind, int32_t e) {
    return SiteId{kind, ll, static_cast<int16_t>(e)};
  };
  for (int32_t e = 0; e < E; ++e) {
    if (!count[e]) continue;
    RETURN_IF_ERROR(gemm_site(b, esite(SiteKind::kExpertGate, e), eb.data() + base[e] * H, H,
                              count[e], count[e], L.experts[e].gate, eg.data() + base[e] * F, F,
                              nullptr, true, emap.data() + base[e]));
  }
  for (int32_t e = 0; e < E; ++e) {
    if (!count[e]) continue;
    RETURN_IF_ERROR(gemm_site(b, esite(SiteKind::kExpertUp, e), eb.data() + base[e] * H, H,
                              count[e], count[e], L.experts[e].up, eu.data() + base[e] * F, F,
                              nullptr, true, emap.data() + base[e]));
  }
  if (total > 0) {
    kernels::swiglu(eg.data(), F, eu.data(), F, total, F, ea.data(), F, *pool);
    if (c.bf16_activations) bf16_round(ea.data(), total, F, F);
  }
  for (int32_t e = 0; e < E; ++e) {
    if (!count[e]) continue;
    plain_site(b, esite(SiteKind::kExpertAct, e), ea.data() + base[e] * F, F, count[e], F,
               emap.data() + base[e]);
  }
  for (int32_t e = 0; e < E; ++e) {
    if (!count[e]) continue;
    RETURN_IF_ERROR(gemm_site(b, esite(SiteKind::kExpertDown, e), ea.data() + base[e] * F, F,
                              count[e], count[e], L.experts[e].down, eo.data() + base[e] * H, H,
                              nullptr, true, emap.data() + base[e]));
  }
  // Shared expert: Qwen2-MoE sigmoid(x·w_gate) · MLP(x), DeepSeek-V3 MLP(x) (its
  // n_shared_experts fused into one MLP), added after the routed sum.
  if (L.has_shared) {
    const int64_t SF = c.shared_ffn;
    sg.resize(static_cast<size_t>(R) * SF);
    su.resize(sg.size());
    sa.resize(sg.size());
    sd.resize(static_cast<size_t>(R) * H);
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kSharedGate), h.data(), H, R, b.full_rows,
                              L.shared.gate, sg.data(), SF, nullptr, false, map));
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kSharedUp), h.data(), H, R, b.full_rows,
                              L.shared.up, su.data(), SF, nullptr, false, map));
    kernels::swiglu(sg.data(), SF, su.data(), SF, R, SF, sa.data(), SF, *pool);
    if (c.bf16_activations) bf16_round(sa.data(), R, SF, SF);
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kSharedDown), sa.data(), SF, R, b.full_rows,
                              L.shared.down, sd.data(), H, nullptr, false, map));
    if (L.has_shared_gate) {
      sscale.resize(static_cast<size_t>(R));
      RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kSharedScale), h.data(), H, R, b.full_rows,
                                L.shared_gate, sscale.data(), 1, nullptr, false, map));
      kernels::sigmoid_inplace(sscale.data(), R);
      if (c.bf16_activations) bf16_round(sscale.data(), R, 1, 1);
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t j = 0; j < H; ++j) sd[r * H + j] = sscale[r] * sd[r * H + j];
      }
      if (c.bf16_activations) bf16_round(sd.data(), R, H, H);
    }
  }
  // Combine. Its plan's arrival data is indexed by the recorded batch rows.
  {
    SiteId st = site(SiteKind::kCombine);
    uint64_t mask = ask(b, st);
    ASSIGN_OR_RETURN(Plan p, get_plan(b, combine_plan_query(b, st, K)));
    const Plan* use = &p;
    if (!b.identity && p.order == CombineOrder::kArrival) {
      sliced = p;
      sliced.arrival.resize(static_cast<size_t>(R) * K);
      for (int64_t r = 0; r < R; ++r) {
        std::copy_n(p.arrival.begin() + static_cast<int64_t>(b.orig[r]) * K, K,
                    sliced.arrival.begin() + r * K);
      }
      use = &sliced;
    }
    comb.resize(static_cast<size_t>(R) * H);
    kernels::moe_combine(eo.data(), H, src.data(), routing.gates.data(), R, K, H, comb.data(),
                         H, *use, *pool);
    if (c.bf16_activations) bf16_round(comb.data(), R, H, H);
    if (L.has_shared) {
      for (int64_t i = 0; i < R * H; ++i) comb[i] = comb[i] + sd[i];
      if (c.bf16_activations) bf16_round(comb.data(), R, H, H);
    }
    emit(mask, b, st, comb.data(), H, R, H, map);
  }
  std::memcpy(tmp.data(), comb.data(), static_cast<size_t>(R) * H * sizeof(float));
  return Status::Ok();
}

}  // namespace llmrr
