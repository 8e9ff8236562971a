#include "llmrr/replayer/diff.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "llmrr/format/trace_reader.h"
#include "llmrr/kernels/plan.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/replayer/trace_feed.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/site.h"
#include "llmrr/runtime/tokenizers.h"

namespace llmrr::replay {
namespace {

// ---- pass 1: one streaming read per trace --------------------------------------------------

// Order-free mix of (site, fingerprint hash): a row's digest is the sum over its sites, so
// the order the sites come in does not matter.
inline uint64_t mix(uint64_t site, uint64_t hash) {
  uint64_t z = hash ^ (site * 0x9E3779B97F4A7C15ull) ^ 0x5851F42D4C957F2Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct RowInfo {
  int64_t step = -1;
  int32_t batch_row = -1;
  uint32_t sites = 0;
  uint64_t digest = 0;
};

struct SampleInfo {
  int64_t step = -1;
  int32_t batch_row = -1;
  trace::Fingerprint full;
  float margin = 0;
  int32_t top1 = -1, top2 = -1;
  float v1 = 0, v2 = 0;
};

using AlignKey = std::tuple<uint64_t, uint32_t, int32_t, uint32_t, uint64_t>;

// Greedy decoding (temperature <= 0, as the sampler treats it) ignores top-k, top-p and the
// seed, so they are not part of the key then: a run recorded with --seed aligns with one
// recorded without.
bool greedy(const trace::RequestRecord& r) { return !(r.temperature > 0.0f); }

AlignKey align_key(const trace::RequestRecord& r, AlignBy by) {
  if (by == AlignBy::kIds) return {r.id, 0, 0, 0, 0};
  const uint64_t ph = trace::prompt_hash(r.prompt);
  if (by == AlignBy::kPrompt || greedy(r)) return {ph, 0, 0, 0, 0};
  uint32_t t, p;
  std::memcpy(&t, &r.temperature, 4);
  std::memcpy(&p, &r.top_p, 4);
  return {ph, t, r.top_k, p, r.seed};
}

struct ReqSummary {
  trace::RequestRecord rec;
  bool have_rec = false;
  int64_t arrival_index = -1;       // arrival order in its trace
  AlignKey key{};                   // prompt hash and sampling params
  uint32_t occurrence = 0;          // earlier arrivals with the same key in its trace
  std::vector<RowInfo> rows;        // by position
  std::vector<SampleInfo> samples;  // by position of the sampled row
  std::vector<int32_t> tokens;      // by position the token occupies; -1 = none
  int32_t generated = 0;
};

// Receives each request's summary once it is complete: at its finish record, or at the end of
// the trace for requests still running (truncated traces). Then the summary is gone from the
// scan: memory holds only the requests in flight.
using EmitFn = std::function<void(ReqSummary&&)>;

// Which sites go into the row digests: those both traces capture.
enum class DigestSites { kNone, kLayers, kAll };

bool digest_site(DigestSites which, uint64_t packed) {
  switch (which) {
    case DigestSites::kNone:
      return false;
    case DigestSites::kLayers:
      return is_layer_output(SiteId::unpack(packed));
    case DigestSites::kAll:
      return true;
  }
  return false;
}

template <typename T>
T& at_grow(std::vector<T>& v, size_t i, const T& fill = T()) {
  if (v.size() <= i) v.resize(i + 1, fill);
  return v[i];
}

// Streams one trace, one step per next(), emitting each request's summary when complete.
class Scanner {
 public:
  Scanner(const trace::TraceReader& reader, DigestSites which, AlignBy align, EmitFn emit)
      : cur_(reader.steps()), which_(which), align_(align), emit_(std::move(emit)) {}

  // Processes one step; false at the end (after emitting the requests still running).
  Result<bool> next() {
    if (done_) return false;
    Result<bool> got = cur_.next(&s_);
    if (!got.ok()) return got.status();
    if (!*got) {
      finish();
      done_ = true;
      return false;
    }
    ++steps_;
    take_step();
    return true;
  }
  int64_t steps() const { return steps_; }

 private:
  void take_step() {
    trace::StepRecord& s = s_;
    for (trace::RequestRecord& a : s.arrivals) {
      ReqSummary& r = live_[a.id];
      if (!r.have_rec) {
        r.rec = std::move(a);
        r.have_rec = true;
        r.arrival_index = arrivals_++;
        r.key = align_key(r.rec, align_);
        r.occurrence = occurrences_[r.key]++;
      }
    }
    row_req_.clear();
    row_pos_.clear();
    int32_t row = 0;
    for (const trace::Segment& g : s.segments) {
      ReqSummary* rs = &live_[g.request];
      if (g.start < 0 || g.count < 0 || g.start > (1 << 28)) continue;
      for (int32_t j = 0; j < g.count; ++j) {
        row_req_.push_back(rs);
        row_pos_.push_back(g.start + j);
        RowInfo& ri = at_grow(rs->rows, static_cast<size_t>(g.start + j));
        ri.step = s.step;
        ri.batch_row = row++;
      }
    }
    const int64_t nrows = static_cast<int64_t>(row_req_.size());
    for (const trace::SiteRows& sr : s.rows) {
      if (!digest_site(which_, sr.site)) continue;
      for (size_t r = 0; r < sr.rows.size(); ++r) {
        int64_t b = sr.batch_rows.empty() ? static_cast<int64_t>(r) : sr.batch_rows[r];
        if (b < 0 || b >= nrows) continue;
        RowInfo& ri = row_req_[b]->rows[row_pos_[b]];
        ri.digest += mix(sr.site, sr.rows[r].hash);
        ++ri.sites;
      }
    }
    for (const trace::LogitsRecord& l : s.logits) {
      if (l.position < 0 || l.position > (1 << 28)) continue;
      SampleInfo& si = at_grow(live_[l.request].samples, static_cast<size_t>(l.position));
      si.step = s.step;
      si.batch_row = l.batch_row;
      si.full = l.full;
      si.margin = l.margin;
      if (!l.top_ids.empty()) {
        si.top1 = l.top_ids[0];
        si.v1 = l.top_values[0];
      }
      if (l.top_ids.size() > 1) {
        si.top2 = l.top_ids[1];
        si.v2 = l.top_values[1];
      }
    }
    for (const trace::TokenRecord& t : s.tokens) {
      if (t.position < 0 || t.position > (1 << 28)) continue;
      ReqSummary& rs = live_[t.request];
      at_grow(rs.tokens, static_cast<size_t>(t.position), int32_t{-1}) = t.token;
      ++rs.generated;
    }
    for (const trace::FinishRecord& f : s.finishes) {
      auto it = live_.find(f.request);
      if (it == live_.end()) continue;
      if (it->second.have_rec) emit_(std::move(it->second));
      live_.erase(it);
    }
  }

  // Requests still running when the trace ends, in arrival order.
  void finish() {
    std::vector<ReqSummary*> rest;
    for (auto& [id, r] : live_) {
      if (r.have_rec) rest.push_back(&r);
    }
    std::sort(rest.begin(), rest.end(), [](const ReqSummary* x, const ReqSummary* y) {
      return x->arrival_index < y->arrival_index;
    });
    for (ReqSummary* r : rest) emit_(std::move(*r));
    live_.clear();
  }

  trace::StepCursor cur_;
  DigestSites which_;
  AlignBy align_ = AlignBy::kPromptAndParams;
  EmitFn emit_;
  trace::StepRecord s_;
  bool done_ = false;
  int64_t steps_ = 0;
  std::unordered_map<RequestId, ReqSummary> live_;
  std::map<AlignKey, uint32_t> occurrences_;
  int64_t arrivals_ = 0;
  std::vector<ReqSummary*> row_req_;
  std::vector<int32_t> row_pos_;
};

// ---- helpers -------------------------------------------------------------------------------

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string g6(double v) {
  return fmt("%.6g", v);
}
std::string g3(double v) {
  return fmt("%.3g", v);
}

std::string plan_str(const trace::PlanRecord& r) {
  std::string s = plan_to_string(to_plan(r));
  return s.empty() ? "op " + std::to_string(static_cast<int>(r.op)) : s;
}

std::string ints_str(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string outcomes_str(const std::vector<trace::RouteOutcome>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::string(route_outcome_name(v[i]));
  return s;
}

std::string rows_str(int64_t n) {
  return std::to_string(n) + (n == 1 ? " row" : " rows");
}

// Printable form of decoded text: control bytes and invalid UTF-8 escaped.
std::string printable(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int j = 1; ok && j < len; ++j) ok = (static_cast<unsigned char>(s[i + j]) >> 6) == 2;
    if (!ok) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
      ++i;
      continue;
    }
    if (len == 1) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\\') {
        out += "\\\\";
      } else if (c < 0x20 || c == 0x7f) {
        char b[8];
        std::snprintf(b, sizeof b, "\\x%02x", c);
        out += b;
      } else {
        out += static_cast<char>(c);
      }
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  return out;
}

// Fingerprints of one batch row at every site of a step: site → fingerprint.
std::map<uint64_t, trace::Fingerprint> row_sites(const trace::StepRecord& s, int64_t row) {
  std::map<uint64_t, trace::Fingerprint> out;
  for (const trace::SiteRows& sr : s.rows) {
    if (sr.batch_rows.empty()) {
      if (row >= 0 && row < static_cast<int64_t>(sr.rows.size())) out[sr.site] = sr.rows[row];
    } else {
      for (size_t r = 0; r < sr.batch_rows.size() && r < sr.rows.size(); ++r) {
        if (sr.batch_rows[r] == row) {
          out[sr.site] = sr.rows[r];
          break;
        }
      }
    }
  }
  return out;
}

BatchSide batch_side(const trace::StepRecord& s, RequestId request, int32_t position) {
  BatchSide b;
  b.step = s.step;
  b.segments = s.segments;
  std::vector<RequestId> reqs;
  int64_t row = 0;
  for (const trace::Segment& g : s.segments) {
    b.rows += g.count;
    if (g.kind == trace::SegmentKind::kPrefill) {
      ++b.prefill_segments;
    } else {
      ++b.decode_segments;
    }
    if (std::find(reqs.begin(), reqs.end(), g.request) == reqs.end()) reqs.push_back(g.request);
    if (g.request == request && position >= g.start && position < g.start + g.count) {
      b.own = g;
      b.batch_row = row + (position - g.start);
    }
    row += g.count;
  }
  b.requests = static_cast<int32_t>(reqs.size());
  return b;
}

bool same_shape(const BatchSide& a, const BatchSide& b) {
  if (a.rows != b.rows || a.segments.size() != b.segments.size()) return false;
  for (size_t i = 0; i < a.segments.size(); ++i) {
    const trace::Segment &x = a.segments[i], &y = b.segments[i];
    if (x.start != y.start || x.count != y.count || x.cached != y.cached || x.kind != y.kind ||
        x.sample != y.sample) {
      return false;
    }
  }
  return true;
}

const trace::Routing* find_routing(const trace::StepRecord& s, int32_t layer) {
  for (const trace::Routing& r : s.routing) {
    if (r.layer == layer) return &r;
  }
  return nullptr;
}

void count_outcomes(const trace::Routing& r, int64_t* rerouted, int64_t* dropped) {
  *rerouted = *dropped = 0;
  for (trace::RouteOutcome o : r.outcome) {
    if (o == trace::RouteOutcome::kRerouted) ++*rerouted;
    if (o == trace::RouteOutcome::kDropped) ++*dropped;
  }
}

// Routing of one row at `layer` in both steps; nullopt when neither records that layer.
std::optional<RoutingDifference> routing_of_row(const trace::StepRecord& sa, int64_t ra,
                                                const trace::StepRecord& sb, int64_t rb,
                                                int32_t layer) {
  const trace::Routing* a = find_routing(sa, layer);
  const trace::Routing* b = find_routing(sb, layer);
  if (!a && !b) return std::nullopt;
  RoutingDifference d;
  d.layer = layer;
  auto take = [](const trace::Routing* r, int64_t row, std::vector<int32_t>* chosen,
                 std::vector<int32_t>* experts, std::vector<trace::RouteOutcome>* outcome) {
    if (!r || row < 0 || row >= r->rows) return;
    const size_t k = static_cast<size_t>(r->k);
    const size_t o = static_cast<size_t>(row) * k;
    if (o + k > r->experts.size() || o + k > r->chosen.size() || o + k > r->outcome.size()) return;
    chosen->assign(r->chosen.begin() + o, r->chosen.begin() + o + k);
    experts->assign(r->experts.begin() + o, r->experts.begin() + o + k);
    outcome->assign(r->outcome.begin() + o, r->outcome.begin() + o + k);
  };
  take(a, ra, &d.chosen_a, &d.experts_a, &d.outcome_a);
  take(b, rb, &d.chosen_b, &d.experts_b, &d.outcome_b);
  if (a) {
    d.capacity_a = a->capacity;
    d.rows_a = a->rows;
    count_outcomes(*a, &d.rerouted_a, &d.dropped_a);
  }
  if (b) {
    d.capacity_b = b->capacity;
    d.rows_b = b->rows;
    count_outcomes(*b, &d.rerouted_b, &d.dropped_b);
  }
  d.row_differs = d.experts_a != d.experts_b || d.outcome_a != d.outcome_b;
  return d;
}

// The arrival permutation of one combine row, or the whole arrival for other ops.
std::vector<uint16_t> arrival_of_row(const trace::PlanRecord& p, int64_t rows, int64_t row) {
  if (p.op != trace::OpKind::kCombine || p.arrival.empty() || rows <= 0) return p.arrival;
  const size_t k = p.arrival.size() / static_cast<size_t>(rows);
  if (k == 0 || row < 0 || static_cast<size_t>(row + 1) * k > p.arrival.size()) return {};
  return std::vector<uint16_t>(p.arrival.begin() + row * k, p.arrival.begin() + (row + 1) * k);
}

std::string arrival_str(const std::vector<uint16_t>& a) {
  std::string s;
  for (size_t i = 0; i < a.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(a[i]);
  }
  return s;
}

// Header fields that differ, as "what: A vs B".
std::vector<std::string> header_differences(const trace::RunHeader& a, const trace::RunHeader& b) {
  std::vector<std::string> out;
  auto cmp = [&](const std::string& what, const std::string& x, const std::string& y) {
    if (x != y) out.push_back(what + ": " + (x.empty() ? "-" : x) + " vs " + (y.empty() ? "-" : y));
  };
  cmp("model", a.model.name, b.model.name);
  cmp("weights", a.model.weight_hash, b.model.weight_hash);
  cmp("compute dtype", a.model.compute_dtype, b.model.compute_dtype);
  cmp("policy",
      a.engine.policy + (a.engine.atomics && a.engine.policy.find("atomics") == std::string::npos
                             ? " (atomics)"
                             : ""),
      b.engine.policy + (b.engine.atomics && b.engine.policy.find("atomics") == std::string::npos
                             ? " (atomics)"
                             : ""));
  cmp("virtual device",
      std::to_string(a.engine.virtual_sms) + " SMs x " + std::to_string(a.engine.blocks_per_sm),
      std::to_string(b.engine.virtual_sms) + " SMs x " + std::to_string(b.engine.blocks_per_sm));
  cmp("load", std::to_string(a.engine.load), std::to_string(b.engine.load));
  auto cap = [](const trace::EngineConfig& e) {
    return e.capacity_factor > 0
               ? g3(e.capacity_factor) + " (" + trace::overflow_policy_name(e.overflow) + ")"
               : std::string("dropless");
  };
  cmp("expert capacity", cap(a.engine), cap(b.engine));
  cmp("max batch tokens", std::to_string(a.engine.max_batch_tokens),
      std::to_string(b.engine.max_batch_tokens));
  cmp("prefill chunk", std::to_string(a.engine.prefill_chunk),
      std::to_string(b.engine.prefill_chunk));
  cmp("capture", trace::capture_level_name(a.engine.capture),
      trace::capture_level_name(b.engine.capture));
  cmp("host ISA", a.host.isa, b.host.isa);
  return out;
}

std::string quoted(const std::string& s) {
  return "'" + printable(s) + "'";
}

class TextDecoder {
 public:
  void set(std::shared_ptr<const Tokenizer> t) { tok_ = std::move(t); }
  bool ok() const { return tok_ != nullptr; }
  std::string text(const std::vector<int32_t>& ids) const {
    if (!tok_) {
      std::string s;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
      }
      return s;
    }
    return printable(tok_->decode(ids));
  }
  std::string token(int32_t id) const {
    if (id < 0) return "-";
    if (!tok_) return "#" + std::to_string(id);
    return quoted(tok_->decode(std::vector<int32_t>{id}));
  }

