// Alignment: which request of A is compared with which of B (--align: prompt hash and the
// sampling params that can change the output, prompt hash alone, request id; or --request),
// and, when nothing pairs, which keys differed.
#include <algorithm>
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

AlignKey align_key(const trace::RequestRecord& r, AlignBy by) {
  if (by == AlignBy::kIds) return {r.id, 0, 0, 0, 0};
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

std::vector<PairWork> Matcher::take_pairs() {
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
  return {r.key, r.occurrence};
}

}  // namespace diff_internal

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

}  // namespace llmrr::replay
