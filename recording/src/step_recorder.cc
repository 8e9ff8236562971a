#include "llmrr/recording/step_recorder.h"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "llmrr/format/fingerprint.h"
#include "row_stats.h"
#include "step_slot.h"

namespace llmrr::recording {
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


// The widest x86 vector ISA this CPU runs (and the OS saves the registers of): what a trace
// recorded outside the engine says of its host ("avx512", "avx2", "").
std::string cpu_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
#endif
  return "";
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
  h.host.isa = cpu_isa();
  h.device.kind = "cpu";
  h.device.name = h.host.cpu;
  return h;
}

StepRecorder::StepRecorder()
    : current_(std::make_unique<internal::StepSlot>()),
      spare_(std::make_unique<internal::StepSlot>()) {}

Result<std::unique_ptr<StepRecorder>> StepRecorder::open(const std::string& path,
                                                           trace::RunHeader header,
                                                           Options options) {
  if (options.top_k < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "logits top-K must be >= 0, got " + std::to_string(options.top_k));
  }
  std::unique_ptr<StepRecorder> rec(new StepRecorder());
  rec->path_ = path;
  rec->options_ = options;
  header.engine.capture = options.capture;
  header.engine.logits_mode = options.logits;
  header.engine.top_k = options.top_k;
  rec->mixsum_rows_ = header.engine.fingerprint == trace::kFingerprintMixsum;

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

  // With a ring the first segment is written (open_ring names it and sizes its chunks).
  if (options.ring.enabled()) RETURN_IF_ERROR(rec->open_ring(header));
  ASSIGN_OR_RETURN(rec->writer_,
                   trace::TraceWriter::open(options.ring.enabled() ? rec->current_segment_.path : path,
                                            rec->options_.writer));
  RETURN_IF_ERROR(rec->writer_->append_run_header(header));
  // A trigger already there when recording starts asks for nothing: only a change does.
  if (!options.snapshot.trigger.empty()) rec->trigger_seen_ = trigger_id(options.snapshot.trigger);
  if (options.background) {
    try {
      StepRecorder* r = rec.get();
      const int cores = static_cast<int>(std::thread::hardware_concurrency());
      rec->own_core_ = header.engine.threads >= 1 && header.engine.threads < cores;
      rec->worker_ = std::thread([r] { r->worker_loop(); });
    } catch (const std::system_error&) {
      // No thread to be had: complete steps inline instead (same records).
    }
  }
  return rec;
}

StepRecorder::~StepRecorder() {
  if (!closed_) (void)close();
  if (worker_.joinable()) {
    cv_.notify_all();  // stop_worker_ is set
    worker_.join();
  }
}

Status StepRecorder::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  return status_;
}

void StepRecorder::mark_lossy(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!closed_ && lossy_reason_.empty())
    lossy_reason_ = reason.empty() ? "records were dropped" : reason;
}

void StepRecorder::fail(Status status) {
  if (status.ok()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!status_.ok()) return;
    status_ = std::move(status);
    if (lossy_reason_.empty()) lossy_reason_ = "recording stopped: " + status_.to_string();
    stopped_.store(true, std::memory_order_relaxed);
  }
  if (options_.warn_on_stop) {
    std::fprintf(stderr, "llmrr: recording stopped, the trace is lossy: %s\n",
                 this->status().to_string().c_str());
  }
}

