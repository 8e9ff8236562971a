// Builds .trace files frame by frame, bypassing TraceWriter's checks, so that tests and the
// golden-error generator can produce exactly the damage they want: lying sizes, bad
// checksums, invalid FlatBuffers, records that break the schema's semantic rules.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "check.h"
#include "codec.h"
#include "convert.h"
#include "llmrr/format/container.h"
#include "llmrr/format/records.h"

namespace llmrr::trace::testing {

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> v;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return v;
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
  std::fclose(f);
  return v;
}

inline bool write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

// Overrides applied to a frame header after encoding (std::nullopt-like: -1 = keep).
struct FrameLies {
  int64_t raw_size = -1;
  int64_t stored_size = -1;
  int64_t index = -1;
  bool bad_checksum = false;
  bool bad_header_check = false;
  int kind = -1;
  int codec = -1;
};

class RawTrace {
 public:
  explicit RawTrace(uint16_t major = kFormatMajor, uint16_t minor = kFormatMinor) {
    bytes.resize(kFileHeaderBytes);
    detail::encode_file_header(major, minor, bytes.data());
  }

  // Appends a frame whose decoded payload is `raw` (for blobs: prefix + meta + tensor).
  // `stored_override` replaces the encoded payload entirely when non-empty.
  void add_frame(FrameKind kind, const std::vector<uint8_t>& raw, Codec codec = Codec::kZstd,
                 const FrameLies& lies = {}, const std::vector<uint8_t>* stored_override = nullptr,
                 int64_t first = -1, int64_t last = -1) {
    std::vector<uint8_t> stored;
    if (stored_override) {
      stored = *stored_override;
    } else if (codec == Codec::kNone) {
      stored = raw;
    } else {
      std::string err;
      detail::ZstdCompressor z;
      detail::Buffer out;
      z.compress(raw.data(), raw.size(), 3, &out, &err);
      stored.assign(out.begin(), out.end());
    }
    detail::FrameHeader h;
    h.kind = kind;
    h.codec = codec;
    h.raw_size = static_cast<uint32_t>(raw.size());
    h.stored_size = static_cast<uint32_t>(stored.size());
    h.checksum = detail::xxh3(stored.data(), stored.size());
    h.index = static_cast<uint32_t>(frames.size());
    if (lies.raw_size >= 0) h.raw_size = static_cast<uint32_t>(lies.raw_size);
    if (lies.stored_size >= 0) h.stored_size = static_cast<uint32_t>(lies.stored_size);
    if (lies.index >= 0) h.index = static_cast<uint32_t>(lies.index);
    if (lies.bad_checksum) h.checksum ^= 1;
    if (lies.kind >= 0) h.kind = static_cast<FrameKind>(lies.kind);
    if (lies.codec >= 0) h.codec = static_cast<Codec>(lies.codec);
    uint8_t hb[kFrameHeaderBytes];
    detail::encode_frame_header(h, hb);
    if (lies.bad_header_check) hb[28] ^= 0x40;
    FrameInfo fi;
    fi.offset = bytes.size();
    fi.kind = h.kind;
    fi.codec = h.codec;
    fi.raw_size = h.raw_size;
    fi.stored_size = h.stored_size;
    fi.first = first;
    fi.last = last;
    bytes.insert(bytes.end(), hb, hb + kFrameHeaderBytes);
    bytes.insert(bytes.end(), stored.begin(), stored.end());
    if (kind != FrameKind::kFooter) frames.push_back(fi);
  }

  void add_run_header(const RunHeader& h, const FrameLies& lies = {}) {
    RunHeader x = h;
    x.format_major = major();
    x.format_minor = minor();
    std::vector<uint8_t> raw;
    detail::build_run_header(x, &raw);
    add_frame(FrameKind::kRunHeader, raw, Codec::kZstd, lies);
  }

