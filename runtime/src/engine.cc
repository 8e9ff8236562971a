#include "llmrr/runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_forward.h"
#include "engine_weights.h"
#include "kv_cache.h"
#include "step_batch.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/sample.h"

namespace llmrr {
namespace {

using kernels::PackedWeight;

void bf16_round(float* p, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = p + r * ld;
    for (int64_t c = 0; c < cols; ++c) row[c] = numerics::round_to_bf16(row[c]);
  }
}

std::string step_str(int64_t step) { return "step " + std::to_string(step); }

}  // namespace

std::string check_engine_config(const EngineConfig& c) {
  if (c.threads < 1 || c.threads > 256) {
    return "threads must be in [1, 256] (got " + std::to_string(c.threads) + ")";
  }
  if (c.kv_block < 1 || c.kv_block > 65536) {
    return "kv block must be in [1, 65536] positions (got " + std::to_string(c.kv_block) + ")";
  }
  std::string s = check_scheduler_config(c.scheduler);
  if (!s.empty()) return s;
  if (!std::isfinite(c.capacity.factor) || c.capacity.factor < 0) {
    return "capacity factor must be a finite number >= 0";
  }
  if (c.capacity.overflow != Overflow::kNone && !(c.capacity.factor > 0)) {
    return std::string("overflow '") + overflow_name(c.capacity.overflow) +
           "' needs a capacity factor > 0";
  }
  return "";
}

struct Engine::Impl {
  EngineWeights w;
  EngineConfig cfg;
  std::shared_ptr<Policy> policy;
  std::unique_ptr<kernels::ThreadPool> pool;
  KvCache kv;
  Scheduler sched;
  std::vector<Observer*> obs;
  ScheduleSource* schedule = nullptr;
  bool schedule_done = false;
  RoutingSource* routing_src = nullptr;
  RoutingMode routing_mode = RoutingMode::kCompute;
  std::optional<RequestId> isolated;
  std::unordered_map<RequestId, RequestState> reqs;
  std::unordered_map<RequestId, std::vector<int32_t>> tables;
  std::unordered_map<RequestId, std::vector<int32_t>> seqs;  // prompt then generated
  std::vector<RequestId> order;
  std::optional<RoutingMismatch> mismatch;
  EngineStats stats;
  int64_t next_step = 0;

  // Workspace, reused across steps.
  std::vector<float> x, h, q, k, v, att, tmp, gate, up, act;
  std::vector<float> router_logits, scores, eb, eg, eu, ea, eo, comb, sg, su, sa, sd, sscale;
  std::vector<float> xs, hs, logits;
  std::vector<int32_t> src, emap, erows;
  Routing routing;
  Plan sliced;
  std::unique_ptr<DeviceForward> device;  // set when the forward pass runs on a GPU

  Impl(EngineWeights weights, const EngineConfig& c, std::shared_ptr<Policy> p)
      : w(std::move(weights)),
        cfg(c),
        policy(std::move(p)),
        pool(std::make_unique<kernels::ThreadPool>(c.threads)),
        kv(w.cfg.layers, w.cfg.kv_heads, w.cfg.head_dim, c.kv_block),
        sched(c.scheduler) {}

  // ---- observer plumbing ----------------------------------------------------------------

  uint64_t ask(const StepBatch& b, SiteId site) {
    if (!b.notify || obs.empty()) return 0;
    uint64_t mask = 0;
    for (size_t i = 0; i < obs.size() && i < 64; ++i) {
      if (obs[i]->wants_rows(site)) mask |= uint64_t{1} << i;
    }
    return mask;
  }

  void emit(uint64_t mask, const StepBatch& b, SiteId site, const float* data, int64_t ld,
            int64_t rows, int64_t cols, const int32_t* batch_rows) {
    if (!mask) return;
    RowsView view;
    view.step = b.step;
    view.site = site;
    view.data = data;
    view.ld = ld;
    view.rows = rows;
    view.cols = cols;
    view.batch_rows = batch_rows;
    for (size_t i = 0; i < obs.size() && i < 64; ++i) {
      if (mask & (uint64_t{1} << i)) obs[i]->on_rows(view);
    }
  }

