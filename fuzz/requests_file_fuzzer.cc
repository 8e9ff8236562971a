// Fuzz target: arbitrary bytes as a requests file (record --requests), with the byte
// tokenizer so text prompts are read too, and a model's vocabulary and positions to check
// against. Every line is JSON with a nesting cap; nothing may crash or throw.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "llmrr/recorder/requests_file.h"
#include "llmrr/runtime/tokenizers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizer = llmrr::make_byte_tokenizer();
  static const llmrr::ModelConfig model = [] {
    llmrr::ModelConfig m;
    m.vocab = 258;
    m.max_positions = 512;
    return m;
  }();
  llmrr::RequestDefaults d;
  llmrr::RequestsFileContext ctx;
  ctx.model = &model;
  ctx.tokenizer = tokenizer.get();
  (void)llmrr::parse_requests_jsonl(std::string_view(reinterpret_cast<const char*>(data), size),
                                    "fuzz.jsonl", d, ctx);
  return 0;
}
