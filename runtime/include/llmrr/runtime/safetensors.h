// Hugging Face checkpoints: a directory with config.json and model.safetensors (or shards
// listed in model.safetensors.index.json). Supported: LlamaForCausalLM, MixtralForCausalLM,
// Qwen2MoeForCausalLM; tensors F32, F16, BF16.
#pragma once

#include <string>

#include "llmrr/format/status.h"
#include "llmrr/runtime/model.h"

namespace llmrr {

// Loads the directory `dir`. Every tensor the architecture needs is checked for presence
// and shape against the config; unknown tensors (other than rotary caches) are rejected
// as unsupported features. BF16 checkpoints set weight_type kBF16 and bf16_activations.
// A tokenizer.json next to the weights gives the tokenizer; otherwise `tokenizer` is null
// and prompts must be given as token ids.
Result<LoadedModel> load_safetensors_dir(const std::string& dir);

// Parses a config.json text into a ModelConfig (architecture, sizes, MoE fields).
Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& where);

// Writes `model` as `dir`/model.safetensors (F32) + `dir`/config.json, loadable by
// load_safetensors_dir and by Hugging Face transformers. `dir` must exist.
Status save_safetensors_dir(const LoadedModel& model, const std::string& dir);

}  // namespace llmrr