 private:
  std::shared_ptr<const Tokenizer> tok_;
};

// ---- pass 2: explaining one request --------------------------------------------------------

// What pass 2 needs of one aligned pair once both summaries are dropped: the comparison,
// the rows worth a look (positions whose digests differ, up to the split, at most
// max_candidates + 1), and whether the split row has no captured sites at all.
struct Candidate {
  int32_t position = 0;
  int64_t step_a = -1, step_b = -1;
  int32_t row_a = -1, row_b = -1;
};

struct PairWork {
  int64_t order = 0;  // A's arrival index
  RequestDiff d;
  std::vector<Candidate> candidates;
  bool more_candidates = false;
  bool split_row_has_no_sites = false;
};

class Explainer {
 public:
  Explainer(trace::TraceReader& a, trace::TraceReader& b, const DiffOptions& o, bool weights_differ,
            bool config_differs)
      : a_(a), b_(b), o_(o), weights_differ_(weights_differ), config_differs_(config_differs) {}

  Status explain(PairWork* w);

 private:
  Status read(trace::TraceReader& r, int64_t step, trace::StepRecord* out) {
    Status st = r.read_step(step, out);
    if (!st.ok())
      return st.with_context(r.path() + ": reading step " + std::to_string(step) + ": ");
    return st;
  }
  void causes(const trace::StepRecord& sa, const trace::StepRecord& sb, RequestDiff* d);

