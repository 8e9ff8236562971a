// StepRecorder: the recording SDK's core. A producer (the engine's Observer adapter,
// TraceRecorder; the C ABI, libllmrr_recorder_c.so, for every other runtime) hands it a run
// step by step in the trace's own vocabulary (format/), and it writes the .trace file
// through TraceWriter (DESIGN, data flow "record"). It depends on format/ alone: no engine,
// no kernels.
//
//   ASSIGN_OR_RETURN(auto rec, recording::StepRecorder::open("run.trace", header, options));
//   rec->arrival(request);                 // before or inside a step
//   rec->begin_step(7);
//   rec->segment(s);                       // the batch, in row order
//   rec->plan(site, plan); rec->rows(view); rec->routing(view); rec->logits(view);
//   rec->token(t); rec->finish(f);
//   rec->end_step();
//   Status closed = rec->close();          // footer; the first recording error, if any
//
// Per step it records the batch composition, the plan of every op at every site (the
// writer deduplicates), fingerprints of the rows of the sites the capture level selects,
// routing per MoE layer, logits per sampled row (top-K ids and values, full-vocab
// fingerprint, top1 − top2 margin, and with LogitsMode::kFull the whole row as a shuffled
// tensor blob), chosen tokens with the sampler's draw, arrivals and finishes.
//
// The producer's thread only copies (DESIGN, "The recorder's pipeline"). The calls store
// the small records as they come and copy the float rows they are handed (site rows,
// logits rows) into a step slot; end_step hands the slot to the recorder's own thread,
// which computes the fingerprints, the logits' top-K and margin, writes full-logit blobs,
// and appends the step to the writer (FlatBuffers encoding and the record checks); the
// writer's thread compresses and writes. When the producer's threads fill the cores and it
// lends idle workers, those do the recorder's and the writer's work in its serial phases
// instead (help). One step is in flight: end_step of step N+1 first waits until step N is
// appended, so at most two slots exist and memory stays bounded (the writer's own bound
// applies behind it).
//
// The recorder never takes down the producer it observes: the first error (I/O, a record
// the writer refuses, an allocation failure) stops recording, marks the trace lossy with
// the reason, and every later call returns at once; the producer runs on. close() then
// writes what it can and returns that first error. An error of step N's append is seen by
// status() no later than the end of end_step of step N+1, or by close(): "no later than
// the next append or close", as with TraceWriter.
//
// Thread use: the step calls (arrival … end_step, discard_step, close) come from one thread
// at a time; help, status, stats and mark_lossy from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/site.h"
#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/recording/ring.h"
#include "llmrr/recording/views.h"

namespace llmrr::recording {

namespace internal {
struct StepSlot;
}

struct Options {
  trace::CaptureLevel capture = trace::CaptureLevel::kLayers;
  trace::LogitsMode logits = trace::LogitsMode::kTopK;
  int32_t top_k = 32;
  // Store full-logit blobs as XOR against the blob of the same (request prompt, position)
  // in this trace, when it has one of the same size (--reference). Not owned.
  const trace::TraceReader* reference = nullptr;
  // Step chunks of 128 KiB rather than the writer's 1 MiB: a kill -9 loses at most the
  // steps of one small chunk, and close() compresses at most one small chunk while the
  // producer waits. Costs ~1.5 % more bytes per token (the plan set restarts per chunk).
  trace::WriterOptions writer = [] {
    trace::WriterOptions w;
    w.chunk_target_bytes = size_t{128} << 10;
    return w;
  }();
  // Complete and append each step on the recorder's own thread (the default), or inline
  // on the producer's thread in end_step. Both write the same records; inline is for
  // measuring the difference, and the fallback when no thread can be started.
  bool background = true;
  // The flight recorder (ring.h): keep only the last steps within this bound, in segments
  // joined into the trace at close. Off by default.
  RingOptions ring;
  // Closed snapshots on a trigger file, without stopping (ring.h). Off by default.
  SnapshotOptions snapshot;
  // Print the first recording error to stderr ("the trace is lossy") when it stops
  // recording. llmrr record turns it off: it reports the error itself, and removes the
  // trace instead of keeping it lossy.
  bool warn_on_stop = true;
};

struct Stats {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t fingerprints = 0;
  int64_t blobs = 0;
  int64_t xor_blobs = 0;  // blobs stored as XOR against the reference
  uint64_t file_bytes = 0;
  // Steps the producer's thread completed itself at the next step's end because the
  // recorder's thread had not taken them yet (pipelined only; a busy machine raises it).
  int64_t inline_steps = 0;
  // Steps the producer's idle workers completed (help).
  int64_t idle_steps = 0;
  // The flight recorder: snapshots written, steps its ring dropped so far.
  int64_t snapshots = 0;
  int64_t ring_dropped_steps = 0;
};

// What a lent idle worker is asked before it starts a long piece of work: does its owner
// have a job for it (the engine's kernels::JobSignal, through the Observer adapter)?
class IdleSignal {
 public:
  virtual ~IdleSignal() = default;
  virtual bool job_waiting() const = 0;
};

class StepRecorder {
 public:
  // Opens the file and writes the run header. header.engine.capture / logits_mode / top_k
  // are overwritten from `options` so the header always says what was captured.
  static Result<std::unique_ptr<StepRecorder>> open(const std::string& path,
                                                    trace::RunHeader header,
                                                    Options options = {});
  ~StepRecorder();
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  // Whether the rows of `site` are recorded at the capture level (false once stopped).
  bool wants_rows(SiteId site) const;

