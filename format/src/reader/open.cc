// Opening a trace: the file header (magic, version), the trailer that points at the footer,
// the footer and the frame index it holds (checked against the file), and the run header.
// Without a trailer the frames are scanned instead (reader/scan.cc).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "impl.h"

namespace llmrr::trace {
namespace {

Status read_footer(TraceReader::Impl& r, uint64_t footer_offset);
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
  // Far past any version written (a major per incompatible change): the header is damaged
  // or the bytes after the magic are not a header, which upgrading would not fix.
  if (r.major > kFormatMajor + 64)
    return make_error(ErrorCode::kCorruptPayload,
                      p + ": offset 8: expected trace format version " +
                          std::to_string(kFormatMajor) + ".x, found " + std::to_string(r.major) +
                          "." + std::to_string(r.minor) +
                          ", which no llmrr wrote: the file header is damaged");
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
    // The trailer's magic is its last 4 bytes, written with the rest in one piece: a
    // trailer whose magic is whole but whose check fails was damaged, not cut short by a
    // killed writer, and is not read as a recording that was never closed.
    if (!trailer && std::memcmp(t + 12, kTrailerMagic, 4) == 0)
      return make_error(ErrorCode::kBadFooter,
                        p + ": trailer at offset " + std::to_string(r.size - kTrailerBytes) +
                            ": expected its check to match its footer offset, found a mismatch "
                            "(the trailer is damaged)");
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
                                                   ": expected codec 0..3, found " +
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
      return make_error(ErrorCode::kUnknownKind, w + "expected codec 0..3, found " +
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

// ---------------------------------------------------------------------------------------
// TraceReader::open

Result<std::unique_ptr<TraceReader>> TraceReader::open(const std::string& path,
                                                       ReaderOptions options) {
  return guarded(path, [&]() -> Result<std::unique_ptr<TraceReader>> {
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    RETURN_IF_ERROR(open_impl(*impl, options));
    return std::unique_ptr<TraceReader>(new TraceReader(std::move(impl)));
  });
}

}  // namespace llmrr::trace
