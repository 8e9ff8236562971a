#include "llmrr/runtime/tokenizers.h"

namespace llmrr {

Result<std::shared_ptr<const Tokenizer>> load_tokenizer_json(const std::string& path) {
  return make_error(ErrorCode::kUnsupported, path + ": tokenizer.json not supported yet");
}

}  // namespace llmrr