// Every callback body runs inside this guard: whatever goes wrong becomes a recording
// error (the trace is marked lossy), never an exception in the producer.
#define LLMRR_STEP_RECORDER_GUARD_BEGIN \
  if (!recording()) return;        \
  try {
#define LLMRR_STEP_RECORDER_GUARD_END                                                  \
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

bool StepRecorder::wants_rows(SiteId site) const {
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

// ---- the producer's side: store small records, copy float rows --------------------------

void StepRecorder::arrival(trace::RequestRecord rec) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  // The engine reports arrivals before its step; a C ABI caller may add one inside a step.
  if (in_step_) {
    current_->step.arrivals.push_back(std::move(rec));
  } else {
    pending_arrivals_.push_back(std::move(rec));
  }
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::begin_step(int64_t step) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  internal::StepSlot& slot = *current_;
  slot.clear();
  slot.step.step = step;
  slot.step.arrivals.swap(pending_arrivals_);
  pending_arrivals_.clear();
  in_step_ = true;
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::segment(const trace::Segment& segment) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  current_->step.segments.push_back(segment);
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::plan(SiteId site, trace::PlanRecord plan) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  current_->step.plans.push_back({site.packed(), std::move(plan)});
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::rows(const RowsView& v) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  internal::StepSlot& slot = *current_;
  trace::SiteRows rows = slot.spare_rows.take();
  rows.site = v.site.packed();
  rows.cols = static_cast<int32_t>(v.cols);
  if (v.batch_rows) {
    rows.batch_rows.assign(v.batch_rows, v.batch_rows + v.rows);
  } else {
    rows.batch_rows.clear();
  }
  if (v.fingerprints) {
    rows.rows.assign(v.fingerprints, v.fingerprints + v.rows);
  } else {
    // Copy now (the view dies with the callback); fingerprint on the recorder's side.
    rows.rows.resize(static_cast<size_t>(v.rows));
    internal::PendingRows p;
    p.index = slot.step.rows.size();
    p.rows = v.rows;
    p.cols = v.cols;
    p.offset = slot.arena.take(static_cast<size_t>(v.rows * v.cols));
    if (v.site == SiteId{SiteKind::kLogits, -1, -1})
      slot.logits_site_rows = static_cast<int64_t>(slot.rows.size());
    float* dst = slot.arena.at(p.offset);
    const size_t row_bytes = static_cast<size_t>(v.cols) * sizeof(float);
    if (v.ld == v.cols) {
      if (v.rows > 0) std::memcpy(dst, v.data, row_bytes * static_cast<size_t>(v.rows));
    } else {
      for (int64_t r = 0; r < v.rows; ++r) std::memcpy(dst + r * v.cols, v.data + r * v.ld, row_bytes);
    }
    slot.rows.push_back(p);
  }
  slot.step.rows.push_back(std::move(rows));
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::routing(const RoutingView& v) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  if (v.batch_rows != nullptr) {
    fail(make_error(ErrorCode::kInvalidArgument,
                    "recording a request-alone run is not supported (routing of step " +
                        std::to_string(v.step) + " covers only some rows)"));
    return;
  }
  trace::Routing r = current_->spare_routing.take();
  r.layer = v.layer;
  r.rows = static_cast<int32_t>(v.rows);
  r.k = v.k;
  r.experts_total = v.experts_total;
  r.capacity = v.capacity;
  size_t n = static_cast<size_t>(v.rows) * static_cast<size_t>(v.k);
  r.chosen.assign(v.chosen, v.chosen + n);
  r.experts.assign(v.experts, v.experts + n);
  r.gates.assign(v.gates, v.gates + n);
  r.outcome.assign(v.outcome, v.outcome + n);
  current_->step.routing.push_back(std::move(r));
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::logits(const LogitsView& v) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  internal::StepSlot& slot = *current_;
  trace::LogitsRecord rec = slot.spare_logits.take();
  rec.request = v.request;
  rec.position = v.position;
  rec.batch_row = static_cast<int32_t>(v.batch_row);
  rec.vocab = static_cast<int32_t>(v.vocab);
  rec.top_ids.clear();  // filled when the step is completed
  rec.top_values.clear();
  rec.full = {};
  rec.margin = 0.0f;
  rec.logsumexp.reset();
  rec.blob = -1;
  internal::PendingLogits p;
  p.index = slot.step.logits.size();
  p.vocab = v.vocab;
  const internal::PendingRows* site =
      slot.logits_site_rows >= 0 ? &slot.rows[static_cast<size_t>(slot.logits_site_rows)] : nullptr;
  if (v.logits_site_row >= 0 && site != nullptr && v.logits_site_row < site->rows &&
      site->cols == v.vocab) {
    // The producer says this row is one of the logits site's rows it reported this step,
    // unchanged since: the copy made then serves.
    p.offset = site->offset + static_cast<size_t>(v.logits_site_row * v.vocab);
  } else {
    p.offset = slot.arena.take(static_cast<size_t>(v.vocab));
    if (v.vocab > 0)
      std::memcpy(slot.arena.at(p.offset), v.logits, static_cast<size_t>(v.vocab) * sizeof(float));
  }
  slot.logits.push_back(p);
  slot.step.logits.push_back(std::move(rec));
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::discard_step() {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  if (!in_step_) return;
  in_step_ = false;
  internal::StepSlot& slot = *current_;
  std::vector<trace::RequestRecord> arrivals;
  arrivals.swap(slot.step.arrivals);
  for (trace::RequestRecord& r : pending_arrivals_) arrivals.push_back(std::move(r));
  pending_arrivals_ = std::move(arrivals);
  slot.clear();
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::token(const trace::TokenRecord& t) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  current_->step.tokens.push_back(t);
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::finish(const trace::FinishRecord& f) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  current_->step.finishes.push_back(f);
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::op(trace::OpRecord o) {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  current_->step.ops.push_back(std::move(o));
  LLMRR_STEP_RECORDER_GUARD_END
}

void StepRecorder::end_step() {
  LLMRR_STEP_RECORDER_GUARD_BEGIN
  if (!in_step_) return;
  in_step_ = false;
  if (!pipelined()) {
    complete_and_append(*current_);
    return;
  }
  // Step N−1 must be appended before step N goes: its verdict is known from here on, and
  // its slot becomes the next one to fill. If the recorder's thread has not taken it yet,
  // this thread completes it (the same work, here rather than there).
  std::unique_lock<std::mutex> lk(mu_);
  settle_in_flight(lk);
  if (!recording()) return;
  const auto now = std::chrono::steady_clock::now();
  if (handoffs_ > 0) {
    // The step period, smoothed, for the recorder's thread to plan its next look.
    const int64_t dt =
        std::chrono::duration_cast<std::chrono::microseconds>(now - last_handoff_).count();
    const int64_t sample = std::clamp<int64_t>(dt, 20, 4 * std::max<int64_t>(period_us_, 20));
    period_us_ = handoffs_ == 1 ? sample : (7 * period_us_ + sample) / 8;
  }
  ++handoffs_;
  last_handoff_ = now;
  in_flight_ = std::move(current_);
  current_ = std::move(spare_);
  takeable_.store(true, std::memory_order_release);
  // Waking a sleeping thread costs this one a futex call and, on a virtual machine, an
  // interprocessor interrupt (~40 µs per step measured on the bench machine, about the
  // step's whole completion). When the engine leaves a core free, the recorder's thread
  // looks on its own clock instead, and is woken only when it would sleep past the next
  // step's end (the first step, or after a pause). When the engine's threads fill every
  // core, a thread that wakes on its own clock preempts them at random moments and is
  // often late (the engine then completes the step itself); waking it at once measured
  // better there. With the engine's idle workers lent, nobody is woken: they take the
  // step (or this thread does, at the next step's end).
  const bool wake = !idle_lent_.load(std::memory_order_relaxed) &&
                    (!own_core_ || worker_wakes_at_ > now + std::chrono::microseconds(period_us_));
  lk.unlock();
  if (wake) cv_.notify_all();
  LLMRR_STEP_RECORDER_GUARD_END
}

bool StepRecorder::help(const IdleSignal& signal) {
  // With a core of its own the recorder's thread does the work at no cost to the engine.
  if (own_core_ || !pipelined()) return false;
  // With a ring the writer is replaced at each rotation: only the recording side helps.
  if (!ring_on() && !idle_lent_.load(std::memory_order_relaxed) &&
      !idle_lent_.exchange(true, std::memory_order_relaxed)) {
    // From now on the writer's compression waits for this kind of help too.
    writer_->defer_wakes(true);
  }
  if (takeable_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
    if (lk.owns_lock() && take_in_flight(lk)) {
      ++stats_.idle_steps;
      return true;
    }
  }
  // Compressing a chunk cannot stop half way: start it only while the engine has no job.
  // (Completing a step is not stopped half way either: leaving the rest to the engine's
  // thread at the next step's end measured worse than finishing it.)
  return !ring_on() && !signal.job_waiting() && writer_->help();
}

bool StepRecorder::take_in_flight(std::unique_lock<std::mutex>& lk) {
  if (!in_flight_ || claimed_) return false;
  claimed_ = true;
  takeable_.store(false, std::memory_order_relaxed);
  internal::StepSlot* slot = in_flight_.get();
  lk.unlock();
  complete_and_append(*slot);
  slot->clear();  // frees the step's nested records here rather than on the producer's thread
  lk.lock();
  spare_ = std::move(in_flight_);
  claimed_ = false;
  // The producer's thread waits only when another took the step; it sleeps anyway, so the
  // wake costs it nothing.
  if (producer_waiting_) cv_.notify_all();
  return true;
}

void StepRecorder::settle_in_flight(std::unique_lock<std::mutex>& lk) {
  if (!in_flight_) return;
  if (take_in_flight(lk)) {
    ++stats_.inline_steps;
    return;
  }
  producer_waiting_ = true;
  cv_.wait(lk, [&] { return in_flight_ == nullptr; });
  producer_waiting_ = false;
}

// ---- the recorder's side -----------------------------------------------------------------

void StepRecorder::worker_loop() {
  using clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lk(mu_);
  int misses = 0;  // looks in a row that found nothing
  for (;;) {
    if (take_in_flight(lk)) {
      misses = 0;
      continue;
    }
    if (stop_worker_) return;
    // With a core of its own: look again halfway into the next step (by the
    // smoothed period); when it is late, back off so that an engine which pauses costs next
    // to nothing: period / 8, doubling, up to 5 ms. A step not taken by the time the next
    // one ends is completed by the engine's thread.
    const auto now = clock::now();
    const auto period = std::chrono::microseconds(std::max<int64_t>(period_us_, 50));
    const auto due = last_handoff_ + period / 2;
    clock::time_point at;
    if (!own_core_) {
      at = clock::time_point::max();  // woken by each handoff
    } else if (handoffs_ > 0 && due > now && misses == 0) {
      at = due;
    } else {
      const auto backoff = std::min<std::chrono::microseconds>(
          (period / 8) * (int64_t{1} << std::min(misses, 10)), std::chrono::milliseconds(5));
      at = now + backoff;
      ++misses;
    }
    worker_wakes_at_ = at;
    if (at == clock::time_point::max()) {
      cv_.wait(lk);
    } else {
      cv_.wait_until(lk, at);
    }
    worker_wakes_at_ = clock::time_point::max();  // awake
  }
}

void StepRecorder::complete_and_append(internal::StepSlot& slot) {
  if (stopped_.load(std::memory_order_relaxed)) return;
  try {
    trace::StepRecord& step = slot.step;
    if (options_.reference != nullptr) {
      for (const trace::RequestRecord& r : step.arrivals)
        prompt_hashes_[r.id] = trace::prompt_hash(r.prompt);
    }
    int64_t fingerprints = 0;
    for (const internal::PendingRows& p : slot.rows) {
      trace::SiteRows& rows = step.rows[p.index];
      const float* data = slot.arena.at(p.offset);
      for (int64_t r = 0; r < p.rows; ++r) {
        trace::Fingerprint& f = rows.rows[static_cast<size_t>(r)];
        f = mixsum_rows_ ? trace::fingerprint_row_mixsum64(data + r * p.cols, p.cols)
                         : trace::fingerprint_row(data + r * p.cols, p.cols);
      }
      fingerprints += p.rows;
    }
    int64_t blobs = 0, xor_blobs = 0;
    for (const internal::PendingLogits& p : slot.logits) {
      trace::LogitsRecord& rec = step.logits[p.index];
      const float* row = slot.arena.at(p.offset);
      const int k = static_cast<int>(std::min<int64_t>(std::max(options_.top_k, 2), p.vocab));
      rec.top_ids.resize(static_cast<size_t>(k));
      rec.top_values.resize(static_cast<size_t>(k));
      internal::top_k(row, p.vocab, k, rec.top_ids.data(), rec.top_values.data());
      rec.margin = k >= 2 ? rec.top_values[0] - rec.top_values[1] : 0.0f;
      rec.logsumexp = internal::logsumexp(row, p.vocab, rec.top_values[0]);
      // The margin needs the top two; keep only as many as asked for.
      rec.top_ids.resize(static_cast<size_t>(std::min<int64_t>(options_.top_k, k)));
      rec.top_values.resize(rec.top_ids.size());
      rec.full = trace::fingerprint_row(row, p.vocab);
      if (options_.logits == trace::LogitsMode::kFull) {
        const int64_t before = reference_hits_;
        Status st = record_full_logits(row, rec, step.step, &rec.blob);
        if (!st.ok()) {
          fail(st);
          return;
        }
        ++blobs;
        xor_blobs += reference_hits_ - before;
      }
    }
    carry_in(&step);
    Status st = writer_->append_step(step);
    if (!st.ok()) {
      fail(st.with_context("step " + std::to_string(step.step) + ": "));
      return;
    }
    if (ring_on() || !options_.snapshot.trigger.empty()) {
      st = after_append(step);
      if (!st.ok()) {
        fail(st.with_context("flight recorder, after step " + std::to_string(step.step) + ": "));
        return;
      }
    }
    // The writer is this thread's while steps flow; others read its size from stats_.
    uint64_t file_bytes = writer_->stats().file_bytes;
    for (const RingSegment& s : segments_) file_bytes += s.bytes;
    std::lock_guard<std::mutex> lk(mu_);
    stats_.file_bytes = file_bytes;
    ++stats_.steps;
    stats_.tokens += static_cast<int64_t>(step.tokens.size());
    stats_.fingerprints += fingerprints;
    stats_.blobs += blobs;
    stats_.xor_blobs += xor_blobs;
  } catch (const std::bad_alloc&) {
    fail(make_error(ErrorCode::kResourceLimit, "out of memory while recording"));
  } catch (const std::exception& e) {
    fail(make_error(ErrorCode::kInternal, std::string("recorder: ") + e.what()));
  } catch (...) {
    fail(make_error(ErrorCode::kInternal, "recorder: unknown exception"));
  }
}

Status StepRecorder::record_full_logits(const float* logits, const trace::LogitsRecord& rec,
                                         int64_t step, int64_t* blob_id) {
  trace::BlobSpec blob;
  blob.dtype = trace::DType::kF32;
  blob.shape = {rec.vocab};
  blob.data = logits;
  blob.bytes = static_cast<size_t>(rec.vocab) * sizeof(float);
  blob.name = logits_blob_name(rec.position);
  blob.step = step;
  blob.site = SiteId{SiteKind::kLogits, -1, -1}.packed();
  blob.request = rec.request;
  if (options_.reference != nullptr) {
    auto known = prompt_hashes_.find(rec.request);
    if (known != prompt_hashes_.end()) {
      auto ref = reference_blobs_.find({known->second, rec.position});
      if (ref != reference_blobs_.end()) {
        const int64_t ref_id = ref->second;
        Status st = options_.reference->read_blob(ref_id, &reference_bytes_);
        if (st.ok() && reference_bytes_.size() == blob.bytes) {
          blob.xor_reference = reference_bytes_.data();
          blob.reference_trace = options_.reference->run_header().run_id;
          blob.reference_blob = ref_id;
          ++reference_hits_;
        }
      }
    }
  }
  Result<int64_t> id = writer_->append_blob(blob);
  if (!id.ok()) return id.status();
  *blob_id = *id;
  return Status::Ok();
}

Status StepRecorder::close() {
  if (closed_) return status();
  if (pipelined()) {
    // The last step handed over is completed here if the recorder's thread has not taken
    // it. The thread is told to stop, but woken and joined only by the destructor: close()
    // neither pays for the wake nor waits for it to wake up only to leave.
    std::unique_lock<std::mutex> lk(mu_);
    settle_in_flight(lk);
    stop_worker_ = true;
  }
  if (!writer_) {
    closed_ = true;
    return status();
  }
  if (in_step_) {
    // The producer stopped inside a step (an error on its side): keep what was seen.
    complete_and_append(*current_);
    in_step_ = false;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    if (!lossy_reason_.empty()) writer_->mark_lossy(lossy_reason_);
  }
  Status st = ring_on() ? finish_ring() : writer_->close();
  std::lock_guard<std::mutex> lk(mu_);
  stats_.file_bytes = writer_->stats().file_bytes;
  if (struct stat joined {}; ring_on() && ::stat(path_.c_str(), &joined) == 0)
    stats_.file_bytes = static_cast<uint64_t>(joined.st_size);
  if (status_.ok() && !st.ok()) status_ = st;
  return status_;
}

Stats StepRecorder::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace llmrr::recording
