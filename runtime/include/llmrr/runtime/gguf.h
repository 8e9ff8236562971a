// GGUF (llama.cpp's model format): a bounds-checked reader, ggml dequantization, and the
// loader that maps llama.cpp tensor names to Hugging Face names and layouts — the tensors
// equal what transformers builds when it loads the same file (from_pretrained(gguf_file=)).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/runtime/model.h"

namespace llmrr {

// ggml tensor types (ggml.h numbering).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kBF16 = 30,
};

// "Q4_1", or "type 23" for a type this reader does not know.
std::string ggml_type_name(uint32_t type);

// Elements per block and bytes per block of a type we can dequantize (every GgmlType above
// except Q8_1); false otherwise.
bool ggml_type_layout(uint32_t type, int64_t* block_elems, int64_t* block_bytes);

// Dequantizes `n` values of `type` from `src` (exactly n / block_elems · block_bytes bytes)
// into `dst`, with the formulas (and float operation order) of ggml's dequantize_row_* and
// gguf-py's quants.py, which transformers uses: bit-identical fp32 results.
Status ggml_dequantize(uint32_t type, const uint8_t* src, uint64_t src_bytes, int64_t n,
                       float* dst);

// One metadata value. Arrays of scalars or strings are kept; nested arrays are skipped.
struct GgufValue {
  enum class Kind : uint8_t { kUint, kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kUint;
  uint32_t gguf_type = 0;   // the file's value type (0 u8 ... 12 f64)
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  // Arrays: element type and elements (one of these is filled, by element kind).
  uint32_t elem_type = 0;
  std::vector<std::string> strings;
  std::vector<int64_t> ints;     // integer and bool elements
  std::vector<double> floats;    // float elements
  uint64_t count = 0;            // element count (also for skipped nested arrays)
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the contiguous dimension
  uint32_t type = 0;
  uint64_t offset = 0;       // relative to the start of the tensor data
  uint64_t bytes = 0;
};

// A parsed, memory-mapped GGUF file. Every count, length and offset is checked against the
// file size before anything is allocated or read from it.
class GgufFile {
 public:
  GgufFile();
  ~GgufFile();
  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;

  static Result<GgufFile> open(const std::string& path);

  const std::string& path() const;
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;

  const GgufValue* find(const std::string& key) const;
  // Typed getters: kBadModel when present with the wrong type, kNotFound when absent.
  Result<std::string> get_string(const std::string& key) const;
  Result<int64_t> get_int(const std::string& key) const;      // any integer type
  Result<double> get_float(const std::string& key) const;     // float or integer types
  Result<bool> get_bool(const std::string& key) const;

 private:
  struct Mapping;
  std::unique_ptr<Mapping> map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, GgufValue> kv_;
  friend class GgufParser;
};

// Loads a .gguf model: general.architecture "llama" (dense, or MoE with expert_count > 0)
// or "qwen2moe"; every tensor dequantized to fp32 in HF names and shapes, with llama.cpp's
// Q/K row permutation undone for llama exactly as transformers' LlamaTensorProcessor does.
// The tokenizer comes from tokenizer.ggml.* (model "gpt2": byte-level BPE).
// With options.keep_quantized, block-quantized and F16/BF16 2-D weights stay as stored (HostTensor::stored,
// Q/K rows permuted by row pointers, stacked experts sliced) and the mapping stays open in
// LoadedModel::storage; their pages are released after hashing and re-read when packed.
Result<LoadedModel> load_gguf(const std::string& path, const ModelLoadOptions& options = {});

}  // namespace llmrr
