// Builtin models: tiny Llama, Mixtral and DeepSeek-V3 checkpoints generated from a fixed seed.
//
// Generator. Every value is a pure function of (seed, tensor name, element index): a
// counter-based splitmix64 (key = mix(seed ^ fnv1a64(name)), draw i = mix(key + (i+1)·φ64))
// whose 64 bits are cut into four 16-bit uniforms; their sum, centred and scaled, is an
// Irwin–Hall(4) variate with mean 0 and variance 1 (bounded at ±2√3). Only integer
// arithmetic and two correctly rounded float multiplications are involved — no libm, no
// std::normal_distribution — so the weights, and the weight hash, are identical on every
// platform and compiler.
//
// Architecture (Hugging Face names and shapes, fp32, untied lm_head):
//   tiny-dense: LlamaForCausalLM, vocab 258 (bytes + BOS 256 + EOS 257), hidden 256,
//               4 layers, 8 heads / 4 KV heads (head_dim 32), MLP 688, RoPE θ 10000,
//               RMSNorm ε 1e-5, max positions 4096.
//   tiny-moe:   MixtralForCausalLM, same attention, 8 experts of MLP 256, top-2, softmax
//               router with the top-k renormalized.
//   tiny-deepseek: DeepseekV3ForCausalLM, same vocabulary, hidden, 4 layers, 8 heads; MLA
//               with q_lora_rank 96, kv_lora_rank 64, per head 32 nope + 16 rope (not
//               interleaved), v_head_dim 32; layer 0 dense (MLP 688, first_k_dense_replace
//               1), layers 1-3 MoE: 16 routed experts of MLP 128 in 4 groups, 2 groups kept,
//               top-4 by sigmoid score + e_score_correction_bias (σ 0.05), gates renormalized
//               and × routed_scaling_factor 2.5, one shared expert of MLP 128.
//
// Scales (x is the RMS-normalised input, rms ≈ 1):
//   q, k         σ = 1.2/√in   → scores q·k/√32 with std ≈ 1.4: attention neither uniform
//                               nor one-hot
//   v, gate, up  σ = 1/√in     → unit-scale projections
//   o, down      σ = 0.5/√in   → each block adds ≈ 0.5 rms to the residual, so after 4
//                               layers the residual has grown ~1.7×, not exploded
//                               (tiny-deepseek's routed experts 0.2/√in: their gates sum
//                               to 2.5)
//   MLA          q_a, kv_a 1/√in; q_b 1.2/√in (scores of the same spread as q, k above);
//                kv_b 1/√in; low-rank norms 1 + 0.1·z
//   router       σ = 1/√in     (column 0 ×0.1, see below) → router logits with std ≈ 1:
//                               routing depends on content, with clear top-2 choices
//   norms        1 + 0.1·z     → non-trivial (an engine that ignores them is caught)
//   embeddings   z, except column 0 = 4
//   lm_head      0.12·z − 0.02·embedding (columns 1..), column 0 = the token's class weight
//
// Readable output. Column 0 of every embedding is the constant 4 (a "beacon"); the residual
// stream carries it through the layers, so after the final norm h[0] ≈ 2..3 for every
// position. lm_head's column 0 turns it into a per-token bias: lowercase letters +1.0,
// space +0.9, uppercase and common punctuation +0.4, digits +0.2, newline 0, other
// printable ASCII −0.5, control and non-ASCII bytes −2, EOS −1, BOS −3. The random part
// of a logit has std ≈ 0.12·√256 ≈ 1.9. The −0.02·embedding term makes a token predict
// itself less (the residual still carries the current token's embedding), which keeps
// greedy decoding out of "xxxx" / all-space loops. Measured with transformers on the
// exported checkpoints: last-position logits have std ≈ 4 and range ≈ 17–20, the top token
// has p ≈ 0.1–0.45, and greedy and sampled text is random but printable (mostly lowercase
// letters, some spaces and punctuation). The router's column 0 is damped so the beacon
// does not pin every token to the same experts.
#include "llmrr/runtime/builtin.h"

#include <cmath>
#include <cstring>
#include <string>

#include "llmrr/runtime/tokenizers.h"
#include "loaders/loader_util.h"

namespace llmrr {
namespace {

constexpr uint64_t kSeed = 0x6c6c6d7272'0001ull;  // "llmrr", version 1 of the generator
constexpr uint64_t kPhi = 0x9E3779B97F4A7C15ull;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Irwin–Hall(4) standard variate for draw i of stream `key`.
float normal_at(uint64_t key, uint64_t i) {
  uint64_t r = mix64(key + (i + 1) * kPhi);
  int32_t s = static_cast<int32_t>(r & 0xffff) + static_cast<int32_t>((r >> 16) & 0xffff) +
              static_cast<int32_t>((r >> 32) & 0xffff) + static_cast<int32_t>(r >> 48);
  // Mean of the sum is 4 · 65535/2 = 131070; variance 4 · (65536² − 1)/12 ≈ 65536²/3.
  constexpr float kScale = 1.7320508075688772f / 65536.0f;  // √3 / 2¹⁶
  return static_cast<float>(s - 131070) * kScale;
}

struct Builder {
  LoadedModel m;

