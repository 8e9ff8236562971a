#include "llmrr/format/trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <unordered_map>

#include "check.h"
#include "codec.h"
#include "convert.h"
#include "guarded.h"

namespace llmrr::trace {

using detail::ChunkDecoder;
using detail::FooterFields;
using detail::ZstdDecompressor;

namespace {

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

template <typename T>
bool verify_flatbuffer(const uint8_t* p, size_t n) {
  flatbuffers::Verifier::Options o;
  o.max_depth = 64;
  o.max_tables = static_cast<flatbuffers::uoffset_t>(std::max<size_t>(n / 8, 4096));
  flatbuffers::Verifier v(p, n, o);
  return v.VerifyBuffer<T>(nullptr);
}

// Scratch one reading thread needs.
struct IoBuffers {
  detail::Buffer stored;
  detail::Buffer scratch;
  ZstdDecompressor dz;
};

}  // namespace

class TraceReader::Impl {
 public:
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  std::string path;
  int fd = -1;
  uint64_t size = 0;
  uint16_t major = 0, minor = 0;
  bool has_footer = false, complete = false, lossy = false;
  std::string lossy_reason;
  std::vector<std::string> warnings;
  RunHeader header;
  std::vector<FrameInfo> frames;
  uint64_t footer_offset = 0;
  std::vector<size_t> chunks;  // frame indices of step chunks
  std::vector<size_t> blobs;   // blob id -> frame index
  int64_t steps = 0, first = -1, last = -1, tokens = 0;
  uint64_t raw_bytes = 0;
  std::vector<RequestSummary> requests;
  std::vector<KindBytes> kind_bytes;
  FooterFields footer;

  mutable IoBuffers io;
  // read_step's last decoded chunk.
  detail::Buffer cache_raw;
  int64_t cache_frame = -1;

  std::string where(size_t i, const FrameInfo& f) const {
    return path + ": frame " + std::to_string(i) + " (" + kind_text(f.kind) + ") at offset " +
           std::to_string(f.offset) + ": ";
  }