  // One step chunk holding `steps`, exactly as the writer would encode them (no checks).
  void add_steps(const std::vector<StepRecord>& steps, const FrameLies& lies = {}) {
    detail::ChunkBuilder b;
    detail::KindCounters kc;
    for (const StepRecord& s : steps) {
      b.add_step(s, &kc);
      ++steps_;
      tokens_ += static_cast<int64_t>(s.tokens.size());
      for (const RequestRecord& r : s.arrivals) {
        index_[r.id] = requests_.size();
        requests_.push_back(arrival_summary(r, s.step));
      }
      for (const FinishRecord& f : s.finishes) {
        auto it = index_.find(f.request);
        if (it == index_.end()) continue;
        apply_finish(requests_[it->second], f, s.step);
      }
    }
    const int64_t first = b.first_step(), last = b.last_step();
    std::vector<uint8_t> raw;
    b.finish(&raw);
    add_chunk_bytes(raw, first, last, lies, 0);
  }

  // A step chunk whose FlatBuffer the caller built (possibly invalid), counted as `nsteps`
  // steps in the footer; `stored_override` replaces the encoded payload.
  void add_chunk_bytes(const std::vector<uint8_t>& raw, int64_t first, int64_t last,
                       const FrameLies& lies = {}, int64_t nsteps = 1,
                       const std::vector<uint8_t>* stored_override = nullptr,
                       Codec codec = Codec::kZstd) {
    if (first_step_ < 0) first_step_ = first;
    last_step_ = last;
    steps_ += nsteps;
    add_frame(FrameKind::kStepChunk, raw, codec, lies, stored_override, first, last);
  }

  // A tensor blob frame (shuffle + zstd like the writer).
  void add_blob(DType dtype, const std::vector<int64_t>& shape, const std::vector<uint8_t>& data,
                const FrameLies& lies = {}, int64_t id = -1) {
    detail::BlobMetaFields m;
    m.id = id >= 0 ? id : blobs_;
    m.dtype = dtype;
    m.elem_size = static_cast<uint8_t>(dtype_size(dtype));
    m.shape = shape;
    m.nbytes = data.size();
    std::vector<uint8_t> meta;
    detail::build_blob_meta(m, &meta);
    const size_t padded = (meta.size() + 7) & ~size_t{7};
    std::vector<uint8_t> prefix(8 + padded, 0);
    detail::store_u32(prefix.data(), static_cast<uint32_t>(padded));
    std::memcpy(prefix.data() + 8, meta.data(), meta.size());
    std::vector<uint8_t> shuffled(data.size());
    detail::shuffle_bytes(data.data(), shuffled.data(), data.size(), m.elem_size);
    std::vector<uint8_t> stored = prefix;
    std::string err;
    detail::ZstdCompressor z;
    detail::Buffer out;
    z.compress(shuffled.data(), shuffled.size(), 3, &out, &err);
    stored.insert(stored.end(), out.begin(), out.end());
    std::vector<uint8_t> raw = prefix;
    raw.insert(raw.end(), data.begin(), data.end());
    add_frame(FrameKind::kTensorBlob, raw, Codec::kShuffleZstd, lies, &stored, m.id, m.id);
    ++blobs_;
  }

  // Footer + trailer, with counts computed from what was added.
  void finish(bool complete = true, std::vector<uint8_t>* footer_override = nullptr,
              int64_t trailer_offset = -1) {
    detail::FooterFields f;
    f.complete = complete;
    f.frames = frames;
    f.steps = steps_;
    f.first_step = first_step_;
    f.last_step = last_step_;
    f.tokens = tokens_;
    f.blobs = blobs_;
    for (const FrameInfo& fi : frames) f.raw_bytes += fi.raw_size;
    f.stored_bytes = bytes.size();
    f.requests = requests_;
    std::vector<uint8_t> raw;
    detail::build_footer(f, &raw);
    const uint64_t at = bytes.size();
    add_frame(FrameKind::kFooter, footer_override ? *footer_override : raw);
    uint8_t t[kTrailerBytes];
    detail::encode_trailer(trailer_offset >= 0 ? static_cast<uint64_t>(trailer_offset) : at, t);
    bytes.insert(bytes.end(), t, t + kTrailerBytes);
  }

  uint16_t major() const { return detail::load_u16(bytes.data() + 8); }
  uint16_t minor() const { return detail::load_u16(bytes.data() + 10); }

  std::vector<uint8_t> bytes;
  std::vector<FrameInfo> frames;

 private:
  int64_t steps_ = 0, tokens_ = 0, blobs_ = 0, first_step_ = -1, last_step_ = -1;
  std::vector<RequestSummary> requests_;
  std::unordered_map<uint64_t, size_t> index_;
};

}  // namespace llmrr::trace::testing
