// mismatch_traces: one read of each trace into per-request, per-position summaries, requests
// paired by tokens, then per token the two log-probs and the first differing site, and the
// statistics RL frameworks report (mismatch.h).
#include "llmrr/replayer/mismatch.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <unordered_map>
#include <utility>

#include "llmrr/format/site.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/diff.h"

namespace llmrr::replay {
namespace {

struct Logit {
  bool present = false;
  uint64_t hash = 0;
  std::optional<double> lse;
  std::vector<int32_t> ids;
  std::vector<float> values;
};

struct Position {
  std::vector<std::pair<uint64_t, uint64_t>> sites;  // (packed site, hash), sorted by site
  Logit logit;
  std::map<int32_t, std::vector<int32_t>> routed;  // layer -> chosen experts, sorted
};

struct Req {
  trace::RequestRecord rec;
  int64_t arrival = 0;
  std::map<int32_t, int32_t> generated;  // position -> token
  std::map<int32_t, Position> at;  // by position: only those a record names (a hostile trace's
                                   // far positions cost nothing)

  std::vector<int32_t> sequence() const {
    std::vector<int32_t> s = rec.prompt;
    for (auto it = generated.find(static_cast<int32_t>(rec.prompt.size()));
         it != generated.end() && it->first == static_cast<int32_t>(s.size()); ++it)
      s.push_back(it->second);
    return s;
  }
};

constexpr int32_t kMaxPosition = 1 << 24;

struct Scanned {
  trace::RunHeader header;
  std::vector<std::unique_ptr<Req>> requests;  // arrival order
};

Result<Scanned> scan(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<trace::TraceReader> reader, trace::TraceReader::open(path));
  Scanned out;
  out.header = reader->run_header();
  std::unordered_map<uint64_t, Req*> by_id;
  trace::StepCursor cur = reader->steps();
  trace::StepRecord s;
  std::vector<std::pair<Req*, int32_t>> rows;  // batch row -> (request, position)
  for (;;) {
    Result<bool> got = cur.next(&s);
    if (!got.ok()) return got.status().with_context(path + ": ");
    if (!*got) break;
    for (trace::RequestRecord& a : s.arrivals) {
      if (by_id.count(a.id)) continue;
      auto r = std::make_unique<Req>();
      r->rec = std::move(a);
      r->arrival = static_cast<int64_t>(out.requests.size());
      by_id[r->rec.id] = r.get();
      out.requests.push_back(std::move(r));
    }
    rows.clear();
    for (const trace::Segment& g : s.segments) {
      auto it = by_id.find(g.request);
      for (int32_t j = 0; j < g.count; ++j) {
        const int32_t p = g.start + j;
        const bool ok = it != by_id.end() && g.start >= 0 && p < kMaxPosition;
        rows.push_back({ok ? it->second : nullptr, p});
      }
    }
    for (const trace::SiteRows& sr : s.rows) {
      for (size_t k = 0; k < sr.rows.size(); ++k) {
        const int64_t b = sr.batch_rows.empty() ? static_cast<int64_t>(k) : sr.batch_rows[k];
        if (b < 0 || b >= static_cast<int64_t>(rows.size()) || !rows[b].first) continue;
        rows[b].first->at[rows[b].second].sites.push_back({sr.site, sr.rows[k].hash});
      }
    }
    for (const trace::Routing& ro : s.routing) {
      if (ro.k < 1 || ro.rows != static_cast<int32_t>(rows.size())) continue;
      for (int32_t b = 0; b < ro.rows; ++b) {
        if (!rows[b].first) continue;
        std::vector<int32_t> chosen;
        for (int32_t k = 0; k < ro.k; ++k) {
          const size_t i = static_cast<size_t>(b) * static_cast<size_t>(ro.k) + k;
          if (i < ro.chosen.size()) chosen.push_back(ro.chosen[i]);
        }
        std::sort(chosen.begin(), chosen.end());
        rows[b].first->at[rows[b].second].routed[ro.layer] = std::move(chosen);
      }
    }
    for (trace::LogitsRecord& l : s.logits) {
      auto it = by_id.find(l.request);
      if (it == by_id.end() || l.position < 0 || l.position >= kMaxPosition) continue;
      Logit& x = it->second->at[l.position].logit;
      x.present = true;
      x.hash = l.full.hash;
      x.lse = l.logsumexp;
      x.ids = std::move(l.top_ids);
      x.values = std::move(l.top_values);
    }
    for (const trace::TokenRecord& t : s.tokens) {
      auto it = by_id.find(t.request);
      if (it == by_id.end() || t.position < 0 || t.position >= kMaxPosition) continue;
      it->second->generated[t.position] = t.token;
    }
  }
  for (auto& r : out.requests)
    for (auto& [pos, p] : r->at) std::sort(p.sites.begin(), p.sites.end());
  return out;
}

std::optional<double> logprob(const Logit& l, int32_t token) {
  if (!l.lse) return std::nullopt;
  for (size_t k = 0; k < l.ids.size() && k < l.values.size(); ++k)
    if (l.ids[k] == token) return static_cast<double>(l.values[k]) - *l.lse;
  return std::nullopt;
}

// The first site, forward order, that both positions hold and whose hashes differ.
std::optional<SiteId> first_differing_site(const Position& x, const Position& y) {
  std::optional<SiteId> first;
  size_t i = 0, j = 0;
  while (i < x.sites.size() && j < y.sites.size()) {
    if (x.sites[i].first < y.sites[j].first) {
      ++i;
    } else if (y.sites[j].first < x.sites[i].first) {
      ++j;
    } else {
      if (x.sites[i].second != y.sites[j].second) {
        const SiteId s = SiteId::unpack(x.sites[i].first);
        if (!first || s < *first) first = s;
      }
      ++i, ++j;
    }
  }
  return first;
}

// Running sums for MismatchStats.
struct Acc {
  MismatchStats st;
  double sum_dlogp = 0, sum_dp = 0, sum_k3 = 0, sum_chi2 = 0;
  double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;

