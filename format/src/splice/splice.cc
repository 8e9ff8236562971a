// join_traces and cut_request (llmrr/format/splice.h): both walk their inputs' frames in
// file order (so a blob is copied before the step that names it, and kernel records keep
// their place) and hand each kept step to a Splicer, which carries in the requests alive
// before the first kept step and renumbers blobs.
#include "llmrr/format/splice.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <utility>

#include "llmrr/format/trace_reader.h"

namespace llmrr::trace {
namespace {

class Splicer {
 public:
  explicit Splicer(TraceWriter* writer, SpliceReport* report) : w_(writer), rep_(report) {}

  // A step before the kept range: only what it says of the requests' lives is kept.
  void observe(const StepRecord& s) {
    for (const RequestRecord& r : s.arrivals) {
      if (alive_.count(r.id)) continue;  // a carried duplicate
      alive_[r.id] = r;
      order_.push_back(r.id);
    }
    for (const TokenRecord& t : s.tokens) {
      auto it = alive_.find(t.request);
      if (it != alive_.end()) it->second.history.push_back(t.token);
    }
    for (const FinishRecord& f : s.finishes) alive_.erase(f.request);
  }

  // A kept step: appended, the alive requests carried into the first one, blob ids mapped
  // through `blobs` (this input's id -> the output's).
  Status emit(StepRecord& s, const std::unordered_map<int64_t, int64_t>& blobs) {
    std::vector<RequestRecord> arrivals;
    if (rep_->steps == 0) {
      for (uint64_t id : order_) {
        auto it = alive_.find(id);
        if (it == alive_.end()) continue;
        RequestRecord r = it->second;
        r.carried = true;
        arrivals.push_back(std::move(r));
      }
    }
    for (RequestRecord& r : s.arrivals) {
      if (r.carried && (known_.count(r.id) || alive_.count(r.id))) continue;  // known already
      arrivals.push_back(std::move(r));
    }
    for (const RequestRecord& r : arrivals) {
      known_.insert(r.id);
      ++rep_->requests;
      if (r.carried) ++rep_->carried;
    }
    s.arrivals = std::move(arrivals);
    for (LogitsRecord& l : s.logits) {
      if (l.blob < 0) continue;
      auto it = blobs.find(l.blob);
      l.blob = it == blobs.end() ? -1 : it->second;
    }
    RETURN_IF_ERROR(w_->append_step(s).with_context("step " + std::to_string(s.step) + ": "));
    if (rep_->steps == 0) rep_->first_step = s.step;
    rep_->last_step = s.step;
    ++rep_->steps;
    rep_->tokens += static_cast<int64_t>(s.tokens.size());
    // The requests of this step are known now: later carried copies are dropped.
    for (const FinishRecord& f : s.finishes) alive_.erase(f.request);
    return Status::Ok();
  }

