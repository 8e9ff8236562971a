// The flight recorder's side of StepRecorder (llmrr/recording/ring.h): the ring's segments,
// the requests carried into each, snapshots on a trigger file. Runs where steps are
// appended (the recorder's thread, or the producer's when not pipelined), and at close.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "llmrr/format/splice.h"
#include "llmrr/recording/step_recorder.h"

namespace llmrr::recording {
namespace {

using clock = std::chrono::steady_clock;


// A segment is closed at 1/8 of the bound: the ring then holds 7 to 8 eighths of it.
uint64_t segment_bytes(const RingOptions& r) {
  return r.bytes > 0 ? std::max<uint64_t>(r.bytes / 8, uint64_t{32} << 10) : uint64_t{64} << 20;
}

// "<base>.rankK" -> ".rankK" (a tensor-parallel rank's trace), else "".
std::string rank_suffix(const std::string& path) {
  const size_t at = path.rfind(".rank");
  if (at == std::string::npos || at + 5 == path.size()) return "";
  for (size_t i = at + 5; i < path.size(); ++i)
    if (path[i] < '0' || path[i] > '9') return "";
  return path.substr(at);
}

}  // namespace

StepRecorder::TriggerId StepRecorder::trigger_id(const std::string& path) {
  TriggerId id;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.ino = st.st_ino;
    id.size = static_cast<uint64_t>(st.st_size);
    id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  }
  return id;
}

Status StepRecorder::open_ring(const trace::RunHeader& header) {
  header_ = header;
  // Chunks of at most a quarter segment: a segment passes its share of the bound by at most
  // one chunk (what is not yet on disk when the size is looked at).
  options_.writer.chunk_target_bytes =
      std::min<size_t>(options_.writer.chunk_target_bytes, segment_bytes(options_.ring) / 4);
  ring_dir_ = ring_folder(path_);
  if (::mkdir(ring_dir_.c_str(), 0755) != 0) {
    const int e = errno;
    return make_error(ErrorCode::kIo,
                      ring_dir_ + ": cannot create the flight recorder's folder: " +
                          std::strerror(e) +
                          (e == EEXIST ? " (left by an earlier recording? join it with llmrr "
                                         "join, or remove it)"
                                       : ""));
  }
  current_segment_ = RingSegment{};
  current_segment_.path = ring_segment(path_, segment_index_);
  segment_began_ = clock::now();
  return Status::Ok();
}

void StepRecorder::carry_in(trace::StepRecord* step) {
  if (!carry_pending_) return;
  carry_pending_ = false;
  std::vector<trace::RequestRecord> arrivals;
  arrivals.reserve(alive_.size() + step->arrivals.size());
  for (const auto& [id, r] : alive_) {
    trace::RequestRecord c = r;
    c.carried = true;
    arrivals.push_back(std::move(c));
  }
  for (trace::RequestRecord& r : step->arrivals) arrivals.push_back(std::move(r));
  step->arrivals = std::move(arrivals);
}

Status StepRecorder::after_append(const trace::StepRecord& step) {
  const clock::time_point now = clock::now();
  if (ring_on()) {
    for (const trace::RequestRecord& r : step.arrivals)
      if (!r.carried) alive_[r.id] = r;
    for (const trace::TokenRecord& t : step.tokens) {
      auto it = alive_.find(t.request);
      if (it != alive_.end()) it->second.history.push_back(t.token);
    }
    for (const trace::FinishRecord& f : step.finishes) alive_.erase(f.request);
    if (current_segment_.first_step < 0) current_segment_.first_step = step.step;
    current_segment_.last_step = step.step;
    if (first_kept_step_ < 0) first_kept_step_ = step.step;
    const RingOptions& ring = options_.ring;
    const bool full = writer_->stats().file_bytes >= segment_bytes(ring);
    const bool old = ring.seconds > 0 && now - segment_began_ >= std::chrono::seconds(ring.seconds) / 8;
    if (full || old) RETURN_IF_ERROR(rotate());
  }
  if (!options_.snapshot.trigger.empty() && now >= next_trigger_check_) {
    next_trigger_check_ = now + std::chrono::milliseconds(100);
    const TriggerId id = trigger_id(options_.snapshot.trigger);
    if (id.exists && !(id == trigger_seen_)) {
      trigger_seen_ = id;
      RETURN_IF_ERROR(take_snapshot());
    }
    trigger_seen_ = id;
  }
  return Status::Ok();
}

