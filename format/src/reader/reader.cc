#include "llmrr/format/trace_reader.h"

#include <algorithm>
#include <new>

#include "impl.h"

namespace llmrr::trace {

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
// TraceReader

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

}  // namespace llmrr::trace
