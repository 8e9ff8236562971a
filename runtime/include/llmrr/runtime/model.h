// Model configuration and weights, as the loaders produce them and the engine consumes them.
// Tensors use Hugging Face names and layouts (model.layers.3.mlp.down_proj.weight, Linear
// weights [out, in]) whatever the source format, so every loader feeds the same engine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/runtime/tokenizer.h"

namespace llmrr {

enum class Arch : uint8_t {
  kLlama = 0,     // dense: LlamaForCausalLM (also SmolLM2, Qwen2 without biases)
  kMixtral = 1,   // MixtralForCausalLM: softmax router, top-k renormalized
  kQwen2Moe = 2,  // Qwen2MoeForCausalLM: softmax router, optional renorm, shared expert + gate
  kQwen3 = 3,     // Qwen3ForCausalLM: Llama plus per-head q/k RMSNorm before RoPE
  kQwen3Moe = 4,  // Qwen3MoeForCausalLM: q/k norm, softmax router, top-k renormalized by
                  // norm_topk_prob, no shared expert, mlp_only_layers / decoder_sparse_step
  kDeepseekV3 = 5,  // DeepseekV3ForCausalLM: multi-head latent attention (MLA), sigmoid router
                    // with a selection bias and group-limited top-k, shared experts, the
                    // first first_k_dense_replace layers dense
};

// "llama", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v3" (HF model_type).
const char* arch_name(Arch arch);

enum class RouterScoring : uint8_t { kSoftmax = 0, kSigmoid = 1 };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int32_t vocab = 0;
  int32_t hidden = 0;
  int32_t layers = 0;
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  int32_t ffn = 0;                 // dense MLP intermediate size (0: every layer is MoE)
  double rope_theta = 10000.0;
  float norm_eps = 1e-5f;
  bool tied_embeddings = false;
  int32_t max_positions = 2048;
  int32_t bos = -1;
  int32_t eos = -1;
  kernels::WeightType weight_type = kernels::WeightType::kF32;  // storage of linear weights
  bool bf16_activations = false;   // round op outputs to bf16, as a bf16 checkpoint computes

  // MoE (experts == 0 for dense models).
  int32_t experts = 0;
  int32_t top_k = 0;
  int32_t moe_ffn = 0;             // expert intermediate size
  int32_t shared_ffn = 0;          // shared expert intermediate size (0 = none)
  bool shared_expert_gate = false; // Qwen2-MoE: sigmoid(x·w) scales the shared expert
  bool norm_topk_prob = true;      // renormalize the top-k gate weights to sum to 1
  RouterScoring scoring = RouterScoring::kSoftmax;
  int32_t decoder_sparse_step = 1; // Qwen2-MoE: MoE on layers where (i+1) % step == 0
  std::vector<int32_t> mlp_only_layers;  // Qwen2-MoE: layers forced to the dense MLP

  // Qwen2-MoE adds biases to q/k/v (HF `model.layers.N.self_attn.{q,k,v}_proj.bias`,
  // shape [out]); o_proj has none. The engine adds them after the projection.
  bool attention_bias = false;
  // Qwen3 / Qwen3-MoE: RMSNorm over each head's head_dim values of q and of k (weights
  // `self_attn.{q,k}_norm.weight`, shape [head_dim], one for all heads), after the
  // projection and before RoPE; ε is norm_eps.
  bool qk_norm = false;

  // DeepSeek-V3 multi-head latent attention (mla true; DESIGN.md "Architectures"). q is
  // q_b_proj(RMSNorm(q_a_proj(x))) (q_proj(x) when q_lora_rank is 0), heads × (nope + rope);
  // kv_a_proj_with_mqa(x) gives the latent (kv_lora_rank, RMSNorm'd) and one shared rope key
  // (qk_rope_dim); kv_b_proj [heads × (nope + v_head_dim), kv_lora_rank] expands the latent.
  // head_dim is qk_rope_dim (the RoPE width); the low-rank norms use lora_norm_eps (HF's
  // DeepseekV3RMSNorm default). With rope_interleave the rope part rotates interleaved pairs
  // (2i, 2i+1), written out as transformers' apply_rotary_pos_emb_interleave does.
  bool mla = false;
  int32_t q_lora_rank = 0;
  int32_t kv_lora_rank = 0;
  int32_t qk_nope_dim = 0;
  int32_t qk_rope_dim = 0;
  int32_t v_head_dim = 0;
  bool rope_interleave = false;
  float lora_norm_eps = 1e-6f;
  int32_t qk_head_dim() const { return qk_nope_dim + qk_rope_dim; }
  // The KV cache row of one position: kv_heads × head_dim, or for MLA one latent row
  // (kv_lora_rank, then the rope key) that keys and values both read.
  int32_t cache_heads() const { return mla ? 1 : kv_heads; }
  int32_t cache_dim() const { return mla ? kv_lora_rank + qk_rope_dim : head_dim; }

