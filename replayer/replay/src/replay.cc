// Replay: a trace re-executed bit for bit, its schedule, plans and routing forced, and every
// recorded row, logit and token checked by a verifying Observer. The Materializer is in
// materialize.cc, the report's text and JSON in report.cc.
#include "llmrr/replayer/replay.h"

#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>

#include "llmrr/format/fingerprint.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/replayer/trace_feed.h"
#include "llmrr/kernels/cublaslt_plan.h"
#include "cpu_gate.h"
#include "internal.h"

namespace llmrr::replay {
namespace {

using replay_internal::ints_text;
using replay_internal::Materializer;

std::string fp_text(const trace::Fingerprint& f) {
  char b[96];
  std::snprintf(b, sizeof b, "fingerprint %016" PRIx64 " (l2 %.9g, max |x| %.9g)", f.hash,
                static_cast<double>(f.l2), static_cast<double>(f.max_abs));
  return b;
}

std::string float_text(float v) {
  char b[48];
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  std::snprintf(b, sizeof b, "%.9g (0x%08x)", static_cast<double>(v), bits);
  return b;
}

std::string segments_text(const std::vector<trace::Segment>& segs) {
  std::string s;
  for (size_t i = 0; i < segs.size() && i < 12; ++i) {
    const trace::Segment& g = segs[i];
    s += (i ? ", " : "") + std::string("r") + std::to_string(g.request) + " " +
         trace::segment_kind_name(g.kind) + " [" + std::to_string(g.start) + "," +
         std::to_string(g.start + g.count) + ")";
  }
  if (segs.size() > 12) s += ", ... (" + std::to_string(segs.size()) + " segments)";
  return s.empty() ? "(empty)" : s;
}

// Compares what the engine produces with the current step of a TraceFeed.
class Verifier final : public Observer {
 public:
  Verifier(TraceFeed& feed, const trace::TraceReader* reader, std::optional<RequestId> only,
           const Engine* engine, bool check_routing)
      : feed_(feed),
        reader_(reader),
        only_(only),
        engine_(engine),
        check_routing_(check_routing),
        mixsum_(reader != nullptr &&
                reader->run_header().engine.fingerprint == trace::kFingerprintMixsum) {}

  const std::optional<Mismatch>& mismatch() const { return mismatch_; }
  bool routing_first() const { return routing_first_; }
  int64_t rows_checked = 0, logits_checked = 0, plans_checked = 0, routings_checked = 0,
          tokens_checked = 0, blobs_checked = 0;

  bool wants_rows(SiteId site) override {
    return !mismatch_ && site_index_.count(site.packed()) != 0;
  }

  void on_step(const StepInfo& info) override {
    if (mismatch_) return;
    active_ = feed_.has_current() && feed_.current().step == info.step;
    if (!active_) {
      fail(info.step, "batch", "step", "step " + std::to_string(feed_.current().step),
           "step " + std::to_string(info.step));
      return;
    }
    const trace::StepRecord& s = feed_.current();
    // Who owns each batch row.
    row_req_.clear();
    row_pos_.clear();
    for (const trace::Segment& g : s.segments) {
      for (int32_t j = 0; j < g.count; ++j) {
        row_req_.push_back(g.request);
        row_pos_.push_back(g.start + j);
      }
    }
    // The batch: all segments, or the replayed request's.
    std::vector<trace::Segment> expect;
    for (const trace::Segment& g : s.segments) {
      if (!only_ || g.request == *only_) expect.push_back(g);
    }
    bool same = expect.size() == info.segments.size();
    for (size_t i = 0; same && i < expect.size(); ++i) {
      same = to_segment(expect[i]) == info.segments[i];
    }
    if (!same) {
      std::vector<trace::Segment> got;
      for (const BatchSegment& b : info.segments) got.push_back(to_trace_segment(b));
      fail(info.step, "batch", "segments", segments_text(expect), segments_text(got));
      return;
    }
    site_index_.clear();
    expected_rows_.assign(s.rows.size(), 0);
    checked_rows_.assign(s.rows.size(), 0);
    for (size_t i = 0; i < s.rows.size(); ++i) {
      const trace::SiteRows& sr = s.rows[i];
      site_index_[sr.site] = i;
      for (size_t r = 0; r < sr.rows.size(); ++r) {
        int64_t row = sr.batch_rows.empty() ? static_cast<int64_t>(r) : sr.batch_rows[r];
        if (relevant(row)) ++expected_rows_[i];
      }
    }
    logits_seen_.assign(s.logits.size(), false);
    tokens_seen_.assign(s.tokens.size(), false);
    finishes_seen_.assign(s.finishes.size(), false);
  }

