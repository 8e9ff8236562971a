// Container internals: frame header and trailer encoding, byte-plane shuffle, zstd.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/format/container.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace llmrr::trace::detail {

inline void store_u16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
inline void store_u32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}
inline void store_u64(uint8_t* p, uint64_t v) {
  std::memcpy(p, &v, 8);
}
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t xxh3(const void* data, size_t bytes);

// An allocator whose resize() leaves new bytes uninitialized: frame buffers are always
// overwritten (by zstd, memcpy or pread), and zero-filling megabytes per frame shows up in
// the writer's and reader's throughput.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Buffer = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

struct FrameHeader {
  FrameKind kind = FrameKind::kStepChunk;
  Codec codec = Codec::kZstd;
  uint16_t reserved = 0;
  uint32_t raw_size = 0;
  uint32_t stored_size = 0;
  uint64_t checksum = 0;
  uint32_t index = 0;
  uint32_t header_check = 0;
};

void encode_frame_header(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]);
uint32_t frame_header_check(const uint8_t bytes[kFrameHeaderBytes]);

enum class HeaderProblem { kNone, kMagic, kCheck };
// Decodes without judging kind, codec or sizes (the caller knows the context).
HeaderProblem decode_frame_header(const uint8_t in[kFrameHeaderBytes], FrameHeader* h);

void encode_file_header(uint16_t major, uint16_t minor, uint8_t out[kFileHeaderBytes]);
void encode_trailer(uint64_t footer_offset, uint8_t out[kTrailerBytes]);
// True when the 16 bytes are a well-formed trailer (magic and check); sets *offset.
bool decode_trailer(const uint8_t in[kTrailerBytes], uint64_t* offset);

bool known_kind(uint8_t kind);
bool known_codec(uint8_t codec);

// Byte-plane shuffle: out[p * n + i] = in[i * elem + p] for n = bytes / elem whole elements;
// trailing bytes (bytes % elem) are copied unchanged.
void shuffle_bytes(const uint8_t* in, uint8_t* out, size_t bytes, size_t elem);
void unshuffle_bytes(const uint8_t* in, uint8_t* out, size_t bytes, size_t elem);

// A byte range [begin, end) of a payload whose bytes are near-random (hashes, low mantissa
// bits): compressing it would cost time and save almost nothing.
struct NoisySpan {
  size_t begin = 0;
  size_t end = 0;
};

// Estimated Shannon entropy of [p, p+n) in bits per byte, from at most ~4096 sampled bytes.
double sampled_entropy(const uint8_t* p, size_t n);
// Byte planes of a shuffled tensor (`planes` planes of n bytes each from `data`) whose
// sampled entropy is at least kNoisyBitsPerByte, as spans (adjacent planes merged). Below
// 7.2 bits per byte entropy coding alone can save 10 % or more, which is worth zstd's time.
inline constexpr double kNoisyBitsPerByte = 7.2;
std::vector<NoisySpan> noisy_planes(const uint8_t* data, size_t n, size_t planes);

// Level 1, the writer's default and fastest setting, codes noisy spans apart (see
// ZstdCompressor::compress_spans): they go into stored zstd frames (raw blocks), since zstd's
// match search and literal coding spend most of the writer's time on them for ~10 % of size.
// Level 2 and up compress everything (bench/README.md has both sides).
inline constexpr int kMaxSpanLevel = 1;

// Appends [src, src+n) (n < 4 GiB) as one zstd frame of raw blocks: stored, any zstd
// decoder reads it.
inline constexpr size_t kZstdBlockMax = 128 * 1024;
void append_stored_zstd_frame(const uint8_t* src, size_t n, Buffer* out);

// Reusable zstd contexts (one per thread).
class ZstdCompressor {
 public:
  ZstdCompressor();
  ~ZstdCompressor();
  ZstdCompressor(const ZstdCompressor&) = delete;
  ZstdCompressor& operator=(const ZstdCompressor&) = delete;
  // Appends the compressed form of [src, src+n) to *out as one zstd frame at `level`, or as
  // a stored frame when `noisy`. Returns false (with *error) on failure, which only an
  // internal bug can cause.
  bool compress(const uint8_t* src, size_t n, int level, Buffer* out, std::string* error,
                bool noisy = false);
  // Appends [src, src+n) as consecutive zstd frames, which any zstd decoder (and
  // Codec::kZstd / kShuffleZstd readers) decode as one stream: the `noisy` spans (ascending,
  // disjoint, inside [0, n)) as stored frames, the bytes between them at `level`. Gaps
  // under kMinSpanBytes between two spans are folded into them; spans under kMinSpanBytes,
  // or whose sampled entropy is below kNoisyBitsPerByte (real fingerprints of few rows per
  // site compress ~1.3x: their tables and float summaries are far from random), are
  // compressed with their neighbours. With no usable span this is compress().
  static constexpr size_t kMinSpanBytes = 1024;
  bool compress_spans(const uint8_t* src, size_t n, int level, const std::vector<NoisySpan>& noisy,
                      Buffer* out, std::string* error);
  // Frames written by the last compress or compress_spans call.
  size_t last_frames() const { return last_frames_; }

 private:
  ZSTD_CCtx_s* ctx_;
  size_t last_frames_ = 0;
};

class ZstdDecompressor {
 public:
  ZstdDecompressor();
  ~ZstdDecompressor();
  ZstdDecompressor(const ZstdDecompressor&) = delete;
  ZstdDecompressor& operator=(const ZstdDecompressor&) = delete;

  enum class Result { kOk, kTooBig, kTooSmall, kCorrupt };
  // Decodes [src, src+n) into exactly `expected` bytes at dst (whose capacity is exactly
  // `expected`). kTooBig: the stream decodes to more; kTooSmall: to fewer (*decoded says
  // how many); kCorrupt: zstd refused it (*error says why).
  Result decompress(const uint8_t* src, size_t n, uint8_t* dst, size_t expected, size_t* decoded,
                    std::string* error);

 private:
  ZSTD_DCtx_s* ctx_;
};

}  // namespace llmrr::trace::detail