  Result<Plan> get_plan(const StepBatch& b, PlanQuery q) {
    q.step = b.step;
    ASSIGN_OR_RETURN(Plan p, policy->plan(q));
    if (p.cublaslt) {
      return make_error(ErrorCode::kUnsupported,
                        step_str(b.step) + ", site " + site_name(q.site) + ": " +
                            plan_to_string(p) + " is a tensor-core GEMM; only --device cuda runs it");
    }
    std::string why = plan_check(p, q.op == OpKind::kCombine ? b.full_rows : 0,
                                 q.op == OpKind::kCombine ? q.top_k : 0);
    if (!why.empty()) {
      return make_error(ErrorCode::kSemantic, step_str(b.step) + ", site " + site_name(q.site) +
                                                  ": bad plan (" + plan_to_string(p) + "): " + why);
    }
    if (b.notify) {
      for (Observer* o : obs) o->on_plan(b.step, q.site, p);
    }
    return p;
  }

  // ---- ops at sites ------------------------------------------------------------------------

  Status gemm_site(const StepBatch& b, SiteId site, const float* xin, int64_t ldx, int64_t m,
                   int64_t plan_m, const PackedWeight& wt, float* y, int64_t ldy,
                   const std::vector<float>* bias, bool expert, const int32_t* row_map) {
    uint64_t mask = ask(b, site);
    ASSIGN_OR_RETURN(Plan p, get_plan(b, gemm_plan_query(b, site, plan_m, wt.n(), wt.k(), expert)));
    kernels::gemm(xin, ldx, m, wt, y, ldy, p, *pool);
    const int64_t n = wt.n();
    if (bias && !bias->empty()) {
      for (int64_t r = 0; r < m; ++r) {
        float* row = y + r * ldy;
        for (int64_t j = 0; j < n; ++j) row[j] = row[j] + (*bias)[j];
      }
    }
    if (w.cfg.bf16_activations) bf16_round(y, m, n, ldy);
    emit(mask, b, site, y, ldy, m, n, row_map);
    return Status::Ok();
  }

  Status norm_site(const StepBatch& b, SiteId site, const float* xin, int64_t rows,
                   int64_t plan_rows, const std::vector<float>& weight, float* y,
                   const int32_t* row_map) {
    const int64_t H = w.cfg.hidden;
    uint64_t mask = ask(b, site);
    ASSIGN_OR_RETURN(Plan p, get_plan(b, norm_plan_query(b, site, plan_rows, H)));
    kernels::rmsnorm(xin, H, rows, H, weight.data(), w.cfg.norm_eps, y, H, p, *pool);
    if (w.cfg.bf16_activations) bf16_round(y, rows, H, H);
    emit(mask, b, site, y, H, rows, H, row_map);
    return Status::Ok();
  }

  void residual_add(float* xio, const float* d, int64_t rows) {
    const int64_t n = rows * w.cfg.hidden;
    for (int64_t i = 0; i < n; ++i) xio[i] = xio[i] + d[i];
    if (w.cfg.bf16_activations) bf16_round(xio, rows, w.cfg.hidden, w.cfg.hidden);
  }

  void plain_site(const StepBatch& b, SiteId site, const float* data, int64_t ld, int64_t rows,
                  int64_t cols, const int32_t* row_map) {
    uint64_t mask = ask(b, site);
    emit(mask, b, site, data, ld, rows, cols, row_map);
  }

  // ---- forward --------------------------------------------------------------------------------