  void on_plan(int64_t step, SiteId site, const Plan& plan) override {
    if (mismatch_ || !active_) return;
    const trace::PlanRecord* rec = feed_.current().find_plan(site.packed());
    trace::PlanRecord got = to_plan_record(plan);
    if (!rec) {
      fail(step, site_name(site), "plan", "no plan recorded", plan_text(got));
      return;
    }
    if (!(*rec == got)) {
      fail(step, site_name(site), "plan", plan_text(*rec), plan_text(got));
      return;
    }
    ++plans_checked;
  }

  void on_rows(const RowsView& v) override {
    if (mismatch_ || !active_) return;
    auto it = site_index_.find(v.site.packed());
    if (it == site_index_.end()) return;
    const trace::SiteRows& rec = feed_.current().rows[it->second];
    if (rec.cols != v.cols) {
      fail(v.step, site_name(v.site), "row width", std::to_string(rec.cols) + " columns",
           std::to_string(v.cols) + " columns");
      return;
    }
    // Recorded fingerprint index of each batch row.
    const int64_t full = static_cast<int64_t>(row_req_.size());
    index_of_.assign(static_cast<size_t>(std::max<int64_t>(full, 1)), -1);
    for (size_t r = 0; r < rec.rows.size(); ++r) {
      int64_t row = rec.batch_rows.empty() ? static_cast<int64_t>(r) : rec.batch_rows[r];
      if (row >= 0 && row < full) index_of_[row] = static_cast<int64_t>(r);
    }
    for (int64_t r = 0; r < v.rows; ++r) {
      const int64_t row = v.batch_rows ? v.batch_rows[r] : r;
      const trace::Fingerprint got =
          v.fingerprints ? v.fingerprints[r]
          : mixsum_      ? trace::fingerprint_row_mixsum64(v.data + r * v.ld, v.cols)
                         : trace::fingerprint_row(v.data + r * v.ld, v.cols);
      const int64_t idx = row >= 0 && row < full ? index_of_[row] : -1;
      if (idx < 0) {
        fail_row(v.step, row, site_name(v.site), "fingerprint", "no row recorded", fp_text(got));
        return;
      }
      const trace::Fingerprint& want = rec.rows[idx];
      if (want.hash != got.hash) {
        fail_row(v.step, row, site_name(v.site), "fingerprint", fp_text(want), fp_text(got));
        return;
      }
      ++checked_rows_[it->second];
      ++rows_checked;
    }
  }

