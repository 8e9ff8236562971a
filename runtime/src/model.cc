// load_model: picks the loader from the spec (builtin name, directory, .gguf file).
#include "llmrr/runtime/model.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "llmrr/runtime/builtin.h"
#include "llmrr/runtime/gguf.h"
#include "llmrr/runtime/safetensors.h"
#include "llmrr/safeio/input.h"

namespace llmrr {

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::kLlama: return "llama";
    case Arch::kMixtral: return "mixtral";
    case Arch::kQwen2Moe: return "qwen2_moe";
    case Arch::kQwen3: return "qwen3";
    case Arch::kQwen3Moe: return "qwen3_moe";
    case Arch::kDeepseekV3: return "deepseek_v3";
  }
  return "unknown";
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<std::vector<float>> HostTensor::to_f32() const {
  if (!stored) return data;
  const int64_t n = numel();
  if (shape.size() != 2 || static_cast<int64_t>(stored->rows.size()) != shape[0])
    return make_error(ErrorCode::kInternal, "stored tensor rows do not match its shape");
  int64_t be = 0, bb = 0;
  if (!ggml_type_layout(stored->ggml_type, &be, &bb) || shape[1] % be != 0)
    return make_error(ErrorCode::kUnsupported,
                      "stored tensor of type " + ggml_type_name(stored->ggml_type));
  std::vector<float> out(static_cast<size_t>(n));
  const uint64_t row_bytes = static_cast<uint64_t>(shape[1] / be * bb);
  for (int64_t r = 0; r < shape[0]; ++r) {
    RETURN_IF_ERROR(ggml_dequantize(stored->ggml_type, stored->rows[r], row_bytes, shape[1],
                                    out.data() + r * shape[1]));
  }
  return out;
}

Result<LoadedModel> load_model(const std::string& spec) { return load_model(spec, {}); }

Result<LoadedModel> load_model(const std::string& spec, const ModelLoadOptions& options) {
  constexpr std::string_view kBuiltin = "builtin:";
  if (spec.rfind(kBuiltin, 0) == 0) return load_builtin(std::string_view(spec).substr(kBuiltin.size()));
  if (spec.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the model spec is empty, expected builtin:<name>, a safetensors "
                      "directory or a .gguf file");
  }
  struct stat st;
  if (::stat(spec.c_str(), &st) != 0)
    return make_error(ErrorCode::kNotFound,
                      spec + ": no such file or directory (a model is builtin:<name>, a "
                             "directory with config.json + *.safetensors, or a .gguf file)");
  if (S_ISDIR(st.st_mode)) return load_safetensors_dir(spec);
  // A FIFO or a device is refused before anything opens it (an open could block forever).
  RETURN_IF_ERROR(safeio::require_file_or_directory(spec, "model"));
  // A file: GGUF by its magic (whatever its name), or a .safetensors file inside a model
  // directory.
  char magic[4] = {};
  if (std::FILE* f = std::fopen(spec.c_str(), "rb")) {
    const size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (got == 4 && std::memcmp(magic, "GGUF", 4) == 0) return load_gguf(spec, options);
  }
  const size_t slash = spec.find_last_of('/');
  if (spec.size() > 12 && spec.compare(spec.size() - 12, 12, ".safetensors") == 0)
    return load_safetensors_dir(slash == std::string::npos ? "." : spec.substr(0, slash));
  if (spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".gguf") == 0)
    return load_gguf(spec, options);
  return make_error(ErrorCode::kInvalidArgument,
                    spec + ": not a GGUF file, a .safetensors file or a model directory");
}

std::string model_cache_dir() {
  if (const char* d = std::getenv("LLMRR_MODEL_DIR"); d != nullptr && *d != '\0') return d;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/llmrr/models";
}

std::string find_smollm2() {
  std::string path = model_cache_dir() + "/" + kSmolLM2FileName;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return "";
  return path;
}

}  // namespace llmrr