  trace::TraceReader& a_;
  trace::TraceReader& b_;
  const DiffOptions& o_;
  bool weights_differ_, config_differs_;
};

Status Explainer::explain(PairWork* w) {
  RequestDiff* d = &w->d;
  if (w->candidates.empty() && d->split_position < 0) return Status::Ok();  // nothing differs

  trace::StepRecord sa, sb;
  int examined = 0;
  for (const Candidate& c : w->candidates) {
    if (examined++ >= o_.max_candidates) break;
    RETURN_IF_ERROR(read(a_, c.step_a, &sa));
    RETURN_IF_ERROR(read(b_, c.step_b, &sb));
    std::map<uint64_t, trace::Fingerprint> fa = row_sites(sa, c.row_a);
    std::map<uint64_t, trace::Fingerprint> fb = row_sites(sb, c.row_b);
    std::optional<SiteId> first;
    int32_t common = 0;
    for (const auto& [site, fpa] : fa) {
      auto it = fb.find(site);
      if (it == fb.end()) continue;
      ++common;
      if (fpa.hash == it->second.hash) continue;
      SiteId s = SiteId::unpack(site);
      if (!first || s < *first) first = s;
    }
    if (!first) continue;
    d->root_found = true;
    d->root_position = c.position;
    d->first_site = site_name(*first);
    d->first_site_packed = first->packed();
    d->site_a = fa[first->packed()];
    d->site_b = fb[first->packed()];
    d->common_sites = common;
    causes(sa, sb, d);
    return Status::Ok();
  }
  if (examined > o_.max_candidates || w->more_candidates) {
    d->notes.push_back("gave up after examining " + std::to_string(o_.max_candidates) +
                       " rows whose fingerprints differ only in the sites one trace holds");
  }
  if (d->split_position < 0) {
    return Status::Ok();  // digests differ only through sites one trace lacks
  }
  // No captured site tells: fall back to the step of the first differing logits.
  d->root_position = d->split_position;
  RETURN_IF_ERROR(read(a_, d->split_step_a, &sa));
  RETURN_IF_ERROR(read(b_, d->split_step_b, &sb));
  d->capture_note =
      w->split_row_has_no_sites
          ? "no row fingerprints were captured for this request (capture none, or a trace "
            "from the C ABI without sites): the first difference is known only from the "
            "logits; record with --capture all to name the op"
          : "every captured site agrees up to the logits: the difference arises after the "
            "last captured site; record with --capture all to name the op";
  causes(sa, sb, d);
  return Status::Ok();
}

