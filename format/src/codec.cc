#include "codec.h"

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
  return codec <= 2;
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
                              std::string* error) {
  if (ctx_ == nullptr) {
    *error = "zstd: out of memory creating a compression context";
    return false;
  }
  const size_t bound = ZSTD_compressBound(n);
  const size_t old = out->size();
  out->resize(old + bound);
  size_t r = ZSTD_compressCCtx(ctx_, out->data() + old, bound, src, n, level);
  if (ZSTD_isError(r)) {
    out->resize(old);
    *error = std::string("zstd: ") + ZSTD_getErrorName(r);
    return false;
  }
  out->resize(old + r);
  return true;
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
