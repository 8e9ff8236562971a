// The concrete tokenizers behind runtime/tokenizer.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/runtime/tokenizer.h"

namespace llmrr {

// Byte-level vocabulary of the builtin models: ids 0..255 are the bytes, 256 = BOS,
// 257 = EOS (vocab 258). encode() maps each byte to its id (no BOS added); decode() of an
// id ≥ 256 (or out of range) yields "".
inline constexpr int32_t kByteBos = 256;
inline constexpr int32_t kByteEos = 257;
inline constexpr int32_t kByteVocab = 258;
std::shared_ptr<const Tokenizer> make_byte_tokenizer();

// What a GPT-2-style byte-level BPE tokenizer is built from (GGUF tokenizer.ggml.* or
// tokenizer.json).
struct BpeSpec {
  std::vector<std::string> tokens;           // id → token text (byte-to-unicode mapped)
  std::vector<std::string> merges;           // "a b", highest priority first
  std::vector<int32_t> token_types;          // GGUF token_type (1 normal, 3 control, 4 user
                                             // defined, ...); empty = all normal
  std::vector<std::string> special_tokens;   // matched as whole tokens in input text
  std::string pre;                           // pre-tokenizer: "smollm", "gpt2", "llama3", ...
  int32_t bos = -1;
  int32_t eos = -1;
  bool add_bos = false;                      // prepend BOS in encode()
  std::string chat_template;                 // Jinja source, used to pick the chat format
};

// Validates the spec (ids in range, merges name existing tokens, known pre-tokenizer) and
// builds the tokenizer.
Result<std::shared_ptr<const Tokenizer>> make_bpe_tokenizer(BpeSpec spec);

// Hugging Face tokenizer.json (model.type "BPE", byte-level) plus, when present next to it,
// tokenizer_config.json (chat_template, bos/eos tokens).
Result<std::shared_ptr<const Tokenizer>> load_tokenizer_json(const std::string& path);

}  // namespace llmrr
