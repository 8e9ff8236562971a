// Pass 1 of diff_traces: one streaming read per trace, each request summarized by position
// (the step and batch row of each row, an order-free digest of its fingerprints, its sampled
// logits and tokens) and emitted when it finishes.
#include <algorithm>

#include "internal.h"
#include "llmrr/format/site.h"

namespace llmrr::replay::diff_internal {
namespace {

// Order-free mix of (site, fingerprint hash): a row's digest is the sum over its sites, so
// the order the sites come in does not matter.
inline uint64_t mix(uint64_t site, uint64_t hash) {
  uint64_t z = hash ^ (site * 0x9E3779B97F4A7C15ull) ^ 0x5851F42D4C957F2Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

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

}  // namespace

Result<bool> Scanner::next() {
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

void Scanner::take_step() {
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

void Scanner::finish() {
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

}  // namespace llmrr::replay::diff_internal
