#include "weights.h"

#include <string>
#include <vector>

#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/quant.h"
#include "llmrr/runtime/gguf.h"
#include "loaders/loader_util.h"

namespace llmrr {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Fetcher {
 public:
  Fetcher(const LoadedModel& m, kernels::WeightType type) : m_(m), type_(type) {}

  const HostTensor* find(const std::string& name) const {
    auto it = m_.tensors.find(name);
    return it == m_.tensors.end() ? nullptr : &it->second;
  }

  Result<const HostTensor*> get(const std::string& name, std::vector<int64_t> shape) const {
    const HostTensor* t = find(name);
    if (!t) {
      return make_error(ErrorCode::kMissingTensor,
                        m_.source + ": tensor " + name + " is missing (expected shape " +
                            shape_str(shape) + ")");
    }
    if (t->shape != shape) {
      return make_error(ErrorCode::kShapeMismatch, m_.source + ": tensor " + name + " has shape " +
                                                       shape_str(t->shape) + ", expected " +
                                                       shape_str(shape));
    }
    if (t->stored) {
      if (shape.size() != 2 || static_cast<int64_t>(t->stored->rows.size()) != shape[0]) {
        return make_error(ErrorCode::kBadModel, m_.source + ": stored tensor " + name +
                                                    " has " +
                                                    std::to_string(t->stored->rows.size()) +
                                                    " rows for shape " + shape_str(t->shape));
      }
    } else if (static_cast<int64_t>(t->data.size()) != t->numel()) {
      return make_error(ErrorCode::kBadModel, m_.source + ": tensor " + name + " holds " +
                                                  std::to_string(t->data.size()) +
                                                  " values for shape " + shape_str(t->shape));
    }
    return t;
  }

  Status linear(const std::string& name, int64_t n, int64_t k, kernels::PackedWeight* out) const {
    ASSIGN_OR_RETURN(const HostTensor* t, get(name, {n, k}));
    return pack(*t, n, k, out);
  }