  void add(const TokenMismatch& t, double threshold) {
    if (!t.logits_equal) ++st.logits_differ;
    if (!t.logp_a || !t.logp_b) {
      ++st.unknown;
      return;
    }
    const double a = *t.logp_a, b = *t.logp_b;
    const double d = std::fabs(a - b), dp = std::fabs(std::exp(a) - std::exp(b));
    const double r = b - a, e = std::exp(r);
    ++st.tokens;
    sum_dlogp += d;
    sum_dp += dp;
    sum_k3 += e - 1.0 - r;
    sum_chi2 += (e - 1.0) * (e - 1.0);
    st.max_abs_dlogp = std::max(st.max_abs_dlogp, d);
    st.max_abs_dp = std::max(st.max_abs_dp, dp);
    if (d > threshold) ++st.past_threshold;
    sa += a, sb += b, saa += a * a, sbb += b * b, sab += a * b;
  }

  MismatchStats done() const {
    MismatchStats out = st;
    const double n = static_cast<double>(st.tokens);
    out.pearson = std::nan("");
    if (st.tokens == 0) return out;
    out.mean_abs_dlogp = sum_dlogp / n;
    out.mean_abs_dp = sum_dp / n;
    out.k3_kl = sum_k3 / n;
    out.chi2 = sum_chi2 / n;
    const double va = saa - sa * sa / n, vb = sbb - sb * sb / n, cov = sab - sa * sb / n;
    if (st.tokens >= 2 && va > 0 && vb > 0) out.pearson = cov / std::sqrt(va * vb);
    return out;
  }
};

}  // namespace

bool MismatchReport::identical() const {
  if (requests.empty()) return false;
  for (const RequestMismatch& r : requests)
    for (const TokenMismatch& t : r.tokens)
      if (!t.logits_equal) return false;
  return true;
}