void Explainer::causes(const trace::StepRecord& sa, const trace::StepRecord& sb, RequestDiff* d) {
  const int32_t q = d->root_position;
  d->batch_a = batch_side(sa, d->a, q);
  d->batch_b = batch_side(sb, d->b, q);
  d->batch_differs = !same_shape(d->batch_a, d->batch_b);
  const int64_t ra = d->batch_a.batch_row, rb = d->batch_b.batch_row;

  std::optional<SiteId> first;
  if (!d->first_site.empty()) first = SiteId::unpack(d->first_site_packed);
  const bool layer_outputs_only = first && is_layer_output(*first) &&
                                  (a_.run_header().engine.capture != trace::CaptureLevel::kAll ||
                                   b_.run_header().engine.capture != trace::CaptureLevel::kAll);
  if (layer_outputs_only && d->capture_note.empty()) {
    d->capture_note = "only layer outputs were captured: first difference at " + d->first_site +
                      "; record with --capture all to name the op";
  }

  // Plans of the ops that feed the first differing site: that site's own plan, and the
  // earlier sites of the same layer (for final_norm / logits: those two). Without a site,
  // every op of the step.
  auto relevant = [&](SiteId s) {
    if (!first) return true;
    if (first->layer >= 0) return s.layer == first->layer && !(*first < s);
    return s.layer < 0 && s.kind != SiteKind::kEmbed && !(*first < s);
  };
  std::map<uint64_t, std::pair<const trace::PlanRecord*, const trace::PlanRecord*>> sites;
  for (const trace::SitePlan& p : sa.plans) {
    if (relevant(SiteId::unpack(p.site))) sites[p.site].first = &p.plan;
  }
  for (const trace::SitePlan& p : sb.plans) {
    if (relevant(SiteId::unpack(p.site))) sites[p.site].second = &p.plan;
  }
  std::map<uint64_t, trace::Fingerprint> fa, fb;
  if (ra >= 0) fa = row_sites(sa, ra);
  if (rb >= 0) fb = row_sites(sb, rb);
  std::vector<std::pair<SiteId, PlanDifference>> diffs;
  for (const auto& [site, pr] : sites) {
    const trace::PlanRecord* pa = pr.first;
    const trace::PlanRecord* pb = pr.second;
    PlanDifference pd;
    pd.site = site;
    SiteId sid = SiteId::unpack(site);
    pd.site_name = site_name(sid);
    pd.in_a = pa != nullptr;
    pd.in_b = pb != nullptr;
    pd.is_first_site = first && first->packed() == site;
    auto ia = fa.find(site), ib = fb.find(site);
    pd.output_checked_equal =
        ia != fa.end() && ib != fb.end() && ia->second.hash == ib->second.hash;
    if (pa && pb) {
      if (*pa == *pb) {
        if (pa->order != trace::CombineOrder::kArrival) continue;
      }
      trace::PlanRecord xa = *pa, xb = *pb;
      std::vector<uint16_t> arr_a = arrival_of_row(xa, d->batch_a.rows, ra);
      std::vector<uint16_t> arr_b = arrival_of_row(xb, d->batch_b.rows, rb);
      xa.arrival.clear();
      xb.arrival.clear();
      if (xa == xb) {
        if (arr_a == arr_b) continue;  // the same order for this row
        pd.arrival_only = true;
      }
      pd.a = *pa;
      pd.b = *pb;
      pd.a_text = plan_str(xa) + (arr_a.empty() ? "" : ", arrival order " + arrival_str(arr_a));
      pd.b_text = plan_str(xb) + (arr_b.empty() ? "" : ", arrival order " + arrival_str(arr_b));
      if (xa.op == trace::OpKind::kCombine && !arr_a.empty()) {
        pd.a_text = "combine in arrival order " + arrival_str(arr_a);
      }
      if (xb.op == trace::OpKind::kCombine && !arr_b.empty()) {
        pd.b_text = "combine in arrival order " + arrival_str(arr_b);
      }
    } else {
      if (pa) pd.a = *pa;
      if (pb) pd.b = *pb;
      pd.a_text = pa ? plan_str(*pa) : "(did not run)";
      pd.b_text = pb ? plan_str(*pb) : "(did not run)";
    }
    diffs.push_back({sid, std::move(pd)});
  }
  std::sort(diffs.begin(), diffs.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  // The first site's own plan first, then forward order.
  std::stable_partition(diffs.begin(), diffs.end(),
                        [](const auto& x) { return x.second.is_first_site; });
  for (auto& [sid, pd] : diffs) d->plans.push_back(std::move(pd));

  // Routing of this row at the first differing site's layer, or at the first layer where
  // its experts differ.
  if (first && first->layer >= 0) {
    d->routing = routing_of_row(sa, ra, sb, rb, first->layer);
  } else {
    int32_t layers = std::max(a_.run_header().model.layers, 0);
    for (int32_t l = 0; l < layers; ++l) {
      std::optional<RoutingDifference> r = routing_of_row(sa, ra, sb, rb, l);
      if (r && r->row_differs) {
        d->routing = r;
        break;
      }
    }
  }

  // The cause.
  const PlanDifference* own = nullptr;
  const PlanDifference* any = nullptr;
  for (const PlanDifference& p : d->plans) {
    if (p.is_first_site) own = &p;
    if (!any && !p.output_checked_equal) any = &p;
  }
  const bool after_router = !first || first->kind > SiteKind::kRouter || is_layer_output(*first);
  if (d->routing && d->routing->row_differs && after_router) {
    d->cause = "routing";
  } else if (own) {
    d->cause = own->arrival_only ? "arrival-order" : "plan";
  } else if (any) {
    d->cause = any->arrival_only ? "arrival-order" : "plan";
  } else if (d->batch_differs) {
    d->cause = "batch";
  } else if (weights_differ_) {
    d->cause = "weights";
  } else if (config_differs_) {
    d->cause = "config";
  } else {
    d->cause = "unknown";
  }
}

// ---- the report ------------------------------------------------------------------------------

void compare_request(const ReqSummary& ra, const ReqSummary& rb, RequestDiff* d) {
  d->a = ra.rec.id;
  d->b = rb.rec.id;
  d->label = ra.rec.label;
  d->prompt_len = static_cast<int32_t>(ra.rec.prompt.size());
  d->generated_a = ra.generated;
  d->generated_b = rb.generated;
  const int32_t L = d->prompt_len;
  // Requests paired by id (--align ids, --request) may have different prompts: then the runs
  // split at the input, at the first prompt token that differs.
  const std::vector<int32_t>&pa = ra.rec.prompt, &pb = rb.rec.prompt;
  if (pa != pb) {
    size_t q = 0;
    while (q < pa.size() && q < pb.size() && pa[q] == pb[q]) ++q;
    d->visible_position = static_cast<int32_t>(q);
    d->notes.push_back("the prompts differ from position " + std::to_string(q) + " (A " +
                       std::to_string(pa.size()) + " tokens, B " + std::to_string(pb.size()) +
                       "): the pair was made by id, and the runs split at the input");
  }
  // Visible split: the first token position that differs.
  const int32_t nt = static_cast<int32_t>(std::min(ra.tokens.size(), rb.tokens.size()));
  for (int32_t p = L; p < nt && d->visible_position < 0; ++p) {
    if (ra.tokens[p] < 0 || rb.tokens[p] < 0) break;
    if (ra.tokens[p] != rb.tokens[p]) {
      d->visible_position = p;
      break;
    }
  }
  // Numerical split: the first sampled row whose logits differ, among rows whose inputs
  // are the same (positions before the visible split).
  const int32_t limit = d->visible_position >= 0 ? d->visible_position - 1 : INT32_MAX;
  const int32_t ns = static_cast<int32_t>(std::min(ra.samples.size(), rb.samples.size()));
  for (int32_t p = std::max(L - 1, 0); p < ns && p <= limit; ++p) {
    const SampleInfo &x = ra.samples[p], &y = rb.samples[p];
    if (x.step < 0 || y.step < 0) continue;
    ++d->compared_logits;
    if (x.full.hash != y.full.hash) {
      d->split_position = p;
      d->split_step_a = x.step;
      d->split_step_b = y.step;
      d->logits_a = x.full;
      d->logits_b = y.full;
      break;
    }
  }
  d->verdict = d->visible_position >= 0 ? Verdict::kVisible
               : d->split_position >= 0 ? Verdict::kNumerical
                                        : Verdict::kIdentical;
  if (d->visible_position >= 0) {
    const int32_t v = d->visible_position;
    if (v - 1 >= 0 && v - 1 < static_cast<int32_t>(ra.samples.size())) {
      const SampleInfo& x = ra.samples[v - 1];
      d->top1_a = x.top1, d->top2_a = x.top2, d->top1_value_a = x.v1, d->top2_value_a = x.v2;
      d->margin_a = x.margin;
    }
    if (v - 1 >= 0 && v - 1 < static_cast<int32_t>(rb.samples.size())) {
      const SampleInfo& y = rb.samples[v - 1];
      d->top1_b = y.top1, d->top2_b = y.top2, d->top1_value_b = y.v1, d->top2_value_b = y.v2;
      d->margin_b = y.margin;
    }
    if (d->split_position < 0) {
      d->notes.push_back("tokens differ at position " + std::to_string(v) +
                         " but no recorded logits differ before it");
    }
  }
}

// The tokens around a visible split (the summaries are dropped after matching).
void gather_split_tokens(const ReqSummary& ra, const ReqSummary& rb, const DiffOptions& o,
                         RequestDiff* d) {
  const int32_t v = d->visible_position;
  if (v < 0) return;
  auto token_at = [&](const ReqSummary& r, int32_t p) -> int32_t {
    if (p < static_cast<int32_t>(r.rec.prompt.size())) return r.rec.prompt[p];
    return p < static_cast<int32_t>(r.tokens.size()) ? r.tokens[p] : -1;
  };
  for (int32_t p = std::max(0, v - 24); p < v; ++p) d->context.push_back(token_at(ra, p));
  for (int32_t p = v; p < v + o.continuation; ++p) {
    int32_t x = token_at(ra, p);
    if (x >= 0) d->continuation_a.push_back(x);
    int32_t y = token_at(rb, p);
    if (y >= 0) d->continuation_b.push_back(y);
  }
}

void fill_text(const TextDecoder& dec, RequestDiff* d) {
  if (d->visible_position < 0) return;
  d->context_text = dec.text(d->context);
  d->text_a = dec.text(d->continuation_a);
  d->text_b = dec.text(d->continuation_b);
  d->token_a_text = dec.token(d->continuation_a.empty() ? -1 : d->continuation_a[0]);
  d->token_b_text = dec.token(d->continuation_b.empty() ? -1 : d->continuation_b[0]);
  d->top1_a_text = dec.token(d->top1_a);
  d->top2_a_text = dec.token(d->top2_a);
  d->top1_b_text = dec.token(d->top1_b);
  d->top2_b_text = dec.token(d->top2_b);
}

// Compares one aligned pair and keeps what pass 2 needs.
PairWork make_pair_work(const ReqSummary& ra, const ReqSummary& rb, const DiffOptions& o) {
  PairWork w;
  w.order = ra.arrival_index;
  RequestDiff& d = w.d;
  compare_request(ra, rb, &d);
  gather_split_tokens(ra, rb, o, &d);
  // Candidate rows: positions up to the numerical split (or every comparable row when the
  // logits agree) whose digests differ.
  int32_t last = d.split_position >= 0     ? d.split_position
                 : d.visible_position >= 0 ? d.visible_position - 1
                                           : INT32_MAX;
  const int32_t n = static_cast<int32_t>(std::min(ra.rows.size(), rb.rows.size()));
  last = std::min(last, n - 1);
  for (int32_t q = 0; q <= last; ++q) {
    const RowInfo &x = ra.rows[q], &y = rb.rows[q];
    if (x.step < 0 || y.step < 0) continue;
    if (x.digest == y.digest && x.sites == y.sites) continue;
    if (static_cast<int32_t>(w.candidates.size()) > o.max_candidates) {
      w.more_candidates = true;
      break;
    }
    w.candidates.push_back({q, x.step, y.step, x.batch_row, y.batch_row});
  }
  const int32_t p = d.split_position;
  if (p >= 0) {
    w.split_row_has_no_sites = static_cast<size_t>(p) < ra.rows.size() && ra.rows[p].sites == 0 &&
                               static_cast<size_t>(p) < rb.rows.size() && rb.rows[p].sites == 0;
  }
  return w;
}

// Pairs the summaries the two scans emit (from two threads) and drops them once compared:
// memory holds the requests in flight in either trace, plus those still waiting for their
// counterpart (requests only one trace has wait until the end).
class Matcher {
 public:
  explicit Matcher(const DiffOptions& o) : o_(o) {}

  void add(int side, ReqSummary&& r) {
    std::optional<ReqSummary> other;
    Key key = key_of(side, r);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (o_.request) {
        RequestId want = side == 0 ? o_.request->first : o_.request->second;
        if (r.rec.id != want) return;
        found_[side] = true;
      }
      auto& theirs = pending_[1 - side];
      auto it = theirs.find(key);
      if (it == theirs.end()) {
        pending_[side].emplace(key, std::move(r));
        return;
      }
      other = std::move(it->second);
      theirs.erase(it);
    }
    const ReqSummary& a = side == 0 ? r : *other;
    const ReqSummary& b = side == 0 ? *other : r;
    PairWork w = make_pair_work(a, b, o_);
    std::lock_guard<std::mutex> lock(mu_);
    pairs_.push_back(std::move(w));
  }

  // After both scans: pairs in A's arrival order; the unmatched ids of each side.
  std::vector<PairWork> take_pairs() {
    std::sort(pairs_.begin(), pairs_.end(),
              [](const PairWork& x, const PairWork& y) { return x.order < y.order; });
    return std::move(pairs_);
  }
  std::vector<RequestId> unmatched(int side) const {
    std::vector<std::pair<int64_t, RequestId>> v;
    for (const auto& [k, r] : pending_[side]) v.push_back({r.arrival_index, r.rec.id});
    std::sort(v.begin(), v.end());
    std::vector<RequestId> out;
    for (const auto& x : v) out.push_back(x.second);
    return out;
  }
  bool found(int side) const { return found_[side]; }

  // After both scans found no pair: which keys differed, for the first unmatched request of
  // A (in arrival order) against B's requests.
  std::string why_unmatched() const {
    const ReqSummary* first = nullptr;
    for (const auto& [k, r] : pending_[0]) {
      if (!first || r.arrival_index < first->arrival_index) first = &r;
    }
    if (!first) return "A has no request";
    const trace::RequestRecord& ra = first->rec;
    const uint64_t ph = trace::prompt_hash(ra.prompt);
    std::string who = "A's request " + std::to_string(ra.id);
    if (o_.align == AlignBy::kIds) {
      return who + " has no request of the same id in B (B's ids start at " +
             std::to_string(first_id(1)) + ")";
    }
    for (const auto& [k, r] : pending_[1]) {
      if (trace::prompt_hash(r.rec.prompt) != ph) continue;
      const trace::RequestRecord& rb = r.rec;
      std::string d;
      auto add = [&](const char* name, const std::string& x, const std::string& y) {
        if (x == y) return;
        if (!d.empty()) d += ", ";
        d.append(name).append(" ").append(x).append(" vs ").append(y);
      };
      add("temperature", fmt_float(ra.temperature), fmt_float(rb.temperature));
      add("top-k", std::to_string(ra.top_k), std::to_string(rb.top_k));
      add("top-p", fmt_float(ra.top_p), fmt_float(rb.top_p));
      add("seed", std::to_string(ra.seed), std::to_string(rb.seed));
      return who + " and B's request " + std::to_string(rb.id) +
             " have the same prompt but different sampling params (" + d + ")";
    }
    return who + "'s prompt (" + std::to_string(ra.prompt.size()) +
           " tokens) is not the prompt of any request of B";
  }

 private:
  static std::string fmt_float(float v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
    return buf;
  }
  RequestId first_id(int side) const {
    RequestId best = 0;
    bool any = false;
    for (const auto& [k, r] : pending_[side]) {
      if (!any || r.rec.id < best) best = r.rec.id;
      any = true;
    }
    return best;
  }

  // (prompt hash, sampling params, occurrence of that key in its trace) — or, with explicit
  // ids, one key for the one request of each side.
  using Key = std::tuple<AlignKey, uint32_t>;
  Key key_of(int side, const ReqSummary& r) const {
    if (o_.request) return {AlignKey{}, 0};
    return {r.key, r.occurrence};
  }

  const DiffOptions& o_;
  std::mutex mu_;
  std::map<Key, ReqSummary> pending_[2];
  std::vector<PairWork> pairs_;
  bool found_[2] = {false, false};
};

