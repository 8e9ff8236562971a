// Split points: for each aligned pair the visible split (first differing token) and the
// numerical split (first differing logits), the rows worth a look before them, and in pass 2
// the first differing site among the sites both traces hold (Explainer::explain).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "internal.h"
#include "llmrr/format/site.h"

namespace llmrr::replay::diff_internal {

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
  const bool both_all = a_.run_header().engine.capture == trace::CaptureLevel::kAll &&
                        b_.run_header().engine.capture == trace::CaptureLevel::kAll;
  d->capture_note =
      w->split_row_has_no_sites
          ? "no row fingerprints were captured for this request (capture none, or a trace "
            "from the C ABI without sites): the first difference is known only from the "
            "logits; record with --capture all to name the op"
          : both_all ? "every captured site agrees up to the logits, final_norm included: the "
                       "difference arises in the LM head (the logits GEMM)"
                     : "every captured site agrees up to the logits: the difference arises after "
                       "the last captured site; record with --capture all to name the op";
  causes(sa, sb, d);
  return Status::Ok();
}

namespace {

void compare_request(const ReqSummary& ra, const ReqSummary& rb, const DiffOptions& o,
                     RequestDiff* d) {
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
  // --align tokens: the sequences agree over the covering length by construction (one
  // request's completion is in the other's prompt), so no token splits there; the logits are
  // compared at every position both sampled below it, from the first.
  const bool by_tokens = o.align == AlignBy::kTokens && !o.request;
  const int32_t covered = by_tokens ? covering_length(ra, rb) : -1;
  if (by_tokens && pa != pb) {
    d->notes.push_back("paired by tokens over " + std::to_string(covered) + " positions (A's prompt " +
                       std::to_string(pa.size()) + ", B's " + std::to_string(pb.size()) + ")");
  }
  if (pa != pb && !by_tokens) {
    size_t q = 0;
    while (q < pa.size() && q < pb.size() && pa[q] == pb[q]) ++q;
    d->visible_position = static_cast<int32_t>(q);
    d->notes.push_back("the prompts differ from position " + std::to_string(q) + " (A " +
                       std::to_string(pa.size()) + " tokens, B " + std::to_string(pb.size()) +
                       "): the pair was made by id, and the runs split at the input");
  }
  // Visible split: the first token position that differs.
  const int32_t nt =
      by_tokens ? 0 : static_cast<int32_t>(std::min(ra.tokens.size(), rb.tokens.size()));
  for (int32_t p = L; p < nt && d->visible_position < 0; ++p) {
    if (ra.tokens[p] < 0 || rb.tokens[p] < 0) break;
    if (ra.tokens[p] != rb.tokens[p]) {
      d->visible_position = p;
      break;
    }
  }
  // Numerical split: the first sampled row whose logits differ, among rows whose inputs
  // are the same (positions before the visible split).
  const int32_t limit = by_tokens                   ? covered - 1
                        : d->visible_position >= 0 ? d->visible_position - 1
                                                   : INT32_MAX;
  const int32_t ns = static_cast<int32_t>(std::min(ra.samples.size(), rb.samples.size()));
  for (int32_t p = by_tokens ? 0 : std::max(L - 1, 0); p < ns && p <= limit; ++p) {
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

}  // namespace

// Compares one aligned pair and keeps what pass 2 needs.
PairWork make_pair_work(const ReqSummary& ra, const ReqSummary& rb, const DiffOptions& o) {
  PairWork w;
  w.order = ra.arrival_index;
  RequestDiff& d = w.d;
  compare_request(ra, rb, o, &d);
  gather_split_tokens(ra, rb, o, &d);
  // Candidate rows: positions up to the numerical split (or every comparable row when the
  // logits agree) whose digests differ.
  int32_t last = d.split_position >= 0     ? d.split_position
                 : d.visible_position >= 0 ? d.visible_position - 1
                                           : INT32_MAX;
  const int32_t n = static_cast<int32_t>(std::min(ra.rows.size(), rb.rows.size()));
  last = std::min(last, n - 1);
  if (o.align == AlignBy::kTokens && !o.request) last = std::min(last, covering_length(ra, rb) - 1);
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

}  // namespace llmrr::replay::diff_internal