  // A request arrives: recorded in the open step, else in the next one to begin.
  void arrival(trace::RequestRecord request);
  // Opens step `step`; then its batch, one segment per call in batch row order.
  void begin_step(int64_t step);
  void segment(const trace::Segment& segment);
  void plan(SiteId site, trace::PlanRecord plan);
  void rows(const RowsView& rows);
  void routing(const RoutingView& routing);
  void logits(const LogitsView& logits);
  void token(const trace::TokenRecord& token);
  void finish(const trace::FinishRecord& finish);
  // What one op of the runtime's graph ran with (format 1.6; the caller checked it).
  void op(trace::OpRecord op);
  // Closes the step and hands it over (appended by the recorder's thread, or here).
  void end_step();

  // A lent idle worker (any thread, concurrently with the calls above and with itself):
  // completes and appends the step in flight if no thread has taken it, else helps the
  // writer compress while `signal` says its owner has no job for it. Whether there was any
  // work. Never blocks on the producer.
  bool help(const IdleSignal& signal);

  // Writes the footer and closes the file (with a ring: joins the segments kept into the
  // trace's path). Returns the first error seen while recording (the trace is then marked
  // lossy) or the close error. Idempotent.
  Status close();

  // Marks the trace lossy without stopping: records the producer meant to write were
  // dropped (e.g. a C ABI call with bad arguments). The first reason wins.
  void mark_lossy(const std::string& reason);

  // Stops recording with `error` (a producer-side failure, e.g. out of memory converting a
  // record): as if the recorder had failed itself; the trace is marked lossy.
  void stop(Status error) { fail(std::move(error)); }

  // Drops the open step: none of its rows, plans, routing, logits, tokens or finishes is
  // written. Its arrivals move to the next step. The caller marks the trace lossy (a step is
  // missing); recording goes on. No-op outside a step.
  void discard_step();

  // The first recording error (ok while healthy). Thread-safe.
  Status status() const;
  bool in_step() const { return in_step_; }
  bool recording() const { return !stopped_.load(std::memory_order_relaxed) && !closed_; }
  // Counts of what was appended; a step still in flight is counted once it is appended
  // (all of them after close()). Thread-safe.
  Stats stats() const;
  // Whether steps are completed on the recorder's thread (Options::background and the
  // thread could be started).
  bool pipelined() const { return worker_.joinable(); }
  const std::string& path() const { return path_; }

 private:
  StepRecorder();
  // Records the first error and the lossy reason; recording stops. Any thread.
  void fail(Status status);
  // --- the recorder's side (its thread, or the producer's when not pipelined) ---
  // Completes the slot's step (fingerprints, top-K, blobs) and appends it.
  void complete_and_append(internal::StepSlot& slot);
  Status record_full_logits(const float* logits, const trace::LogitsRecord& rec,
                            int64_t step, int64_t* blob_id);
  void worker_loop();
  // Producer side, under mu_ (held by lk): makes sure no slot is in flight, completing it on
  // this thread when the recorder's thread has not taken it, waiting when it has.
  void settle_in_flight(std::unique_lock<std::mutex>& lk);
  // Any thread, under mu_ (held by lk, released while it works): completes and appends the
  // slot in flight if no thread has taken it. Whether it did.
  bool take_in_flight(std::unique_lock<std::mutex>& lk);

  std::string path_;
  Options options_;
  std::unique_ptr<trace::TraceWriter> writer_;
  bool closed_ = false;
  bool mixsum_rows_ = false;  // header.engine.fingerprint "mixsum64": rows hashed that way
  bool in_step_ = false;
  std::atomic<bool> stopped_{false};  // an error stopped recording

