#include "codec.h"

#include <algorithm>
#include <cmath>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>
#include <zstd_errors.h>

namespace llmrr::trace::detail {

uint64_t xxh3(const void* data, size_t bytes) {
  return XXH3_64bits(data, bytes);
}

void encode_frame_header(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  std::memcpy(out, kFrameMagic, 4);
  out[4] = static_cast<uint8_t>(h.kind);
  out[5] = static_cast<uint8_t>(h.codec);
  store_u16(out + 6, 0);
  store_u32(out + 8, h.raw_size);
  store_u32(out + 12, h.stored_size);
  store_u64(out + 16, h.checksum);
  store_u32(out + 24, h.index);
  store_u32(out + 28, frame_header_check(out));
}

uint32_t frame_header_check(const uint8_t bytes[kFrameHeaderBytes]) {
  return static_cast<uint32_t>(xxh3(bytes, 28));
}

HeaderProblem decode_frame_header(const uint8_t in[kFrameHeaderBytes], FrameHeader* h) {
  if (std::memcmp(in, kFrameMagic, 4) != 0) return HeaderProblem::kMagic;
  h->kind = static_cast<FrameKind>(in[4]);
  h->codec = static_cast<Codec>(in[5]);
  h->reserved = load_u16(in + 6);
  h->raw_size = load_u32(in + 8);
  h->stored_size = load_u32(in + 12);
  h->checksum = load_u64(in + 16);
  h->index = load_u32(in + 24);
  h->header_check = load_u32(in + 28);
  if (h->header_check != frame_header_check(in)) return HeaderProblem::kCheck;
  return HeaderProblem::kNone;
}

void encode_file_header(uint16_t major, uint16_t minor, uint8_t out[kFileHeaderBytes]) {
  std::memcpy(out, kFileMagic, 8);
  store_u16(out + 8, major);
  store_u16(out + 10, minor);
  store_u32(out + 12, 0);
}

void encode_trailer(uint64_t footer_offset, uint8_t out[kTrailerBytes]) {
  store_u64(out, footer_offset);
  store_u32(out + 8, static_cast<uint32_t>(xxh3(out, 8)));
  std::memcpy(out + 12, kTrailerMagic, 4);
}

bool decode_trailer(const uint8_t in[kTrailerBytes], uint64_t* offset) {
  if (std::memcmp(in + 12, kTrailerMagic, 4) != 0) return false;
  if (load_u32(in + 8) != static_cast<uint32_t>(xxh3(in, 8))) return false;
  *offset = load_u64(in);
  return true;
}

bool known_kind(uint8_t kind) {
  return kind >= 1 && kind <= 5;
}
bool known_codec(uint8_t codec) {
  return codec <= 3;
}

void shuffle_bytes(const uint8_t* in, uint8_t* out, size_t bytes, size_t elem) {
  if (elem <= 1) {
    std::memcpy(out, in, bytes);
    return;
  }
  const size_t n = bytes / elem;
  if (elem == 2) {
    uint8_t* p0 = out;
    uint8_t* p1 = out + n;
    for (size_t i = 0; i < n; ++i) {
      p0[i] = in[2 * i];
      p1[i] = in[2 * i + 1];
    }
  } else if (elem == 4) {
    uint8_t* p0 = out;
    uint8_t* p1 = out + n;
    uint8_t* p2 = out + 2 * n;
    uint8_t* p3 = out + 3 * n;
    for (size_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, in + 4 * i, 4);
      p0[i] = static_cast<uint8_t>(v);
      p1[i] = static_cast<uint8_t>(v >> 8);
      p2[i] = static_cast<uint8_t>(v >> 16);
      p3[i] = static_cast<uint8_t>(v >> 24);
    }
  } else {
    for (size_t i = 0; i < n; ++i)
      for (size_t p = 0; p < elem; ++p) out[p * n + i] = in[i * elem + p];
  }
  std::memcpy(out + n * elem, in + n * elem, bytes - n * elem);
}