  void on_routing(const RoutingView& v) override {
    if (mismatch_ || !active_) return;
    if (check_routing_) {
      // The engine compared the recomputed experts with the recorded ones.
      if (engine_->routing_mismatch() && !routing_seen_) {
        routing_seen_ = true;
        routing_first_ = true;
        const RoutingMismatch& m = *engine_->routing_mismatch();
        Mismatch mm;
        mm.step = m.step;
        mm.request = m.request;
        mm.position = m.position;
        mm.batch_row = m.batch_row;
        mm.site = "routing L" + std::to_string(m.layer);
        mm.what = "experts";
        mm.expected = ints_text(m.expected.data(), m.expected.size());
        mm.found = ints_text(m.found.data(), m.found.size());
        mismatch_ = std::move(mm);
      }
      ++routings_checked;
      return;
    }
    const trace::Routing* rec = nullptr;
    for (const trace::Routing& r : feed_.current().routing) {
      if (r.layer == v.layer) rec = &r;
    }
    const std::string site = "routing L" + std::to_string(v.layer);
    if (!rec) {
      fail(v.step, site, "routing", "no routing recorded",
           "routing of " + std::to_string(v.rows) + " rows");
      return;
    }
    if (rec->k != v.k || rec->capacity != v.capacity) {
      fail(v.step, site, "k / capacity",
           "k " + std::to_string(rec->k) + ", capacity " + std::to_string(rec->capacity),
           "k " + std::to_string(v.k) + ", capacity " + std::to_string(v.capacity));
      return;
    }
    const int32_t K = v.k;
    for (int64_t r = 0; r < v.rows; ++r) {
      const int64_t row = v.batch_rows ? v.batch_rows[r] : r;
      if (row < 0 || row >= rec->rows) {
        fail_row(v.step, row, site, "routing", "no routing for this row", "a routed row");
        return;
      }
      const size_t a = static_cast<size_t>(row) * K, b = static_cast<size_t>(r) * K;
      for (int i = 0; i < K; ++i) {
        if (rec->chosen[a + i] != v.chosen[b + i]) {
          fail_row(v.step, row, site, "router top-k", ints_text(&rec->chosen[a], K),
                   ints_text(v.chosen + b, K));
          return;
        }
        if (rec->experts[a + i] != v.experts[b + i] ||
            static_cast<int>(rec->outcome[a + i]) != static_cast<int>(v.outcome[b + i])) {
          fail_row(v.step, row, site, "experts", ints_text(&rec->experts[a], K),
                   ints_text(v.experts + b, K));
          return;
        }
        if (std::memcmp(&rec->gates[a + i], v.gates + b + i, sizeof(float)) != 0) {
          fail_row(v.step, row, site, "gate " + std::to_string(i), float_text(rec->gates[a + i]),
                   float_text(v.gates[b + i]));
          return;
        }
      }
    }
    ++routings_checked;
  }

  void on_logits(const LogitsView& v) override {
    if (mismatch_ || !active_) return;
    const std::vector<trace::LogitsRecord>& recs = feed_.current().logits;
    const std::string where = "logits";
    size_t i = 0;
    while (i < recs.size() && !(recs[i].request == v.request && recs[i].position == v.position)) {
      ++i;
    }
    const trace::Fingerprint got = trace::fingerprint_row(v.logits, v.vocab);
    if (i == recs.size()) {
      fail_row(v.step, v.batch_row, where, "logits", "no logits recorded", fp_text(got));
      return;
    }
    const trace::LogitsRecord& rec = recs[i];
    logits_seen_[i] = true;
    if (rec.vocab != v.vocab || rec.full.hash != got.hash) {
      fail_row(v.step, v.batch_row, where, "full-vocab fingerprint", fp_text(rec.full),
               fp_text(got));
      return;
    }
    const int k = static_cast<int>(
        std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(rec.top_ids.size()), 2), v.vocab));
    top_ids_.resize(k);
    top_vals_.resize(k);
    kernels::topk(v.logits, v.vocab, k, top_ids_.data(), top_vals_.data());
    for (size_t j = 0; j < rec.top_ids.size() && j < static_cast<size_t>(k); ++j) {
      if (rec.top_ids[j] != top_ids_[j] ||
          std::memcmp(&rec.top_values[j], &top_vals_[j], sizeof(float)) != 0) {
        fail_row(v.step, v.batch_row, where, "top-" + std::to_string(j + 1),
                 "id " + std::to_string(rec.top_ids[j]) + " = " + float_text(rec.top_values[j]),
                 "id " + std::to_string(top_ids_[j]) + " = " + float_text(top_vals_[j]));
        return;
      }
    }
    // Full logits stored as a blob (--logits full): compared bit for bit. An XOR-coded blob
    // needs its reference trace, which a replay does not have: the fingerprint stands then.
    if (rec.blob >= 0 && reader_ != nullptr) {
      Result<trace::BlobInfo> info = reader_->blob_info(rec.blob);
      if (info.ok() && !info->xor_coded) {
        Status st = reader_->read_blob(rec.blob, &blob_);
        const size_t bytes = static_cast<size_t>(v.vocab) * sizeof(float);
        if (!st.ok()) {
          fail_row(v.step, v.batch_row, where, "full logits blob " + std::to_string(rec.blob),
                   "a readable blob", st.to_string());
          return;
        }
        if (blob_.size() != bytes || std::memcmp(blob_.data(), v.logits, bytes) != 0) {
          fail_row(v.step, v.batch_row, where, "full logits blob " + std::to_string(rec.blob),
                   std::to_string(blob_.size()) + " bytes as recorded",
                   std::to_string(bytes) + " bytes that differ");
          return;
        }
        ++blobs_checked;
      }
    }
    const float margin = k >= 2 ? top_vals_[0] - top_vals_[1] : 0.0f;
    if (std::memcmp(&margin, &rec.margin, sizeof(float)) != 0) {
      fail_row(v.step, v.batch_row, where, "top1-top2 margin", float_text(rec.margin),
               float_text(margin));
      return;
    }
    ++logits_checked;
  }

