// Alignment: which request of A is compared with which of B (--align: prompt hash and the
// sampling params that can change the output, prompt hash alone, request id; or --request),
// and, when nothing pairs, which keys differed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "internal.h"

namespace llmrr::replay {
namespace diff_internal {
namespace {

// Greedy decoding (temperature <= 0, as the sampler treats it) ignores top-k, top-p and the
// seed, so they are not part of the key then: a run recorded with --seed aligns with one
// recorded without.
bool greedy(const trace::RequestRecord& r) { return !(r.temperature > 0.0f); }

}  // namespace

std::vector<int32_t> ReqSummary::sequence() const {
  std::vector<int32_t> s = rec.prompt;
  for (size_t p = rec.prompt.size(); p < tokens.size() && tokens[p] >= 0; ++p)
    s.push_back(tokens[p]);
  return s;
}

int32_t covering_length(const ReqSummary& a, const ReqSummary& b) {
  return tokens_cover(a.sequence(), a.rec.prompt.size(), b.sequence(), b.rec.prompt.size());
}

AlignKey align_key(const trace::RequestRecord& r, AlignBy by) {
  if (by == AlignBy::kIds) return {r.id, 0, 0, 0, 0};
  if (by == AlignBy::kTokens) return {0, 0, 0, 0, 0};  // paired at the end (pair_by_tokens)
  const uint64_t ph = trace::prompt_hash(r.prompt);
  if (by == AlignBy::kPrompt || greedy(r)) return {ph, 0, 0, 0, 0};
  uint32_t t, p;
  std::memcpy(&t, &r.temperature, 4);
  std::memcpy(&p, &r.top_p, 4);
  return {ph, t, r.top_k, p, r.seed};
}

void Matcher::add(int side, ReqSummary&& r) {
  std::optional<ReqSummary> other;
  Key key = key_of(side, r);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (o_.request) {
      RequestId want = side == 0 ? o_.request->first : o_.request->second;
      if (r.rec.id != want) return;
      found_[side] = true;
    }
    if (o_.align == AlignBy::kTokens && !o_.request) {
      pending_[side].emplace(key, std::move(r));  // paired once both scans are done
      return;
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

void Matcher::pair_by_tokens() {
  if (tokens_paired_) return;
  tokens_paired_ = true;
  auto by_arrival = [](std::map<Key, ReqSummary>& m) {
    std::vector<std::map<Key, ReqSummary>::iterator> v;
    for (auto it = m.begin(); it != m.end(); ++it) v.push_back(it);
    std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) {
      return x->second.arrival_index < y->second.arrival_index;
    });
    return v;
  };
  auto as = by_arrival(pending_[0]);
  auto bs = by_arrival(pending_[1]);
  // B's requests by their first token: a pair must share it.
  std::multimap<int32_t, size_t> by_first;
  for (size_t j = 0; j < bs.size(); ++j) {
    const auto& p = bs[j]->second.rec.prompt;
    if (!p.empty() && !is_padding_request(bs[j]->second.rec)) by_first.emplace(p[0], j);
  }
  std::vector<bool> used(bs.size(), false);
  for (auto& ia : as) {
    const ReqSummary& ra = ia->second;
    if (ra.rec.prompt.empty() || is_padding_request(ra.rec)) continue;
    size_t best = bs.size();
    auto [lo, hi] = by_first.equal_range(ra.rec.prompt[0]);
    for (auto it = lo; it != hi; ++it) {
      const size_t j = it->second;
      if (used[j] || (best < bs.size() && j > best)) continue;
      if (covering_length(ra, bs[j]->second) > 0) best = j;
    }
    if (best == bs.size()) continue;
    used[best] = true;
    pairs_.push_back(make_pair_work(ra, bs[best]->second, o_));
  }
  for (size_t j = bs.size(); j-- > 0;)
    if (used[j]) pending_[1].erase(bs[j]);
  for (auto it = pending_[0].begin(); it != pending_[0].end();) {
    bool paired = false;
    for (const PairWork& w : pairs_) paired = paired || w.d.a == it->second.rec.id;
    it = paired ? pending_[0].erase(it) : std::next(it);
  }
}

std::vector<PairWork> Matcher::take_pairs() {
  if (o_.align == AlignBy::kTokens && !o_.request) pair_by_tokens();
  std::sort(pairs_.begin(), pairs_.end(),
            [](const PairWork& x, const PairWork& y) { return x.order < y.order; });
  return std::move(pairs_);
}

std::vector<RequestId> Matcher::unmatched(int side) const {
  std::vector<std::pair<int64_t, RequestId>> v;
  for (const auto& [k, r] : pending_[side]) v.push_back({r.arrival_index, r.rec.id});
  std::sort(v.begin(), v.end());
  std::vector<RequestId> out;
  for (const auto& x : v) out.push_back(x.second);
  return out;
}

std::string Matcher::why_unmatched() const {
  const ReqSummary* first = nullptr;
  for (const auto& [k, r] : pending_[0]) {
    if (!first || r.arrival_index < first->arrival_index) first = &r;
  }
  if (!first) return "A has no request";
  const trace::RequestRecord& ra = first->rec;
  const uint64_t ph = trace::prompt_hash(ra.prompt);
  std::string who = "A's request " + std::to_string(ra.id);
  if (o_.align == AlignBy::kTokens) {
    return who + "'s tokens (" + std::to_string(first->sequence().size()) +
           ", prompt and completion) neither extend nor are extended by those of any request "
           "of B over both prompts";
  }
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

std::string Matcher::fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

RequestId Matcher::first_id(int side) const {
  RequestId best = 0;
  bool any = false;
  for (const auto& [k, r] : pending_[side]) {
    if (!any || r.rec.id < best) best = r.rec.id;
    any = true;
  }
  return best;
}

Matcher::Key Matcher::key_of(int side, const ReqSummary& r) const {
  if (o_.request) return {AlignKey{}, 0};
  if (o_.align == AlignBy::kTokens)  // unique per summary: paired by pair_by_tokens
    return {AlignKey{static_cast<uint64_t>(r.arrival_index), 0, 0, 0, 0}, 0};
  return {r.key, r.occurrence};
}

}  // namespace diff_internal

int32_t tokens_cover(const std::vector<int32_t>& x, size_t prompt_a, const std::vector<int32_t>& y,
                     size_t prompt_b) {
  const size_t c = std::min(x.size(), y.size());
  if (c == 0 || c < prompt_a || c < prompt_b || c > static_cast<size_t>(INT32_MAX)) return -1;
  if (!std::equal(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(c), y.begin())) return -1;
  return static_cast<int32_t>(c);
}

const char* align_by_name(AlignBy a) {
  switch (a) {
    case AlignBy::kPromptAndParams:
      return "prompt hash and sampling params";
    case AlignBy::kPrompt:
      return "prompt hash";
    case AlignBy::kIds:
      return "request id";
    case AlignBy::kTokens:
      return "token sequence";
  }
  return "?";
}

}  // namespace llmrr::replay