  Status pread_all(uint8_t* dst, size_t n, uint64_t at, const std::string& what) const {
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
  Status read_header(size_t i, const FrameInfo& f, detail::FrameHeader* h) const {
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
  Status load_frame(size_t i, IoBuffers& io_, detail::Buffer* raw) const {
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

  Status decode_body(const std::string& w, Codec codec, const uint8_t* src, size_t n, uint8_t* dst,
                     size_t expected, IoBuffers& io_, uint8_t elem) const {
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

  Status decode_payload(const std::string& w, const FrameInfo& f, IoBuffers& io_,
                        detail::Buffer* raw) const {
    const uint8_t* s = io_.stored.data();
    const size_t n = io_.stored.size();
    if (f.kind != FrameKind::kTensorBlob) {
      if (f.codec == Codec::kShuffleZstd)
        return make_error(ErrorCode::kUnknownKind,
                          w + "codec: expected none or zstd for this frame kind, found "
                              "shuffle+zstd (blobs only)");
      raw->resize(f.raw_size);
      return decode_body(w, f.codec, s, n, raw->data(), f.raw_size, io_, 1);
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
  Status open_chunk(size_t i, const detail::Buffer& raw, ChunkDecoder* dec) const {
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
};

// ---------------------------------------------------------------------------------------
// StepCursor

struct StepCursor::State {
  const TraceReader::Impl* r = nullptr;
  int64_t first = 0, last = 0;
  size_t chunk_pos = 0;
  bool loaded = false;
  bool done = false;
  Status error;
  IoBuffers io;
  detail::Buffer raw;
  ChunkDecoder dec;
  size_t step_i = 0;
};

StepCursor::StepCursor(StepCursor&&) noexcept = default;
StepCursor& StepCursor::operator=(StepCursor&&) noexcept = default;
StepCursor::~StepCursor() = default;

Result<bool> StepCursor::next(StepRecord* out) {
  if (!state_) return false;
  State& st = *state_;
  if (!st.error.ok()) return st.error;
  if (st.done) return false;
  try {
    const TraceReader::Impl& r = *st.r;
    for (;;) {
      if (!st.loaded) {
        if (st.chunk_pos >= r.chunks.size()) {
          st.done = true;
          return false;
        }
        const size_t fi = r.chunks[st.chunk_pos];
        const FrameInfo& f = r.frames[fi];
        if (f.first > st.last) {
          st.done = true;
          return false;
        }
        if (f.last < st.first) {
          ++st.chunk_pos;
          continue;
        }
        Status s = r.load_frame(fi, st.io, &st.raw);
        if (s.ok()) s = r.open_chunk(fi, st.raw, &st.dec);
        if (!s.ok()) {
          st.error = s;
          return s;
        }
        st.loaded = true;
        st.step_i = 0;
      }
      if (st.step_i >= st.dec.size()) {
        st.loaded = false;
        ++st.chunk_pos;
        continue;
      }
      const int64_t n = st.dec.step_number(st.step_i);
      const size_t fi = r.chunks[st.chunk_pos];
      if (n > st.last) {
        st.done = true;
        return false;
      }
      const bool skip = n < st.first;
      std::string e = st.dec.decode(st.step_i, out, skip);
      ++st.step_i;
      if (!e.empty()) {
        st.error = make_error(ErrorCode::kSemantic, r.where(fi, r.frames[fi]) + e);
        return st.error;
      }
      if (skip) continue;
      return true;
    }
  } catch (const std::bad_alloc&) {
    st.error = make_error(ErrorCode::kResourceLimit, st.r->path + ": out of memory decoding steps");
    return st.error;
  }
}

// ---------------------------------------------------------------------------------------
// Opening

namespace {

Status scan_frames(TraceReader::Impl& r);
Status read_footer(TraceReader::Impl& r, uint64_t footer_offset);
Status validate_index(TraceReader::Impl& r, bool from_footer);
Status read_run_header(TraceReader::Impl& r);

Status open_impl(TraceReader::Impl& r, const ReaderOptions& opt) {
  const std::string& p = r.path;
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT)
      return make_error(ErrorCode::kNotFound, p + ": expected a trace file, found no such file");
    if (e == EISDIR)
      return make_error(ErrorCode::kIsDirectory, p + ": expected a trace file, found a directory");
    return make_error(ErrorCode::kIo, p + ": cannot open: " + errno_text(e));
  }
  r.fd = fd;
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return make_error(ErrorCode::kIo, p + ": cannot stat: " + errno_text(errno));
  if (S_ISDIR(st.st_mode))
    return make_error(ErrorCode::kIsDirectory, p + ": expected a trace file, found a directory");
  if (!S_ISREG(st.st_mode))
    return make_error(ErrorCode::kInvalidArgument,
                      p + ": expected a regular trace file, found a device, pipe or socket");
  r.size = static_cast<uint64_t>(st.st_size);
  if (r.size == 0)
    return make_error(ErrorCode::kTruncated,
                      p + ": offset 0: expected a 16-byte llmrr trace header, found an empty file");
  uint8_t h[kFileHeaderBytes] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(r.size, kFileHeaderBytes));
  RETURN_IF_ERROR(r.pread_all(h, n, 0, p + ": "));
  const size_t magic_n = std::min<size_t>(n, 8);
  if (std::memcmp(h, kFileMagic, magic_n) != 0)
    return make_error(ErrorCode::kBadMagic, p +
                                                ": offset 0: expected the llmrr trace magic 89 4c "
                                                "4c 4d 52 52 0d 0a (\"\\x89LLMRR\\r\\n\"), found " +
                                                bytes_text(h, magic_n) + " (not an llmrr trace)");
  if (n < kFileHeaderBytes)
    return make_error(
        ErrorCode::kTruncated,
        p + ": expected a 16-byte llmrr trace header, found a " + std::to_string(n) + "-byte file");
  r.major = detail::load_u16(h + 8);
  r.minor = detail::load_u16(h + 10);
  if (r.major > kFormatMajor)
    return make_error(ErrorCode::kVersionTooNew,
                      p + ": offset 8: expected trace format version " +
                          std::to_string(kFormatMajor) + ".x or older, found " +
                          std::to_string(r.major) + "." + std::to_string(r.minor) +
                          ": written by a newer llmrr; upgrade llmrr to read it");
  if (r.major == 0)
    return make_error(ErrorCode::kUnsupported,
                      p + ": offset 8: expected trace format version 1 or later, found 0." +
                          std::to_string(r.minor));
  if (r.minor > kFormatMinor && r.major == kFormatMajor)
    r.warnings.push_back(p + ": written by format " + std::to_string(r.major) + "." +
                         std::to_string(r.minor) + ", this llmrr reads " +
                         std::to_string(kFormatMajor) + "." + std::to_string(kFormatMinor) +
                         ": fields added since are ignored");

  // The trailer decides: a valid one must lead to a valid footer; without one, scan.
  bool trailer = false;
  uint64_t footer_offset = 0;
  if (r.size >= kFileHeaderBytes + kFrameHeaderBytes + kTrailerBytes) {
    uint8_t t[kTrailerBytes];
    RETURN_IF_ERROR(r.pread_all(t, sizeof t, r.size - kTrailerBytes, p + ": "));
    trailer = detail::decode_trailer(t, &footer_offset);
  }
  if (trailer) {
    RETURN_IF_ERROR(read_footer(r, footer_offset));
    RETURN_IF_ERROR(validate_index(r, true));
  } else {
    if (!opt.scan_without_footer)
      return make_error(ErrorCode::kTruncated,
                        p + ": offset " + std::to_string(r.size) +
                            ": expected a trailer pointing at the footer, found none (the writer "
                            "did not close the trace)");
    RETURN_IF_ERROR(scan_frames(r));
  }
  return read_run_header(r);
}

Status read_footer(TraceReader::Impl& r, uint64_t off) {
  const std::string& p = r.path;
  const uint64_t limit = r.size - kTrailerBytes;
  const std::string at = p + ": trailer at offset " + std::to_string(limit) + ": ";
  if (off < kFileHeaderBytes || off + kFrameHeaderBytes > limit)
    return make_error(ErrorCode::kBadFooter, at + "expected a footer offset in [16, " +
                                                 std::to_string(limit - kFrameHeaderBytes) +
                                                 "], found " + std::to_string(off));
  uint8_t b[kFrameHeaderBytes];
  RETURN_IF_ERROR(r.pread_all(b, sizeof b, off, at));
  detail::FrameHeader h;
  const detail::HeaderProblem hp = detail::decode_frame_header(b, &h);
  if (hp != detail::HeaderProblem::kNone)
    return make_error(ErrorCode::kBadFooter,
                      at + "expected a footer frame at offset " + std::to_string(off) + ", found " +
                          (hp == detail::HeaderProblem::kMagic
                               ? "no frame magic (" + bytes_text(b, 4) + ")"
                               : std::string("a frame header that fails its check")));
  if (h.kind != FrameKind::kFooter)
    return make_error(ErrorCode::kBadFooter, at + "expected a footer frame at offset " +
                                                 std::to_string(off) + ", found a " +
                                                 kind_text(h.kind) + " frame");
  if (off + kFrameHeaderBytes + h.stored_size != limit)
    return make_error(ErrorCode::kBadFooter,
                      at + "expected the footer frame to end at the trailer (offset " +
                          std::to_string(limit) + "), found it ending at " +
                          std::to_string(off + kFrameHeaderBytes + h.stored_size));
  FrameInfo f;
  f.offset = off;
  f.kind = FrameKind::kFooter;
  f.codec = h.codec;
  f.raw_size = h.raw_size;
  f.stored_size = h.stored_size;
  if (!detail::known_codec(static_cast<uint8_t>(h.codec)))
    return make_error(ErrorCode::kUnknownKind, p + ": footer at offset " + std::to_string(off) +
                                                   ": expected codec 0..2, found " +
                                                   std::to_string(static_cast<int>(h.codec)));
  detail::Buffer raw;
  const std::string w = p + ": footer (frame " + std::to_string(h.index) + ") at offset " +
                        std::to_string(off) + ": ";
  if (h.raw_size > kMaxFrameRawBytes || h.stored_size > kMaxFrameStoredBytes)
    return make_error(ErrorCode::kFrameTooLarge,
                      w + "expected raw size <= " + std::to_string(kMaxFrameRawBytes) + ", found " +
                          std::to_string(h.raw_size));
  r.io.stored.resize(h.stored_size);
  RETURN_IF_ERROR(r.pread_all(r.io.stored.data(), h.stored_size, off + kFrameHeaderBytes, w));
  const uint64_t sum = detail::xxh3(r.io.stored.data(), h.stored_size);
  if (sum != h.checksum)
    return make_error(ErrorCode::kChecksumMismatch, w + "payload checksum: expected xxh3 " +
                                                        hex64(h.checksum) +
                                                        " (frame header), found " + hex64(sum));
  RETURN_IF_ERROR(r.decode_payload(w, f, r.io, &raw));
  if (!verify_flatbuffer<fb::Footer>(raw.data(), raw.size()))
    return make_error(ErrorCode::kBadFooter,
                      w + "expected a valid Footer FlatBuffer, found one the Verifier rejects");
  detail::decode_footer(flatbuffers::GetRoot<fb::Footer>(raw.data()), &r.footer);
  if (r.footer.frames.size() != h.index)
    return make_error(ErrorCode::kBadFooter,
                      w + "expected the footer to be frame " +
                          std::to_string(r.footer.frames.size()) + " (after the " +
                          std::to_string(r.footer.frames.size()) +
                          " frames it indexes), found frame index " + std::to_string(h.index));
  r.frames = r.footer.frames;
  r.footer_offset = off;
  r.has_footer = true;
  r.complete = r.footer.complete;
  r.lossy = r.footer.lossy;
  r.lossy_reason = r.footer.lossy_reason;
  r.requests = r.footer.requests;
  r.kind_bytes = r.footer.kind_bytes;
  r.tokens = r.footer.tokens;
  return Status::Ok();
}

// Frames in file order from offset 16; stops at a torn last frame (warning) or a footer.
Status scan_frames(TraceReader::Impl& r) {
  const std::string& p = r.path;
  uint64_t off = kFileHeaderBytes;
  r.frames.clear();
  detail::Buffer raw;
  ChunkDecoder dec;
  StepRecord rec;
  std::unordered_map<uint64_t, size_t> by_id;
  int64_t steps = 0;
  while (off < r.size) {
    const uint64_t remaining = r.size - off;
    const size_t i = r.frames.size();
    const std::string w =
        p + ": frame " + std::to_string(i) + " at offset " + std::to_string(off) + ": ";
    if (remaining < kFrameHeaderBytes) {
      r.warnings.push_back(w + "torn: " + std::to_string(remaining) +
                           " bytes after the last whole frame (less than a frame header); dropped");
      break;
    }
    uint8_t b[kFrameHeaderBytes];
    RETURN_IF_ERROR(r.pread_all(b, sizeof b, off, w));
    detail::FrameHeader h;
    switch (detail::decode_frame_header(b, &h)) {
      case detail::HeaderProblem::kMagic:
        return make_error(
            ErrorCode::kBadMagic,
            w + "expected frame magic 4c 52 46 4d (\"LRFM\"), found " + bytes_text(b, 4));
      case detail::HeaderProblem::kCheck:
        return make_error(ErrorCode::kChecksumMismatch,
                          w + "frame header check: expected " + hex32(h.header_check) +
                              " (stored), found " + hex32(detail::frame_header_check(b)) +
                              " (computed)");
      case detail::HeaderProblem::kNone:
        break;
    }
    if (h.index != i)
      return make_error(ErrorCode::kSemantic, w + "expected frame index " + std::to_string(i) +
                                                  ", found " + std::to_string(h.index));
    if (h.raw_size > kMaxFrameRawBytes || h.stored_size > kMaxFrameStoredBytes)
      return make_error(ErrorCode::kFrameTooLarge,
                        w + "expected raw size <= " + std::to_string(kMaxFrameRawBytes) +
                            " and stored size <= " + std::to_string(kMaxFrameStoredBytes) +
                            ", found raw " + std::to_string(h.raw_size) + ", stored " +
                            std::to_string(h.stored_size));
    if (h.stored_size > remaining - kFrameHeaderBytes) {
      r.warnings.push_back(w + "torn: declares " + std::to_string(h.stored_size) +
                           " stored bytes, only " + std::to_string(remaining - kFrameHeaderBytes) +
                           " remain; dropped");
      break;
    }
    FrameInfo f;
    f.offset = off;
    f.kind = h.kind;
    f.codec = h.codec;
    f.raw_size = h.raw_size;
    f.stored_size = h.stored_size;
    if (h.kind == FrameKind::kFooter) {
      r.warnings.push_back(
          w + "footer found but the trailer is missing or torn; frames were scanned instead");
      break;
    }
    const bool known = detail::known_kind(static_cast<uint8_t>(h.kind));
    if (!known) {
      if (r.minor > kFormatMinor) {
        r.warnings.push_back(w + "frame of unknown kind " +
                             std::to_string(static_cast<int>(h.kind)) +
                             " (newer minor format) skipped");
        r.frames.push_back(f);
        off = f.end();
        continue;
      }
      return make_error(ErrorCode::kUnknownKind, w + "expected frame kind 1..5, found " +
                                                     std::to_string(static_cast<int>(h.kind)));
    }
    if (!detail::known_codec(static_cast<uint8_t>(h.codec)))
      return make_error(ErrorCode::kUnknownKind, w + "expected codec 0..2, found " +
                                                     std::to_string(static_cast<int>(h.codec)));
    r.frames.push_back(f);
    // Step chunks and blobs: the index needs their step range / blob id.
    if (h.kind == FrameKind::kStepChunk || h.kind == FrameKind::kTensorBlob) {
      RETURN_IF_ERROR(r.load_frame(i, r.io, &raw));
      if (h.kind == FrameKind::kTensorBlob) {
        const fb::BlobMeta* m = flatbuffers::GetRoot<fb::BlobMeta>(raw.data() + 8);
        r.frames[i].first = r.frames[i].last = m->id();
      } else {
        if (!verify_flatbuffer<fb::StepChunk>(raw.data(), raw.size()))
          return make_error(
              ErrorCode::kBadFlatbuffer,
              r.where(i, f) +
                  "expected a valid StepChunk FlatBuffer, found one the Verifier rejects");
        const fb::StepChunk* c = flatbuffers::GetRoot<fb::StepChunk>(raw.data());
        const auto* steps = c->steps();
        if (steps->size() == 0)
          return make_error(ErrorCode::kSemantic,
                            r.where(i, f) + "expected at least one step, found none");
        r.frames[i].first = steps->Get(0)->step();
        r.frames[i].last = steps->Get(steps->size() - 1)->step();
        // Gather what the footer would have said.
        RETURN_IF_ERROR(r.open_chunk(i, raw, &dec));
        for (size_t k = 0; k < dec.size(); ++k) {
          std::string e = dec.decode(k, &rec);
          if (!e.empty()) return make_error(ErrorCode::kSemantic, r.where(i, f) + e);
          for (const RequestRecord& q : rec.arrivals) {
            by_id[q.id] = r.requests.size();
            r.requests.push_back(arrival_summary(q, rec.step));
          }
          for (const FinishRecord& fin : rec.finishes) {
            auto it = by_id.find(fin.request);
            if (it == by_id.end()) continue;
            apply_finish(r.requests[it->second], fin, rec.step);
          }
          r.tokens += static_cast<int64_t>(rec.tokens.size());
        }
        r.steps += static_cast<int64_t>(dec.size());
      }
    } else if (h.kind == FrameKind::kRunHeader || h.kind == FrameKind::kKernelRecords) {
      RETURN_IF_ERROR(r.load_frame(i, r.io, &raw));
    }
    off = f.end();
  }
  steps = r.steps;
  r.has_footer = false;
  r.complete = false;
  r.warnings.push_back(p +
                       ": no footer: the trace was not closed (writer killed or out of space?); " +
                       std::to_string(r.frames.size()) + " whole frames read by scanning");
  RETURN_IF_ERROR(validate_index(r, false));
  r.steps = steps;
  return Status::Ok();
}

Status validate_index(TraceReader::Impl& r, bool from_footer) {
  const std::string& p = r.path;
  const ErrorCode order_code = from_footer ? ErrorCode::kBadFooter : ErrorCode::kSemantic;
  const std::string src = from_footer ? "footer index: " : "";
  uint64_t expect = kFileHeaderBytes;
  const uint64_t end = from_footer ? r.footer_offset : r.size;
  int64_t prev_last = 0;
  bool any_step = false;
  r.chunks.clear();
  r.blobs.clear();
  r.raw_bytes = 0;
  r.steps = 0;
  for (size_t i = 0; i < r.frames.size(); ++i) {
    const FrameInfo& f = r.frames[i];
    const std::string w =
        p + ": " + src + "frame " + std::to_string(i) + " (" + kind_text(f.kind) + "): ";
    if (f.offset != expect)
      return make_error(ErrorCode::kBadFooter, w + "expected offset " + std::to_string(expect) +
                                                   " (end of the previous frame), found " +
                                                   std::to_string(f.offset));
    if (f.raw_size > kMaxFrameRawBytes || f.stored_size > kMaxFrameStoredBytes)
      return make_error(ErrorCode::kFrameTooLarge,
                        w + "expected raw size <= " + std::to_string(kMaxFrameRawBytes) +
                            " and stored size <= " + std::to_string(kMaxFrameStoredBytes) +
                            ", found raw " + std::to_string(f.raw_size) + ", stored " +
                            std::to_string(f.stored_size));
    if (f.end() > end)
      return make_error(ErrorCode::kBadFooter, w + "expected the frame to end by offset " +
                                                   std::to_string(end) + ", found it ending at " +
                                                   std::to_string(f.end()));
    expect = f.end();
    r.raw_bytes += f.raw_size;
    const uint8_t k = static_cast<uint8_t>(f.kind);
    if (!detail::known_kind(k)) {
      if (r.minor > kFormatMinor) continue;  // a newer minor's frame: skipped
      return make_error(ErrorCode::kUnknownKind,
                        w + "expected frame kind 1..5, found " + std::to_string(k));
    }
    if (!detail::known_codec(static_cast<uint8_t>(f.codec)))
      return make_error(ErrorCode::kUnknownKind, w + "expected codec 0..2, found " +
                                                     std::to_string(static_cast<int>(f.codec)));
    if (f.kind == FrameKind::kFooter)
      return make_error(ErrorCode::kBadFooter,
                        w + "expected a footer only as the last frame, found one inside");
    if ((i == 0) != (f.kind == FrameKind::kRunHeader))
      return make_error(
          ErrorCode::kSemantic,
          w + (i == 0
                   ? "expected the run header as frame 0, found a " + std::string(kind_text(f.kind))
                   : std::string("expected one run header (frame 0), found another")));
    if (f.kind == FrameKind::kStepChunk) {
      if (f.first > f.last || (any_step && f.first <= prev_last))
        return make_error(order_code, w + "expected steps after " +
                                          (any_step ? std::to_string(prev_last) : "none") +
                                          " in increasing order, found steps " +
                                          std::to_string(f.first) + ".." + std::to_string(f.last));
      any_step = true;
      prev_last = f.last;
      r.chunks.push_back(i);
    } else if (f.kind == FrameKind::kTensorBlob) {
      const int64_t id = static_cast<int64_t>(r.blobs.size());
      if (f.first != id || f.last != id)
        return make_error(order_code, w + "expected blob id " + std::to_string(id) +
                                          " (blobs numbered in file order), found " +
                                          std::to_string(f.first));
      r.blobs.push_back(i);
    }
  }
  if (from_footer && expect != end)
    return make_error(ErrorCode::kBadFooter,
                      p + ": footer index: expected frames up to the footer at offset " +
                          std::to_string(end) + ", found them ending at " + std::to_string(expect));
  r.first = r.chunks.empty() ? -1 : r.frames[r.chunks.front()].first;
  r.last = r.chunks.empty() ? -1 : r.frames[r.chunks.back()].last;
  if (from_footer) {
    if (r.footer.blobs != static_cast<int64_t>(r.blobs.size()))
      return make_error(ErrorCode::kBadFooter,
                        p + ": footer: expected a blob count of " + std::to_string(r.blobs.size()) +
                            " (blob frames), found " + std::to_string(r.footer.blobs));
    if (r.footer.first_step != r.first || r.footer.last_step != r.last)
      return make_error(ErrorCode::kBadFooter,
                        p + ": footer: expected steps " + std::to_string(r.first) + ".." +
                            std::to_string(r.last) + " (from the frame index), found " +
                            std::to_string(r.footer.first_step) + ".." +
                            std::to_string(r.footer.last_step));
    if (r.footer.steps < static_cast<int64_t>(r.chunks.size()) || r.footer.tokens < 0)
      return make_error(ErrorCode::kBadFooter,
                        p + ": footer: expected at least one step per step chunk (" +
                            std::to_string(r.chunks.size()) + "), found " +
                            std::to_string(r.footer.steps) + " steps");
    r.steps = r.footer.steps;
  }
  return Status::Ok();
}

Status read_run_header(TraceReader::Impl& r) {
  if (r.frames.empty())
    return make_error(
        ErrorCode::kTruncated,
        r.path + ": offset 16: expected frame 0 (run header), found " +
            (r.size > kFileHeaderBytes ? "only a torn frame" : "the end of the file"));
  detail::Buffer raw;
  RETURN_IF_ERROR(r.load_frame(0, r.io, &raw));
  if (!verify_flatbuffer<fb::RunHeader>(raw.data(), raw.size()))
    return make_error(ErrorCode::kBadFlatbuffer,
                      r.where(0, r.frames[0]) +
                          "expected a valid RunHeader FlatBuffer, found one the Verifier rejects");
  const fb::RunHeader* h = flatbuffers::GetRoot<fb::RunHeader>(raw.data());
  detail::decode_run_header(h, &r.header);
  if (r.header.format_major != r.major)
    return make_error(ErrorCode::kSemantic, r.where(0, r.frames[0]) + "format_major: expected " +
                                                std::to_string(r.major) + " (file header), found " +
                                                std::to_string(r.header.format_major));
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// TraceReader

using detail::guarded;

Result<std::unique_ptr<TraceReader>> TraceReader::open(const std::string& path,
                                                       ReaderOptions options) {
  return guarded(path, [&]() -> Result<std::unique_ptr<TraceReader>> {
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    RETURN_IF_ERROR(open_impl(*impl, options));
    return std::unique_ptr<TraceReader>(new TraceReader(std::move(impl)));
  });
}

TraceReader::TraceReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceReader::~TraceReader() = default;

const std::string& TraceReader::path() const {
  return impl_->path;
}
uint64_t TraceReader::file_size() const {
  return impl_->size;
}
uint16_t TraceReader::format_major() const {
  return impl_->major;
}
uint16_t TraceReader::format_minor() const {
  return impl_->minor;
}
bool TraceReader::complete() const {
  return impl_->complete;
}
bool TraceReader::has_footer() const {
  return impl_->has_footer;
}
bool TraceReader::lossy() const {
  return impl_->lossy;
}
const std::string& TraceReader::lossy_reason() const {
  return impl_->lossy_reason;
}
const std::vector<std::string>& TraceReader::warnings() const {
  return impl_->warnings;
}
const RunHeader& TraceReader::run_header() const {
  return impl_->header;
}
const std::vector<FrameInfo>& TraceReader::frames() const {
  return impl_->frames;
}
int64_t TraceReader::step_count() const {
  return impl_->steps;
}
int64_t TraceReader::first_step() const {
  return impl_->first;
}
int64_t TraceReader::last_step() const {
  return impl_->last;
}
int64_t TraceReader::token_count() const {
  return impl_->tokens;
}
int64_t TraceReader::blob_count() const {
  return static_cast<int64_t>(impl_->blobs.size());
}
uint64_t TraceReader::raw_bytes() const {
  return impl_->raw_bytes;
}
const std::vector<RequestSummary>& TraceReader::requests() const {
  return impl_->requests;
}
const std::vector<KindBytes>& TraceReader::kind_bytes() const {
  return impl_->kind_bytes;
}
int64_t TraceReader::kernel_record_count() const {
  return impl_->has_footer ? impl_->footer.kernel_records : -1;
}
int64_t TraceReader::dropped_records() const {
  return impl_->has_footer ? impl_->footer.dropped_records : 0;
}

StepCursor TraceReader::steps(int64_t first, int64_t last) const {
  StepCursor c;
  c.state_ = std::make_unique<StepCursor::State>();
  c.state_->r = impl_.get();
  c.state_->first = first;
  c.state_->last = last;
  // Start at the first chunk that can hold `first`.
  const auto& ch = impl_->chunks;
  const auto& fr = impl_->frames;
  c.state_->chunk_pos =
      static_cast<size_t>(std::lower_bound(ch.begin(), ch.end(), first,
                                           [&](size_t fi, int64_t s) { return fr[fi].last < s; }) -
                          ch.begin());
  return c;
}

Status TraceReader::read_step(int64_t step, StepRecord* out) {
  return guarded(impl_->path, [&]() -> Status {
    Impl& r = *impl_;
    auto not_found = [&] {
      return make_error(ErrorCode::kNotFound,
                        r.path + ": expected step " + std::to_string(step) +
                            ", found no such step (steps " + std::to_string(r.first) + ".." +
                            std::to_string(r.last) + ", " + std::to_string(r.steps) + " recorded)");
    };
    // The chunk whose range holds `step`; the last decoded chunk is kept, so reading
    // neighbouring steps does not decompress the same frame again.
    auto it = std::lower_bound(r.chunks.begin(), r.chunks.end(), step,
                               [&](size_t fi, int64_t s) { return r.frames[fi].last < s; });
    if (it == r.chunks.end() || r.frames[*it].first > step) return not_found();
    const size_t fi = *it;
    if (r.cache_frame != static_cast<int64_t>(fi)) {
      r.cache_frame = -1;
      RETURN_IF_ERROR(r.load_frame(fi, r.io, &r.cache_raw));
      r.cache_frame = static_cast<int64_t>(fi);
    }
    ChunkDecoder dec;
    RETURN_IF_ERROR(r.open_chunk(fi, r.cache_raw, &dec));
    for (size_t k = 0; k < dec.size(); ++k) {
      const int64_t n = dec.step_number(k);
      if (n > step) break;
      std::string e = dec.decode(k, out, /*skip_payload=*/n != step);
      if (!e.empty()) return make_error(ErrorCode::kSemantic, r.where(fi, r.frames[fi]) + e);
      if (n == step) return Status::Ok();
    }
    return not_found();
  });
}

namespace {

Status blob_frame(const TraceReader::Impl& r, int64_t id, detail::Buffer* raw, BlobInfo* info) {
  if (id < 0 || id >= static_cast<int64_t>(r.blobs.size()))
    return make_error(ErrorCode::kNotFound, r.path + ": expected a blob id in [0, " +
                                                std::to_string(r.blobs.size()) + "), found " +
                                                std::to_string(id));
  const size_t fi = r.blobs[static_cast<size_t>(id)];
  RETURN_IF_ERROR(r.load_frame(fi, r.io, raw));
  const fb::BlobMeta* m = flatbuffers::GetRoot<fb::BlobMeta>(raw->data() + 8);
  detail::decode_blob_meta(m, info);
  info->frame = static_cast<int64_t>(fi);
  info->shuffled = r.frames[fi].codec == Codec::kShuffleZstd;
  const std::string w = r.where(fi, r.frames[fi]);
  if (info->id != id)
    return make_error(ErrorCode::kSemantic, w + "expected blob id " + std::to_string(id) +
                                                ", found " + std::to_string(info->id));
  const size_t prefix = 8 + detail::load_u32(raw->data());
  if (info->nbytes != raw->size() - prefix)
    return make_error(ErrorCode::kSizeMismatch,
                      w + "blob nbytes: expected " + std::to_string(raw->size() - prefix) +
                          " (decoded bytes), found " + std::to_string(info->nbytes));
  return Status::Ok();
}

}  // namespace

Result<BlobInfo> TraceReader::blob_info(int64_t id) const {
  return guarded(impl_->path, [&]() -> Result<BlobInfo> {
    detail::Buffer raw;
    BlobInfo info;
    RETURN_IF_ERROR(blob_frame(*impl_, id, &raw, &info));
    return info;
  });
}

Status TraceReader::read_blob(int64_t id, std::vector<uint8_t>* out) const {
  return read_blob(id, out, nullptr, 0);
}

Status TraceReader::read_blob(int64_t id, std::vector<uint8_t>* out, const void* reference,
                              size_t reference_bytes) const {
  return guarded(impl_->path, [&]() -> Status {
    detail::Buffer raw;
    BlobInfo info;
    RETURN_IF_ERROR(blob_frame(*impl_, id, &raw, &info));
    const size_t prefix = 8 + detail::load_u32(raw.data());
    out->assign(raw.begin() + static_cast<std::ptrdiff_t>(prefix), raw.end());
    if (!info.xor_coded) return Status::Ok();
    const std::string w = impl_->path + ": blob " + std::to_string(id) + ": ";
    if (reference == nullptr)
      return make_error(ErrorCode::kInvalidArgument,
                        w + "XOR-coded against blob " + std::to_string(info.reference_blob) +
                            " of trace run_id \"" + info.reference_trace +
                            "\": expected its reference bytes, found none");
    if (reference_bytes != out->size())
      return make_error(ErrorCode::kInvalidArgument, w + "expected " + std::to_string(out->size()) +
                                                         " reference bytes, found " +
                                                         std::to_string(reference_bytes));
    const uint64_t h = detail::xxh3(reference, reference_bytes);
    if (h != info.reference_hash)
      return make_error(ErrorCode::kInvalidArgument,
                        w + "reference hash: expected xxh3 " + hex64(info.reference_hash) +
                            ", found " + hex64(h) + " (not the reference it was coded against)");
    const uint8_t* ref = static_cast<const uint8_t*>(reference);
    for (size_t i = 0; i < out->size(); ++i) (*out)[i] ^= ref[i];
    return Status::Ok();
  });
}

Status TraceReader::read_blob(int64_t id, std::vector<uint8_t>* out,
                              const TraceReader& reference) const {
  return guarded(impl_->path, [&]() -> Status {
    ASSIGN_OR_RETURN(BlobInfo info, blob_info(id));
    if (!info.xor_coded) return read_blob(id, out);
    if (reference.run_header().run_id != info.reference_trace)
      return make_error(ErrorCode::kInvalidArgument,
                        impl_->path + ": blob " + std::to_string(id) +
                            ": expected a reference trace with run_id \"" + info.reference_trace +
                            "\", found \"" + reference.run_header().run_id + "\" (" +
                            reference.path() + ")");
    std::vector<uint8_t> ref;
    RETURN_IF_ERROR(reference.read_blob(info.reference_blob, &ref));
    return read_blob(id, out, ref.data(), ref.size());
  });
}

Status TraceReader::read_kernels(int64_t frame, std::vector<KernelRecord>* out) const {
  return guarded(impl_->path, [&]() -> Status {
    const Impl& r = *impl_;
    if (frame < 0 || frame >= static_cast<int64_t>(r.frames.size()) ||
        r.frames[static_cast<size_t>(frame)].kind != FrameKind::kKernelRecords)
      return make_error(ErrorCode::kInvalidArgument,
                        r.path + ": expected the index of a kernel-records frame, found " +
                            std::to_string(frame));
    detail::Buffer raw;
    const size_t fi = static_cast<size_t>(frame);
    RETURN_IF_ERROR(r.load_frame(fi, r.io, &raw));
    if (!verify_flatbuffer<fb::KernelChunk>(raw.data(), raw.size()))
      return make_error(
          ErrorCode::kBadFlatbuffer,
          r.where(fi, r.frames[fi]) +
              "expected a valid KernelChunk FlatBuffer, found one the Verifier rejects");
    if (!detail::decode_kernel_chunk(flatbuffers::GetRoot<fb::KernelChunk>(raw.data()), raw.size(),
                                     out))
      return make_error(ErrorCode::kResourceLimit,
                        r.where(fi, r.frames[fi]) +
                            "expected kernel records no larger than the frame, found shared "
                            "strings that inflate decoding");
    for (size_t k = 0; k < out->size(); ++k)
      if (std::string e = check_kernel_record((*out)[k]); !e.empty())
        return make_error(ErrorCode::kSemantic, r.where(fi, r.frames[fi]) + "kernel record " +
                                                    std::to_string(k) + ": " + e);
    return Status::Ok();
  });
}

Status TraceReader::read_frame_payload(int64_t frame, std::vector<uint8_t>* out) const {
  return guarded(impl_->path, [&]() -> Status {
    if (frame < 0 || frame >= static_cast<int64_t>(impl_->frames.size()))
      return make_error(ErrorCode::kInvalidArgument, impl_->path +
                                                         ": expected a frame index in [0, " +
                                                         std::to_string(impl_->frames.size()) +
                                                         "), found " + std::to_string(frame));
    detail::Buffer raw;
    RETURN_IF_ERROR(impl_->load_frame(static_cast<size_t>(frame), impl_->io, &raw));
    out->assign(raw.begin(), raw.end());
    return Status::Ok();
  });
}

// ---------------------------------------------------------------------------------------
// verify

Status TraceReader::verify(VerifyReport* report) const {
  return guarded(impl_->path, [&]() -> Status {
    const Impl& r = *impl_;
    VerifyReport rep;
    rep.warnings = r.warnings;
    detail::SemanticChecker chk;
    const int64_t blob_total = static_cast<int64_t>(r.blobs.size());
    IoBuffers io;
    detail::Buffer raw;
    ChunkDecoder dec;
    StepRecord rec;
    int64_t blob_seen = 0, kernel_records = 0;
    for (size_t i = 0; i < r.frames.size(); ++i) {
      const FrameInfo& f = r.frames[i];
      // Every frame's integrity is checked, including kinds of a newer minor version that
      // this build cannot interpret (their payload is otherwise skipped).
      RETURN_IF_ERROR(r.load_frame(i, io, &raw));
      const std::string w = r.where(i, f);
      ++rep.frames;
      rep.raw_bytes += f.raw_size;
      if (!detail::known_kind(static_cast<uint8_t>(f.kind))) continue;
      switch (f.kind) {
        case FrameKind::kRunHeader:
          if (!verify_flatbuffer<fb::RunHeader>(raw.data(), raw.size()))
            return make_error(
                ErrorCode::kBadFlatbuffer,
                w + "expected a valid RunHeader FlatBuffer, found one the Verifier rejects");
          if (flatbuffers::GetRoot<fb::RunHeader>(raw.data())->tool_version()->size() == 0)
            return make_error(ErrorCode::kSemantic,
                              w + "tool_version: expected a version string, found \"\"");
          break;
        case FrameKind::kStepChunk: {
          RETURN_IF_ERROR(r.open_chunk(i, raw, &dec));
          for (size_t k = 0; k < dec.size(); ++k) {
            std::string e = dec.decode(k, &rec);
            if (!e.empty()) return make_error(ErrorCode::kSemantic, w + e);
            e = chk.check_step(rec, blob_total);
            if (!e.empty()) return make_error(ErrorCode::kSemantic, w + e);
          }
          break;
        }
        case FrameKind::kTensorBlob: {
          BlobInfo info;
          detail::decode_blob_meta(flatbuffers::GetRoot<fb::BlobMeta>(raw.data() + 8), &info);
          const size_t prefix = 8 + detail::load_u32(raw.data());
          if (info.id != blob_seen)
            return make_error(ErrorCode::kSemantic, w + "blob id: expected " +
                                                        std::to_string(blob_seen) + ", found " +
                                                        std::to_string(info.id));
          ++blob_seen;
          const int es = dtype_size(info.dtype);
          const uint8_t elem = flatbuffers::GetRoot<fb::BlobMeta>(raw.data() + 8)->elem_size();
          if (es == 0)
            return make_error(ErrorCode::kSemantic,
                              w + "dtype: expected a known dtype, found " +
                                  std::to_string(static_cast<int>(info.dtype)));
          if (elem != es)
            return make_error(ErrorCode::kSemantic,
                              w + "elem_size: expected " + std::to_string(es) + " for " +
                                  dtype_name(info.dtype) + ", found " + std::to_string(elem));
          uint64_t elems = 1;
          bool overflow = false;
          for (int64_t d : info.shape) {
            if (d < 0 || (d > 0 && elems > (uint64_t{1} << 40) / static_cast<uint64_t>(d))) {
              overflow = true;
              break;
            }
            elems *= static_cast<uint64_t>(d);
          }
          if (overflow || elems * static_cast<uint64_t>(es) != info.nbytes ||
              info.nbytes != raw.size() - prefix)
            return make_error(ErrorCode::kSizeMismatch,
                              w + "expected product(shape) x elem_size = nbytes = decoded bytes (" +
                                  std::to_string(raw.size() - prefix) + "), found nbytes " +
                                  std::to_string(info.nbytes) +
                                  (overflow ? " and a shape that overflows" : ""));
          ++rep.blobs;
          break;
        }
        case FrameKind::kKernelRecords: {
          if (!verify_flatbuffer<fb::KernelChunk>(raw.data(), raw.size()))
            return make_error(
                ErrorCode::kBadFlatbuffer,
                w + "expected a valid KernelChunk FlatBuffer, found one the Verifier rejects");
          std::vector<KernelRecord> ks;
          if (!detail::decode_kernel_chunk(flatbuffers::GetRoot<fb::KernelChunk>(raw.data()),
                                           raw.size(), &ks))
            return make_error(ErrorCode::kResourceLimit,
                              w + "expected kernel records no larger than the frame, found "
                                  "shared strings that inflate decoding");
          for (size_t k = 0; k < ks.size(); ++k)
            if (std::string e = check_kernel_record(ks[k]); !e.empty())
              return make_error(ErrorCode::kSemantic,
                                w + "kernel record " + std::to_string(k) + ": " + e);
          kernel_records += static_cast<int64_t>(ks.size());
          break;
        }
        case FrameKind::kFooter:
          break;
      }
    }
    rep.steps = chk.steps();
    rep.kernel_records = kernel_records;
    rep.tokens = chk.tokens();
    rep.requests = static_cast<int64_t>(chk.requests().size());
    rep.stored_bytes = r.size;
    if (r.has_footer) {
      const FooterFields& f = r.footer;
      const std::string w = r.path + ": footer at offset " + std::to_string(r.footer_offset) + ": ";
      auto mismatch = [&](const char* what, int64_t frames_say, int64_t footer_says) {
        return make_error(ErrorCode::kBadFooter,
                          w + what + ": expected " + std::to_string(frames_say) +
                              " (from the frames), found " + std::to_string(footer_says));
      };
      if (f.steps != chk.steps()) return mismatch("steps", chk.steps(), f.steps);
      // Format 1.0 footers predate the kernel counts.
      if (r.minor >= 1 && f.kernel_records != kernel_records)
        return mismatch("kernel_records", kernel_records, f.kernel_records);
      if (f.dropped_records < 0 || (f.dropped_records > 0 && !f.lossy))
        return make_error(ErrorCode::kBadFooter,
                          w + "dropped_records: expected 0, or > 0 with lossy set, found " +
                              std::to_string(f.dropped_records) +
                              (f.lossy ? "" : " with lossy unset"));
      if (f.tokens != chk.tokens()) return mismatch("tokens", chk.tokens(), f.tokens);
      if (f.raw_bytes != rep.raw_bytes)
        return mismatch("raw_bytes", static_cast<int64_t>(rep.raw_bytes),
                        static_cast<int64_t>(f.raw_bytes));
      if (f.stored_bytes != r.footer_offset)
        return mismatch("stored_bytes", static_cast<int64_t>(r.footer_offset),
                        static_cast<int64_t>(f.stored_bytes));
      if (f.requests.size() != chk.requests().size())
        return mismatch("requests", static_cast<int64_t>(chk.requests().size()),
                        static_cast<int64_t>(f.requests.size()));
      for (size_t k = 0; k < f.requests.size(); ++k)
        if (!(f.requests[k] == chk.requests()[k]))
          return make_error(ErrorCode::kBadFooter,
                            w + "requests[" + std::to_string(k) +
                                "]: expected the summary of request " +
                                std::to_string(chk.requests()[k].id) + " (arrival step " +
                                std::to_string(chk.requests()[k].arrival_step) + ", finish step " +
                                std::to_string(chk.requests()[k].finish_step) +
                                "), found request " + std::to_string(f.requests[k].id) +
                                " (arrival step " + std::to_string(f.requests[k].arrival_step) +
                                ", finish step " + std::to_string(f.requests[k].finish_step) + ")");
    }
    if (report) *report = std::move(rep);
    return Status::Ok();
  });
}

}  // namespace llmrr::trace