  // A tensor of N(0, sigma²) draws (Irwin–Hall), keyed by its name.
  HostTensor& random(const std::string& name, std::vector<int64_t> shape, float sigma) {
    HostTensor& t = m.tensors[name];
    t.shape = std::move(shape);
    t.data.resize(static_cast<size_t>(t.numel()));
    uint64_t key = mix64(kSeed ^ fnv1a64(name));
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = normal_at(key, i) * sigma;
    return t;
  }

  // 1 + 0.1·z: a norm weight that is not the identity.
  HostTensor& norm(const std::string& name, int64_t dim) {
    HostTensor& t = random(name, {dim}, 0.1f);
    for (float& v : t.data) v += 1.0f;
    return t;
  }

  void linear(const std::string& name, int64_t out, int64_t in, float gain) {
    random(name, {out, in}, gain / std::sqrt(static_cast<float>(in)));
  }
};

constexpr float kAntiRepeat = 0.02f;
constexpr float kSpaceWeight = 0.9f;

// lm_head column 0: how much each token is favoured through the beacon.
float class_weight(int32_t id) {
  if (id == kByteBos) return -3.0f;
  if (id == kByteEos) return -1.0f;
  unsigned char c = static_cast<unsigned char>(id);
  if (c >= 'a' && c <= 'z') return 1.0f;
  if (c == ' ') return kSpaceWeight;
  if (c >= 'A' && c <= 'Z') return 0.4f;
  if (std::strchr(".,;:!?'-", c) != nullptr && c != 0) return 0.4f;
  if (c >= '0' && c <= '9') return 0.2f;
  if (c == '\n') return 0.0f;
  if (c > 0x20 && c < 0x7f) return -0.5f;
  return -2.0f;
}

enum class Kind { kDense, kMoe, kDeepseek };

// DeepSeek-V3 attention (MLA) and MoE block of layer prefix p (tiny-deepseek).
void deepseek_layer(Builder& b, const ModelConfig& c, const std::string& p, bool moe) {
  const int64_t h = c.hidden, nh = c.heads, qk = c.qk_head_dim();
  b.linear(p + "self_attn.q_a_proj.weight", c.q_lora_rank, h, 1.0f);
  b.norm(p + "self_attn.q_a_layernorm.weight", c.q_lora_rank);
  b.linear(p + "self_attn.q_b_proj.weight", nh * qk, c.q_lora_rank, 1.2f);
  b.linear(p + "self_attn.kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_dim, h, 1.0f);
  b.norm(p + "self_attn.kv_a_layernorm.weight", c.kv_lora_rank);
  b.linear(p + "self_attn.kv_b_proj.weight", nh * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank,
           1.2f);
  b.linear(p + "self_attn.o_proj.weight", h, nh * c.v_head_dim, 0.5f);
  if (!moe) {
    b.linear(p + "mlp.gate_proj.weight", c.ffn, h, 1.0f);
    b.linear(p + "mlp.up_proj.weight", c.ffn, h, 1.0f);
    b.linear(p + "mlp.down_proj.weight", h, c.ffn, 0.5f);
    return;
  }
  const std::string m = p + "mlp.";
  b.linear(m + "gate.weight", c.experts, h, 1.0f);
  HostTensor& router = b.m.tensors[m + "gate.weight"];
  for (int64_t e = 0; e < c.experts; ++e) router.data[e * h] *= 0.1f;
  b.random(m + "gate.e_score_correction_bias", {c.experts}, 0.05f);
  for (int e = 0; e < c.experts; ++e) {
    const std::string ep = m + "experts." + std::to_string(e) + ".";
    b.linear(ep + "gate_proj.weight", c.moe_ffn, h, 1.0f);
    b.linear(ep + "up_proj.weight", c.moe_ffn, h, 1.0f);
    b.linear(ep + "down_proj.weight", h, c.moe_ffn, 0.2f);
  }
  b.linear(m + "shared_experts.gate_proj.weight", c.shared_ffn, h, 1.0f);
  b.linear(m + "shared_experts.up_proj.weight", c.shared_ffn, h, 1.0f);
  b.linear(m + "shared_experts.down_proj.weight", h, c.shared_ffn, 0.5f);
}

LoadedModel build(Kind kind) {
  const bool moe = kind == Kind::kMoe;
  Builder b;
  ModelConfig& c = b.m.config;
  c.arch = kind == Kind::kDeepseek ? Arch::kDeepseekV3 : moe ? Arch::kMixtral : Arch::kLlama;
  c.vocab = kByteVocab;
  c.hidden = 256;
  c.layers = 4;
  c.heads = 8;
  c.kv_heads = 4;
  c.head_dim = 32;
  c.ffn = moe ? 0 : 688;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-5f;
  c.tied_embeddings = false;
  c.max_positions = 4096;
  c.bos = kByteBos;
  c.eos = kByteEos;
  if (moe) {
    c.experts = 8;
    c.top_k = 2;
    c.moe_ffn = 256;
    c.norm_topk_prob = true;
    c.scoring = RouterScoring::kSoftmax;
  }
  if (kind == Kind::kDeepseek) {
    c.kv_heads = c.heads;
    c.mla = true;
    c.q_lora_rank = 96;
    c.kv_lora_rank = 64;
    c.qk_nope_dim = 32;
    c.qk_rope_dim = 16;
    c.head_dim = c.qk_rope_dim;
    c.v_head_dim = 32;
    c.rope_interleave = false;
    c.lora_norm_eps = 1e-6f;
    c.experts = 16;
    c.top_k = 4;
    c.moe_ffn = 128;
    c.shared_ffn = 128;
    c.norm_topk_prob = true;
    c.scoring = RouterScoring::kSigmoid;
    c.router_bias = true;
    c.n_group = 4;
    c.topk_group = 2;
    c.routed_scaling = 2.5f;
    c.mlp_only_layers = {0};  // first_k_dense_replace 1
  }
  const int64_t h = c.hidden, q_out = int64_t{c.heads} * c.head_dim,
                kv_out = int64_t{c.kv_heads} * c.head_dim;

  HostTensor& emb = b.random("model.embed_tokens.weight", {c.vocab, h}, 1.0f);
  for (int64_t t = 0; t < c.vocab; ++t) emb.data[t * h] = 4.0f;

  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    b.norm(p + "input_layernorm.weight", h);
    b.norm(p + "post_attention_layernorm.weight", h);
    if (kind == Kind::kDeepseek) {
      deepseek_layer(b, c, p, c.is_moe_layer(l));
      continue;
    }
    b.linear(p + "self_attn.q_proj.weight", q_out, h, 1.2f);
    b.linear(p + "self_attn.k_proj.weight", kv_out, h, 1.2f);
    b.linear(p + "self_attn.v_proj.weight", kv_out, h, 1.0f);
    b.linear(p + "self_attn.o_proj.weight", h, q_out, 0.5f);
    if (!moe) {
      b.linear(p + "mlp.gate_proj.weight", c.ffn, h, 1.0f);
      b.linear(p + "mlp.up_proj.weight", c.ffn, h, 1.0f);
      b.linear(p + "mlp.down_proj.weight", h, c.ffn, 0.5f);
    } else {
      const std::string moe_p = p + "block_sparse_moe.";
      b.linear(moe_p + "gate.weight", c.experts, h, 1.0f);
      HostTensor& router = b.m.tensors[moe_p + "gate.weight"];
      for (int64_t e = 0; e < c.experts; ++e) router.data[e * h] *= 0.1f;
      for (int e = 0; e < c.experts; ++e) {
        const std::string ep = moe_p + "experts." + std::to_string(e) + ".";
        b.linear(ep + "w1.weight", c.moe_ffn, h, 1.0f);   // gate
        b.linear(ep + "w3.weight", c.moe_ffn, h, 1.0f);   // up
        b.linear(ep + "w2.weight", h, c.moe_ffn, 0.5f);   // down
      }
    }
  }
  HostTensor& fnorm = b.norm("model.norm.weight", h);
  fnorm.data[0] = 1.0f;
  HostTensor& head = b.random("lm_head.weight", {c.vocab, h}, 0.12f);
  for (int32_t t = 0; t < c.vocab; ++t) {
    for (int64_t d = 1; d < h; ++d) head.data[t * h + d] -= kAntiRepeat * emb.data[t * h + d];
    head.data[t * h] = class_weight(t);
  }

  loaders::WeightHasher hasher;
  for (const auto& [name, t] : b.m.tensors)
    hasher.add(name, "F32", t.shape, t.data.data(), t.data.size() * sizeof(float));
  b.m.weight_hash = hasher.digest();
  b.m.tokenizer = make_byte_tokenizer();
  return std::move(b.m);
}

}  // namespace

std::vector<std::string> builtin_model_names() {
  return {"tiny-dense", "tiny-moe", "tiny-deepseek"};
}

Result<LoadedModel> load_builtin(std::string_view name) {
  if (name != "tiny-dense" && name != "tiny-moe" && name != "tiny-deepseek") {
    std::string known;
    for (const std::string& n : builtin_model_names()) known += (known.empty() ? "" : ", ") + n;
    return make_error(ErrorCode::kNotFound, "builtin:" + std::string(name) +
                                                ": no such builtin model (known: " + known + ")");
  }
  LoadedModel m = build(name == "tiny-moe"        ? Kind::kMoe
                        : name == "tiny-deepseek" ? Kind::kDeepseek
                                                  : Kind::kDense);
  m.identity = "builtin:" + std::string(name);
  m.source = m.identity;
  return m;
}

}  // namespace llmrr