  void on_token(const TokenEvent& t) override {
    if (mismatch_ || !active_) return;
    const std::vector<trace::TokenRecord>& recs = feed_.current().tokens;
    size_t i = 0;
    while (i < recs.size() && !(recs[i].request == t.request && recs[i].position == t.position)) {
      ++i;
    }
    if (i == recs.size()) {
      fail_token(t, "no token recorded", std::to_string(t.token));
      return;
    }
    tokens_seen_[i] = true;
    const trace::TokenRecord& rec = recs[i];
    if (rec.token != t.token) {
      fail_token(t, std::to_string(rec.token), std::to_string(t.token));
      return;
    }
    if (std::memcmp(&rec.uniform, &t.sample.uniform, sizeof(double)) != 0) {
      char a[40], b[40];
      std::snprintf(a, sizeof a, "draw %.17g", rec.uniform);
      std::snprintf(b, sizeof b, "draw %.17g", t.sample.uniform);
      fail_token(t, a, b);
      return;
    }
    ++tokens_checked;
  }

  void on_finish(const RequestFinish& f) override {
    if (mismatch_ || !active_) return;
    const std::vector<trace::FinishRecord>& recs = feed_.current().finishes;
    size_t i = 0;
    while (i < recs.size() && recs[i].request != f.request) ++i;
    const std::string got =
        std::string(trace::finish_reason_name(f.reason)) +
        " after " + std::to_string(f.generated) + " tokens";
    if (i == recs.size()) {
      fail(f.step, "finish", "request " + std::to_string(f.request), "no finish recorded", got,
           f.request);
      return;
    }
    finishes_seen_[i] = true;
    const trace::FinishRecord& rec = recs[i];
    if (static_cast<int>(rec.reason) != static_cast<int>(f.reason) ||
        rec.generated != f.generated) {
      fail(f.step, "finish", "request " + std::to_string(f.request),
           std::string(trace::finish_reason_name(rec.reason)) + " after " +
               std::to_string(rec.generated) + " tokens",
           got, f.request);
    }
  }