  Status attention_layer(StepBatch& b, int32_t l) {
    const ModelConfig& c = w.cfg;
    const int64_t R = b.rows(), D = c.head_dim;
    const int64_t qd = c.heads * D, kvd = c.kv_heads * D;
    const LayerWeights& L = w.layers[l];
    const int32_t* map = b.row_map();
    auto site = [&](SiteKind kind) { return SiteId{kind, static_cast<int16_t>(l), -1}; };

    RETURN_IF_ERROR(norm_site(b, site(SiteKind::kAttnNorm), x.data(), R, b.full_rows,
                              L.attn_norm, h.data(), map));
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kQ), h.data(), c.hidden, R, b.full_rows, L.q,
                              q.data(), qd, &L.q_bias, false, map));
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kK), h.data(), c.hidden, R, b.full_rows, L.k,
                              k.data(), kvd, &L.k_bias, false, map));
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kV), h.data(), c.hidden, R, b.full_rows, L.v,
                              v.data(), kvd, &L.v_bias, false, map));
    kernels::rope(q.data(), qd, R, b.positions.data(), c.heads, w.rope);
    kernels::rope(k.data(), kvd, R, b.positions.data(), c.kv_heads, w.rope);
    if (c.bf16_activations) {
      bf16_round(q.data(), R, qd, qd);
      bf16_round(k.data(), R, kvd, kvd);
    }
    // KV is written before attention reads it (the invariant engines' rule; here for every
    // policy, so a row never reads a half-written cache).
    for (int64_t r = 0; r < R; ++r) {
      const ActiveSeg& s = b.segs[b.row_seg[r]];
      std::memcpy(kv.k_at(l, *s.table, b.positions[r]), k.data() + r * kvd, kvd * sizeof(float));
      std::memcpy(kv.v_at(l, *s.table, b.positions[r]), v.data() + r * kvd, kvd * sizeof(float));
    }
    // Block pointer tables of this layer.
    const size_t S = b.segs.size();
    std::vector<std::vector<const float*>> kp(S), vp(S);
    std::vector<kernels::KvSeqView> views(S);
    for (size_t s = 0; s < S; ++s) {
      const std::vector<int32_t>& t = *b.segs[s].table;
      kp[s].resize(t.size());
      vp[s].resize(t.size());
      for (size_t j = 0; j < t.size(); ++j) {
        kp[s][j] = kv.k_block(l, t[j]);
        vp[s][j] = kv.v_block(l, t[j]);
      }
      views[s].k_blocks = kp[s].data();
      views[s].v_blocks = vp[s].data();
      views[s].block_size = kv.block_size();
    }
    std::vector<kernels::AttnRow> rows(R);
    for (int64_t r = 0; r < R; ++r) {
      const ActiveSeg& s = b.segs[b.row_seg[r]];
      rows[r].q = q.data() + r * qd;
      rows[r].out = att.data() + r * qd;
      rows[r].kv = &views[b.row_seg[r]];
      rows[r].pos = b.positions[r];
      rows[r].cached = s.seg.kind == SegmentKind::kDecode ? b.positions[r] : s.seg.cached;
    }
    {
      SiteId st = site(SiteKind::kAttn);
      uint64_t mask = ask(b, st);
      ASSIGN_OR_RETURN(Plan p, get_plan(b, attention_plan_query(b, c, st, kv.block_size())));
      kernels::AttnShape shape;
      shape.heads = c.heads;
      shape.kv_heads = c.kv_heads;
      shape.head_dim = static_cast<int32_t>(D);
      shape.scale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
      kernels::attention(rows, shape, p, *pool);
      if (c.bf16_activations) bf16_round(att.data(), R, qd, qd);
      emit(mask, b, st, att.data(), qd, R, qd, map);
    }
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kO), att.data(), qd, R, b.full_rows, L.o,
                              tmp.data(), c.hidden, nullptr, false, map));
    residual_add(x.data(), tmp.data(), R);
    plain_site(b, site(SiteKind::kAttnResid), x.data(), c.hidden, R, c.hidden, map);
    return Status::Ok();
  }

  Status dense_mlp(StepBatch& b, int32_t l) {
    const ModelConfig& c = w.cfg;
    const int64_t R = b.rows(), F = c.ffn, H = c.hidden;
    const LayerWeights& L = w.layers[l];
    const int32_t* map = b.row_map();
    auto site = [&](SiteKind kind) { return SiteId{kind, static_cast<int16_t>(l), -1}; };
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kGate), h.data(), H, R, b.full_rows, L.mlp.gate,
                              gate.data(), F, nullptr, false, map));
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kUp), h.data(), H, R, b.full_rows, L.mlp.up,
                              up.data(), F, nullptr, false, map));
    kernels::swiglu(gate.data(), F, up.data(), F, R, F, act.data(), F, *pool);
    if (c.bf16_activations) bf16_round(act.data(), R, F, F);
    plain_site(b, site(SiteKind::kAct), act.data(), F, R, F, map);
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kDown), act.data(), F, R, b.full_rows,
                              L.mlp.down, tmp.data(), H, nullptr, false, map));
    return Status::Ok();
  }

  Status route(StepBatch& b, int32_t l) {
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
        kernels::topk(scores.data() + r * E, E, K, routing.chosen.data() + r * K, vals.data());
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
      compute_gates(scores.data(), R, E, c.norm_topk_prob, &routing);
    } else {
      route_tokens(scores.data(), R, E, K, c.norm_topk_prob, cfg.capacity, b.full_rows, &routing);
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

  Status moe_mlp(StepBatch& b, int32_t l) {
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
    // Shared expert (Qwen2-MoE): sigmoid(x·w_gate) · MLP(x), added after the routed sum.
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

  // Runs the batch; fills `logits` ([sampled rows, vocab]).
  Status forward(StepBatch& b) {
    const ModelConfig& c = w.cfg;
    const int64_t R = b.rows(), H = c.hidden;
    const int64_t qd = static_cast<int64_t>(c.heads) * c.head_dim;
    const int64_t kvd = static_cast<int64_t>(c.kv_heads) * c.head_dim;
    x.resize(R * H);
    h.resize(R * H);
    tmp.resize(R * H);
    q.resize(R * qd);
    att.resize(R * qd);
    k.resize(R * kvd);
    v.resize(R * kvd);
    if (c.ffn > 0) {
      gate.resize(R * c.ffn);
      up.resize(R * c.ffn);
      act.resize(R * c.ffn);
    }
    const int32_t* map = b.row_map();
    for (ActiveSeg& s : b.segs) kv.reserve(*s.table, s.seg.start + s.seg.count);
    if (device) return device->forward(b, *policy, obs, &logits);

    w.embed(b.tokens.data(), R, x.data());
    plain_site(b, SiteId{SiteKind::kEmbed, -1, -1}, x.data(), H, R, H, map);
    for (int32_t l = 0; l < c.layers; ++l) {
      RETURN_IF_ERROR(attention_layer(b, l));
      auto site = [&](SiteKind kind) { return SiteId{kind, static_cast<int16_t>(l), -1}; };
      RETURN_IF_ERROR(norm_site(b, site(SiteKind::kMlpNorm), x.data(), R, b.full_rows,
                                w.layers[l].mlp_norm, h.data(), map));
      if (w.layers[l].sparse) {
        RETURN_IF_ERROR(moe_mlp(b, l));
      } else {
        RETURN_IF_ERROR(dense_mlp(b, l));
      }
      residual_add(x.data(), tmp.data(), R);
      plain_site(b, site(SiteKind::kLayerOut), x.data(), H, R, H, map);
    }
    // Final norm and lm_head on the rows that sample only.
    const int64_t S = static_cast<int64_t>(b.sampled.size());
    logits.resize(static_cast<size_t>(S) * c.vocab);
    if (S == 0) return Status::Ok();
    xs.resize(S * H);
    hs.resize(S * H);
    for (int64_t i = 0; i < S; ++i) {
      std::memcpy(xs.data() + i * H, x.data() + static_cast<int64_t>(b.sampled[i]) * H,
                  H * sizeof(float));
    }
    RETURN_IF_ERROR(norm_site(b, SiteId{SiteKind::kFinalNorm, -1, -1}, xs.data(), S,
                              b.full_sampled, w.final_norm, hs.data(), b.sampled_orig.data()));
    RETURN_IF_ERROR(gemm_site(b, SiteId{SiteKind::kLogits, -1, -1}, hs.data(), H, S,
                              b.full_sampled, w.lm_head, logits.data(), c.vocab, nullptr, false,
                              b.sampled_orig.data()));
    return Status::Ok();
  }

  // ---- steps ------------------------------------------------------------------------------

  // Builds the computed rows of `b` from b.full. Validates forced segments.
  Status build_batch(StepBatch& b, bool forced) {
    b.full_rows = 0;
    b.full_sampled = 0;
    b.attn_seqs.clear();
    b.identity = true;
    for (size_t i = 0; i < b.full.size(); ++i) {
      const BatchSegment& seg = b.full[i];
      const int64_t orig0 = b.full_rows;
      b.full_rows += seg.count;
      if (seg.sample) ++b.full_sampled;
      b.attn_seqs.push_back(AttnSeq{seg.count, seg.cached, seg.kind == SegmentKind::kDecode});
      if (isolated && seg.request != *isolated) {
        b.identity = false;
        continue;
      }
      auto it = reqs.find(seg.request);
      if (it == reqs.end()) {
        return make_error(ErrorCode::kSemantic, step_str(b.step) + ", segment " +
                                                    std::to_string(i) + ": request " +
                                                    std::to_string(seg.request) +
                                                    " was never added");
      }
      RequestState& r = it->second;
      if (forced) RETURN_IF_ERROR(check_segment(b, i, seg, r));
      ActiveSeg a;
      a.seg = seg;
      a.req = &r;
      a.table = &tables[seg.request];
      a.tokens = seqs[seg.request].data();
      a.row0 = b.rows();
      a.orig_row0 = orig0;
      b.segs.push_back(a);
      b.active_segments.push_back(seg);
      for (int32_t j = 0; j < seg.count; ++j) {
        b.tokens.push_back(a.tokens[seg.start + j]);
        b.positions.push_back(seg.start + j);
        b.orig.push_back(static_cast<int32_t>(orig0 + j));
        b.row_seg.push_back(static_cast<int32_t>(b.segs.size() - 1));
      }
      if (seg.sample) {
        b.sampled.push_back(static_cast<int32_t>(b.rows() - 1));
        b.sampled_orig.push_back(static_cast<int32_t>(orig0 + seg.count - 1));
      }
    }
    return Status::Ok();
  }

  Status check_segment(const StepBatch& b, size_t i, const BatchSegment& seg,
                       const RequestState& r) {
    auto bad = [&](const std::string& what) {
      return make_error(ErrorCode::kSemantic, step_str(b.step) + ", segment " + std::to_string(i) +
                                                  " (request " + std::to_string(seg.request) +
                                                  "): " + what);
    };
    const int32_t plen = static_cast<int32_t>(r.spec.prompt.size());
    const int32_t ngen = static_cast<int32_t>(r.generated.size());
    if (r.spec.arrival_step > b.step) {
      return bad("the request arrives at step " + std::to_string(r.spec.arrival_step));
    }
    if (r.finished) return bad("the request already finished");
    if (seg.count <= 0) return bad("count must be positive");
    if (seg.start != r.processed) {
      return bad("starts at position " + std::to_string(seg.start) + " but the request has " +
                 std::to_string(r.processed) + " positions in its KV cache");
    }
    if (seg.cached != seg.start) {
      return bad("cached " + std::to_string(seg.cached) + " differs from start " +
                 std::to_string(seg.start));
    }
    for (const ActiveSeg& a : b.segs) {
      if (a.seg.request == seg.request) return bad("the request appears twice in the batch");
    }
    if (seg.kind == SegmentKind::kPrefill) {
      if (seg.start + seg.count > plen) {
        return bad("prefill rows [" + std::to_string(seg.start) + ", " +
                   std::to_string(seg.start + seg.count) + ") run past the prompt of " +
                   std::to_string(plen) + " tokens");
      }
      if (seg.sample != (seg.start + seg.count == plen)) {
        return bad(seg.sample ? "samples before the end of its prompt"
                              : "reaches the end of its prompt without sampling");
      }
    } else {
      if (seg.count != 1 || !seg.sample) return bad("a decode segment has one sampling row");
      if (ngen == 0 || r.processed != plen + ngen - 1) {
        return bad("decode at position " + std::to_string(seg.start) +
                   " but the request has no token waiting there");
      }
    }
    return Status::Ok();
  }

  Result<bool> step() {
    auto t0 = std::chrono::steady_clock::now();
    StepBatch b;
    if (schedule) {
      if (schedule_done) return false;
      ASSIGN_OR_RETURN(std::optional<ScheduledStep> next, schedule->next());
      if (!next) {
        schedule_done = true;
        return false;
      }
      if (next->step < next_step) {
        return make_error(ErrorCode::kSemantic, "schedule goes back to " + step_str(next->step) +
                                                    " after step " +
                                                    std::to_string(next_step - 1));
      }
      b.step = next->step;
      b.full = std::move(next->segments);
    } else {
      for (;;) {
        if (sched.idle()) return false;
        b.full = sched.next_batch(next_step);
        if (!b.full.empty()) break;
        std::optional<int64_t> arrival = sched.next_arrival();
        if (!arrival || *arrival <= next_step) {
          return make_error(ErrorCode::kInternal, "scheduler produced an empty batch at " +
                                                      step_str(next_step) +
                                                      " with requests running");
        }
        next_step = *arrival;  // nothing runs until the next arrival: skip the empty steps
      }
      b.step = next_step;
    }
    next_step = b.step + 1;
    RETURN_IF_ERROR(build_batch(b, schedule != nullptr));

    for (RequestId id : order) {
      RequestState& r = reqs[id];
      if (!r.arrived && r.spec.arrival_step <= b.step) {
        r.arrived = true;
        for (Observer* o : obs) o->on_arrival(b.step, r.spec);
      }
    }
    if (b.segs.empty()) return true;  // request-alone replay: the request is not in this step

    StepInfo info;
    info.step = b.step;
    info.segments = b.active_segments;
    info.rows = b.rows();
    for (Observer* o : obs) o->on_step(info);

    RETURN_IF_ERROR(forward(b));

    for (ActiveSeg& s : b.segs) {
      s.req->processed = s.seg.start + s.seg.count;
      if (s.req->first_step < 0) s.req->first_step = b.step;
      if (s.seg.kind == SegmentKind::kDecode) {
        stats.decode_rows += s.seg.count;
      } else {
        stats.prefill_rows += s.seg.count;
      }
    }
    stats.rows += b.rows();
    const int64_t V = w.cfg.vocab;
    std::vector<TokenEvent> tokens;
    for (size_t i = 0; i < b.sampled.size(); ++i) {
      const int32_t row = b.sampled[i];
      const ActiveSeg& s = b.segs[b.row_seg[row]];
      LogitsView lv;
      lv.step = b.step;
      lv.request = s.seg.request;
      lv.position = b.positions[row];
      lv.batch_row = b.sampled_orig[i];
      lv.logits = logits.data() + static_cast<int64_t>(i) * V;
      lv.vocab = V;
      for (Observer* o : obs) o->on_logits(lv);
      TokenEvent t;
      t.step = b.step;
      t.request = s.seg.request;
      t.position = b.positions[row] + 1;
      t.sample = kernels::sample(lv.logits, V, s.req->spec.sampling, s.seg.request, t.position);
      t.token = t.sample.token;
      tokens.push_back(t);
    }
    for (const TokenEvent& t : tokens) {
      for (Observer* o : obs) o->on_token(t);
    }
    std::vector<RequestFinish> finishes;
    for (const TokenEvent& t : tokens) {
      RequestState& r = reqs[t.request];
      r.generated.push_back(t.token);
      seqs[t.request].push_back(t.token);
      ++stats.generated;
      bool eos = r.spec.stop_at_eos && w.cfg.eos >= 0 && t.token == w.cfg.eos;
      bool done = eos || static_cast<int32_t>(r.generated.size()) >= r.spec.max_tokens;
      if (done) {
        r.finished = true;
        r.reason = eos ? FinishReason::kEos : FinishReason::kMaxTokens;
        r.finish_step = b.step;
        kv.release(tables[t.request]);
        finishes.push_back(RequestFinish{b.step, t.request, r.reason,
                                         static_cast<int32_t>(r.generated.size())});
      }
      if (!schedule) sched.on_token(t.request, done);
    }
    for (const RequestFinish& f : finishes) {
      for (Observer* o : obs) o->on_finish(f);
    }
    for (Observer* o : obs) o->on_step_end(b.step);
    ++stats.steps;
    stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return true;
  }

  Status add_request(const RequestSpec& spec) {
    const ModelConfig& c = w.cfg;
    const std::string who = "request " + std::to_string(spec.id);
    if (reqs.count(spec.id)) {
      return make_error(ErrorCode::kInvalidArgument, who + ": id already used");
    }
    if (spec.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, who + ": empty prompt");
    for (size_t i = 0; i < spec.prompt.size(); ++i) {
      if (spec.prompt[i] < 0 || spec.prompt[i] >= c.vocab) {
        return make_error(ErrorCode::kInvalidArgument,
                          who + ": prompt token " + std::to_string(i) + " is " +
                              std::to_string(spec.prompt[i]) + ", outside the vocabulary [0, " +
                              std::to_string(c.vocab) + ")");
      }
    }
    if (spec.max_tokens < 1) {
      return make_error(ErrorCode::kInvalidArgument, who + ": max tokens must be >= 1");
    }
    const int64_t need = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens - 1;
    if (need > c.max_positions) {
      return make_error(ErrorCode::kInvalidArgument,
                        who + ": prompt of " + std::to_string(spec.prompt.size()) +
                            " tokens + " + std::to_string(spec.max_tokens) +
                            " new tokens needs " + std::to_string(need) +
                            " positions; the model has " + std::to_string(c.max_positions));
    }
    const kernels::SamplingParams& sp = spec.sampling;
    if (!std::isfinite(sp.temperature) || sp.temperature < 0 || sp.top_k < 0 ||
        !(sp.top_p > 0 && sp.top_p <= 1)) {
      return make_error(ErrorCode::kInvalidArgument,
                        who + ": sampling needs temperature >= 0, top-k >= 0, top-p in (0, 1]");
    }
    if (spec.arrival_step < 0) {
      return make_error(ErrorCode::kInvalidArgument, who + ": arrival step must be >= 0");
    }
    RequestState st;
    st.spec = spec;
    reqs.emplace(spec.id, std::move(st));
    tables[spec.id];
    seqs[spec.id] = spec.prompt;
    order.push_back(spec.id);
    sched.add(spec.id, static_cast<int32_t>(spec.prompt.size()), spec.arrival_step);
    return Status::Ok();
  }

  Result<std::vector<float>> score_prompt(std::span<const int32_t> prompt) {
    const ModelConfig& c = w.cfg;
    if (prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "score: empty prompt");
    if (static_cast<int64_t>(prompt.size()) > c.max_positions) {
      return make_error(ErrorCode::kInvalidArgument, "score: prompt longer than max positions");
    }
    for (int32_t t : prompt) {
      if (t < 0 || t >= c.vocab) {
        return make_error(ErrorCode::kInvalidArgument,
                          "score: token " + std::to_string(t) + " outside the vocabulary");
      }
    }
    std::vector<int32_t> table;
    std::vector<int32_t> toks(prompt.begin(), prompt.end());
    StepBatch b;
    b.step = -1;
    b.notify = false;
    BatchSegment seg;
    seg.count = static_cast<int32_t>(prompt.size());
    seg.sample = true;
    b.full.push_back(seg);
    ActiveSeg a;
    a.seg = seg;
    a.table = &table;
    a.tokens = toks.data();
    b.segs.push_back(a);
    b.active_segments.push_back(seg);
    b.full_rows = seg.count;
    b.full_sampled = seg.count;
    b.attn_seqs.push_back(AttnSeq{seg.count, 0, false});
    for (int32_t j = 0; j < seg.count; ++j) {
      b.tokens.push_back(toks[j]);
      b.positions.push_back(j);
      b.orig.push_back(j);
      b.row_seg.push_back(0);
      b.sampled.push_back(j);
      b.sampled_orig.push_back(j);
    }
    Status st = forward(b);
    kv.release(table);
    RETURN_IF_ERROR(st);
    return logits;
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(const LoadedModel& model,
                                               const EngineConfig& config,
                                               std::shared_ptr<Policy> policy) {
  std::string why = check_engine_config(config);
  if (!why.empty()) return make_error(ErrorCode::kInvalidArgument, why);
  ModelConfig mc = model.config;
  if (config.weight_type) mc.weight_type = *config.weight_type;
  if (config.bf16_activations) mc.bf16_activations = *config.bf16_activations;
  if (config.scoring) mc.scoring = *config.scoring;
  ASSIGN_OR_RETURN(EngineWeights weights, pack_weights(model, mc));
  if (!policy) policy = make_production_policy();
  auto impl = std::make_unique<Impl>(std::move(weights), config, std::move(policy));
  if (config.device != Device::kCpu) {
    RETURN_IF_ERROR(check_device(config.device));
    ASSIGN_OR_RETURN(impl->device, make_device_forward(impl->w, config));
    impl->kv.set_host_storage(false);  // the KV lives on the device; the host keeps the tables
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelConfig& Engine::model_config() const { return impl_->w.cfg; }
const EngineConfig& Engine::config() const { return impl_->cfg; }
Policy& Engine::policy() { return *impl_->policy; }
void Engine::set_policy(std::shared_ptr<Policy> policy) { impl_->policy = std::move(policy); }
void Engine::add_observer(Observer* o) { impl_->obs.push_back(o); }
void Engine::remove_observer(Observer* o) {
  auto& v = impl_->obs;
  v.erase(std::remove(v.begin(), v.end(), o), v.end());
}
void Engine::set_schedule_source(ScheduleSource* s) {
  impl_->schedule = s;
  impl_->schedule_done = false;
}
void Engine::set_routing_source(RoutingSource* s, RoutingMode mode) {
  impl_->routing_src = s;
  impl_->routing_mode = s ? mode : RoutingMode::kCompute;
}
void Engine::set_isolated_request(std::optional<RequestId> r) { impl_->isolated = r; }
Status Engine::add_request(const RequestSpec& spec) { return impl_->add_request(spec); }
Result<bool> Engine::step() { return impl_->step(); }
Status Engine::run(int64_t max_steps) {
  for (int64_t n = 0; max_steps < 0 || n < max_steps; ++n) {
    ASSIGN_OR_RETURN(bool more, impl_->step());
    if (!more) break;
  }
  return Status::Ok();
}
Result<std::vector<float>> Engine::score_prompt(std::span<const int32_t> prompt) {
  return impl_->score_prompt(prompt);
}
const RequestState* Engine::request(RequestId id) const {
  auto it = impl_->reqs.find(id);
  return it == impl_->reqs.end() ? nullptr : &it->second;
}
std::vector<RequestId> Engine::request_ids() const { return impl_->order; }
const std::optional<RoutingMismatch>& Engine::routing_mismatch() const { return impl_->mismatch; }
const EngineStats& Engine::stats() const { return impl_->stats; }
int64_t Engine::next_step() const { return impl_->next_step; }

}  // namespace llmrr
