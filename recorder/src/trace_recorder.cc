#include "llmrr/recorder/trace_recorder.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "llmrr/format/fingerprint.h"
#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/recorder/convert.h"
#include "row_stats.h"

namespace llmrr {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "";
}

std::string make_run_id() {
  std::random_device rd;
  uint64_t a = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  uint64_t b = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) ^
               (static_cast<uint64_t>(rd()) << 20);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

std::string logits_blob_name(int32_t position) {
  return "logits:" + std::to_string(position);
}

}  // namespace

trace::RunHeader base_run_header() {
  trace::RunHeader h;
  h.tool_version = LLMRR_VERSION;
  h.created_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  h.run_id = make_run_id();
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) h.host.hostname = host;
  struct utsname u;
  if (uname(&u) == 0) h.host.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  h.host.cpu = cpu_model();
  h.host.cores = static_cast<int32_t>(std::thread::hardware_concurrency());
  h.host.isa = kernels::isa_name(kernels::active_isa());
  h.device.kind = "cpu";
  h.device.name = h.host.cpu;
  return h;
}

Result<std::unique_ptr<TraceRecorder>> TraceRecorder::open(const std::string& path,
                                                           trace::RunHeader header,
                                                           RecorderOptions options) {
  if (options.top_k < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "logits top-K must be >= 0, got " + std::to_string(options.top_k));
  }
  std::unique_ptr<TraceRecorder> rec(new TraceRecorder());
  rec->path_ = path;
  rec->options_ = options;
  header.engine.capture = options.capture;
  header.engine.logits_mode = options.logits;
  header.engine.top_k = options.top_k;

  if (options.reference != nullptr) {
    // Index the reference's full-logit blobs by (prompt hash, position).
    const trace::TraceReader& ref = *options.reference;
    for (int64_t id = 0; id < ref.blob_count(); ++id) {
      Result<trace::BlobInfo> info = ref.blob_info(id);
      if (!info.ok()) return info.status().with_context("reference " + ref.path() + ": ");
      const std::string& name = info->name;
      if (name.rfind("logits:", 0) != 0) continue;
      int32_t position = std::atoi(name.c_str() + 7);
      for (const trace::RequestSummary& r : ref.requests()) {
        if (r.id == info->request) {
          rec->reference_blobs_.emplace(std::make_pair(r.prompt_hash, position), id);
          break;
        }
      }
    }
  }

  ASSIGN_OR_RETURN(rec->writer_, trace::TraceWriter::open(path, options.writer));
  RETURN_IF_ERROR(rec->writer_->append_run_header(header));
  return rec;
}

TraceRecorder::~TraceRecorder() {
  if (!closed_) (void)close();
}

void TraceRecorder::mark_lossy(const std::string& reason) {
  if (writer_ && !closed_) writer_->mark_lossy(reason);
}

void TraceRecorder::fail(Status status) {
  if (!status_.ok() || status.ok()) return;
  status_ = std::move(status);
  if (writer_) writer_->mark_lossy("recording stopped: " + status_.to_string());
  std::fprintf(stderr, "llmrr: recording stopped, the trace is lossy: %s\n",
               status_.to_string().c_str());
}

// Every callback body runs inside this guard: whatever goes wrong becomes a recording
// error (the trace is marked lossy), never an exception in the engine.
#define LLMRR_RECORDER_GUARD_BEGIN \
  if (!recording()) return;        \
  try {
#define LLMRR_RECORDER_GUARD_END                                                  \
  }                                                                               \
  catch (const std::bad_alloc&) {                                                 \
    fail(make_error(ErrorCode::kResourceLimit, "out of memory while recording")); \
  }                                                                               \
  catch (const std::exception& e) {                                               \
    fail(make_error(ErrorCode::kInternal, std::string("recorder: ") + e.what())); \
  }                                                                               \
  catch (...) {                                                                   \
    fail(make_error(ErrorCode::kInternal, "recorder: unknown exception"));        \
  }