  // A stored (quantized) tensor stays quantized when the weights compute as fp32: its packed
  // values are exactly the dequantized ones (kernels/quant.h). F16 and BF16 tensors stay
  // 16-bit (BF16 also under bf16 weights), widened exactly inside the GEMM. Under a bf16
  // override anything else is dequantized and rounded like any fp32 tensor.
  Status pack(const HostTensor& t, int64_t n, int64_t k, kernels::PackedWeight* out) const {
    if (!t.stored) {
      *out = kernels::PackedWeight::pack(t.data.data(), n, k, type_);
      return Status::Ok();
    }
    const uint32_t gt = t.stored->ggml_type;
    const bool f16 =
        gt == static_cast<uint32_t>(GgmlType::kF16) && type_ == kernels::WeightType::kF32;
    const bool bf16 = gt == static_cast<uint32_t>(GgmlType::kBF16);
    if (f16 || bf16) {
      *out = kernels::PackedWeight::pack_rows16(
          reinterpret_cast<const uint16_t* const*>(t.stored->rows.data()), n, k,
          f16 ? kernels::WeightType::kF16 : kernels::WeightType::kBF16);
      loaders::release_pages(t.stored->first, t.stored->bytes);
      return Status::Ok();
    }
    int64_t be = 0, bb = 0;
    if (type_ == kernels::WeightType::kF32 &&
        kernels::ggml_quant_block(t.stored->ggml_type, &be, &bb) && k % be == 0) {
      *out = kernels::pack_ggml(t.stored->ggml_type, t.stored->rows.data(), n, k);
      // The packed copy is all the engine reads; the file's pages can go.
      loaders::release_pages(t.stored->first, t.stored->bytes);
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(std::vector<float> f32, t.to_f32());
    *out = kernels::PackedWeight::pack(f32.data(), n, k, type_);
    return Status::Ok();
  }

  // A vector (norm weight, bias); rounded to bf16 when the weights are bf16, as a bf16
  // checkpoint stores every parameter.
  Status vec(const std::string& name, int64_t n, std::vector<float>* out) const {
    ASSIGN_OR_RETURN(const HostTensor* t, get(name, {n}));
    ASSIGN_OR_RETURN(*out, t->to_f32());
    if (type_ == kernels::WeightType::kBF16) {
      for (float& v : *out) v = numerics::round_to_bf16(v);
    }
    return Status::Ok();
  }

  Status optional_vec(const std::string& name, int64_t n, std::vector<float>* out) const {
    if (!find(name)) {
      out->clear();
      return Status::Ok();
    }
    return vec(name, n, out);
  }

  Status mlp(const std::string& gate, const std::string& up, const std::string& down,
             int64_t hidden, int64_t ffn, MlpWeights* out) const {
    RETURN_IF_ERROR(linear(gate, ffn, hidden, &out->gate));
    RETURN_IF_ERROR(linear(up, ffn, hidden, &out->up));
    RETURN_IF_ERROR(linear(down, hidden, ffn, &out->down));
    return Status::Ok();
  }

 private:
  const LoadedModel& m_;
  kernels::WeightType type_;
};

// MLA weights of one layer (prefix p = "model.layers.N.").
Status pack_mla(const Fetcher& f, const ModelConfig& c, const std::string& p, LayerWeights* L) {
  const int64_t H = c.hidden, NH = c.heads, QK = c.qk_head_dim(), NOPE = c.qk_nope_dim,
                RD = c.qk_rope_dim, KL = c.kv_lora_rank, VD = c.v_head_dim;
  const kernels::WeightType type = c.weight_type;
  auto fp32 = [&](const std::string& name, int64_t n, int64_t k) -> Result<std::vector<float>> {
    ASSIGN_OR_RETURN(const HostTensor* t, f.get(name, {n, k}));
    return t->to_f32();
  };
  if (c.q_lora_rank > 0) {
    RETURN_IF_ERROR(f.linear(p + "self_attn.q_a_proj.weight", c.q_lora_rank, H, &L->q_a));
    RETURN_IF_ERROR(f.vec(p + "self_attn.q_a_layernorm.weight", c.q_lora_rank, &L->q_a_norm));
    RETURN_IF_ERROR(f.linear(p + "self_attn.q_b_proj.weight", NH * QK, c.q_lora_rank, &L->q));
  } else {
    RETURN_IF_ERROR(f.linear(p + "self_attn.q_proj.weight", NH * QK, H, &L->q));
  }
  RETURN_IF_ERROR(f.linear(p + "self_attn.kv_a_proj_with_mqa.weight", KL + RD, H, &L->kv_a));
  RETURN_IF_ERROR(f.vec(p + "self_attn.kv_a_layernorm.weight", KL, &L->kv_a_norm));
  ASSIGN_OR_RETURN(std::vector<float> wkvb, fp32(p + "self_attn.kv_b_proj.weight",
                                                 NH * (NOPE + VD), KL));
  L->uk_t.resize(NH);
  L->uv.resize(NH);
  std::vector<float> ukt(KL * NOPE);
  for (int64_t h = 0; h < NH; ++h) {
    const float* base = wkvb.data() + h * (NOPE + VD) * KL;
    for (int64_t i = 0; i < NOPE; ++i)
      for (int64_t j = 0; j < KL; ++j) ukt[j * NOPE + i] = base[i * KL + j];
    L->uk_t[h] = kernels::PackedWeight::pack(ukt.data(), KL, NOPE, type);
    L->uv[h] = kernels::PackedWeight::pack(base + NOPE * KL, VD, KL, type);
  }
  return f.linear(p + "self_attn.o_proj.weight", H, NH * VD, &L->o);
}

Status bad_config(const LoadedModel& m, const std::string& what) {
  return make_error(ErrorCode::kBadModel, m.source + ": model config: " + what);
}

}  // namespace

bool is_sparse_layer(const ModelConfig& cfg, int32_t layer) { return cfg.is_moe_layer(layer); }

Result<EngineWeights> pack_weights(const LoadedModel& model, const ModelConfig& in) {
  EngineWeights w;
  w.cfg = in;
  ModelConfig& c = w.cfg;
  if (c.vocab <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0) {
    return bad_config(model, "vocab, hidden, layers and heads must be positive (got vocab " +
                                 std::to_string(c.vocab) + ", hidden " + std::to_string(c.hidden) +
                                 ", layers " + std::to_string(c.layers) + ", heads " +
                                 std::to_string(c.heads) + ")");
  }
  if (c.kv_heads <= 0) c.kv_heads = c.heads;
  if (c.heads % c.kv_heads != 0) {
    return bad_config(model, "heads (" + std::to_string(c.heads) +
                                 ") is not a multiple of kv_heads (" +
                                 std::to_string(c.kv_heads) + ")");
  }
  if (c.head_dim <= 0) {
    if (c.hidden % c.heads != 0) {
      return bad_config(model, "hidden is not a multiple of heads and head_dim is not given");
    }
    c.head_dim = c.hidden / c.heads;
  }
  if (c.head_dim % 2 != 0) return bad_config(model, "head_dim must be even for RoPE");
  if (c.mla) {
    if (c.kv_lora_rank <= 0 || c.qk_nope_dim <= 0 || c.v_head_dim <= 0 || c.q_lora_rank < 0 ||
        c.qk_rope_dim != c.head_dim)
      return bad_config(model, "MLA needs kv_lora_rank, qk_nope_head_dim, v_head_dim > 0 and "
                               "head_dim == qk_rope_head_dim (got kv_lora_rank " +
                                   std::to_string(c.kv_lora_rank) + ", qk_nope_head_dim " +
                                   std::to_string(c.qk_nope_dim) + ", v_head_dim " +
                                   std::to_string(c.v_head_dim) + ", qk_rope_head_dim " +
                                   std::to_string(c.qk_rope_dim) + ", head_dim " +
                                   std::to_string(c.head_dim) + ")");
  }
  if (c.n_group < 1 || c.topk_group < 1 || c.topk_group > c.n_group ||
      (c.is_moe() && (c.experts % c.n_group != 0 ||
                      int64_t{c.topk_group} * (c.experts / c.n_group) < c.top_k ||
                      (c.n_group > 1 && c.experts / c.n_group < 2))))
    return bad_config(model, "group-limited routing needs n_group dividing the experts, groups "
                             "of at least 2, 1 <= topk_group <= n_group and top_k within the "
                             "chosen groups (got n_group " + std::to_string(c.n_group) +
                                 ", topk_group " + std::to_string(c.topk_group) + ", experts " +
                                 std::to_string(c.experts) + ", top_k " +
                                 std::to_string(c.top_k) + ")");
  if (c.max_positions <= 0) return bad_config(model, "max_positions must be positive");
  if (c.is_moe()) {
    if (c.top_k <= 0 || c.top_k > c.experts) {
      return bad_config(model, "top_k " + std::to_string(c.top_k) + " outside [1, experts=" +
                                   std::to_string(c.experts) + "]");
    }
    if (c.moe_ffn <= 0) return bad_config(model, "moe intermediate size must be positive");
  }
  const int64_t H = c.hidden, D = c.head_dim, V = c.vocab;
  const int64_t q_out = static_cast<int64_t>(c.heads) * D;
  const int64_t kv_out = static_cast<int64_t>(c.kv_heads) * D;
  const bool bf16 = c.weight_type == kernels::WeightType::kBF16;
  Fetcher f(model, c.weight_type);

  ASSIGN_OR_RETURN(const HostTensor* embed, f.get("model.embed_tokens.weight", {V, H}));
  const bool tied = c.tied_embeddings && !f.find("lm_head.weight");
  if (embed->stored && !bf16) {
    // A quantized table is looked up in its packed form; tied, it is the lm_head itself.
    if (tied) {
      RETURN_IF_ERROR(f.pack(*embed, V, H, &w.lm_head));
      w.embed_from = EngineWeights::EmbedFrom::kLmHead;
    } else {
      RETURN_IF_ERROR(f.pack(*embed, V, H, &w.embed_packed));
      RETURN_IF_ERROR(f.linear("lm_head.weight", V, H, &w.lm_head));
      w.embed_from = EngineWeights::EmbedFrom::kPacked;
    }
  } else if (embed->stored) {
    ASSIGN_OR_RETURN(std::vector<float> e32, embed->to_f32());
    w.embed_bf16.resize(e32.size());
    for (size_t i = 0; i < e32.size(); ++i) w.embed_bf16[i] = numerics::f32_to_bf16(e32[i]);
    if (tied) {
      w.lm_head = kernels::PackedWeight::pack(e32.data(), V, H, c.weight_type);
    } else {
      RETURN_IF_ERROR(f.linear("lm_head.weight", V, H, &w.lm_head));
    }
  } else if (bf16) {
    w.embed_bf16.resize(embed->data.size());
    for (size_t i = 0; i < embed->data.size(); ++i) {
      w.embed_bf16[i] = numerics::f32_to_bf16(embed->data[i]);
    }
  } else {
    w.embed_f32 = embed->data;
  }
  if (!embed->stored) {
    if (tied) {
      w.lm_head = kernels::PackedWeight::pack(embed->data.data(), V, H, c.weight_type);
    } else {
      RETURN_IF_ERROR(f.linear("lm_head.weight", V, H, &w.lm_head));
    }
  }
  RETURN_IF_ERROR(f.vec("model.norm.weight", H, &w.final_norm));

  w.layers.resize(c.layers);
  for (int32_t l = 0; l < c.layers; ++l) {
    LayerWeights& L = w.layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    RETURN_IF_ERROR(f.vec(p + "input_layernorm.weight", H, &L.attn_norm));
    RETURN_IF_ERROR(f.vec(p + "post_attention_layernorm.weight", H, &L.mlp_norm));
    if (c.mla) {
      RETURN_IF_ERROR(pack_mla(f, c, p, &L));
    } else {
      RETURN_IF_ERROR(f.linear(p + "self_attn.q_proj.weight", q_out, H, &L.q));
      RETURN_IF_ERROR(f.linear(p + "self_attn.k_proj.weight", kv_out, H, &L.k));
      RETURN_IF_ERROR(f.linear(p + "self_attn.v_proj.weight", kv_out, H, &L.v));
      RETURN_IF_ERROR(f.linear(p + "self_attn.o_proj.weight", H, q_out, &L.o));
    }
    if (c.attention_bias) {
      RETURN_IF_ERROR(f.vec(p + "self_attn.q_proj.bias", q_out, &L.q_bias));
      RETURN_IF_ERROR(f.vec(p + "self_attn.k_proj.bias", kv_out, &L.k_bias));
      RETURN_IF_ERROR(f.vec(p + "self_attn.v_proj.bias", kv_out, &L.v_bias));
    } else {
      RETURN_IF_ERROR(f.optional_vec(p + "self_attn.q_proj.bias", q_out, &L.q_bias));
      RETURN_IF_ERROR(f.optional_vec(p + "self_attn.k_proj.bias", kv_out, &L.k_bias));
      RETURN_IF_ERROR(f.optional_vec(p + "self_attn.v_proj.bias", kv_out, &L.v_bias));
    }
    if (c.qk_norm) {
      RETURN_IF_ERROR(f.vec(p + "self_attn.q_norm.weight", D, &L.q_norm));
      RETURN_IF_ERROR(f.vec(p + "self_attn.k_norm.weight", D, &L.k_norm));
    }

    L.sparse = is_sparse_layer(c, l);
    if (!L.sparse) {
      if (c.ffn <= 0) {
        return bad_config(model, "layer " + std::to_string(l) +
                                     " is dense but the intermediate size is not positive");
      }
      RETURN_IF_ERROR(f.mlp(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                            p + "mlp.down_proj.weight", H, c.ffn, &L.mlp));
      continue;
    }
    // Mixtral names (block_sparse_moe.*, w1 gate / w3 up / w2 down) or Qwen2-MoE names
    // (mlp.gate, mlp.experts.E.*_proj, mlp.shared_expert*).
    const bool mixtral = f.find(p + "block_sparse_moe.gate.weight") != nullptr ||
                         (c.arch == Arch::kMixtral && !f.find(p + "mlp.gate.weight"));
    const int64_t E = c.experts, F = c.moe_ffn;
    L.experts.resize(E);
    if (mixtral) {
      RETURN_IF_ERROR(f.linear(p + "block_sparse_moe.gate.weight", E, H, &L.router));
      for (int64_t e = 0; e < E; ++e) {
        const std::string q = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        RETURN_IF_ERROR(f.mlp(q + "w1.weight", q + "w3.weight", q + "w2.weight", H, F,
                              &L.experts[e]));
      }
    } else {
      RETURN_IF_ERROR(f.linear(p + "mlp.gate.weight", E, H, &L.router));
      if (c.router_bias)
        RETURN_IF_ERROR(f.vec(p + "mlp.gate.e_score_correction_bias", E, &L.router_bias));
      for (int64_t e = 0; e < E; ++e) {
        const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        RETURN_IF_ERROR(f.mlp(q + "gate_proj.weight", q + "up_proj.weight",
                              q + "down_proj.weight", H, F, &L.experts[e]));
      }
    }
    if (c.shared_ffn > 0) {
      L.has_shared = true;
      const std::string q =
          p + (c.arch == Arch::kDeepseekV3 ? "mlp.shared_experts." : "mlp.shared_expert.");
      RETURN_IF_ERROR(f.mlp(q + "gate_proj.weight", q + "up_proj.weight",
                            q + "down_proj.weight", H, c.shared_ffn, &L.shared));
      if (c.shared_expert_gate) {
        L.has_shared_gate = true;
        RETURN_IF_ERROR(f.linear(p + "mlp.shared_expert_gate.weight", 1, H, &L.shared_gate));
      }
    }
  }
  w.rope = kernels::RopeTable(D, c.rope_theta, c.max_positions);
  return w;
}

void EngineWeights::embed(const int32_t* ids, int64_t rows, float* out) const {
  if (embed_from != EmbedFrom::kTable) {
    kernels::embedding_packed(embed_from == EmbedFrom::kLmHead ? lm_head : embed_packed, ids,
                              rows, out, cfg.hidden);
  } else {
    kernels::embedding(embed_table(), cfg.weight_type, cfg.vocab, cfg.hidden, ids, rows, out,
                       cfg.hidden);
  }
}

}  // namespace llmrr