// Logits distance at the numerical split from the two steps' top-K lists.
Status logits_distance(trace::TraceReader& a, trace::TraceReader& b, RequestDiff* d) {
  if (d->split_position < 0) return Status::Ok();
  trace::StepRecord sa, sb;
  RETURN_IF_ERROR(a.read_step(d->split_step_a, &sa));
  RETURN_IF_ERROR(b.read_step(d->split_step_b, &sb));
  const trace::LogitsRecord *la = nullptr, *lb = nullptr;
  for (const trace::LogitsRecord& l : sa.logits) {
    if (l.request == d->a && l.position == d->split_position) la = &l;
  }
  for (const trace::LogitsRecord& l : sb.logits) {
    if (l.request == d->b && l.position == d->split_position) lb = &l;
  }
  if (!la || !lb) return Status::Ok();
  float worst = 0;
  int32_t common = 0;
  for (size_t i = 0; i < la->top_ids.size(); ++i) {
    for (size_t j = 0; j < lb->top_ids.size(); ++j) {
      if (la->top_ids[i] != lb->top_ids[j]) continue;
      ++common;
      worst = std::max(worst, std::fabs(la->top_values[i] - lb->top_values[j]));
    }
  }
  d->logits_top_max_delta = worst;
  d->logits_top_common = common;
  return Status::Ok();
}

}  // namespace

const char* align_by_name(AlignBy a) {
  switch (a) {
    case AlignBy::kPromptAndParams:
      return "prompt hash and sampling params";
    case AlignBy::kPrompt:
      return "prompt hash";
    case AlignBy::kIds:
      return "request id";
  }
  return "?";
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kIdentical:
      return "identical";
    case Verdict::kNumerical:
      return "numerical split";
    case Verdict::kVisible:
      return "visible split";
  }
  return "?";
}

bool DiffReport::identical() const {
  if (requests.empty()) return false;
  for (const RequestDiff& r : requests) {
    if (r.verdict != Verdict::kIdentical) return false;
  }
  return true;
}

