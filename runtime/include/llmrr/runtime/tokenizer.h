// Tokenizers: byte-level for the builtin models, GPT-2-style byte-level BPE from GGUF
// metadata (or tokenizer.json) for real models.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llmrr {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Decodes ids to bytes (may end inside a UTF-8 sequence when given a prefix).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos() const { return -1; }
  virtual int32_t eos() const { return -1; }
  // The prompt for a single user turn in the model's chat format, or `text` unchanged when
  // the model has none.
  virtual std::string chat_prompt(std::string_view text) const { return std::string(text); }
  virtual bool has_chat_template() const { return false; }
};

}  // namespace llmrr
