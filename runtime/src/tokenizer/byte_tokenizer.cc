#include <memory>

#include "llmrr/runtime/tokenizers.h"

namespace llmrr {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids)
      if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
    return out;
  }
  int32_t vocab_size() const override { return kByteVocab; }
  int32_t bos() const override { return kByteBos; }
  int32_t eos() const override { return kByteEos; }
};

}  // namespace

std::shared_ptr<const Tokenizer> make_byte_tokenizer() {
  static const std::shared_ptr<const Tokenizer> kInstance = std::make_shared<ByteTokenizer>();
  return kInstance;
}

}  // namespace llmrr