Result<MismatchReport> mismatch_traces(const std::string& a_path, const std::string& b_path,
                                       const MismatchOptions& o) {
  if (!(o.threshold >= 0) || !std::isfinite(o.threshold))
    return make_error(ErrorCode::kInvalidArgument, "--threshold: expected a finite value >= 0");
  ASSIGN_OR_RETURN(Scanned a, scan(a_path));
  ASSIGN_OR_RETURN(Scanned b, scan(b_path));
  MismatchReport rep;
  rep.a_path = a_path;
  rep.b_path = b_path;
  rep.a_producer = a.header.tool_version;
  rep.b_producer = b.header.tool_version;
  rep.threshold = o.threshold;
  rep.fingerprint_a = trace::fingerprint_kind(a.header.engine);
  rep.fingerprint_b = trace::fingerprint_kind(b.header.engine);
  rep.sites_comparable = rep.fingerprint_a == rep.fingerprint_b;

  // Pairing: A's requests in arrival order, each with the first unused B request it covers.
  std::multimap<int32_t, size_t> b_by_first;
  std::vector<std::vector<int32_t>> b_seq(b.requests.size());
  for (size_t j = 0; j < b.requests.size(); ++j) {
    if (is_padding_request(b.requests[j]->rec)) continue;
    b_seq[j] = b.requests[j]->sequence();
    if (!b_seq[j].empty()) b_by_first.emplace(b_seq[j][0], j);
  }
  std::vector<bool> used(b.requests.size(), false);
  Acc total;
  std::map<int32_t, std::pair<int64_t, int64_t>> routing;  // layer -> (positions, same)
  for (const auto& ra : a.requests) {
    if (is_padding_request(ra->rec)) continue;
    const std::vector<int32_t> sa = ra->sequence();
    size_t best = b.requests.size();
    int32_t covered = -1;
    if (!sa.empty()) {
      auto [lo, hi] = b_by_first.equal_range(sa[0]);
      for (auto it = lo; it != hi; ++it) {
        const size_t j = it->second;
        if (used[j] || j >= best) continue;
        const int32_t c =
            tokens_cover(sa, ra->rec.prompt.size(), b_seq[j], b.requests[j]->rec.prompt.size());
        if (c > 0) best = j, covered = c;
      }
    }
    if (best == b.requests.size()) {
      rep.only_a.push_back(ra->rec.id);
      continue;
    }
    used[best] = true;
    const Req& rb = *b.requests[best];
    // The token predicted at p is the longer sequence's p + 1: both runs' inputs up to p are
    // the common ones, for every p below the covered length.
    const std::vector<int32_t>& seq = b_seq[best].size() >= sa.size() ? b_seq[best] : sa;
    RequestMismatch m;
    m.a = ra->rec.id;
    m.b = rb.rec.id;
    m.label = ra->rec.label;
    m.prompt_len_a = static_cast<int32_t>(ra->rec.prompt.size());
    m.prompt_len_b = static_cast<int32_t>(rb.rec.prompt.size());
    m.covered = covered;
    Acc acc;
    for (const auto& [p, x] : ra->at) {
      if (p >= covered) break;
      auto yit = rb.at.find(p);
      if (yit == rb.at.end()) continue;
      const Position& y = yit->second;
      for (const auto& [layer, chosen] : x.routed) {
        auto it = y.routed.find(layer);
        if (it == y.routed.end()) continue;
        auto& [positions, same] = routing[layer];
        ++positions;
        same += chosen == it->second ? 1 : 0;
      }
      if (!x.logit.present || !y.logit.present || p + 1 >= static_cast<int32_t>(seq.size()))
        continue;
      TokenMismatch t;
      t.position = p;
      t.token = seq[static_cast<size_t>(p) + 1];
      t.logp_a = logprob(x.logit, t.token);
      t.logp_b = logprob(y.logit, t.token);
      t.logits_equal = x.logit.hash == y.logit.hash;
      if (!t.logits_equal) {
        const std::optional<SiteId> s =
            rep.sites_comparable ? first_differing_site(x, y) : std::nullopt;
        t.first_site = s ? site_name(*s) : "logits";
        t.first_layer = s ? s->layer : -1;
        ++rep.first_layer_histogram[t.first_layer];
        ++rep.first_site_histogram[t.first_site];
      }
      acc.add(t, o.threshold);
      total.add(t, o.threshold);
      m.tokens.push_back(std::move(t));
    }
    m.stats = acc.done();
    rep.requests.push_back(std::move(m));
  }
  for (size_t j = 0; j < b.requests.size(); ++j)
    if (!used[j] && !is_padding_request(b.requests[j]->rec)) rep.only_b.push_back(b.requests[j]->rec.id);
  rep.total = total.done();
  for (const auto& [layer, c] : routing) rep.routing.push_back({layer, c.first, c.second});
  if (rep.requests.empty()) {
    std::string why = a.requests.empty()   ? a_path + " has no request"
                      : b.requests.empty() ? b_path + " has no request"
                                           : "A's request " +
                                                 std::to_string(a.requests[0]->rec.id) +
                                                 "'s prompt + completion neither extends nor is "
                                                 "extended by that of any request of B";
    return make_error(ErrorCode::kInvalidArgument,
                      "nothing to compare: no request of " + a_path + " has its tokens in " +
                          b_path + " (" + why + ")");
  }
  return rep;
}

}  // namespace llmrr::replay