bool TraceRecorder::wants_rows(SiteId site) {
  if (!recording()) return false;
  switch (options_.capture) {
    case trace::CaptureLevel::kNone:
      return false;
    case trace::CaptureLevel::kLayers:
      return is_layer_output(site);
    case trace::CaptureLevel::kAll:
      return true;
  }
  return false;
}

void TraceRecorder::on_arrival(int64_t step, const RequestSpec& r) {
  LLMRR_RECORDER_GUARD_BEGIN
  trace::RequestRecord rec = to_request_record(r);
  if (options_.reference != nullptr) prompt_hashes_[r.id] = trace::prompt_hash(r.prompt);
  // The engine reports arrivals before on_step; a C ABI caller may add one inside a step.
  if (in_step_) {
    step_.arrivals.push_back(std::move(rec));
  } else {
    pending_arrivals_.push_back(std::move(rec));
  }
  LLMRR_RECORDER_GUARD_END
}

void TraceRecorder::on_step(const StepInfo& s) {
  LLMRR_RECORDER_GUARD_BEGIN
  step_.clear();
  step_.step = s.step;
  step_.arrivals.swap(pending_arrivals_);
  pending_arrivals_.clear();
  step_.segments.reserve(s.segments.size());
  for (const BatchSegment& g : s.segments) step_.segments.push_back(to_trace_segment(g));
  in_step_ = true;
  LLMRR_RECORDER_GUARD_END
}

void TraceRecorder::on_plan(int64_t step, SiteId site, const Plan& plan) {
  LLMRR_RECORDER_GUARD_BEGIN
  step_.plans.push_back({site.packed(), to_plan_record(plan)});
  LLMRR_RECORDER_GUARD_END
}

void TraceRecorder::on_rows(const RowsView& v) {
  LLMRR_RECORDER_GUARD_BEGIN
  trace::SiteRows rows;
  rows.site = v.site.packed();
  rows.cols = static_cast<int32_t>(v.cols);
  if (v.batch_rows) rows.batch_rows.assign(v.batch_rows, v.batch_rows + v.rows);
  rows.rows.resize(static_cast<size_t>(v.rows));
  for (int64_t r = 0; r < v.rows; ++r) {
    rows.rows[static_cast<size_t>(r)] =
        v.fingerprints ? v.fingerprints[r] : trace::fingerprint_row(v.data + r * v.ld, v.cols);
  }
  stats_.fingerprints += v.rows;
  step_.rows.push_back(std::move(rows));
  LLMRR_RECORDER_GUARD_END
}

void TraceRecorder::on_routing(const RoutingView& v) {
  LLMRR_RECORDER_GUARD_BEGIN
  if (v.batch_rows != nullptr) {
    fail(make_error(ErrorCode::kInvalidArgument,
                    "recording a request-alone run is not supported (routing of step " +
                        std::to_string(v.step) + " covers only some rows)"));
    return;
  }
  trace::Routing r;
  r.layer = v.layer;
  r.rows = static_cast<int32_t>(v.rows);
  r.k = v.k;
  r.experts_total = v.experts_total;
  r.capacity = v.capacity;
  size_t n = static_cast<size_t>(v.rows) * static_cast<size_t>(v.k);
  r.chosen.assign(v.chosen, v.chosen + n);
  r.experts.assign(v.experts, v.experts + n);
  r.gates.assign(v.gates, v.gates + n);
  r.outcome.resize(n);
  for (size_t i = 0; i < n; ++i) r.outcome[i] = static_cast<trace::RouteOutcome>(v.outcome[i]);
  step_.routing.push_back(std::move(r));
  LLMRR_RECORDER_GUARD_END
}