  void on_step_end(int64_t step) override {
    if (mismatch_ || !active_) return;
    const trace::StepRecord& s = feed_.current();
    for (size_t i = 0; i < s.rows.size(); ++i) {
      if (checked_rows_[i] < expected_rows_[i]) {
        fail(step, site_name(SiteId::unpack(s.rows[i].site)), "rows",
             std::to_string(expected_rows_[i]) + " rows recorded",
             std::to_string(checked_rows_[i]) + " rows produced");
        return;
      }
    }
    for (size_t i = 0; i < s.logits.size(); ++i) {
      if (!logits_seen_[i] && relevant_request(s.logits[i].request)) {
        fail_row(step, s.logits[i].batch_row, "logits", "logits", "logits recorded",
                 "this row was not sampled");
        return;
      }
    }
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      if (!tokens_seen_[i] && relevant_request(s.tokens[i].request)) {
        fail(step, "token", "token", std::to_string(s.tokens[i].token), "no token",
             s.tokens[i].request, s.tokens[i].position);
        return;
      }
    }
    for (size_t i = 0; i < s.finishes.size(); ++i) {
      if (!finishes_seen_[i] && relevant_request(s.finishes[i].request)) {
        fail(step, "finish", "request " + std::to_string(s.finishes[i].request),
             std::string(trace::finish_reason_name(s.finishes[i].reason)), "still running",
             s.finishes[i].request);
        return;
      }
    }
    active_ = false;
  }

 private:
  bool relevant(int64_t row) const {
    if (!only_) return true;
    return row >= 0 && row < static_cast<int64_t>(row_req_.size()) && row_req_[row] == *only_;
  }
  bool relevant_request(RequestId r) const { return !only_ || r == *only_; }

  void fail(int64_t step, std::string site, std::string what, std::string expected,
            std::string found, RequestId request = 0, int32_t position = -1) {
    if (mismatch_) return;
    Mismatch m;
    m.step = step;
    m.request = request;
    m.position = position;
    m.site = std::move(site);
    m.what = std::move(what);
    m.expected = std::move(expected);
    m.found = std::move(found);
    mismatch_ = std::move(m);
  }
  void fail_row(int64_t step, int64_t row, std::string site, std::string what, std::string expected,
                std::string found) {
    if (mismatch_) return;
    RequestId req = 0;
    int32_t pos = -1;
    if (row >= 0 && row < static_cast<int64_t>(row_req_.size())) {
      req = row_req_[row];
      pos = row_pos_[row];
    }
    fail(step, std::move(site), std::move(what), std::move(expected), std::move(found), req, pos);
    mismatch_->batch_row = row;
  }
  void fail_token(const TokenEvent& t, std::string expected, std::string found) {
    fail(t.step, "token", "token", std::move(expected), std::move(found), t.request, t.position);
  }

  TraceFeed& feed_;
  const trace::TraceReader* reader_;
  std::optional<RequestId> only_;
  const Engine* engine_;
  bool check_routing_;
  bool mixsum_;  // the trace hashes rows with mixsum64 (record --row-hash mixsum64)
  bool active_ = false;
  bool routing_seen_ = false;
  bool routing_first_ = false;
  std::optional<Mismatch> mismatch_;
  std::vector<RequestId> row_req_;
  std::vector<int32_t> row_pos_;
  std::unordered_map<uint64_t, size_t> site_index_;
  std::vector<int64_t> expected_rows_, checked_rows_, index_of_;
  std::vector<bool> logits_seen_, tokens_seen_, finishes_seen_;
  std::vector<int32_t> top_ids_;
  std::vector<float> top_vals_;
  std::vector<uint8_t> blob_;
};

Unreproducible unreproducible_at(const CpuStop& stop, const trace::StepRecord& step) {
  Unreproducible u;
  u.step = stop.step;
  u.site = site_name(stop.site);
  u.plan = plan_to_string(stop.plan);
  std::vector<SiteId> sites;
  for (const trace::SitePlan& sp : step.plans) {
    if (sp.plan.cublaslt) sites.push_back(SiteId::unpack(sp.site));
  }
  std::sort(sites.begin(), sites.end());
  for (const SiteId& s : sites) u.sites.push_back(site_name(s));
  return u;
}

}  // namespace

