// llmrr export --perfetto: Chrome trace-event JSON (layout in llmrr/replayer/export.h).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "llmrr/recorder/convert.h"
#include "llmrr/replayer/export.h"
#include "llmrr/format/site.h"
#include "llmrr/safeio/output.h"
#include "collect.h"

namespace llmrr::replay {
namespace {

constexpr int kRunPid = 1;
constexpr int kKernelPid = 2;
constexpr int kStepsTid = 0;
constexpr double kStepUs = 1000.0;  // logical clock: one step = 1 ms

class EventWriter {
 public:
  EventWriter(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}

  Status begin() { return put("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"); }
  Status event(const nlohmann::json& e) {
    std::string s =
        (n_ ? ",\n" : "") + e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    ++n_;
    return put(s);
  }
  Status end(const nlohmann::json& other) {
    return put("\n],\"otherData\":" +
               other.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "}\n");
  }
  int64_t count() const { return n_; }

 private:
  Status put(const std::string& s) {
    if (std::fwrite(s.data(), 1, s.size(), f_) != s.size()) {
      return make_error(ErrorCode::kIo, path_ + ": write failed: " + std::strerror(errno));
    }
    return Status::Ok();
  }
  std::FILE* f_;
  std::string path_;
  int64_t n_ = 0;
};

nlohmann::json meta(const char* name, int pid, int tid, const nlohmann::json& args) {
  nlohmann::json e = {{"ph", "M"}, {"name", name}, {"pid", pid}, {"args", args}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

}  // namespace

Result<PerfettoSummary> export_perfetto(const trace::TraceReader& reader, const std::string& out) {
  struct Closer {
    void operator()(std::FILE* f) const {
      if (f) std::fclose(f);
    }
  };
  std::unique_ptr<std::FILE, Closer> f(safeio::open_for_writing(out.c_str()));
  if (!f) {
    return make_error(ErrorCode::kIo, out + ": cannot create: " + std::strerror(errno));
  }
  PerfettoSummary sum;
  EventWriter w(f.get(), out);
  RETURN_IF_ERROR(w.begin());
  const trace::RunHeader& h = reader.run_header();
  RETURN_IF_ERROR(
      w.event(meta("process_name", kRunPid, -1,
                   {{"name", "llmrr run " + h.model.name + " (" + h.engine.policy + ")"}})));
  RETURN_IF_ERROR(w.event(meta("process_sort_index", kRunPid, -1, {{"sort_index", 0}})));
  RETURN_IF_ERROR(w.event(meta("thread_name", kRunPid, kStepsTid, {{"name", "steps"}})));
  RETURN_IF_ERROR(w.event(meta("thread_sort_index", kRunPid, kStepsTid, {{"sort_index", 0}})));
  // One track per request, in arrival order.
  std::map<uint64_t, int> tid;
  for (const trace::RequestSummary& r : reader.requests()) {
    const int t = static_cast<int>(tid.size()) + 1;
    tid[r.id] = t;
    std::string name = "request " + std::to_string(r.id);
    if (!r.label.empty()) name += " " + r.label;
    RETURN_IF_ERROR(w.event(meta("thread_name", kRunPid, t, {{"name", name}})));
    RETURN_IF_ERROR(w.event(meta("thread_sort_index", kRunPid, t, {{"sort_index", t}})));
  }
  auto tid_of = [&](uint64_t id) {
    auto it = tid.find(id);
    if (it != tid.end()) return it->second;
    const int t = static_cast<int>(tid.size()) + 1;
    tid[id] = t;
    return t;
  };

  trace::StepCursor cur = reader.steps();
  trace::StepRecord s;
  std::map<uint64_t, std::string> last_plans;
  for (;;) {
    ASSIGN_OR_RETURN(bool got, cur.next(&s));
    if (!got) break;
    const double ts = static_cast<double>(s.step) * kStepUs;
    int64_t rows = 0;
    int32_t prefill = 0, decode = 0;
    std::set<uint64_t> reqs;
    for (const trace::Segment& g : s.segments) {
      rows += g.count;
      reqs.insert(g.request);
      (g.kind == trace::SegmentKind::kPrefill ? prefill : decode) += 1;
    }
    nlohmann::json changed = nlohmann::json::array();
    for (const trace::SitePlan& sp : s.plans) {
      std::string label = report::plan_label(sp.plan);
      auto it = last_plans.find(sp.site);
      if (it == last_plans.end() || it->second != label) {
        if (changed.size() < 16)
          changed.push_back(site_name(SiteId::unpack(sp.site)) + ": " + label);
        last_plans[sp.site] = label;
      }
    }
    RETURN_IF_ERROR(w.event({{"ph", "X"},
                             {"name", "step " + std::to_string(s.step)},
                             {"cat", "step"},
                             {"pid", kRunPid},
                             {"tid", kStepsTid},
                             {"ts", ts},
                             {"dur", kStepUs * 0.98},
                             {"args",
                              {{"rows", rows},
                               {"requests", reqs.size()},
                               {"prefill_segments", prefill},
                               {"decode_segments", decode},
                               {"arrivals", s.arrivals.size()},
                               {"finishes", s.finishes.size()},
                               {"plans_changed", changed}}}}));
    ++sum.step_slices;
    RETURN_IF_ERROR(w.event({{"ph", "C"},
                             {"name", "batch rows"},
                             {"pid", kRunPid},
                             {"ts", ts},
                             {"args", {{"rows", rows}}}}));
    RETURN_IF_ERROR(w.event({{"ph", "C"},
                             {"name", "batch requests"},
                             {"pid", kRunPid},
                             {"ts", ts},
                             {"args", {{"requests", reqs.size()}}}}));
    sum.counters += 2;
    for (const trace::Segment& g : s.segments) {
      nlohmann::json args = {
          {"start", g.start}, {"count", g.count}, {"cached", g.cached}, {"sample", g.sample}};
      for (const trace::TokenRecord& t : s.tokens) {
        if (t.request == g.request) args["token"] = t.token;
      }
      for (const trace::LogitsRecord& l : s.logits) {
        if (l.request == g.request) args["margin"] = l.margin;
      }
      const std::string name = g.kind == trace::SegmentKind::kPrefill
                                   ? "prefill [" + std::to_string(g.start) + ", " +
                                         std::to_string(g.start + g.count) + ")"
                                   : "decode " + std::to_string(g.start);
      RETURN_IF_ERROR(w.event({{"ph", "X"},
                               {"name", name},
                               {"cat", trace::segment_kind_name(g.kind)},
                               {"pid", kRunPid},
                               {"tid", tid_of(g.request)},
                               {"ts", ts},
                               {"dur", kStepUs * 0.98},
                               {"args", args}}));
      ++sum.request_slices;
    }
    for (const trace::LogitsRecord& l : s.logits) {
      RETURN_IF_ERROR(w.event({{"ph", "C"},
                               {"name", "margin r" + std::to_string(l.request)},
                               {"pid", kRunPid},
                               {"ts", ts},
                               {"args", {{"margin", l.margin}}}}));
      ++sum.counters;
    }
  }

  // Kernel records, on their own clock.
  std::vector<trace::KernelRecord> ks;
  int64_t t0 = INT64_MAX;
  const std::vector<trace::FrameInfo>& frames = reader.frames();
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].kind != trace::FrameKind::kKernelRecords) continue;
    RETURN_IF_ERROR(reader.read_kernels(static_cast<int64_t>(i), &ks));
    for (const trace::KernelRecord& k : ks) t0 = std::min(t0, k.start_ns);
  }
  if (t0 != INT64_MAX) {
    RETURN_IF_ERROR(
        w.event(meta("process_name", kKernelPid, -1, {{"name", "CUDA kernels (CUPTI)"}})));
    RETURN_IF_ERROR(w.event(meta("process_sort_index", kKernelPid, -1, {{"sort_index", 1}})));
    std::set<uint64_t> streams;
    for (size_t i = 0; i < frames.size(); ++i) {
      if (frames[i].kind != trace::FrameKind::kKernelRecords) continue;
      RETURN_IF_ERROR(reader.read_kernels(static_cast<int64_t>(i), &ks));
      for (const trace::KernelRecord& k : ks) {
        const int stid = static_cast<int>(k.stream % 1000000);
        if (streams.insert(k.stream).second) {
          RETURN_IF_ERROR(w.event(meta("thread_name", kKernelPid, stid,
                                       {{"name", "stream " + std::to_string(k.stream)}})));
        }
        RETURN_IF_ERROR(w.event(
            {{"ph", "X"},
             {"name", k.name},
             {"cat", "kernel"},
             {"pid", kKernelPid},
             {"tid", stid},
             {"ts", static_cast<double>(k.start_ns - t0) / 1000.0},
             {"dur", static_cast<double>(std::max<int64_t>(k.end_ns - k.start_ns, 0)) / 1000.0},
             {"args",
              {{"step", k.step},
               {"grid", k.grid},
               {"block", k.block},
               {"correlation", k.correlation}}}}));
        ++sum.kernels;
      }
    }
  }
  RETURN_IF_ERROR(w.end({{"source", "llmrr"},
                         {"trace", reader.path()},
                         {"run_id", h.run_id},
                         {"model", h.model.name},
                         {"clock",
                          "steps on a logical clock: step N at N ms, 1 ms each; "
                          "kernels (process 2) on their recorded clock"}}));
  sum.events = w.count();
  if (std::fclose(f.release()) != 0) {
    return make_error(ErrorCode::kIo, out + ": write failed: " + std::strerror(errno));
  }
  return sum;
}

}  // namespace llmrr::replay