void unshuffle_bytes(const uint8_t* in, uint8_t* out, size_t bytes, size_t elem) {
  if (elem <= 1) {
    std::memcpy(out, in, bytes);
    return;
  }
  const size_t n = bytes / elem;
  if (elem == 2) {
    const uint8_t* p0 = in;
    const uint8_t* p1 = in + n;
    for (size_t i = 0; i < n; ++i) {
      out[2 * i] = p0[i];
      out[2 * i + 1] = p1[i];
    }
  } else if (elem == 4) {
    const uint8_t* p0 = in;
    const uint8_t* p1 = in + n;
    const uint8_t* p2 = in + 2 * n;
    const uint8_t* p3 = in + 3 * n;
    for (size_t i = 0; i < n; ++i) {
      uint32_t v = static_cast<uint32_t>(p0[i]) | static_cast<uint32_t>(p1[i]) << 8 |
                   static_cast<uint32_t>(p2[i]) << 16 | static_cast<uint32_t>(p3[i]) << 24;
      std::memcpy(out + 4 * i, &v, 4);
    }
  } else {
    for (size_t i = 0; i < n; ++i)
      for (size_t p = 0; p < elem; ++p) out[i * elem + p] = in[p * n + i];
  }
  std::memcpy(out + n * elem, in + n * elem, bytes - n * elem);
}

ZstdCompressor::ZstdCompressor() : ctx_(ZSTD_createCCtx()) {}
ZstdCompressor::~ZstdCompressor() {
  ZSTD_freeCCtx(ctx_);
}

bool ZstdCompressor::compress(const uint8_t* src, size_t n, int level, Buffer* out,
                              std::string* error, bool noisy) {
  last_frames_ = 1;
  if (ctx_ == nullptr) {
    *error = "zstd: out of memory creating a compression context";
    return false;
  }
  const size_t bound = ZSTD_compressBound(n);
  const size_t old = out->size();
  out->resize(old + bound);
  if (noisy) {
    out->resize(old);
    append_stored_zstd_frame(src, n, out);
    return true;
  }
  const size_t r = ZSTD_compressCCtx(ctx_, out->data() + old, bound, src, n, level);
  if (ZSTD_isError(r)) {
    out->resize(old);
    *error = std::string("zstd: ") + ZSTD_getErrorName(r);
    return false;
  }
  out->resize(old + r);
  return true;
}

bool ZstdCompressor::compress_spans(const uint8_t* src, size_t n, int level,
                                    const std::vector<NoisySpan>& noisy, Buffer* out,
                                    std::string* error) {
  // Cut [0, n) into alternating runs: noisy spans that are long enough, with short gaps
  // between two of them absorbed into the span.
  struct Run {
    size_t begin, end;
  };
  std::vector<Run> runs;
  for (const NoisySpan& s : noisy) {
    const size_t b = std::min(s.begin, n), e = std::min(s.end, n);
    if (e <= b) continue;
    if (!runs.empty() && b >= runs.back().end && b - runs.back().end < kMinSpanBytes) {
      runs.back().end = std::max(runs.back().end, e);
    } else if (runs.empty() || b >= runs.back().end) {
      runs.push_back({b, e});
    }
  }
  std::erase_if(runs, [src](const Run& r) {
    return r.end - r.begin < kMinSpanBytes ||
           sampled_entropy(src + r.begin, r.end - r.begin) < kNoisyBitsPerByte;
  });
  if (runs.empty()) return compress(src, n, level, out, error);
  size_t frames = 0, at = 0;
  for (const Run& r : runs) {
    if (r.begin > at) {
      if (!compress(src + at, r.begin - at, level, out, error)) return false;
      ++frames;
    }
    if (!compress(src + r.begin, r.end - r.begin, level, out, error, true)) return false;
    ++frames;
    at = r.end;
  }
  if (at < n) {
    if (!compress(src + at, n - at, level, out, error)) return false;
    ++frames;
  }
  last_frames_ = frames;
  return true;
}

