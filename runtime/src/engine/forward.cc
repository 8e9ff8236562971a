// The CPU forward pass: the ops at each site (a plan from the policy, the kernel, the rows
// to the observers), attention and dense MLP layers, final norm and logits; score_prompt.
// MLA attention (DeepSeek-V3) is in engine/mla.cc, MoE layers in engine/moe.cc; a device other than the CPU takes over in forward().
#include <cmath>
#include <cstring>

#include "impl.h"
#include "llmrr/kernels/numerics.h"

namespace llmrr {
namespace {

using kernels::PackedWeight;

}  // namespace

void bf16_round(float* p, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = p + r * ld;
    for (int64_t c = 0; c < cols; ++c) row[c] = numerics::round_to_bf16(row[c]);
  }
}

Status Engine::Impl::gemm_site(const StepBatch& b, SiteId site, const float* xin, int64_t ldx,
                               int64_t m, int64_t plan_m, const PackedWeight& wt, float* y,
                               int64_t ldy, const std::vector<float>* bias, bool expert,
                               const int32_t* row_map) {
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

Status Engine::Impl::norm_site(const StepBatch& b, SiteId site, const float* xin, int64_t rows,
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

// Qwen3's q/k norm: one RMSNorm row per head (rows × heads rows of head_dim), in place.
Status Engine::Impl::head_norm_site(const StepBatch& b, SiteId site, float* xio, int64_t rows,
                                    int32_t heads, const std::vector<float>& weight,
                                    const int32_t* row_map) {
  const int64_t D = w.cfg.head_dim, width = heads * D;
  uint64_t mask = ask(b, site);
  ASSIGN_OR_RETURN(Plan p, get_plan(b, norm_plan_query(b, site, b.full_rows * heads, D)));
  kernels::rmsnorm(xio, D, rows * heads, D, weight.data(), w.cfg.norm_eps, xio, D, p, *pool);
  if (w.cfg.bf16_activations) bf16_round(xio, rows, width, width);
  emit(mask, b, site, xio, width, rows, width, row_map);
  return Status::Ok();
}

void Engine::Impl::residual_add(float* xio, const float* d, int64_t rows) {
  const int64_t n = rows * w.cfg.hidden;
  for (int64_t i = 0; i < n; ++i) xio[i] = xio[i] + d[i];
  if (w.cfg.bf16_activations) bf16_round(xio, rows, w.cfg.hidden, w.cfg.hidden);
}

void Engine::Impl::plain_site(const StepBatch& b, SiteId site, const float* data, int64_t ld,
                              int64_t rows, int64_t cols, const int32_t* row_map) {
  uint64_t mask = ask(b, site);
  emit(mask, b, site, data, ld, rows, cols, row_map);
}

Status Engine::Impl::attention_layer(StepBatch& b, int32_t l) {
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
  if (c.qk_norm) {
    RETURN_IF_ERROR(head_norm_site(b, site(SiteKind::kQNorm), q.data(), R, c.heads, L.q_norm, map));
    RETURN_IF_ERROR(
        head_norm_site(b, site(SiteKind::kKNorm), k.data(), R, c.kv_heads, L.k_norm, map));
  }
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

Status Engine::Impl::dense_mlp(StepBatch& b, int32_t l) {
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

// Runs the batch; fills `logits` ([sampled rows, vocab]).
Status Engine::Impl::forward(StepBatch& b) {
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
    RETURN_IF_ERROR(c.mla ? mla_attention_layer(b, l) : attention_layer(b, l));
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

Result<std::vector<float>> Engine::Impl::score_prompt(std::span<const int32_t> prompt) {
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

}  // namespace llmrr
