// A trace without a footer (the writer crashed or was killed): its frames scanned in file
// order to rebuild the index and the request summaries the footer would have held; a torn
// last frame is dropped with a warning.
#include <cstdint>
#include <string>
#include <unordered_map>

#include "impl.h"

namespace llmrr::trace {

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
      // A writer killed while closing leaves at most part of the 16-byte trailer after the
      // footer; more than that was appended to a closed trace (or the file is damaged).
      const uint64_t after = remaining - kFrameHeaderBytes - h.stored_size;
      if (after > kTrailerBytes)
        return make_error(ErrorCode::kBadFooter,
                          w + "footer frame followed by " + std::to_string(after) +
                              " bytes, expected at most a " + std::to_string(kTrailerBytes) +
                              "-byte trailer (bytes were appended to a closed trace)");
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
      return make_error(ErrorCode::kUnknownKind, w + "expected codec 0..3, found " +
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

}  // namespace llmrr::trace
