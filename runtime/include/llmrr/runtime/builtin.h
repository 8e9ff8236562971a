// Builtin models: small Llama / Mixtral checkpoints generated from a fixed seed, with a
// byte-level vocabulary, so that text prompts work without any download. Weights are a pure
// function of the name (no platform libm, no std::normal_distribution), so the weight hash
// of a builtin model is the same on every machine.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/runtime/model.h"

namespace llmrr {

// "tiny-dense", "tiny-moe".
std::vector<std::string> builtin_model_names();

// `name` without the "builtin:" prefix. Unknown names are kNotFound, listing the known ones.
Result<LoadedModel> load_builtin(std::string_view name);

}  // namespace llmrr