Result<DiffReport> diff_traces(const std::string& a_path, const std::string& b_path,
                               const DiffOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<trace::TraceReader> a, trace::TraceReader::open(a_path));
  ASSIGN_OR_RETURN(std::unique_ptr<trace::TraceReader> b, trace::TraceReader::open(b_path));
  DiffReport rep;
  rep.a_path = a_path;
  rep.b_path = b_path;
  rep.a_header = a->run_header();
  rep.b_header = b->run_header();
  rep.a_complete = a->complete();
  rep.b_complete = b->complete();
  rep.a_last_step = a->last_step();
  rep.b_last_step = b->last_step();
  rep.a_steps = a->step_count();
  rep.b_steps = b->step_count();
  rep.a_requests = static_cast<int64_t>(a->requests().size());
  rep.b_requests = static_cast<int64_t>(b->requests().size());
  rep.header_differences = header_differences(rep.a_header, rep.b_header);
  for (auto [r, name] : {std::pair{a.get(), "A"}, std::pair{b.get(), "B"}}) {
    if (!r->complete()) {
      rep.notes.push_back(std::string(name) + " (" + r->path() +
                          ") is truncated (no footer): diffed up to its last whole step, step " +
                          std::to_string(r->last_step()));
    }
    if (r->lossy()) {
      rep.notes.push_back(std::string(name) + " is lossy: " + r->lossy_reason());
    }
  }

  // Pass 1.
  const trace::CaptureLevel ca = rep.a_header.engine.capture, cb = rep.b_header.engine.capture;
  DigestSites which = (ca == trace::CaptureLevel::kAll && cb == trace::CaptureLevel::kAll)
                          ? DigestSites::kAll
                      : (ca == trace::CaptureLevel::kNone || cb == trace::CaptureLevel::kNone)
                          ? DigestSites::kNone
                          : DigestSites::kLayers;
  if (ca != cb) {
    rep.notes.push_back(std::string("the traces captured different sites (") +
                        trace::capture_level_name(ca) + " vs " + trace::capture_level_name(cb) +
                        "): rows are compared at the sites both hold");
  }
  Matcher matcher(o);
  Scanner scan_a(*a, which, o.align, [&](ReqSummary&& r) { matcher.add(0, std::move(r)); });
  Scanner scan_b(*b, which, o.align, [&](ReqSummary&& r) { matcher.add(1, std::move(r)); });
  auto drain = [](Scanner& sc) -> Status {
    for (;;) {
      ASSIGN_OR_RETURN(bool more, sc.next());
      if (!more) return Status::Ok();
    }
  };
  Status status_a, status_b;
  if (o.parallel) {
    std::thread t([&] { status_b = drain(scan_b); });
    status_a = drain(scan_a);
    t.join();
  } else {
    // One thread: the two traces step by step in turn, so that requests meet their
    // counterparts as early as they do on two threads.
    bool more_a = true, more_b = true;
    while ((more_a || more_b) && status_a.ok() && status_b.ok()) {
      if (more_a) {
        Result<bool> r = scan_a.next();
        if (r.ok()) {
          more_a = *r;
        } else {
          status_a = r.status();
        }
      }
      if (more_b) {
        Result<bool> r = scan_b.next();
        if (r.ok()) {
          more_b = *r;
        } else {
          status_b = r.status();
        }
      }
    }
  }
  if (!status_a.ok()) return status_a.with_context("A: ");
  if (!status_b.ok()) return status_b.with_context("B: ");

  if (o.request) {
    rep.alignment = "explicit ids";
    if (!matcher.found(0)) {
      return make_error(ErrorCode::kInvalidArgument, "--request: " + a_path + " has no request " +
                                                         std::to_string(o.request->first));
    }
    if (!matcher.found(1)) {
      return make_error(ErrorCode::kInvalidArgument, "--request: " + b_path + " has no request " +
                                                         std::to_string(o.request->second));
    }
  } else {
    rep.alignment = align_by_name(o.align);
    rep.only_a = matcher.unmatched(0);
    rep.only_b = matcher.unmatched(1);
  }
  std::vector<PairWork> pairs = matcher.take_pairs();
  if (pairs.empty() && !o.request && !rep.only_a.empty() && !rep.only_b.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "nothing to compare: no request of " + a_path + " matches one of " +
                          b_path + " by " + rep.alignment + ": " + matcher.why_unmatched() +
                          " (--align prompt|ids, or --request RA:RB, pairs them anyway)");
  }

  uint64_t ha = 0, hb = 0;
  bool weights_differ = parse_weight_hash(rep.a_header.model.weight_hash, &ha) &&
                        parse_weight_hash(rep.b_header.model.weight_hash, &hb) && ha != hb;
  bool config_differs = rep.a_header.model.compute_dtype != rep.b_header.model.compute_dtype ||
                        rep.a_header.extra_config_json != rep.b_header.extra_config_json;
  Explainer ex(*a, *b, o, weights_differ, config_differs);
  for (PairWork& w : pairs) {
    RETURN_IF_ERROR(ex.explain(&w));
    RequestDiff& d = w.d;
    RETURN_IF_ERROR(logits_distance(*a, *b, &d));
    if (d.verdict == Verdict::kIdentical && d.root_found) {
      d.notes.push_back(
          "logits and tokens are bit-identical, but rows differ inside: first at "
          "position " +
          std::to_string(d.root_position) + ", " + d.first_site);
    }
    rep.requests.push_back(std::move(d));
  }

  // Token text for visible splits.
  bool any_visible = false;
  for (const RequestDiff& d : rep.requests) any_visible |= d.verdict == Verdict::kVisible;
  TextDecoder dec;
  if (any_visible && o.model != "none") {
    const trace::ModelInfo& m = rep.a_header.model;
    if (o.model.empty() && m.name.rfind("builtin:", 0) == 0 && m.vocab == kByteVocab) {
      dec.set(make_byte_tokenizer());
    } else {
      Result<std::string> spec = resolve_model_spec(rep.a_header, o.model);
      if (spec.ok()) {
        Result<LoadedModel> lm = load_model(*spec);
        if (lm.ok() && lm->tokenizer) {
          dec.set(lm->tokenizer);
        } else {
          rep.notes.push_back("token text not shown: " +
                              (lm.ok()
                                   ? lm->source + " has no tokenizer (" + lm->tokenizer_note + ")"
                                   : lm.status().message()));
        }
      } else {
        rep.notes.push_back("token text not shown: " + spec.status().message());
      }
    }
  }
  rep.text_decoded = dec.ok();
  for (RequestDiff& d : rep.requests) fill_text(dec, &d);
  return rep;
}

// ---- output ----------------------------------------------------------------------------------