Result<ReplayReport> replay_trace(const trace::TraceReader& reader, const LoadedModel& model,
                                  const ReplayOptions& options) {
  ReplayReport report;
  report.trace = reader.path();
  report.model = model.source;
  report.request = options.request;
  report.check_routing = options.check_routing;
  report.trace_steps = reader.step_count();
  report.trace_tokens = reader.token_count();
  report.trace_complete = reader.complete();
  report.last_whole_step = reader.last_step();
  const trace::RunHeader& header = reader.run_header();

  std::string warning;
  RETURN_IF_ERROR(check_weights(header, model, &warning));
  if (!warning.empty()) report.notes.push_back(warning);
  if (!reader.complete()) {
    report.notes.push_back(
        "the trace is truncated (no footer): replaying up to its last whole "
        "step, step " +
        std::to_string(reader.last_step()));
  }
  if (reader.lossy()) {
    report.notes.push_back("the trace is lossy (" + reader.lossy_reason() +
                           "): records after that point are missing");
  }
  for (const std::string& w : reader.warnings()) report.notes.push_back("trace: " + w);

  if (options.request) {
    bool known = false;
    for (const trace::RequestSummary& r : reader.requests()) known |= r.id == *options.request;
    if (!known) {
      std::string ids;
      for (size_t i = 0; i < reader.requests().size() && i < 16; ++i) {
        ids += (i ? ", " : "") + std::to_string(reader.requests()[i].id);
      }
      if (reader.requests().size() > 16) ids += ", ...";
      return make_error(ErrorCode::kInvalidArgument,
                        "--request " + std::to_string(*options.request) + ": " + reader.path() +
                            " has no such request (requests: " + ids + ")");
    }
  }
  if (!options.materialize.empty()) {
    struct stat st;
    if (options.out_dir.empty()) {
      return make_error(ErrorCode::kInvalidArgument, "--materialize needs -o DIR");
    }
    if (::stat(options.out_dir.c_str(), &st) != 0 && ::mkdir(options.out_dir.c_str(), 0777) != 0) {
      return make_error(ErrorCode::kIo,
                        options.out_dir + ": cannot create the directory: " + std::strerror(errno));
    }
  }

  Result<EngineConfig> from_header = engine_config_from_header(header, options.threads);
  if (!from_header.ok()) return from_header.status().with_context(reader.path() + ": ");
  EngineConfig config = std::move(from_header).value();
  RETURN_IF_ERROR(check_device(options.device));
  config.device = options.device;
  if (options.device == Device::kCuda && !options.materialize.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--materialize needs --device cpu (the CUDA engine hands observers "
                      "device fingerprints, not rows); an exact trace replays the same there");
  }
  if (header.device.kind == "cuda" && options.device == Device::kCpu) {
    report.notes.push_back("recorded on " +
                           (header.device.name.empty() ? std::string("a CUDA GPU")
                                                       : header.device.name) +
                           ", replayed on the CPU");
  }

  Engine* engine_ptr = nullptr;
  const std::optional<RequestId> only = options.request;
  TraceFeed feed(
      reader,
      [&](const RequestSpec& spec) -> Status {
        if (only && spec.id != *only) return Status::Ok();
        return engine_ptr->add_request(spec);
      },
      options.last_step);
  std::shared_ptr<Policy> policy = make_forced_policy(&feed);
  std::shared_ptr<CpuGatePolicy> gate;
  if (options.device == Device::kCpu) policy = gate = std::make_shared<CpuGatePolicy>(policy);
  Result<std::unique_ptr<Engine>> created = Engine::create(model, config, policy);
  if (!created.ok()) return created.status().with_context("replay: building the engine: ");
  Engine& engine = **created;
  engine_ptr = &engine;
  engine.set_schedule_source(&feed);
  engine.set_routing_source(&feed,
                            options.check_routing ? RoutingMode::kCheck : RoutingMode::kForce);
  if (only) engine.set_isolated_request(*only);

  Verifier verifier(feed, &reader, only, &engine, options.check_routing);
  engine.add_observer(&verifier);
  std::unique_ptr<Materializer> materializer;
  if (!options.materialize.empty()) {
    materializer = std::make_unique<Materializer>(options.materialize, options.out_dir);
    engine.add_observer(materializer.get());
  }

  for (;;) {
    Result<bool> more = engine.step();
    if (!more.ok() && gate && gate->stop() && !verifier.mismatch()) {
      report.unreproducible = unreproducible_at(*gate->stop(), feed.current());
      break;
    }
    if (!more.ok()) {
      return more.status().with_context("replay stopped after " +
                                        std::to_string(feed.steps_read()) + " steps: ");
    }
    if (!*more) break;
    ++report.steps;
    if (options.progress) options.progress(feed.current().step, report.steps);
    if (verifier.mismatch()) break;
  }
  report.rows_checked = verifier.rows_checked;
  report.logits_checked = verifier.logits_checked;
  report.plans_checked = verifier.plans_checked;
  report.routings_checked = verifier.routings_checked;
  report.tokens = verifier.tokens_checked;
  report.logit_blobs_checked = verifier.blobs_checked;
  if (verifier.mismatch()) {
    if (verifier.routing_first()) {
      report.routing_mismatch = engine.routing_mismatch();
    } else {
      report.mismatch = verifier.mismatch();
    }
    return report;
  }
  if (materializer && !report.unreproducible) {
    RETURN_IF_ERROR(materializer->finish(&report.written));
  }
  return report;
}

Result<ReplayReport> replay_trace(const std::string& trace_path, const ReplayOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<trace::TraceReader> reader,
                   trace::TraceReader::open(trace_path));
  std::string spec_note;
  ASSIGN_OR_RETURN(std::string spec, resolve_model_spec(reader->run_header(), options.model));
  Result<LoadedModel> model = load_model(spec, ModelLoadOptions{.keep_quantized = true});
  if (!model.ok()) return model.status().with_context("loading the model " + spec + ": ");
  return replay_trace(*reader, *model, options);
}

}  // namespace llmrr::replay