void TraceRecorder::record_full_logits(const LogitsView& v, trace::LogitsRecord& rec) {
  trace::BlobSpec blob;
  blob.dtype = trace::DType::kF32;
  blob.shape = {v.vocab};
  blob.data = v.logits;
  blob.bytes = static_cast<size_t>(v.vocab) * sizeof(float);
  blob.name = logits_blob_name(v.position);
  blob.step = v.step;
  blob.site = SiteId{SiteKind::kLogits, -1, -1}.packed();
  blob.request = v.request;
  if (options_.reference != nullptr) {
    auto known = prompt_hashes_.find(v.request);
    if (known != prompt_hashes_.end()) {
      const uint64_t hash = known->second;
      auto ref = reference_blobs_.find({hash, v.position});
      if (ref != reference_blobs_.end()) {
        const int64_t ref_id = ref->second;
        Status st = options_.reference->read_blob(ref_id, &reference_bytes_);
        if (st.ok() && reference_bytes_.size() == blob.bytes) {
          blob.xor_reference = reference_bytes_.data();
          blob.reference_trace = options_.reference->run_header().run_id;
          blob.reference_blob = ref_id;
          ++stats_.xor_blobs;
        }
      }
    }
  }
  Result<int64_t> id = writer_->append_blob(blob);
  if (!id.ok()) {
    fail(id.status());
    return;
  }
  rec.blob = *id;
  ++stats_.blobs;
}

void TraceRecorder::on_logits(const LogitsView& v) {
  LLMRR_RECORDER_GUARD_BEGIN
  trace::LogitsRecord rec;
  rec.request = v.request;
  rec.position = v.position;
  rec.batch_row = static_cast<int32_t>(v.batch_row);
  rec.vocab = static_cast<int32_t>(v.vocab);
  int k = static_cast<int>(std::min<int64_t>(std::max(options_.top_k, 2), v.vocab));
  rec.top_ids.resize(static_cast<size_t>(k));
  rec.top_values.resize(static_cast<size_t>(k));
  recorder_internal::top_k(v.logits, v.vocab, k, rec.top_ids.data(), rec.top_values.data());
  rec.margin = k >= 2 ? rec.top_values[0] - rec.top_values[1] : 0.0f;
  // The margin needs the top two; keep only as many as asked for.
  rec.top_ids.resize(static_cast<size_t>(std::min<int64_t>(options_.top_k, k)));
  rec.top_values.resize(rec.top_ids.size());
  rec.full = trace::fingerprint_row(v.logits, v.vocab);
  if (options_.logits == trace::LogitsMode::kFull) {
    record_full_logits(v, rec);
    if (!recording()) return;
  }
  step_.logits.push_back(std::move(rec));
  LLMRR_RECORDER_GUARD_END
}

void TraceRecorder::on_token(const TokenEvent& t) {
  LLMRR_RECORDER_GUARD_BEGIN
  step_.tokens.push_back({t.request, t.position, t.token, t.sample.uniform});
  ++stats_.tokens;
  LLMRR_RECORDER_GUARD_END
}

void TraceRecorder::on_finish(const RequestFinish& f) {
  LLMRR_RECORDER_GUARD_BEGIN
  trace::FinishRecord rec;
  rec.request = f.request;
  rec.reason = static_cast<trace::FinishReason>(f.reason);
  rec.generated = f.generated;
  step_.finishes.push_back(rec);
  LLMRR_RECORDER_GUARD_END
}

void TraceRecorder::on_step_end(int64_t step) {
  LLMRR_RECORDER_GUARD_BEGIN
  if (!in_step_) return;
  in_step_ = false;
  Status st = writer_->append_step(step_);
  if (!st.ok()) {
    fail(st.with_context("step " + std::to_string(step) + ": "));
    return;
  }
  ++stats_.steps;
  LLMRR_RECORDER_GUARD_END
}

Status TraceRecorder::close() {
  if (closed_) return status_;
  closed_ = true;
  if (!writer_) return status_;
  if (in_step_ && status_.ok()) {
    // The engine stopped inside a step (an error on its side): keep what was seen.
    Status st = writer_->append_step(step_);
    if (!st.ok()) fail(st);
    in_step_ = false;
  }
  Status st = writer_->close();
  stats_.file_bytes = writer_->stats().file_bytes;
  if (!status_.ok()) return status_;
  if (!st.ok()) status_ = st;
  return status_;
}

RecorderStats TraceRecorder::stats() const {
  RecorderStats s = stats_;
  if (writer_) s.file_bytes = writer_->stats().file_bytes;
  return s;
}

}  // namespace llmrr
