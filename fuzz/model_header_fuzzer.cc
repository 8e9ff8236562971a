// Fuzz target: the GGUF and safetensors headers. The first byte chooses: even, the rest is a
// .gguf file; odd, it is model.safetensors beside a small valid config.json. The loaders
// check every count, size and offset against the file before allocating, so memory stays
// bounded by the input; nothing may crash or throw.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_util.h"
#include "llmrr/runtime/gguf.h"
#include "llmrr/runtime/safetensors.h"

namespace {

const char kConfig[] =
    R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "intermediate_size": 32, "max_position_embeddings": 64, "rms_norm_eps": 1e-5})";

// A directory of our own (tmpfs when there is one) holding config.json.
const std::string& model_dir() {
  static const std::string dir = [] {
    std::string templ = (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                        std::string("/llmrr-fuzz-st-XXXXXX");
    if (::mkdtemp(templ.data()) == nullptr) return std::string();
    std::FILE* f = std::fopen((templ + "/config.json").c_str(), "wb");
    if (f) {
      std::fwrite(kConfig, 1, sizeof kConfig - 1, f);
      std::fclose(f);
    }
    return templ;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    static llmrr::fuzz::MemFile file;
    if (!file.ok() || !file.assign(data + 1, size - 1)) return 0;
    (void)llmrr::load_gguf(file.path());
    return 0;
  }
  const std::string& dir = model_dir();
  if (dir.empty()) return 0;
  std::FILE* f = std::fopen((dir + "/model.safetensors").c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data + 1, 1, size - 1, f);
  std::fclose(f);
  (void)llmrr::load_safetensors_dir(dir);
  return 0;
}
