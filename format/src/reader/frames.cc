// Reading one frame of an open trace: its header checked against the index entry, the stored
// bytes against their checksum, the payload decoded (zstd, byte-plane shuffle, the blob
// prefix) and a step chunk verified against the steps the index gives it.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "columns.h"
#include "impl.h"

namespace llmrr::trace {
namespace detail {

std::string hex64(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

std::string bytes_text(const uint8_t* p, size_t n) {
  std::string s;
  char b[8];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, i ? " %02x" : "%02x", p[i]);
    s += b;
  }
  return s;
}

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

const char* kind_text(FrameKind k) {
  const uint8_t v = static_cast<uint8_t>(k);
  return detail::known_kind(v) ? frame_kind_name(k) : "unknown kind";
}

}  // namespace detail

Status TraceReader::Impl::pread_all(uint8_t* dst, size_t n, uint64_t at,
                                    const std::string& what) const {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(at + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return make_error(ErrorCode::kIo, what + "read failed at offset " +
                                            std::to_string(at + done) + ": " + errno_text(errno));
    }
    if (r == 0)
      return make_error(ErrorCode::kTruncated, what + "expected " + std::to_string(n) +
                                                   " bytes at offset " + std::to_string(at) +
                                                   ", found the end of the file after " +
                                                   std::to_string(done));
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

// Reads frame i's header and checks it against `f` (the index entry).
Status TraceReader::Impl::read_header(size_t i, const FrameInfo& f, detail::FrameHeader* h) const {
  const std::string w = where(i, f);
  if (f.offset + kFrameHeaderBytes > size)
    return make_error(ErrorCode::kTruncated, w + "expected a 32-byte frame header, found " +
                                                 std::to_string(size - std::min(size, f.offset)) +
                                                 " bytes before the end of the file");
  uint8_t b[kFrameHeaderBytes];
  RETURN_IF_ERROR(pread_all(b, sizeof b, f.offset, w));
  switch (detail::decode_frame_header(b, h)) {
    case detail::HeaderProblem::kMagic:
      return make_error(
          ErrorCode::kBadMagic,
          w + "expected frame magic 4c 52 46 4d (\"LRFM\"), found " + bytes_text(b, 4));
    case detail::HeaderProblem::kCheck:
      return make_error(ErrorCode::kChecksumMismatch,
                        w + "frame header check: expected " + hex32(h->header_check) +
                            " (stored), found " + hex32(detail::frame_header_check(b)) +
                            " (computed over bytes 0..27)");
    case detail::HeaderProblem::kNone:
      break;
  }
  if (h->kind != f.kind || h->codec != f.codec || h->raw_size != f.raw_size ||
      h->stored_size != f.stored_size || h->index != i)
    return make_error(
        ErrorCode::kBadFooter,
        w + "expected the frame the index describes (frame " + std::to_string(i) + ", " +
            kind_text(f.kind) + ", codec " + std::to_string(static_cast<int>(f.codec)) +
            ", raw " + std::to_string(f.raw_size) + ", stored " + std::to_string(f.stored_size) +
            "), found frame " + std::to_string(h->index) + ", " + kind_text(h->kind) +
            ", codec " + std::to_string(static_cast<int>(h->codec)) + ", raw " +
            std::to_string(h->raw_size) + ", stored " + std::to_string(h->stored_size));
  return Status::Ok();
}

// Reads, checks and decodes frame i into *raw (the decoded payload).
Status TraceReader::Impl::load_frame(size_t i, IoBuffers& io_, detail::Buffer* raw) const {
  const FrameInfo& f = frames[i];
  const std::string w = where(i, f);
  detail::FrameHeader h;
  RETURN_IF_ERROR(read_header(i, f, &h));
  if (f.raw_size > kMaxFrameRawBytes || f.stored_size > kMaxFrameStoredBytes)
    return make_error(ErrorCode::kFrameTooLarge,
                      w + "expected raw size <= " + std::to_string(kMaxFrameRawBytes) +
                          " and stored size <= " + std::to_string(kMaxFrameStoredBytes) +
                          ", found raw " + std::to_string(f.raw_size) + ", stored " +
                          std::to_string(f.stored_size));
  if (f.end() > size)
    return make_error(ErrorCode::kTruncated,
                      w + "expected " + std::to_string(f.stored_size) + " stored bytes, found " +
                          std::to_string(size - f.offset - kFrameHeaderBytes) +
                          " before the end of the file");
  io_.stored.resize(f.stored_size);
  RETURN_IF_ERROR(pread_all(io_.stored.data(), f.stored_size, f.offset + kFrameHeaderBytes, w));
  const uint64_t sum = detail::xxh3(io_.stored.data(), f.stored_size);
  if (sum != h.checksum)
    return make_error(ErrorCode::kChecksumMismatch,
                      w + "payload checksum: expected xxh3 " + hex64(h.checksum) +
                          " (frame header), found " + hex64(sum) + " over " +
                          std::to_string(f.stored_size) + " stored bytes");
  return decode_payload(w, f, io_, raw);
}

Status TraceReader::Impl::decode_body(const std::string& w, Codec codec, const uint8_t* src,
                                      size_t n, uint8_t* dst, size_t expected, IoBuffers& io_,
                                      uint8_t elem) const {
  if (codec == Codec::kNone) {
    if (n != expected)
      return make_error(ErrorCode::kSizeMismatch,
                        w + "uncompressed payload: expected " + std::to_string(expected) +
                            " bytes (raw size), found " + std::to_string(n));
    if (n) std::memcpy(dst, src, n);
    return Status::Ok();
  }
  uint8_t* out = dst;
  if (codec == Codec::kShuffleZstd) {
    io_.scratch.resize(expected);
    out = io_.scratch.data();
  }
  size_t decoded = 0;
  std::string err;
  switch (io_.dz.decompress(src, n, out, expected, &decoded, &err)) {
    case ZstdDecompressor::Result::kOk:
      break;
    case ZstdDecompressor::Result::kTooBig:
      return make_error(
          ErrorCode::kSizeMismatch,
          w + "zstd payload: expected " + std::to_string(expected) +
              " decoded bytes (raw size), found more (a raw size that lies; decoding stopped)");
    case ZstdDecompressor::Result::kTooSmall:
      return make_error(ErrorCode::kSizeMismatch,
                        w + "zstd payload: expected " + std::to_string(expected) +
                            " decoded bytes (raw size), found " + std::to_string(decoded));
    case ZstdDecompressor::Result::kCorrupt:
      return make_error(ErrorCode::kCorruptPayload,
                        w + "zstd payload: expected a valid zstd stream of " + std::to_string(n) +
                            " bytes, found one zstd refuses: " + err);
  }
  if (codec == Codec::kShuffleZstd) detail::unshuffle_bytes(out, dst, expected, elem);
  return Status::Ok();
}

Status TraceReader::Impl::decode_payload(const std::string& w, const FrameInfo& f, IoBuffers& io_,
                                         detail::Buffer* raw) const {
  const uint8_t* s = io_.stored.data();
  const size_t n = io_.stored.size();
  if (f.kind != FrameKind::kTensorBlob) {
    if (f.codec == Codec::kShuffleZstd)
      return make_error(ErrorCode::kUnknownKind,
                        w + "codec: expected none or zstd for this frame kind, found "
                            "shuffle+zstd (blobs only)");
    if (f.codec == Codec::kColumnZstd && f.kind != FrameKind::kStepChunk)
      return make_error(ErrorCode::kUnknownKind,
                        w + "codec: expected none or zstd for this frame kind, found "
                            "columns+zstd (step chunks only)");
    raw->resize(f.raw_size);
    if (f.codec != Codec::kColumnZstd)
      return decode_body(w, f.codec, s, n, raw->data(), f.raw_size, io_, 1);
    // Format 1.3 (columns.h): the FlatBuffer, verified, gets its columns back. Moving them
    // may break what was verified in a hostile file: open_chunk verifies the result again.
    RETURN_IF_ERROR(decode_body(w, Codec::kZstd, s, n, raw->data(), f.raw_size, io_, 1));
    size_t fb_size = 0;
    std::string why;
    if (!detail::column_fb_size(raw->data(), raw->size(), &fb_size, &why))
      return make_error(ErrorCode::kCorruptPayload, w + why);
    if (!verify_flatbuffer<fb::StepChunk>(raw->data(), fb_size))
      return make_error(ErrorCode::kBadFlatbuffer,
                        w + "expected a valid StepChunk FlatBuffer (" + std::to_string(fb_size) +
                            " bytes before the columns), found one the Verifier rejects");
    why = detail::join_columns(raw, fb_size);
    if (!why.empty()) return make_error(ErrorCode::kCorruptPayload, w + why);
    return Status::Ok();
  }
  if (n < 8)
    return make_error(ErrorCode::kCorruptPayload, w + "expected an 8-byte blob prefix, found " +
                                                      std::to_string(n) + " stored bytes");
  const uint32_t meta = detail::load_u32(s);
  if (meta < 8 || meta % 8 != 0 || meta > n - 8)
    return make_error(ErrorCode::kCorruptPayload,
                      w + "blob metadata size: expected a multiple of 8 in [8, " +
                          std::to_string(n - 8) + "], found " + std::to_string(meta));
  const size_t prefix = 8 + size_t{meta};
  if (f.raw_size < prefix)
    return make_error(ErrorCode::kSizeMismatch,
                      w + "raw size: expected at least the blob prefix (" +
                          std::to_string(prefix) + " bytes), found " +
                          std::to_string(f.raw_size));
  raw->resize(f.raw_size);
  std::memcpy(raw->data(), s, prefix);
  if (!verify_flatbuffer<fb::BlobMeta>(raw->data() + 8, meta))
    return make_error(ErrorCode::kBadFlatbuffer,
                      w + "blob metadata: expected a valid BlobMeta FlatBuffer, found one the "
                          "Verifier rejects");
  const fb::BlobMeta* m = flatbuffers::GetRoot<fb::BlobMeta>(raw->data() + 8);
  const uint8_t elem = m->elem_size();
  if (f.codec == Codec::kShuffleZstd && elem == 0)
    return make_error(
        ErrorCode::kCorruptPayload,
        w + "blob metadata: expected an element size >= 1 for a shuffled blob, found 0");
  return decode_body(w, f.codec, s + prefix, n - prefix, raw->data() + prefix,
                     f.raw_size - prefix, io_, elem);
}

// Verifies a step chunk payload and prepares `dec`; checks the steps against the index.
Status TraceReader::Impl::open_chunk(size_t i, const detail::Buffer& raw, ChunkDecoder* dec) const {
  const FrameInfo& f = frames[i];
  const std::string w = where(i, f);
  if (!verify_flatbuffer<fb::StepChunk>(raw.data(), raw.size()))
    return make_error(ErrorCode::kBadFlatbuffer,
                      w + "expected a valid StepChunk FlatBuffer (" + std::to_string(raw.size()) +
                          " bytes), found one the Verifier rejects (offsets out of range or "
                          "required fields missing)");
  const fb::StepChunk* c = flatbuffers::GetRoot<fb::StepChunk>(raw.data());
  std::string why = dec->reset(c, raw.size());
  if (!why.empty()) return make_error(ErrorCode::kSemantic, w + why);
  for (size_t k = 1; k < dec->size(); ++k) {
    if (dec->step_number(k) <= dec->step_number(k - 1))
      return make_error(ErrorCode::kSemantic,
                        w + "steps[" + std::to_string(k) + "]: expected a step number > " +
                            std::to_string(dec->step_number(k - 1)) + ", found " +
                            std::to_string(dec->step_number(k)));
  }
  const int64_t first_step = dec->step_number(0), last_step = dec->step_number(dec->size() - 1);
  if (first_step != f.first || last_step != f.last)
    return make_error(ErrorCode::kBadFooter, w + "expected steps " + std::to_string(f.first) +
                                                 ".." + std::to_string(f.last) +
                                                 " (index), found " + std::to_string(first_step) +
                                                 ".." + std::to_string(last_step));
  return Status::Ok();
}

}  // namespace llmrr::trace
