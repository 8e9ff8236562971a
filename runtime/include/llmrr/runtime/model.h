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
};

enum class RouterScoring : uint8_t { kSoftmax = 0, kSigmoid = 1 };

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int32_t vocab = 0;
  int32_t hidden = 0;
  int32_t layers = 0;
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  int32_t ffn = 0;                 // dense MLP intermediate size
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

  bool is_moe() const { return experts > 0; }
};

// One tensor, dequantized to fp32, in the Hugging Face name and shape.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t numel() const;
};

struct LoadedModel {
  ModelConfig config;
  std::map<std::string, HostTensor> tensors;
  // xxh3-64 over the tensors as stored in the source (name, dtype, shape, raw bytes, in
  // name order): identifies the weights whatever path they were loaded from.
  uint64_t weight_hash = 0;
  std::string identity;    // "builtin:tiny-moe", "gguf:SmolLM2-135M-Instruct", ...
  std::string source;      // the spec or path it was loaded from
  std::shared_ptr<const Tokenizer> tokenizer;
};

// Loads "builtin:<name>", a directory with config.json + *.safetensors, or a .gguf file.
// Every malformed input is a clear error (file, offset or tensor, expected vs found); no
// allocation is made from a size the file declares before that size is checked against
// the file.
Result<LoadedModel> load_model(const std::string& spec);

}  // namespace llmrr