  // DeepSeek-V3 routing: selection ranks sigmoid(logit) + e_score_correction_bias (the bias
  // only selects; gates use the unbiased score), restricted to the topk_group groups (of
  // n_group equal groups of experts) with the largest sum of their two best biased scores;
  // gates are multiplied by routed_scaling_factor. n_group 1 / no bias: plain top-k.
  bool router_bias = false;        // mlp.gate.e_score_correction_bias [experts]
  int32_t n_group = 1;
  int32_t topk_group = 1;
  float routed_scaling = 1.0f;

  bool is_moe() const { return experts > 0; }
  // Whether layer `layer` runs the MoE block (else the dense MLP of `ffn`), as HF decides:
  // Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer use experts when the layer is not in mlp_only_layers and
  // (layer + 1) % decoder_sparse_step == 0.
  bool is_moe_layer(int32_t layer) const {
    if (experts <= 0) return false;
    for (int32_t l : mlp_only_layers)
      if (l == layer) return false;
    return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
  }
};

// A 2-D weight kept as the source stores it: ggml blocks inside a file mapping that the
// LoadedModel keeps alive (LoadedModel::storage). The engine packs it quantized
// (kernels/quant.h: the same fp32 values the dequantizer would write) and no fp32 copy exists.
struct StoredTensor {
  uint32_t ggml_type = 0;
  std::vector<const uint8_t*> rows;  // HF row i ([out, in] Linear layout), in its blocks
  const uint8_t* first = nullptr;    // the byte range the rows lie in (to release its pages)
  uint64_t bytes = 0;
};

// One tensor in the Hugging Face name and shape: dequantized to fp32 in `data`, or, when
// loaded with ModelLoadOptions::keep_quantized, possibly `stored` with `data` empty.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::shared_ptr<const StoredTensor> stored;
  int64_t numel() const;
  // `data`, or `stored` dequantized (exactly as the loader would have): an error only for a
  // stored type that cannot be dequantized.
  Result<std::vector<float>> to_f32() const;
};

struct LoadedModel {
  ModelConfig config;
  std::map<std::string, HostTensor> tensors;
  // xxh3-64 over the tensors as stored in the source (name, dtype, shape, raw bytes, in
  // name order): identifies the weights whatever path they were loaded from. Streamed per
  // tensor, little-endian: u64 len(name), name, u64 len(dtype), dtype ("F32", "BF16",
  // "Q4_1", ...), u64 ndim, ndim × i64 dims (the source's order: GGUF ne, safetensors shape),
  // u64 len(bytes), bytes. Source names (llama.cpp names for GGUF), not HF names.
  uint64_t weight_hash = 0;
  std::string identity;    // "builtin:tiny-moe", "gguf:SmolLM2-135M-Instruct", ...
  std::string source;      // the spec or path it was loaded from
  std::shared_ptr<const Tokenizer> tokenizer;  // null: the source has no usable tokenizer
  std::string tokenizer_note;  // why `tokenizer` is null (absent, unsupported kind, ...)
  std::shared_ptr<const void> storage;  // keeps the bytes of `stored` tensors mapped
};

struct ModelLoadOptions {
  // GGUF: keep block-quantized 2-D weights (Q4_0/1, Q5_0/1, Q8_0, Q2_K..Q6_K, Q8_K) and
  // F16 / BF16 ones as stored (HostTensor::stored) instead of converting them to fp32. The engine computes
  // the same bits either way; this only saves the memory (and time) of the fp32 copy.
  // Other sources ignore it.
  bool keep_quantized = false;
};

// Tensor layout contract, whatever the source: Linear weights [out, in]; biases [out];
// norms [hidden]. With tied_embeddings, lm_head.weight is absent (use embed_tokens).
// MoE tensors use the original checkpoint names: Mixtral
// model.layers.N.block_sparse_moe.{gate.weight [E, H], experts.E.{w1,w3} [I, H] (gate, up),
// experts.E.w2 [H, I] (down)}; Qwen2-MoE model.layers.N.mlp.{gate.weight [E, H],
// experts.E.{gate,up,down}_proj.weight, shared_expert.{gate,up,down}_proj.weight,
// shared_expert_gate.weight [1, H]} (Qwen3-MoE: the same names, no shared expert).
// Qwen3: model.layers.N.self_attn.{q,k}_norm.weight [head_dim].

// Loads "builtin:<name>", a directory with config.json + *.safetensors, or a .gguf file.
// Every malformed input is a clear error (file, offset or tensor, expected vs found); no
// allocation is made from a size the file declares before that size is checked against
// the file.
Result<LoadedModel> load_model(const std::string& spec);
Result<LoadedModel> load_model(const std::string& spec, const ModelLoadOptions& options);

// Where fetched models live: $LLMRR_MODEL_DIR if set, else $HOME/.cache/llmrr/models
// (tools/setup/smollm2 uses the same rule).
std::string model_cache_dir();

// SmolLM2-135M-Instruct (Q4_1 GGUF) in the model cache, or "" when it has not been fetched
// (tests skip then; run tools/setup/smollm2).
std::string find_smollm2();
inline constexpr const char* kSmolLM2FileName = "SmolLM2-135M-Instruct.Q4_1.gguf";

}  // namespace llmrr