void append_stored_zstd_frame(const uint8_t* src, size_t n, Buffer* out) {
  // RFC 8878: magic, frame header descriptor (single segment, 4-byte content size), then
  // raw blocks of at most 128 KiB, each with a 3-byte header (last flag, type 0 = raw, size).
  const size_t old = out->size();
  const size_t blocks = n == 0 ? 1 : (n + kZstdBlockMax - 1) / kZstdBlockMax;
  out->resize(old + 9 + 3 * blocks + n);
  uint8_t* p = out->data() + old;
  store_u32(p, 0xFD2FB528u);
  p[4] = 0xA0;  // frame content size in 4 bytes, single segment, no checksum, no dictionary
  store_u32(p + 5, static_cast<uint32_t>(n));
  p += 9;
  size_t at = 0;
  do {
    const size_t len = std::min(kZstdBlockMax, n - at);
    const uint32_t h = (at + len == n ? 1u : 0u) | static_cast<uint32_t>(len) << 3;
    p[0] = static_cast<uint8_t>(h);
    p[1] = static_cast<uint8_t>(h >> 8);
    p[2] = static_cast<uint8_t>(h >> 16);
    if (len > 0) std::memcpy(p + 3, src + at, len);
    p += 3 + len;
    at += len;
  } while (at < n);
}

double sampled_entropy(const uint8_t* p, size_t n) {
  if (n == 0) return 0.0;
  uint32_t hist[256] = {};
  const size_t stride = n > 4096 ? n / 4096 : 1;
  size_t count = 0;
  for (size_t i = 0; i < n; i += stride, ++count) ++hist[p[i]];
  double bits = 0.0;
  const double inv = 1.0 / static_cast<double>(count);
  for (uint32_t h : hist)
    if (h != 0) {
      const double q = h * inv;
      bits -= q * std::log2(q);
    }
  return bits;
}

std::vector<NoisySpan> noisy_planes(const uint8_t* data, size_t n, size_t planes) {
  std::vector<NoisySpan> spans;
  // Small planes are left to zstd (too few samples to judge, and little to gain).
  if (n < 4096) return spans;
  for (size_t p = 0; p < planes; ++p) {
    if (sampled_entropy(data + p * n, n) < kNoisyBitsPerByte) continue;
    if (!spans.empty() && spans.back().end == p * n)
      spans.back().end = (p + 1) * n;
    else
      spans.push_back({p * n, (p + 1) * n});
  }
  return spans;
}

ZstdDecompressor::ZstdDecompressor() : ctx_(ZSTD_createDCtx()) {
  // A hostile frame may declare a huge window; single-shot decoding into a buffer of the
  // declared (<= 16 MiB) size never needs more than that.
  if (ctx_ != nullptr) ZSTD_DCtx_setParameter(ctx_, ZSTD_d_windowLogMax, 25);
}
ZstdDecompressor::~ZstdDecompressor() {
  ZSTD_freeDCtx(ctx_);
}

ZstdDecompressor::Result ZstdDecompressor::decompress(const uint8_t* src, size_t n, uint8_t* dst,
                                                      size_t expected, size_t* decoded,
                                                      std::string* error) {
  *decoded = 0;
  if (ctx_ == nullptr) {
    *error = "out of memory creating a zstd context";
    return Result::kCorrupt;
  }
  // An empty destination still needs a valid pointer for zstd.
  uint8_t dummy = 0;
  uint8_t* out = expected == 0 ? &dummy : dst;
  size_t r = ZSTD_decompressDCtx(ctx_, out, expected, src, n);
  if (ZSTD_isError(r)) {
    if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall) return Result::kTooBig;
    *error = ZSTD_getErrorName(r);
    return Result::kCorrupt;
  }
  *decoded = r;
  if (r != expected) return Result::kTooSmall;
  return Result::kOk;
}

}  // namespace llmrr::trace::detail
