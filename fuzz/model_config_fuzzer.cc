// Fuzz target: arbitrary bytes as a Hugging Face config.json. parse_hf_config reads it with
// a nesting cap and typed fields, then checks the sizes before anything is allocated from
// them. Nothing may crash or throw.
#include <cstddef>
#include <cstdint>
#include <string>

#include "llmrr/runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)llmrr::parse_hf_config(std::string(reinterpret_cast<const char*>(data), size),
                               "config.json");
  return 0;
}
