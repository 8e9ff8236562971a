// DeepSeek-V3 multi-head latent attention (MLA) on the CPU, in the absorbed form that
// production MLA decode kernels use (DESIGN.md "Architectures"):
//
//   q      = q_b_proj(RMSNorm(q_a_proj(x)))     per head [nope | rope]     (q_proj(x) without q_lora)
//   [c|kr] = kv_a_proj_with_mqa(x);  c = RMSNorm(c)                        c: kv_lora_rank, kr: rope
//   RoPE on q's rope part and kr (interleaved pairs when rope_interleave, laid out as
//   transformers lays them out); the cache holds [c | kr] per position (one row, no V)
//   q_lat_h = W_UK_hᵀ q_nope_h                                              (attn.q_absorb)
//   o_lat_h = softmax(([q_lat_h | q_rope_h] · [c | kr]) / √(nope + rope)) · [c | kr]
//             (the attention kernel with kv_heads 1 and head_dim kv_lora + rope; values are
//             the keys' rows, only the first kv_lora columns of the output are used)
//   v_h     = W_UV_h o_lat_h                                                (attn.v_up)
//   out     = o_proj([v_0 | ... | v_{heads-1}])
//
// The same function as transformers' unabsorbed DeepseekV3Attention (k_nope = W_UK c,
// v = W_UV c per position), with the products associated the other way: equal up to fp32
// rounding. Every reduction is a planned op: GEMMs (kGemm), the two low-rank norms
// (kRmsNorm), the attention (kAttention over the latent cache).
#include <cmath>
#include <cstring>
#include <vector>

#include "impl.h"

namespace llmrr {
namespace {

// RoPE on `rows` rows of one rope part (table.head_dim() values at x + r·ld). Interleaved
// (DeepSeek's rope_interleave): pairs (2i, 2i+1) rotate by frequency i and the result is laid
// out as transformers' apply_rotary_pos_emb_interleave writes it, [x_2i·cos − x_2i+1·sin for
// every i, then x_2i+1·cos + x_2i·sin] (each product rounded, then the sum, as
// kernels::rope); otherwise the kernels' rotate_half RoPE.
void mla_rope(float* x, int64_t ld, int64_t rows, const int32_t* positions, bool interleaved,
              const kernels::RopeTable& table, std::vector<float>& tmp) {
  if (!interleaved) {
    kernels::rope(x, ld, rows, positions, 1, table);
    return;
  }
  const int64_t hd = table.head_dim(), half = hd / 2;
  tmp.resize(static_cast<size_t>(hd));
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * ld;
    const float* c = table.cos_row(positions[r]);
    const float* s = table.sin_row(positions[r]);
    std::memcpy(tmp.data(), v, hd * sizeof(float));
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = tmp[2 * i], x2 = tmp[2 * i + 1];
      const float a = x1 * c[i], b = x2 * s[i];
      const float d = x2 * c[i], e = x1 * s[i];
      v[i] = a - b;
      v[i + half] = d + e;
    }
  }
}

}  // namespace

Status Engine::Impl::lora_norm_site(const StepBatch& b, SiteId site, float* xio, int64_t ld,
                                    int64_t rows, int64_t dim, const std::vector<float>& weight,
                                    const int32_t* row_map) {
  uint64_t mask = ask(b, site);
  ASSIGN_OR_RETURN(Plan p, get_plan(b, norm_plan_query(b, site, b.full_rows, dim)));
  kernels::rmsnorm(xio, ld, rows, dim, weight.data(), w.cfg.lora_norm_eps, xio, ld, p, *pool);
  if (w.cfg.bf16_activations) bf16_round(xio, rows, dim, ld);
  emit(mask, b, site, xio, ld, rows, dim, row_map);
  return Status::Ok();
}

Status Engine::Impl::head_gemm_site(const StepBatch& b, SiteId site, const float* xin,
                                    int64_t ldx, int64_t x_step, int64_t rows,
                                    const std::vector<kernels::PackedWeight>& wts, float* y,
                                    int64_t ldy, int64_t y_step, const int32_t* row_map) {
  uint64_t mask = ask(b, site);
  const kernels::PackedWeight& w0 = wts.front();
  ASSIGN_OR_RETURN(Plan p, get_plan(b, gemm_plan_query(b, site, b.full_rows, w0.n(), w0.k())));
  for (size_t h = 0; h < wts.size(); ++h) {
    const int64_t hh = static_cast<int64_t>(h);
    kernels::gemm(xin + hh * x_step, ldx, rows, wts[h], y + hh * y_step, ldy, p, *pool);
  }
  const int64_t width = static_cast<int64_t>(wts.size()) * w0.n();
  if (w.cfg.bf16_activations) bf16_round(y, rows, width, ldy);
  emit(mask, b, site, y, ldy, rows, width, row_map);
  return Status::Ok();
}