 private:
  TraceWriter* w_;
  SpliceReport* rep_;
  std::map<uint64_t, RequestRecord> alive_;  // observed, not finished, not yet emitted
  std::vector<uint64_t> order_;              // arrival order of alive_'s requests
  std::set<uint64_t> known_;                 // arrived in the output
};

// Copies the frames of `r` whose steps `keep` selects into `w` through `sp`; steps before
// the range are observed. Blobs are copied when their step is kept.
template <typename Keep, typename Before>
Status copy_frames(const TraceReader& r, TraceWriter* w, Splicer* sp, SpliceReport* rep,
                   Keep keep, Before before) {
  std::unordered_map<int64_t, int64_t> blobs;
  StepRecord step;
  std::vector<KernelRecord> kernels;
  const std::vector<FrameInfo>& frames = r.frames();
  for (size_t f = 0; f < frames.size(); ++f) {
    const FrameInfo& fi = frames[f];
    if (fi.kind == FrameKind::kStepChunk) {
      StepCursor cur = r.steps(fi.first, fi.last);
      for (;;) {
        ASSIGN_OR_RETURN(bool got, cur.next(&step));
        if (!got) break;
        if (keep(step.step)) {
          RETURN_IF_ERROR(sp->emit(step, blobs));
        } else if (before(step.step)) {
          sp->observe(step);
        }
      }
    } else if (fi.kind == FrameKind::kTensorBlob) {
      ASSIGN_OR_RETURN(BlobInfo info, r.blob_info(fi.first));
      if (!keep(info.step)) continue;
      ASSIGN_OR_RETURN(int64_t id, copy_blob(r, info.id, w));
      blobs[info.id] = id;
      ++rep->blobs;
    } else if (fi.kind == FrameKind::kKernelRecords) {
      RETURN_IF_ERROR(r.read_kernels(static_cast<int64_t>(f), &kernels));
      kernels.erase(std::remove_if(kernels.begin(), kernels.end(),
                                   [&](const KernelRecord& k) {
                                     return k.step >= 0 && !keep(k.step);
                                   }),
                    kernels.end());
      if (!kernels.empty()) RETURN_IF_ERROR(w->append_kernels(kernels));
    }
  }
  return Status::Ok();
}

// What CutSpec::whole_lives needs of each request: when it lives, where its first rows start
// (a prompt-cache hit reuses KV another request built), its label and sequence.
struct Life {
  int64_t arrival = 0, finish = -1;
  int32_t first_cached = 0;
  bool seen = false;
  std::string label;
  std::vector<int32_t> sequence;  // prompt, then the tokens generated
};

// Moves *from back until no request in [from, ...] is carried: every request running at
// `from` arrives inside, and so does the one whose KV a request's prompt-cache hit reuses
// (the last earlier request of the same label, a llama.cpp slot; else the last earlier one
// whose sequence starts with the reused prefix, vLLM's prefix cache).
Status extend_to_whole_lives(const TraceReader& r, int64_t* from) {
  std::map<uint64_t, Life> lives;
  std::vector<uint64_t> order;
  StepCursor cur = r.steps();
  StepRecord s;
  for (;;) {
    ASSIGN_OR_RETURN(bool got, cur.next(&s));
    if (!got) break;
    for (const RequestRecord& a : s.arrivals) {
      Life& l = lives[a.id];
      l.arrival = s.step;
      l.label = a.label;
      l.sequence = a.prompt;
      l.sequence.insert(l.sequence.end(), a.history.begin(), a.history.end());
      order.push_back(a.id);
    }
    for (const Segment& g : s.segments) {
      Life& l = lives[g.request];
      if (!l.seen) l.first_cached = g.cached;
      l.seen = true;
    }
    for (const TokenRecord& t : s.tokens) lives[t.request].sequence.push_back(t.token);
    for (const FinishRecord& f : s.finishes) lives[f.request].finish = s.step;
  }
  // The arrival of the request whose KV each one's prompt-cache hit reuses (-1: none), found
  // once: the last earlier request of its label, else the last earlier one whose sequence
  // starts with the reused prefix.
  std::vector<int64_t> donor(order.size(), -1);
  std::map<std::string, int64_t> last_of_label;
  for (size_t k = 0; k < order.size(); ++k) {
    const Life& q = lives[order[k]];
    const size_t c = static_cast<size_t>(q.first_cached);
    if (c > 0) {
      if (auto it = last_of_label.find(q.label); !q.label.empty() && it != last_of_label.end()) {
        donor[k] = it->second;
      } else {
        for (size_t j = k; j-- > 0;) {
          const Life& p = lives[order[j]];
          if (p.sequence.size() >= c && q.sequence.size() >= c &&
              std::equal(q.sequence.begin(), q.sequence.begin() + static_cast<std::ptrdiff_t>(c),
                         p.sequence.begin())) {
            donor[k] = p.arrival;
            break;
          }
        }
      }
    }
    if (!q.label.empty()) last_of_label[q.label] = q.arrival;
  }
  const int64_t start = std::max<int64_t>(r.first_step(), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t k = 0; k < order.size(); ++k) {
      const Life& q = lives[order[k]];
      int64_t need = *from;
      if (q.arrival < *from && (q.finish < 0 || q.finish >= *from)) need = q.arrival;
      if (q.arrival >= *from && donor[k] >= 0 && donor[k] < *from) need = donor[k];
      need = std::max(need, start);
      if (need < *from) {
        *from = need;
        moved = true;
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<int64_t> copy_blob(const TraceReader& r, int64_t id, TraceWriter* w) {
  ASSIGN_OR_RETURN(BlobInfo info, r.blob_info(id));
  if (info.xor_coded) {
    return make_error(ErrorCode::kUnsupported,
                      r.path() + ": blob " + std::to_string(info.id) +
                          " is stored XOR-coded against trace " + info.reference_trace +
                          ", which this copy cannot decode; record without --reference");
  }
  std::vector<uint8_t> bytes;
  RETURN_IF_ERROR(r.read_blob(info.id, &bytes));
  BlobSpec spec;
  spec.dtype = info.dtype;
  spec.shape = info.shape;
  spec.data = bytes.data();
  spec.bytes = bytes.size();
  spec.name = info.name;
  spec.step = info.step;
  spec.site = info.site;
  spec.request = info.request;
  return w->append_blob(spec);
}

Result<SpliceReport> join_traces(const std::vector<std::string>& parts, const std::string& out,
                                 const std::string& lossy_reason, WriterOptions options) {
  if (parts.empty()) return make_error(ErrorCode::kInvalidArgument, "join: no traces to join");
  std::vector<std::unique_ptr<TraceReader>> readers;
  for (const std::string& p : parts) {
    ASSIGN_OR_RETURN(std::unique_ptr<TraceReader> r, TraceReader::open(p));
    if (!readers.empty() && r->run_header().run_id != readers[0]->run_header().run_id) {
      return make_error(ErrorCode::kInvalidArgument,
                        p + ": run id " + r->run_header().run_id + ", expected " +
                            readers[0]->run_header().run_id + " (" + parts[0] +
                            "): the traces are not parts of one run");
    }
    readers.push_back(std::move(r));
  }
  SpliceReport rep;
  std::string reason = lossy_reason;
  for (const auto& r : readers) {
    if (!r->complete()) rep.incomplete_input = true;
    if (reason.empty() && r->lossy()) reason = r->lossy_reason();
  }
  if (rep.incomplete_input && reason.empty())
    reason = "recovered: a part of the recording had no footer (the recording was killed); "
             "its steps up to the last whole frame are here";
  ASSIGN_OR_RETURN(std::unique_ptr<TraceWriter> w, TraceWriter::open(out, options));
  RETURN_IF_ERROR(w->append_run_header(readers[0]->run_header()));
  Splicer sp(w.get(), &rep);
  int64_t last = -1;
  for (const auto& r : readers) {
    // Steps already written (an overlap between parts) are skipped, never written twice.
    const int64_t after = last;
    RETURN_IF_ERROR(copy_frames(
                        *r, w.get(), &sp, &rep, [&](int64_t s) { return s > after; },
                        [](int64_t) { return false; })
                        .with_context(r->path() + ": "));
    last = std::max(last, rep.last_step);
  }
  if (!reason.empty()) w->mark_lossy(reason);
  RETURN_IF_ERROR(w->close());
  return rep;
}

Result<SpliceReport> cut_request(const std::string& in, const CutSpec& spec,
                                 const std::string& out, WriterOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<TraceReader> r, TraceReader::open(in));
  const RequestSummary* q = nullptr;
  for (const RequestSummary& s : r->requests())
    if (s.id == spec.request) q = &s;
  if (q == nullptr) {
    std::string ids;
    for (size_t i = 0; i < r->requests().size() && i < 12; ++i)
      ids += (i ? ", " : "") + std::to_string(r->requests()[i].id);
    if (r->requests().size() > 12) ids += ", ...";
    return make_error(ErrorCode::kNotFound, in + ": no request " + std::to_string(spec.request) +
                                                " (it has " + ids + ")");
  }
  int64_t from = std::max(r->first_step(), q->arrival_step - std::max<int64_t>(spec.before, 0));
  if (spec.whole_lives) RETURN_IF_ERROR(extend_to_whole_lives(*r, &from));
  const int64_t end = q->finish_step >= 0 ? q->finish_step : r->last_step();
  const int64_t to = std::min(r->last_step(), end + std::max<int64_t>(spec.after, 0));

  RunHeader h = r->run_header();
  nlohmann::json extra = nlohmann::json::object();
  if (!h.extra_config_json.empty()) {
    extra = nlohmann::json::parse(h.extra_config_json, nullptr, false);
    if (!extra.is_object()) extra = nlohmann::json::object();
  }
  extra["cut"] = {{"request", spec.request},
                  {"from_step", from},
                  {"to_step", to},
                  {"source_steps", {r->first_step(), r->last_step()}}};
  h.extra_config_json = extra.dump();

  SpliceReport rep;
  rep.incomplete_input = !r->complete();
  ASSIGN_OR_RETURN(std::unique_ptr<TraceWriter> w, TraceWriter::open(out, options));
  RETURN_IF_ERROR(w->append_run_header(h));
  Splicer sp(w.get(), &rep);
  RETURN_IF_ERROR(copy_frames(
      *r, w.get(), &sp, &rep, [&](int64_t s) { return s >= from && s <= to; },
      [&](int64_t s) { return s < from; }));
  std::string reason;
  if (from > r->first_step() || to < r->last_step()) {
    reason = "a cut: steps " + std::to_string(from) + ".." + std::to_string(to) + " of " +
             std::to_string(r->first_step()) + ".." + std::to_string(r->last_step()) +
             " (request " + std::to_string(spec.request) + "'s life); " +
             std::to_string(rep.carried) + " request(s) carried in from earlier steps";
  }
  if (r->lossy()) reason += (reason.empty() ? "" : "; ") + std::string("the source: ") + r->lossy_reason();
  if (!reason.empty()) w->mark_lossy(reason);
  RETURN_IF_ERROR(w->close());
  return rep;
}

}  // namespace llmrr::trace
