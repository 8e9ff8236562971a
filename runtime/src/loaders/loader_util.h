// Pieces every loader shares: the weight hash, exact half-precision widening, a read-only
// file mapping, and a bounds-checked cursor over untrusted bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llmrr/format/status.h"

struct XXH3_state_s;

namespace llmrr::loaders {

// The weight hash of model.h: xxh3-64, streamed over the tensors as the source stores them,
// in name order. Each tensor contributes, little-endian:
//   u64 len(name), name, u64 len(dtype), dtype ("F32", "BF16", "Q4_1", ...),
//   u64 ndim, ndim × i64 dims (in the source's own order), u64 len(bytes), bytes.
// Callers must add tensors sorted by name (std::map order: bytewise).
class WeightHasher {
 public:
  WeightHasher();
  ~WeightHasher();
  WeightHasher(const WeightHasher&) = delete;
  WeightHasher& operator=(const WeightHasher&) = delete;
  void add(std::string_view name, std::string_view dtype, std::span<const int64_t> shape,
           const void* bytes, size_t size);
  uint64_t digest() const;

 private:
  void update(const void* p, size_t n);
  void update_u64(uint64_t v);
  XXH3_state_s* state_;
};

// IEEE binary16 → binary32, exact (subnormals, inf and NaN included).
float half_to_float(uint16_t h);
inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Tells the kernel that the pages of a read-only file mapping covering [p, p + n) are not
// needed now (madvise DONTNEED on the whole pages inside the range): they leave the
// process's resident set and are read from the page cache again on the next access.
void release_pages(const void* p, size_t n);

// A whole file mapped read-only (or nothing, for an empty file).
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> open(const std::string& path);
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
};

// Reads the whole (small) text file; used for config.json and tokenizer.json. `limit`
// bounds what is read so a huge or special file cannot exhaust memory.
Result<std::string> read_text_file(const std::string& path, uint64_t limit);

// Overflow-checked arithmetic for sizes read from files.
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
inline bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

// "[2, 3]"
std::string shape_string(std::span<const int64_t> shape);

}  // namespace llmrr::loaders

#include <map>

#include "llmrr/runtime/model.h"

namespace llmrr::loaders {

// The tensors (HF names, shapes) that `config` needs, in the layout contract of model.h.
std::map<std::string, std::vector<int64_t>> expected_tensors(const ModelConfig& config);

// Checks the config's sizes (positive, consistent, bounded) before any allocation from them.
Status check_config(const ModelConfig& config, const std::string& where);

// Real-valued settings a model file states, each checked where it is read so the message names
// the key: finite and within bounds far outside what real models use (rope_theta 1e4..1e7,
// RMSNorm epsilon 1e-6..1e-5) but inside what the kernels compute with. An inf theta would
// make every rotation NaN; an epsilon of 1e30 would flatten every normalized row.
inline constexpr double kMinRopeTheta = 1, kMaxRopeTheta = 1e12;
inline constexpr double kMinNormEps = 0, kMaxNormEps = 1;
// kBadModel "<where>: <key> is <v>, expected a finite number in [lo, hi]" unless lo <= v <= hi.
Status check_setting(const std::string& where, const std::string& key, double v, double lo,
                     double hi);

// Every expected tensor present with its shape; nothing unexpected (an unknown tensor means a
// feature we do not implement: kUnsupported). `where` prefixes messages.
Status check_tensors(const ModelConfig& config, const std::map<std::string, HostTensor>& tensors,
                     const std::string& where);

}  // namespace llmrr::loaders