Status Engine::Impl::mla_attention_layer(StepBatch& b, int32_t l) {
  const ModelConfig& c = w.cfg;
  const int64_t R = b.rows(), NH = c.heads, QK = c.qk_head_dim(), NOPE = c.qk_nope_dim,
                RD = c.qk_rope_dim, KL = c.kv_lora_rank, VD = c.v_head_dim, CD = KL + RD;
  const LayerWeights& L = w.layers[l];
  const int32_t* map = b.row_map();
  auto site = [&](SiteKind kind) { return SiteId{kind, static_cast<int16_t>(l), -1}; };

  RETURN_IF_ERROR(norm_site(b, site(SiteKind::kAttnNorm), x.data(), R, b.full_rows,
                            L.attn_norm, h.data(), map));
  q.resize(static_cast<size_t>(R) * NH * QK);
  if (c.q_lora_rank > 0) {
    const int64_t QL = c.q_lora_rank;
    qa.resize(static_cast<size_t>(R) * QL);
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kQA), h.data(), c.hidden, R, b.full_rows, L.q_a,
                              qa.data(), QL, nullptr, false, map));
    RETURN_IF_ERROR(lora_norm_site(b, site(SiteKind::kQANorm), qa.data(), QL, R, QL,
                                   L.q_a_norm, map));
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kQ), qa.data(), QL, R, b.full_rows, L.q,
                              q.data(), NH * QK, nullptr, false, map));
  } else {
    RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kQ), h.data(), c.hidden, R, b.full_rows, L.q,
                              q.data(), NH * QK, nullptr, false, map));
  }
  kva.resize(static_cast<size_t>(R) * CD);
  RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kKvA), h.data(), c.hidden, R, b.full_rows, L.kv_a,
                            kva.data(), CD, nullptr, false, map));
  RETURN_IF_ERROR(
      lora_norm_site(b, site(SiteKind::kKvANorm), kva.data(), CD, R, KL, L.kv_a_norm, map));
  // RoPE on each head's rope part of q and on the shared rope key.
  std::vector<float> rtmp;
  for (int64_t hh = 0; hh < NH; ++hh)
    mla_rope(q.data() + hh * QK + NOPE, NH * QK, R, b.positions.data(), c.rope_interleave,
             w.rope, rtmp);
  mla_rope(kva.data() + KL, CD, R, b.positions.data(), c.rope_interleave, w.rope, rtmp);
  if (c.bf16_activations) {
    bf16_round(q.data(), R, NH * QK, NH * QK);
    bf16_round(kva.data(), R, CD, CD);
  }
  // The latent row is written before attention reads it (as K/V in attention_layer).
  for (int64_t r = 0; r < R; ++r) {
    const ActiveSeg& s = b.segs[b.row_seg[r]];
    std::memcpy(kv.k_at(l, *s.table, b.positions[r]), kva.data() + r * CD, CD * sizeof(float));
  }
  // Absorb W_UK into the query: q_lat_h = W_UK_hᵀ q_nope_h.
  qlat.resize(static_cast<size_t>(R) * NH * KL);
  RETURN_IF_ERROR(head_gemm_site(b, site(SiteKind::kQAbsorb), q.data(), NH * QK, QK, R, L.uk_t,
                                 qlat.data(), NH * KL, KL, map));
  qabs.resize(static_cast<size_t>(R) * NH * CD);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t hh = 0; hh < NH; ++hh) {
      float* dst = qabs.data() + (r * NH + hh) * CD;
      std::memcpy(dst, qlat.data() + (r * NH + hh) * KL, KL * sizeof(float));
      std::memcpy(dst + KL, q.data() + r * NH * QK + hh * QK + NOPE, RD * sizeof(float));
    }
  }
  // Attention over the latent cache: one KV "head" of kv_lora + rope, values = keys.
  const size_t S = b.segs.size();
  std::vector<std::vector<const float*>> kp(S);
  std::vector<kernels::KvSeqView> views(S);
  for (size_t s = 0; s < S; ++s) {
    const std::vector<int32_t>& t = *b.segs[s].table;
    kp[s].resize(t.size());
    for (size_t j = 0; j < t.size(); ++j) kp[s][j] = kv.k_block(l, t[j]);
    views[s].k_blocks = kp[s].data();
    views[s].v_blocks = kp[s].data();
    views[s].block_size = kv.block_size();
  }
  latt.resize(static_cast<size_t>(R) * NH * CD);
  std::vector<kernels::AttnRow> rows(R);
  for (int64_t r = 0; r < R; ++r) {
    const ActiveSeg& s = b.segs[b.row_seg[r]];
    rows[r].q = qabs.data() + r * NH * CD;
    rows[r].out = latt.data() + r * NH * CD;
    rows[r].kv = &views[b.row_seg[r]];
    rows[r].pos = b.positions[r];
    rows[r].cached = s.seg.kind == SegmentKind::kDecode ? b.positions[r] : s.seg.cached;
  }
  lat.resize(static_cast<size_t>(R) * NH * KL);
  {
    SiteId st = site(SiteKind::kAttn);
    uint64_t mask = ask(b, st);
    ASSIGN_OR_RETURN(Plan p, get_plan(b, attention_plan_query(b, c, st, kv.block_size())));
    kernels::AttnShape shape;
    shape.heads = c.heads;
    shape.kv_heads = 1;
    shape.head_dim = static_cast<int32_t>(CD);
    shape.scale = static_cast<float>(std::pow(static_cast<double>(QK), -0.5));
    kernels::attention(rows, shape, p, *pool);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t hh = 0; hh < NH; ++hh)
        std::memcpy(lat.data() + (r * NH + hh) * KL, latt.data() + (r * NH + hh) * CD,
                    KL * sizeof(float));
    if (c.bf16_activations) bf16_round(lat.data(), R, NH * KL, NH * KL);
    emit(mask, b, st, lat.data(), NH * KL, R, NH * KL, map);
  }
  // Values: v_h = W_UV_h o_lat_h, heads side by side for o_proj.
  att.resize(static_cast<size_t>(R) * NH * VD);
  RETURN_IF_ERROR(head_gemm_site(b, site(SiteKind::kVUp), lat.data(), NH * KL, KL, R, L.uv,
                                 att.data(), NH * VD, VD, map));
  RETURN_IF_ERROR(gemm_site(b, site(SiteKind::kO), att.data(), NH * VD, R, b.full_rows, L.o,
                            tmp.data(), c.hidden, nullptr, false, map));
  residual_add(x.data(), tmp.data(), R);
  plain_site(b, site(SiteKind::kAttnResid), x.data(), c.hidden, R, c.hidden, map);
  return Status::Ok();
}

}  // namespace llmrr
