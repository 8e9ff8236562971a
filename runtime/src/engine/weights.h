// The engine's model: a LoadedModel's fp32 Hugging Face tensors packed for the kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/runtime/model.h"

namespace llmrr {

struct MlpWeights {
  kernels::PackedWeight gate, up, down;
};

struct LayerWeights {
  std::vector<float> attn_norm, mlp_norm;
  kernels::PackedWeight q, k, v, o;
  std::vector<float> q_bias, k_bias, v_bias;  // empty when the checkpoint has none
  std::vector<float> q_norm, k_norm;          // [head_dim] (Qwen3 q/k norm), else empty
  // MLA (DeepSeek-V3): q is q_a → q_a_norm → q (q_b_proj), or q (q_proj) without q_lora;
  // kv_a [kv_lora + rope, hidden]; rope rows de-interleaved when the checkpoint interleaves.
  // kv_b_proj split per head and absorbed: uk_t[h] = W_UK_hᵀ [kv_lora, nope] (q_nope → latent
  // query), uv[h] = W_UV_h [v_head_dim, kv_lora] (latent → values).
  kernels::PackedWeight q_a, kv_a;
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<kernels::PackedWeight> uk_t, uv;
  bool sparse = false;                        // MoE layer
  MlpWeights mlp;                             // dense layers
  kernels::PackedWeight router;               // [experts, hidden]
  std::vector<float> router_bias;             // [experts] DeepSeek-V3 selection bias, else empty
  std::vector<MlpWeights> experts;
  bool has_shared = false;
  MlpWeights shared;
  bool has_shared_gate = false;
  kernels::PackedWeight shared_gate;          // [1, hidden]
};

struct EngineWeights {
  ModelConfig cfg;                 // head_dim filled in, overrides applied
  std::vector<float> embed_f32;    // [vocab, hidden] (fp32 models)
  std::vector<uint16_t> embed_bf16;
  kernels::PackedWeight lm_head;   // [vocab, hidden]
  // A quantized embedding table stays packed: lookups read the lm_head when tied, else
  // embed_packed (an enum, not a pointer: EngineWeights moves).
  enum class EmbedFrom : uint8_t { kTable, kLmHead, kPacked };
  EmbedFrom embed_from = EmbedFrom::kTable;
  kernels::PackedWeight embed_packed;
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  kernels::RopeTable rope;

  // out[i, :] = the embedding of ids[i] (zeros for an id outside the vocabulary).
  void embed(const int32_t* ids, int64_t rows, float* out) const;

  const void* embed_table() const {
    return cfg.weight_type == kernels::WeightType::kBF16
               ? static_cast<const void*>(embed_bf16.data())
               : static_cast<const void*>(embed_f32.data());
  }
};

// Checks `cfg` (with overrides already applied) and packs every tensor it needs; a missing
// tensor or a wrong shape is an error naming the tensor.
Result<EngineWeights> pack_weights(const LoadedModel& model, const ModelConfig& cfg);

// Layer `layer` is a MoE layer (Qwen2-MoE decoder_sparse_step; every layer for Mixtral).
bool is_sparse_layer(const ModelConfig& cfg, int32_t layer);

}  // namespace llmrr