namespace {

std::string batch_str(const BatchSide& b) {
  std::string s = "batch of " + rows_str(b.rows);
  if (b.requests > 1) {
    s += ", " + std::to_string(b.requests) + " requests";
  }
  return s;
}

// Distance from the fingerprint summaries (the rows themselves are not in the trace).
std::string fp_dist(const trace::Fingerprint& a, const trace::Fingerprint& b) {
  auto pair = [](const char* what, float x, float y) {
    if (std::memcmp(&x, &y, sizeof x) == 0)
      return std::string(what) + " " + fmt("%.8g", x) + " in both";
    return std::string(what) + " " + fmt("%.8g", x) + " vs " + fmt("%.8g", y) + " (diff " +
           g3(std::fabs(static_cast<double>(x) - static_cast<double>(y))) + ")";
  };
  if (std::memcmp(&a.l2, &b.l2, 4) == 0 && std::memcmp(&a.max_abs, &b.max_abs, 4) == 0) {
    return "the rows differ in low bits only: l2 " + fmt("%.8g", a.l2) + " and max |x| " +
           fmt("%.8g", a.max_abs) + " in both";
  }
  return pair("l2", a.l2, b.l2) + ", " + pair("max |x|", a.max_abs, b.max_abs);
}

std::string step_pair(int64_t a, int64_t b) {
  return a == b ? "step " + std::to_string(a)
                : "step " + std::to_string(a) + " in A (step " + std::to_string(b) + " in B)";
}

std::string position_kind(const RequestDiff& d, int32_t p) {
  if (p < d.prompt_len) return "prompt position " + std::to_string(p);
  return "position " + std::to_string(p) + " (token " + std::to_string(p - d.prompt_len) + ")";
}

// The plan difference the story names: the first differing site's own, else the first
// (forward order) whose output was not seen to be equal.
const PlanDifference* main_plan(const RequestDiff& d) {
  for (const PlanDifference& p : d.plans) {
    if (p.is_first_site) return &p;
  }
  for (const PlanDifference& p : d.plans) {
    if (!p.output_checked_equal) return &p;
  }
  return nullptr;
}

std::string explain_cause(const RequestDiff& d) {
  std::string s;
  const PlanDifference* main = main_plan(d);
  const std::string ba = batch_str(d.batch_a), bb = batch_str(d.batch_b);
  if (d.cause == "routing" && d.routing) {
    const RoutingDifference& r = *d.routing;
    s += "routing: at layer " + std::to_string(r.layer) + " this token went to experts " +
         ints_str(r.experts_a) + " (" + outcomes_str(r.outcome_a) + ") in A and " +
         ints_str(r.experts_b) + " (" + outcomes_str(r.outcome_b) + ") in B";
    if (r.chosen_a != r.chosen_b) {
      s += "; the router's own top-k differs too (" + ints_str(r.chosen_a) + " vs " +
           ints_str(r.chosen_b) + "), so the router's input changed first";
    } else if (r.capacity_a > 0 || r.capacity_b > 0) {
      s += "; the router chose " + ints_str(r.chosen_a) +
           " in both runs: expert capacity decided (capacity " + std::to_string(r.capacity_a) +
           " vs " + std::to_string(r.capacity_b) + " per expert; at that layer A rerouted " +
           std::to_string(r.rerouted_a) + " and dropped " + std::to_string(r.dropped_a) + " of " +
           std::to_string(r.rows_a * static_cast<int64_t>(r.experts_a.size())) +
           " slots, B rerouted " + std::to_string(r.rerouted_b) + " and dropped " +
           std::to_string(r.dropped_b) + " of " +
           std::to_string(r.rows_b * static_cast<int64_t>(r.experts_b.size())) + ")";
    } else {
      s += "; the router chose " + ints_str(r.chosen_a) + " in both runs";
    }
    s += d.batch_differs ? " [A " + ba + ", B " + bb + "]" : " [same batch]";
    return s;
  }
  if ((d.cause == "plan" || d.cause == "arrival-order") && main) {
    if (main->arrival_only) {
      s += "the arrival-order reduction at " + main->site_name + ": A " + main->a_text + ", B " +
           main->b_text + " (production --atomics: partials combined in the order they " +
           "arrived" + (d.batch_differs ? "" : "; same batch, same plan otherwise") + ")";
      return s;
    }
    s += (main->is_first_site ? "" : main->site_name + ": ") + std::string("A ran ") +
         main->a_text + " (" + ba + "), B " + main->b_text + " (" + bb + ")";
    return s;
  }
  if (d.cause == "batch") {
    return "batch composition only: A " + ba + ", B " + bb +
           "; no recorded plan or routing of the ops feeding it differs";
  }
  if (d.cause == "weights") return "the runs used different weights";
  if (d.cause == "config") return "the runs used different engine configs (dtype / routing)";
  return "no recorded factor differs at this step (same batch shape, plans and routing)";
}

}  // namespace

std::string format_diff_story(const DiffReport& r, int max_explained) {
  std::string out;
  auto head = [&](const char* name, const std::string& path, const trace::RunHeader& h,
                  int64_t steps, int64_t requests, bool complete) {
    out += std::string(name) + ": " + path + " — " + h.model.name + ", " + h.engine.policy +
           (h.engine.atomics && h.engine.policy.find("atomics") == std::string::npos ? "+atomics"
                                                                                     : "") +
           ", " + std::to_string(requests) + (requests == 1 ? " request, " : " requests, ") +
           std::to_string(steps) + " steps" + (complete ? "" : " (truncated)") + "\n";
  };
  head("A", r.a_path, r.a_header, r.a_steps, r.a_requests, r.a_complete);
  head("B", r.b_path, r.b_header, r.b_steps, r.b_requests, r.b_complete);
  if (!r.header_differences.empty()) {
    out += "run settings that differ: ";
    for (size_t i = 0; i < r.header_differences.size(); ++i) {
      out += (i ? "; " : "") + r.header_differences[i];
    }
    out += "\n";
  }
  for (const std::string& n : r.notes) out += "note: " + n + "\n";
  out += std::to_string(r.requests.size()) + (r.requests.size() == 1 ? " request" : " requests") +
         " in common (aligned by " + r.alignment + ")";
  if (!r.only_a.empty()) out += "; " + std::to_string(r.only_a.size()) + " only in A";
  if (!r.only_b.empty()) out += "; " + std::to_string(r.only_b.size()) + " only in B";
  out += ".\n";
  if (r.requests.empty()) {
    out += "nothing to compare: no request of A matches one of B\n";
    return out;
  }

  int explained = 0;
  int identical = 0;
  for (const RequestDiff& d : r.requests) {
    std::string who = "request " + std::to_string(d.a) +
                      (d.a != d.b ? " (B: " + std::to_string(d.b) + ")" : "") +
                      (d.label.empty() ? "" : " \"" + d.label + "\"");
    if (d.verdict == Verdict::kIdentical) {
      ++identical;
      if (r.requests.size() <= 8 || !d.notes.empty()) {
        out += "\n" + who + ": identical (" + std::to_string(d.compared_logits) +
               " sampled positions, logits bit-identical; " + std::to_string(d.generated_a) +
               " vs " + std::to_string(d.generated_b) + " tokens generated).\n";
        for (const std::string& n : d.notes) out += "  note: " + n + "\n";
      }
      continue;
    }
    out += "\n" + who + ": ";
    if (d.verdict == Verdict::kVisible) {
      if (d.visible_position < d.prompt_len) {
        out += "split in the prompt (position " + std::to_string(d.visible_position) + ")";
      } else {
        out += "split at token " + std::to_string(d.visible_position - d.prompt_len) +
               " (position " + std::to_string(d.visible_position) + ")";
      }
      if (d.split_position >= 0 && d.split_position < d.visible_position - 1) {
        out += "; logits first differ at " + position_kind(d, d.split_position);
      }
      out += ".\n";
    } else {
      out += "numerical split only: logits first differ at " + position_kind(d, d.split_position) +
             ", every token is the same.\n";
    }
    if (explained >= max_explained) {
      out += "  (details omitted; see --json or --request)\n";
      continue;
    }
    ++explained;
    if (!d.cause.empty()) {
      std::string where;
      if (d.root_found) {
        where = "First difference at " + step_pair(d.batch_a.step, d.batch_b.step) + ", " +
                position_kind(d, d.root_position) + ", " + d.first_site + ": ";
      } else {
        where = "At " + step_pair(d.batch_a.step, d.batch_b.step) + " (the first differing " +
                "logits): ";
      }
      out += "  " + where + explain_cause(d) + ".\n";
      if (d.root_found) {
        out += "  There: " + fp_dist(d.site_a, d.site_b) + ".\n";
      }
      if (!d.capture_note.empty()) out += "  (" + d.capture_note + ")\n";
      // Other plans of that layer that differ.
      std::string others;
      int shown = 0, more = 0;
      for (const PlanDifference& p : d.plans) {
        if (&p == main_plan(d) && d.cause != "routing") continue;
        if (shown >= 3) {
          ++more;
          continue;
        }
        ++shown;
        others += (others.empty() ? "" : "; ") + p.site_name + " " + p.a_text + " vs " + p.b_text +
                  (p.output_checked_equal ? " (same bits)" : "");
      }
      if (more > 0) others += "; and " + std::to_string(more) + " more";
      if (!others.empty()) out += "  Other plans that differ there: " + others + ".\n";
      if (d.cause != "routing" && d.routing && d.routing->row_differs) {
        out += "  Routing of this token differs too at layer " + std::to_string(d.routing->layer) +
               ": " + ints_str(d.routing->experts_a) + " vs " + ints_str(d.routing->experts_b) +
               ".\n";
      }
    }
    if (d.split_position >= 0) {
      out += "  Logits first differ at " + position_kind(d, d.split_position) + ", " +
             step_pair(d.split_step_a, d.split_step_b) + ": " + fp_dist(d.logits_a, d.logits_b);
      if (d.logits_top_common > 0) {
        out += ", top-K values differ by up to " + g3(d.logits_top_max_delta);
      }
      out += ".\n";
    }
    if (d.verdict == Verdict::kVisible && d.visible_position >= d.prompt_len) {
      out += "  Token " + std::to_string(d.visible_position - d.prompt_len) + ": A " +
             d.token_a_text + " (margin " + g3(d.margin_a) + ") vs B " + d.token_b_text +
             " (margin " + g3(d.margin_b) + ").\n";
      out += "    A top-1 " + d.top1_a_text + " " + g6(d.top1_value_a) + ", top-2 " +
             d.top2_a_text + " " + g6(d.top2_value_a) + " | B top-1 " + d.top1_b_text + " " +
             g6(d.top1_value_b) + ", top-2 " + d.top2_b_text + " " + g6(d.top2_value_b) + "\n";
      out += "    context: ..." + d.context_text + "\n";
      out += "    A:       " + d.text_a + "\n";
      out += "    B:       " + d.text_b + "\n";
    }
    for (const std::string& n : d.notes) out += "  note: " + n + "\n";
  }
  if (identical > 0 && r.requests.size() > 8) {
    out += "\n" + std::to_string(identical) + " of " + std::to_string(r.requests.size()) +
           " common requests are identical.\n";
  }
  out += "\n";
  out += r.identical() ? "no split: every common request is bit-identical\n" : "runs differ\n";
  return out;
}

