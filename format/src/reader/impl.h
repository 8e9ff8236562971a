// Internal to the TraceReader sources: the reader's state (TraceReader::Impl) and what its
// files share. reader/frames.cc reads and decodes one frame; reader/open.cc opens
// a trace (file header, trailer, footer, index, run header) and reader/scan.cc indexes
// one without a footer; reader/reader.cc serves steps, blobs and kernel records;
// reader/verify.cc is TraceReader::verify.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "codec.h"
#include "convert.h"
#include "guarded.h"
#include "llmrr/format/trace_reader.h"

namespace llmrr::trace {

using detail::ChunkDecoder;
using detail::FooterFields;
using detail::guarded;
using detail::ZstdDecompressor;

namespace detail {

// Pieces of error messages (reader/frames.cc).
std::string hex64(uint64_t v);
std::string hex32(uint32_t v);
std::string bytes_text(const uint8_t* p, size_t n);
std::string errno_text(int e);
const char* kind_text(FrameKind k);

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

}  // namespace detail

using detail::bytes_text;
using detail::errno_text;
using detail::hex32;
using detail::hex64;
using detail::IoBuffers;
using detail::kind_text;
using detail::verify_flatbuffer;

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

  // Frames (reader/frames.cc).
  Status pread_all(uint8_t* dst, size_t n, uint64_t at, const std::string& what) const;

  // Reads frame i's header and checks it against `f` (the index entry).
  Status read_header(size_t i, const FrameInfo& f, detail::FrameHeader* h) const;

  // Reads, checks and decodes frame i into *raw (the decoded payload).
  Status load_frame(size_t i, IoBuffers& io_, detail::Buffer* raw) const;

  Status decode_body(const std::string& w, Codec codec, const uint8_t* src, size_t n, uint8_t* dst,
                     size_t expected, IoBuffers& io_, uint8_t elem) const;

  Status decode_payload(const std::string& w, const FrameInfo& f, IoBuffers& io_,
                        detail::Buffer* raw) const;

  // Verifies a step chunk payload and prepares `dec`; checks the steps against the index.
  Status open_chunk(size_t i, const detail::Buffer& raw, ChunkDecoder* dec) const;
};

// Frames in file order from offset 16; stops at a torn last frame (warning) or a footer
// (reader/scan.cc).
Status scan_frames(TraceReader::Impl& r);
// Checks the frame index (from the footer, or from scanning) and derives chunks, blobs and
// the step range from it (reader/open.cc).
Status validate_index(TraceReader::Impl& r, bool from_footer);

}  // namespace llmrr::trace
