// What each architecture needs, so that every loader rejects the same malformed models the
// same way (missing tensor, wrong shape, unknown feature).
#include <cmath>
#include <cstdio>
#include <string>

#include "loaders/loader_util.h"

namespace llmrr::loaders {

std::map<std::string, std::vector<int64_t>> expected_tensors(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> t;
  const int64_t h = c.hidden, v = c.vocab, q = int64_t{c.heads} * c.head_dim,
                kv = int64_t{c.kv_heads} * c.head_dim;
  t["model.embed_tokens.weight"] = {v, h};
  t["model.norm.weight"] = {h};
  if (!c.tied_embeddings) t["lm_head.weight"] = {v, h};
  for (int32_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t[p + "input_layernorm.weight"] = {h};
    t[p + "post_attention_layernorm.weight"] = {h};
    if (c.mla) {
      const int64_t nh = c.heads, qk = c.qk_head_dim(), kl = c.kv_lora_rank, ql = c.q_lora_rank;
      if (ql > 0) {
        t[p + "self_attn.q_a_proj.weight"] = {ql, h};
        t[p + "self_attn.q_a_layernorm.weight"] = {ql};
        t[p + "self_attn.q_b_proj.weight"] = {nh * qk, ql};
      } else {
        t[p + "self_attn.q_proj.weight"] = {nh * qk, h};
      }
      t[p + "self_attn.kv_a_proj_with_mqa.weight"] = {kl + c.qk_rope_dim, h};
      t[p + "self_attn.kv_a_layernorm.weight"] = {kl};
      t[p + "self_attn.kv_b_proj.weight"] = {nh * (c.qk_nope_dim + c.v_head_dim), kl};
      t[p + "self_attn.o_proj.weight"] = {h, nh * c.v_head_dim};
    } else {
      t[p + "self_attn.q_proj.weight"] = {q, h};
      t[p + "self_attn.k_proj.weight"] = {kv, h};
      t[p + "self_attn.v_proj.weight"] = {kv, h};
      t[p + "self_attn.o_proj.weight"] = {h, q};
    }
    if (c.attention_bias) {
      t[p + "self_attn.q_proj.bias"] = {q};
      t[p + "self_attn.k_proj.bias"] = {kv};
      t[p + "self_attn.v_proj.bias"] = {kv};
    }
    if (c.qk_norm) {
      t[p + "self_attn.q_norm.weight"] = {c.head_dim};
      t[p + "self_attn.k_norm.weight"] = {c.head_dim};
    }
    const int64_t e = c.experts, i = c.moe_ffn, f = c.ffn, s = c.shared_ffn;
    if (!c.is_moe_layer(l)) {
      t[p + "mlp.gate_proj.weight"] = {f, h};
      t[p + "mlp.up_proj.weight"] = {f, h};
      t[p + "mlp.down_proj.weight"] = {h, f};
    } else if (c.arch == Arch::kMixtral) {
      const std::string m = p + "block_sparse_moe.";
      t[m + "gate.weight"] = {e, h};
      for (int64_t x = 0; x < e; ++x) {
        const std::string ep = m + "experts." + std::to_string(x) + ".";
        t[ep + "w1.weight"] = {i, h};
        t[ep + "w3.weight"] = {i, h};
        t[ep + "w2.weight"] = {h, i};
      }
    } else {
      const std::string m = p + "mlp.";
      t[m + "gate.weight"] = {e, h};
      if (c.router_bias) t[m + "gate.e_score_correction_bias"] = {e};
      for (int64_t x = 0; x < e; ++x) {
        const std::string ep = m + "experts." + std::to_string(x) + ".";
        t[ep + "gate_proj.weight"] = {i, h};
        t[ep + "up_proj.weight"] = {i, h};
        t[ep + "down_proj.weight"] = {h, i};
      }
      if (s > 0) {
        const std::string se =
            m + (c.arch == Arch::kDeepseekV3 ? "shared_experts." : "shared_expert.");
        t[se + "gate_proj.weight"] = {s, h};
        t[se + "up_proj.weight"] = {s, h};
        t[se + "down_proj.weight"] = {h, s};
        if (c.shared_expert_gate) t[m + "shared_expert_gate.weight"] = {1, h};
      }
    }
  }
  return t;
}

Status check_setting(const std::string& where, const std::string& key, double v, double lo,
                     double hi) {
  if (std::isfinite(v) && v >= lo && v <= hi) return Status::Ok();
  char text[160];
  std::snprintf(text, sizeof text, "%.9g, expected a finite number in [%g, %g]", v, lo, hi);
  return make_error(ErrorCode::kBadModel, where + ": " + key + " is " + text);
}

Status check_config(const ModelConfig& c, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return make_error(ErrorCode::kBadModel, where + ": " + what);
  };
  // Bounds keep every derived size far from overflow; real models are well inside them.
  constexpr int32_t kMaxDim = 1 << 20, kMaxLayers = 4096, kMaxVocab = 1 << 24;
  auto in = [](int64_t x, int64_t lo, int64_t hi) { return x >= lo && x <= hi; };
  // "<what> <value> is out of range, expected lo..hi": what was wrong and what was expected.
  auto range = [&](const std::string& what, int64_t v, int64_t lo, int64_t hi) {
    return bad(what + " " + std::to_string(v) + " is out of range, expected " +
               std::to_string(lo) + ".." + std::to_string(hi));
  };
  if (!in(c.vocab, 1, kMaxVocab)) return range("vocab size", c.vocab, 1, kMaxVocab);
  if (!in(c.hidden, 1, kMaxDim)) return range("hidden size", c.hidden, 1, kMaxDim);
  if (!in(c.layers, 1, kMaxLayers)) return range("layer count", c.layers, 1, kMaxLayers);
  if (!in(c.heads, 1, 4096)) return range("attention head count", c.heads, 1, 4096);
  if (!in(c.kv_heads, 1, 4096)) return range("KV head count", c.kv_heads, 1, 4096);
  if (c.heads % c.kv_heads != 0)
    return bad("attention heads " + std::to_string(c.heads) + " not a multiple of KV heads " +
               std::to_string(c.kv_heads));
  if (!in(c.head_dim, 2, 4096) || c.head_dim % 2 != 0)
    return bad("head_dim " + std::to_string(c.head_dim) + " must be even and positive");
  if (!in(c.ffn, 0, kMaxDim)) return range("intermediate size", c.ffn, 0, kMaxDim);
  if (!in(c.max_positions, 1, 1 << 24)) return range("max positions", c.max_positions, 1, 1 << 24);
  // The loaders check these by key; this catches a config built any other way.
  RETURN_IF_ERROR(check_setting(where, "rope theta", c.rope_theta, kMinRopeTheta, kMaxRopeTheta));
  RETURN_IF_ERROR(check_setting(where, "norm eps", c.norm_eps, kMinNormEps, kMaxNormEps));
  if (c.bos >= c.vocab || c.eos >= c.vocab)
    return bad("bos/eos id " + std::to_string(c.bos) + "/" + std::to_string(c.eos) +
               " outside the vocabulary of " + std::to_string(c.vocab));
  if (c.experts != 0) {
    if (!in(c.experts, 1, 4096)) return range("expert count", c.experts, 1, 4096);
    if (!in(c.top_k, 1, c.experts))
      return bad("experts per token " + std::to_string(c.top_k) + " not in 1.." +
                 std::to_string(c.experts));
    if (!in(c.moe_ffn, 1, kMaxDim)) return range("expert intermediate size", c.moe_ffn, 1, kMaxDim);
    if (!in(c.shared_ffn, 0, kMaxDim))
      return range("shared expert intermediate size", c.shared_ffn, 0, kMaxDim);
    if (c.decoder_sparse_step < 1) return bad("decoder_sparse_step must be ≥ 1");
  }
  for (int32_t l = 0; l < c.layers; ++l)
    if (!c.is_moe_layer(l) && c.ffn <= 0)
      return bad("layer " + std::to_string(l) + " has a dense MLP but intermediate size is 0");
  return Status::Ok();
}

Status check_tensors(const ModelConfig& config, const std::map<std::string, HostTensor>& tensors,
                     const std::string& where) {
  const auto expected = expected_tensors(config);
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end())
      return make_error(ErrorCode::kMissingTensor, where + ": tensor " + name +
                                                       " is missing (expected shape " +
                                                       shape_string(shape) + ")");
    if (it->second.shape != shape)
      return make_error(ErrorCode::kShapeMismatch,
                        where + ": tensor " + name + " has shape " +
                            shape_string(it->second.shape) + ", expected " + shape_string(shape));
  }
  for (const auto& [name, t] : tensors)
    if (!expected.count(name))
      return make_error(ErrorCode::kUnsupported,
                        where + ": unexpected tensor " + name + " " + shape_string(t.shape) +
                            " (a feature this engine does not implement, or a config mismatch)");
  return Status::Ok();
}

}  // namespace llmrr::loaders