  // Producer side: the slot being filled, the spare one, arrivals before begin_step.
  std::unique_ptr<internal::StepSlot> current_;
  std::unique_ptr<internal::StepSlot> spare_;
  std::vector<trace::RequestRecord> pending_arrivals_;

  // Shared with the recorder's thread, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<internal::StepSlot> in_flight_;  // handed over, not yet appended
  bool claimed_ = false;         // a thread is completing in_flight_
  bool producer_waiting_ = false;  // the producer's thread waits for in_flight_ to be appended
  bool stop_worker_ = false;
  // in_flight_ is set and unclaimed (read without mu_ by help).
  std::atomic<bool> takeable_{false};
  // An idle worker has offered to help: steps handed over wait for it (or for the
  // producer's thread at the next step's end) instead of waking the recorder's thread,
  // whose wake costs the producer as much as the work.
  std::atomic<bool> idle_lent_{false};
  // When steps are handed over: the last time and the smoothed period (the recorder's
  // thread wakes on this clock instead of being woken for each step).
  std::chrono::steady_clock::time_point last_handoff_;
  int64_t period_us_ = 1000;
  int64_t handoffs_ = 0;
  // When the recorder's thread will look next (max() while it is awake).
  std::chrono::steady_clock::time_point worker_wakes_at_ =
      std::chrono::steady_clock::time_point::max();
  Status status_;
  std::string lossy_reason_;  // the first reason; applied to the writer at close
  Stats stats_;
  std::thread worker_;
  // The producer leaves a core free (header.engine.threads < cores): the recorder's thread
  // wakes on its own clock rather than being woken for each step.
  bool own_core_ = false;

  // Recorder side only: prompt hash per request (XOR reference lookup) and the
  // reference's blobs by (prompt hash, position).
  std::unordered_map<uint64_t, uint64_t> prompt_hashes_;  // request → prompt hash
  std::map<std::pair<uint64_t, int32_t>, int64_t> reference_blobs_;
  std::vector<uint8_t> reference_bytes_;
  int64_t reference_hits_ = 0;  // blobs stored as XOR against the reference

  // --- the flight recorder (flight.cc; the recorder's side only) ---
  struct RingSegment {
    std::string path;
    uint64_t bytes = 0;
    int64_t first_step = -1, last_step = -1;
    std::chrono::steady_clock::time_point ended;
  };
  struct TriggerId {
    bool exists = false;
    uint64_t ino = 0, size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const TriggerId&) const = default;
  };
  bool ring_on() const { return options_.ring.enabled(); }
  // The trigger file's identity now (exists, inode, size, mtime): a change asks for a snapshot.
  static TriggerId trigger_id(const std::string& path);
  // Opens the ring's folder and its first segment (writer_), at open.
  Status open_ring(const trace::RunHeader& header);
  // Before a step is appended: the requests alive at a rotation are carried into it.
  void carry_in(trace::StepRecord* step);
  // After a step was appended: the requests' lives, a rotation when the segment is full,
  // a snapshot when the trigger changed.
  Status after_append(const trace::StepRecord& step);
  Status rotate();
  Status take_snapshot();
  // At close: the current segment closed, the segments kept joined into path_.
  Status finish_ring();
  // The lossy reason of a joined trace: what the ring dropped, then the recording's own.
  std::string ring_reason() const;
  trace::RunHeader header_;
  std::string ring_dir_;
  std::vector<RingSegment> segments_;  // closed and kept, oldest first
  RingSegment current_segment_;
  int64_t segment_index_ = 0;
  std::chrono::steady_clock::time_point segment_began_;
  int64_t dropped_steps_ = 0;
  int64_t first_kept_step_ = -1;
  std::map<uint64_t, trace::RequestRecord> alive_;  // arrived, not finished (ring only)
  bool carry_pending_ = false;
  TriggerId trigger_seen_;
  std::chrono::steady_clock::time_point next_trigger_check_;
  int64_t snapshots_ = 0;
};

// The parts of a run header the recorder can fill on its own: tool version, creation time,
// a fresh run id, host (name, OS, CPU, cores, the widest x86 vector ISA the CPU has:
// "avx512", "avx2" or "") and device (cpu). The engine's adapter (llmrr::base_run_header)
// overwrites host.isa with the kernel ISA in use.
trace::RunHeader base_run_header();

}  // namespace llmrr::recording