Status StepRecorder::rotate() {
  if (writer_->stats().steps == 0) return Status::Ok();  // an empty segment stays open
  RETURN_IF_ERROR(writer_->close().with_context(current_segment_.path + ": "));
  current_segment_.bytes = writer_->stats().file_bytes;
  current_segment_.ended = clock::now();
  segments_.push_back(current_segment_);
  // The bound: whole segments dropped from the front, the newest always kept.
  const RingOptions& ring = options_.ring;
  auto over = [&] {
    if (segments_.size() <= 1) return false;
    if (ring.seconds > 0 &&
        clock::now() - segments_.front().ended > std::chrono::seconds(ring.seconds))
      return true;
    if (ring.bytes == 0) return false;
    // The segment about to grow: its share, and a chunk past it (open_ring's chunk size).
    uint64_t total = segment_bytes(ring) + segment_bytes(ring) / 4;
    for (const RingSegment& s : segments_) total += s.bytes;
    return total > ring.bytes;
  };
  while (over()) {
    const RingSegment& s = segments_.front();
    ::unlink(s.path.c_str());
    dropped_steps_ += s.last_step - s.first_step + 1;  // (an upper bound where steps skip)
    segments_.erase(segments_.begin());
    first_kept_step_ = segments_.front().first_step;
  }
  ++segment_index_;
  current_segment_ = RingSegment{};
  current_segment_.path = ring_segment(path_, segment_index_);
  segment_began_ = clock::now();
  ASSIGN_OR_RETURN(writer_, trace::TraceWriter::open(current_segment_.path, options_.writer));
  RETURN_IF_ERROR(writer_->append_run_header(header_));
  carry_pending_ = true;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.ring_dropped_steps = dropped_steps_;
  return Status::Ok();
}

std::string StepRecorder::ring_reason() const {
  // What the ring dropped, then the recording's own first lossy reason.
  std::string reason;
  if (dropped_steps_ > 0)
    reason = "flight recorder (ring " + describe_ring(options_.ring) + "): the steps before " +
             std::to_string(first_kept_step_) + " were dropped (" +
             std::to_string(dropped_steps_) + " steps); the requests alive then are carried in";
  std::lock_guard<std::mutex> lk(mu_);
  if (!lossy_reason_.empty()) reason += (reason.empty() ? "" : "; ") + lossy_reason_;
  return reason;
}

Status StepRecorder::take_snapshot() {
  std::vector<std::string> parts;
  if (ring_on()) {
    RETURN_IF_ERROR(rotate());  // every segment kept is closed now
    for (const RingSegment& s : segments_) parts.push_back(s.path);
    if (parts.empty()) {  // no step yet: the header alone
      RETURN_IF_ERROR(writer_->flush());
      parts.push_back(current_segment_.path);
    }
  } else {
    RETURN_IF_ERROR(writer_->flush());  // whole frames on disk: the reader scans them
    parts.push_back(path_);
  }
  const std::string base =
      (options_.snapshot.output.empty() ? path_ : options_.snapshot.output + rank_suffix(path_)) +
      ".snapshot-";
  const std::string tmp = base + "partial-" + std::to_string(::getpid());
  const std::string reason = ring_reason();
  Result<trace::SpliceReport> joined = trace::join_traces(parts, tmp, reason, options_.writer);
  if (!joined.ok()) {
    ::unlink(tmp.c_str());
    return joined.status().with_context("snapshot: ");
  }
  // The next free name: an existing file is never replaced.
  for (int64_t n = snapshots_ + 1;; ++n) {
    const std::string name = base + std::to_string(n);
    if (::link(tmp.c_str(), name.c_str()) == 0) {
      snapshots_ = n;
      break;
    }
    if (errno != EEXIST || n > snapshots_ + 100000) {
      const int e = errno;
      ::unlink(tmp.c_str());
      return make_error(ErrorCode::kIo, name + ": cannot write the snapshot: " + std::strerror(e));
    }
  }
  ::unlink(tmp.c_str());
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.snapshots;
  return Status::Ok();
}

Status StepRecorder::finish_ring() {
  Status st = writer_->close();
  if (writer_->stats().steps > 0 || segments_.empty()) {
    current_segment_.bytes = writer_->stats().file_bytes;
    segments_.push_back(current_segment_);
  } else {
    ::unlink(current_segment_.path.c_str());  // opened at the last rotation, never written
  }
  std::vector<std::string> parts;
  for (const RingSegment& s : segments_) parts.push_back(s.path);
  const std::string reason = ring_reason();
  Result<trace::SpliceReport> joined = trace::join_traces(parts, path_, reason, options_.writer);
  if (!joined.ok()) {
    // The segments stay: nothing recorded is lost (llmrr join can put them together).
    return joined.status().with_context("flight recorder: joining " + ring_dir_ + " into " +
                                        path_ + ": ");
  }
  for (const std::string& p : parts) ::unlink(p.c_str());
  ::rmdir(ring_dir_.c_str());
  return st;
}

}  // namespace llmrr::recording
