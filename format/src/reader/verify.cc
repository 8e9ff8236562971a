// TraceReader::verify: every frame read and checked, every step record checked against the
// steps before it, blobs and kernel records checked, and the footer's counts checked against
// what the frames hold.
#include <string>
#include <vector>

#include "check.h"
#include "impl.h"

namespace llmrr::trace {

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