std::string diff_report_json(const DiffReport& r) {
  using nlohmann::json;
  auto fp = [](const trace::Fingerprint& f) {
    char b[24];
    std::snprintf(b, sizeof b, "%016" PRIx64, f.hash);
    return json{{"hash", b}, {"l2", f.l2}, {"max_abs", f.max_abs}};
  };
  auto batch = [](const BatchSide& b) {
    json segs = json::array();
    for (const trace::Segment& g : b.segments) {
      segs.push_back({{"request", g.request},
                      {"start", g.start},
                      {"count", g.count},
                      {"kind", trace::segment_kind_name(g.kind)}});
    }
    return json{{"step", b.step},
                {"rows", b.rows},
                {"requests", b.requests},
                {"prefill_segments", b.prefill_segments},
                {"decode_segments", b.decode_segments},
                {"batch_row", b.batch_row},
                {"segments", segs}};
  };
  json j;
  j["a"] = {{"path", r.a_path},
            {"model", r.a_header.model.name},
            {"policy", r.a_header.engine.policy},
            {"steps", r.a_steps},
            {"requests", r.a_requests},
            {"complete", r.a_complete},
            {"last_step", r.a_last_step}};
  j["b"] = {{"path", r.b_path},
            {"model", r.b_header.model.name},
            {"policy", r.b_header.engine.policy},
            {"steps", r.b_steps},
            {"requests", r.b_requests},
            {"complete", r.b_complete},
            {"last_step", r.b_last_step}};
  j["identical"] = r.identical();
  j["alignment"] = r.alignment;
  j["header_differences"] = r.header_differences;
  j["notes"] = r.notes;
  j["only_a"] = r.only_a;
  j["only_b"] = r.only_b;
  j["text_decoded"] = r.text_decoded;
  json reqs = json::array();
  for (const RequestDiff& d : r.requests) {
    json q;
    q["a"] = d.a;
    q["b"] = d.b;
    q["label"] = d.label;
    q["prompt_len"] = d.prompt_len;
    q["generated_a"] = d.generated_a;
    q["generated_b"] = d.generated_b;
    q["verdict"] = verdict_name(d.verdict);
    q["compared_logits"] = d.compared_logits;
    q["notes"] = d.notes;
    if (d.split_position >= 0) {
      q["numerical_split"] = {
          {"position", d.split_position},       {"step_a", d.split_step_a},
          {"step_b", d.split_step_b},           {"logits_a", fp(d.logits_a)},
          {"logits_b", fp(d.logits_b)},         {"top_k_max_delta", d.logits_top_max_delta},
          {"top_k_common", d.logits_top_common}};
    } else {
      q["numerical_split"] = nullptr;
    }
    if (!d.cause.empty()) {
      json first;
      first["position"] = d.root_position;
      first["site"] = d.first_site.empty() ? json(nullptr) : json(d.first_site);
      first["step_a"] = d.batch_a.step;
      first["step_b"] = d.batch_b.step;
      if (d.root_found) {
        first["fingerprint_a"] = fp(d.site_a);
        first["fingerprint_b"] = fp(d.site_b);
        first["common_sites"] = d.common_sites;
      }
      first["capture_note"] = d.capture_note;
      first["cause"] = d.cause;
      first["cause_text"] = explain_cause(d);
      first["batch_a"] = batch(d.batch_a);
      first["batch_b"] = batch(d.batch_b);
      first["batch_differs"] = d.batch_differs;
      json plans = json::array();
      for (const PlanDifference& p : d.plans) {
        plans.push_back({{"site", p.site_name},
                         {"a", p.in_a ? json(p.a_text) : json(nullptr)},
                         {"b", p.in_b ? json(p.b_text) : json(nullptr)},
                         {"arrival_only", p.arrival_only},
                         {"is_first_site", p.is_first_site},
                         {"output_checked_equal", p.output_checked_equal}});
      }
      first["plans"] = plans;
      if (d.routing) {
        const RoutingDifference& x = *d.routing;
        auto oc = [](const std::vector<trace::RouteOutcome>& v) {
          std::vector<std::string> s;
          for (trace::RouteOutcome o : v) s.push_back(trace::route_outcome_name(o));
          return s;
        };
        first["routing"] = {{"layer", x.layer},
                            {"chosen_a", x.chosen_a},
                            {"chosen_b", x.chosen_b},
                            {"experts_a", x.experts_a},
                            {"experts_b", x.experts_b},
                            {"outcome_a", oc(x.outcome_a)},
                            {"outcome_b", oc(x.outcome_b)},
                            {"capacity_a", x.capacity_a},
                            {"capacity_b", x.capacity_b},
                            {"rerouted_a", x.rerouted_a},
                            {"dropped_a", x.dropped_a},
                            {"rerouted_b", x.rerouted_b},
                            {"dropped_b", x.dropped_b},
                            {"row_differs", x.row_differs}};
      } else {
        first["routing"] = nullptr;
      }
      q["first_difference"] = first;
    } else {
      q["first_difference"] = nullptr;
    }
    if (d.visible_position >= 0) {
      q["visible_split"] = {{"position", d.visible_position},
                            {"token_index", d.visible_position - d.prompt_len},
                            {"top1_a", d.top1_a},
                            {"top2_a", d.top2_a},
                            {"top1_value_a", d.top1_value_a},
                            {"top2_value_a", d.top2_value_a},
                            {"margin_a", d.margin_a},
                            {"top1_b", d.top1_b},
                            {"top2_b", d.top2_b},
                            {"top1_value_b", d.top1_value_b},
                            {"top2_value_b", d.top2_value_b},
                            {"margin_b", d.margin_b},
                            {"context", d.context},
                            {"continuation_a", d.continuation_a},
                            {"continuation_b", d.continuation_b},
                            {"context_text", d.context_text},
                            {"text_a", d.text_a},
                            {"text_b", d.text_b}};
    } else {
      q["visible_split"] = nullptr;
    }
    reqs.push_back(q);
  }
  j["requests"] = reqs;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace llmrr::replay
