#include "check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace llmrr::trace::detail {

namespace {

std::string num(int64_t v) {
  return std::to_string(v);
}
std::string unum(uint64_t v) {
  return std::to_string(v);
}
std::string idx(const char* list, size_t i) {
  return std::string(list) + "[" + std::to_string(i) + "]";
}

}  // namespace

// "rows[7]: expected each site once, found site 42 twice", or "" when sites are unique.
template <typename T>
std::string SemanticChecker::duplicate_site(const std::vector<T>& v, const char* list) {
  scratch_ids_.clear();
  for (const T& x : v) scratch_ids_.push_back(x.site);
  std::sort(scratch_ids_.begin(), scratch_ids_.end());
  for (size_t i = 1; i < scratch_ids_.size(); ++i) {
    if (scratch_ids_[i] != scratch_ids_[i - 1]) continue;
    size_t second = 0, seen = 0;
    for (size_t k = 0; k < v.size(); ++k)
      if (v[k].site == scratch_ids_[i] && ++seen == 2) second = k;
    return idx(list, second) + ": expected each site once, found site " + unum(scratch_ids_[i]) +
           " twice";
  }
  return {};
}

std::string plan_problem(const PlanRecord& p) {
  if (static_cast<uint8_t>(p.op) > 3)
    return "op: expected 0..3 (gemm, rmsnorm, attention, combine), found " +
           num(static_cast<uint8_t>(p.op));
  if (static_cast<uint8_t>(p.mode) > 1)
    return "mode: expected 0 (count) or 1 (size), found " + num(static_cast<uint8_t>(p.mode));
  if (static_cast<uint8_t>(p.order) > 1)
    return "order: expected 0 (fixed) or 1 (arrival), found " + num(static_cast<uint8_t>(p.order));
  if (p.splits < 1) return "splits: expected >= 1, found 0";
  if (p.k_tile % 16 != 0) return "k_tile: expected a multiple of 16, found " + unum(p.k_tile);
  if (p.op == OpKind::kAttention && p.mode == SplitMode::kSize && p.split_size < 1)
    return "split_size: expected >= 1 for attention split by size, found 0";
  if (p.cublaslt) {
    // The bounds kernels/cublaslt_plan.h's check() states (format depends on nothing of ours).
    const CublasLtAlgoRecord& a = *p.cublaslt;
    if (p.op != OpKind::kGemm)
      return std::string("cublaslt: expected only on gemm plans, found it on ") + op_kind_name(p.op);
    if (p.order != CombineOrder::kFixed || p.k_tile != 0)
      return "cublaslt: expected fixed order and k_tile 0 with a cuBLASLt algorithm";
    if (a.algo_id < 0) return "cublaslt.algo_id: expected >= 0, found " + num(a.algo_id);
    if (a.splitk < 1 || a.splitk > 1024)
      return "cublaslt.splitk: expected 1..1024, found " + num(a.splitk);
    if (p.splits != static_cast<uint32_t>(a.splitk))
      return "splits: expected the cuBLASLt split-K " + num(a.splitk) + ", found " + unum(p.splits);
    if (a.reduction != 0 && a.reduction != 1 && a.reduction != 2 && a.reduction != 4)
      return "cublaslt.reduction: expected 0, 1, 2 or 4, found " + unum(a.reduction);
    if (a.splitk == 1 && a.reduction != 0)
      return "cublaslt.reduction: expected 0 (none) with split-K 1, found " + unum(a.reduction);
    if (a.swizzle > 1) return "cublaslt.swizzle: expected 0 or 1, found " + unum(a.swizzle);
    if (a.workspace > (uint64_t{1} << 32))
      return "cublaslt.workspace: expected at most 4 GiB, found " + unum(a.workspace) + " bytes";
    for (int32_t t : {a.scale_type, a.a_type, a.b_type, a.c_type})
      if (t != 0 && t != 2 && t != 14)
        return "cublaslt types: expected cudaDataType f32 (0), f16 (2) or bf16 (14), found " +
               num(t);
  }
  if (p.order == CombineOrder::kFixed && !p.arrival.empty())
    return "arrival: expected empty for fixed order, found " + unum(p.arrival.size()) + " entries";
  if (p.order == CombineOrder::kArrival) {
    if (p.op == OpKind::kRmsNorm || p.op == OpKind::kAttention)
      return std::string("order: expected fixed for ") + op_kind_name(p.op) +
             " (only gemm and combine reduce in arrival order), found arrival";
    if (p.arrival.empty()) return "arrival: expected a permutation for arrival order, found none";
    if (p.op == OpKind::kGemm) {
      if (p.arrival.size() != p.splits)
        return "arrival: expected a permutation of 0.." + unum(p.splits - 1) + " (" +
               unum(p.splits) + " entries), found " + unum(p.arrival.size()) + " entries";
      std::vector<bool> seen(p.splits, false);
      for (uint16_t a : p.arrival) {
        if (a >= p.splits || seen[a])
          return "arrival: expected a permutation of 0.." + unum(p.splits - 1) + ", found " +
                 (a >= p.splits ? "out-of-range " : "repeated ") + "entry " + unum(a);
        seen[a] = true;
      }
    }
  }
  return {};
}

std::string SemanticChecker::check_step(const StepRecord& s, int64_t blob_count) {
  const std::string at = "step " + num(s.step) + ": ";  // once per step
  if (s.step < 0) return at + "expected a step number >= 0, found " + num(s.step);
  if (any_ && s.step <= last_step_)
    return at + "expected a step number > " + num(last_step_) +
           " (steps strictly increasing), found " + num(s.step);

  // Arrivals. (Sets of ids are sorted scratch vectors: no allocation per element, which
  // matters because the writer runs these checks on every step it records.)
  std::vector<uint64_t>& arriving = arriving_;
  arriving.clear();
  for (const RequestRecord& r : s.arrivals) arriving.push_back(r.id);
  std::sort(arriving.begin(), arriving.end());
  auto arrives = [&](uint64_t id) {
    return std::binary_search(arriving.begin(), arriving.end(), id);
  };
  for (size_t i = 0; i < s.arrivals.size(); ++i) {
    const RequestRecord& r = s.arrivals[i];
    auto where = [&] {
      return at + idx("arrivals", i) + ": request " + unum(r.id) + ": ";
    };  // built only on failure
    if (by_id_.count(r.id) || std::upper_bound(arriving.begin(), arriving.end(), r.id) -
                                      std::lower_bound(arriving.begin(), arriving.end(), r.id) >
                                  1)
      return where() + "expected a new request id, found one that already arrived";
    if (!(r.temperature >= 0.0f) || !std::isfinite(r.temperature))
      return where() + "temperature: expected a finite value >= 0, found " +
             std::to_string(r.temperature);
    if (!(r.top_p >= 0.0f && r.top_p <= 1.0f))
      return where() + "top_p: expected a value in [0, 1], found " + std::to_string(r.top_p);
    if (r.top_k < 0) return where() + "top_k: expected >= 0, found " + num(r.top_k);
    if (r.max_tokens < 0) return where() + "max_tokens: expected >= 0, found " + num(r.max_tokens);
    if (!r.carried && !r.history.empty())
      return where() + "history: expected none for a request that was not carried (" +
             unum(r.history.size()) + " tokens)";
  }
  auto live = [&](uint64_t id) {
    if (arrives(id)) return true;
    auto it = by_id_.find(id);
    return it != by_id_.end() && !it->second.finished;
  };
  auto why_not_live = [&](uint64_t id) -> std::string {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return "found request " + unum(id) + ", which has not arrived";
    return "found request " + unum(id) + ", which finished at step " +
           num(requests_[it->second.index].finish_step);
  };

  // Segments.
  int64_t rows = 0;
  in_step_.clear();
  for (size_t i = 0; i < s.segments.size(); ++i) {
    const Segment& g = s.segments[i];
    auto where = [&] { return at + idx("segments", i) + ": "; };  // built only on failure
    if (!live(g.request))
      return where() + "expected a request that arrived and is running, " + why_not_live(g.request);
    if (static_cast<uint8_t>(g.kind) > 1)
      return where() + "kind: expected 0 (prefill) or 1 (decode), found " +
             num(static_cast<uint8_t>(g.kind));
    if (g.start < 0) return where() + "start: expected >= 0, found " + num(g.start);
    if (g.count < 1) return where() + "count: expected >= 1, found " + num(g.count);
    if (g.kind == SegmentKind::kDecode && g.count != 1)
      return where() + "count: expected 1 for a decode segment, found " + num(g.count);
    if (g.cached < 0 || g.cached > g.start)
      return where() + "cached: expected a value in [0, start=" + num(g.start) + "], found " +
             num(g.cached);
    rows += g.count;
    if (rows > std::numeric_limits<int32_t>::max())
      return where() + "expected at most 2^31-1 rows in a step, found more";
    in_step_.emplace_back(g.request, g.sample);
  }
  const bool know_rows = !s.segments.empty();
  // request -> has a sampling segment in this step
  std::sort(in_step_.begin(), in_step_.end());
  auto sampled_in_step = [&](uint64_t id) {
    auto it = std::lower_bound(in_step_.begin(), in_step_.end(), std::make_pair(id, true));
    return it != in_step_.end() && it->first == id;  // (id, true) sorts after (id, false)
  };

  // Plans.
  if (std::string d = duplicate_site(s.plans, "plans"); !d.empty()) return at + d;
  for (size_t i = 0; i < s.plans.size(); ++i) {
    std::string e = plan_problem(s.plans[i].plan);
    if (!e.empty()) return at + idx("plans", i) + " (site " + unum(s.plans[i].site) + "): " + e;
  }

  // Fingerprints.
  if (std::string d = duplicate_site(s.rows, "rows"); !d.empty()) return at + d;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const SiteRows& r = s.rows[i];
    auto where = [&] {
      return at + idx("rows", i) + " (site " + unum(r.site) + "): ";
    };  // built only on failure
    if (r.cols < 0) return where() + "cols: expected >= 0, found " + num(r.cols);
    if (!r.batch_rows.empty() && r.batch_rows.size() != r.rows.size())
      return where() + "batch_rows: expected " + unum(r.rows.size()) +
             " entries (one per fingerprint), found " + unum(r.batch_rows.size());
    if (know_rows) {
      if (r.batch_rows.empty() && static_cast<int64_t>(r.rows.size()) > rows)
        return where() + "expected at most " + num(rows) +
               " fingerprints (the step's rows), found " + unum(r.rows.size());
      for (size_t k = 0; k < r.batch_rows.size(); ++k)
        if (r.batch_rows[k] < 0 || r.batch_rows[k] >= rows)
          return where() + idx("batch_rows", k) + ": expected a batch row in [0, " + num(rows) +
                 "), found " + num(r.batch_rows[k]);
    }
  }

  // Routing.
  {
    std::vector<uint64_t>& layers = scratch_ids_;
    layers.clear();
    for (const Routing& r : s.routing)
      layers.push_back(static_cast<uint64_t>(static_cast<uint32_t>(r.layer)));
    std::sort(layers.begin(), layers.end());
    for (size_t i = 1; i < layers.size(); ++i)
      if (layers[i] == layers[i - 1])
        return at + "routing: expected each layer once, found layer " +
               num(static_cast<int32_t>(static_cast<uint32_t>(layers[i]))) + " twice";
  }
  for (size_t i = 0; i < s.routing.size(); ++i) {
    const Routing& r = s.routing[i];
    auto where = [&] {
      return at + idx("routing", i) + " (layer " + num(r.layer) + "): ";
    };  // built only on failure
    if (r.k < 1) return where() + "k: expected >= 1, found " + num(r.k);
    if (r.experts_total < 1 || r.experts_total > 32767)
      return where() + "experts_total: expected a value in [1, 32767], found " +
             num(r.experts_total);
    if (r.rows < 0) return where() + "rows: expected >= 0, found " + num(r.rows);
    if (know_rows && r.rows != rows)
      return where() + "rows: expected " + num(rows) + " (the step's rows), found " + num(r.rows);
    if (r.capacity < 0) return where() + "capacity: expected >= 0, found " + num(r.capacity);
    const uint64_t n = static_cast<uint64_t>(r.rows) * static_cast<uint64_t>(r.k);
    const char* names[4] = {"chosen", "experts", "gates", "outcome"};
    const size_t sizes[4] = {r.chosen.size(), r.experts.size(), r.gates.size(), r.outcome.size()};
    for (int a = 0; a < 4; ++a)
      if (sizes[a] != n)
        return where() + names[a] + ": expected rows x k = " + unum(n) + " entries, found " +
               unum(sizes[a]);
    for (uint64_t k = 0; k < n; ++k) {
      if (r.chosen[k] < 0 || r.chosen[k] >= r.experts_total)
        return where() + idx("chosen", k) + ": expected an expert in [0, " + num(r.experts_total) +
               "), found " + num(r.chosen[k]);
      if (r.experts[k] < -1 || r.experts[k] >= r.experts_total)
        return where() + idx("experts", k) + ": expected -1 or an expert in [0, " +
               num(r.experts_total) + "), found " + num(r.experts[k]);
      const uint8_t o = static_cast<uint8_t>(r.outcome[k]);
      if (o > 2)
        return where() + idx("outcome", k) + ": expected 0..2 (kept, rerouted, dropped), found " +
               num(o);
      if ((r.outcome[k] == RouteOutcome::kDropped) != (r.experts[k] == -1))
        return where() + idx("outcome", k) +
               ": expected 'dropped' exactly where experts is -1, found " +
               route_outcome_name(r.outcome[k]) + " with expert " + num(r.experts[k]);
    }
  }

  // Logits.
  for (size_t i = 0; i < s.logits.size(); ++i) {
    const LogitsRecord& l = s.logits[i];
    auto where = [&] {
      return at + idx("logits", i) + " (request " + unum(l.request) + "): ";
    };  // built only on failure
    if (!live(l.request)) return where() + "expected a running request, " + why_not_live(l.request);
    if (know_rows) {
      if (!sampled_in_step(l.request))
        return where() + "expected a request with a sampling segment in this step, found none";
      if (l.batch_row < 0 || l.batch_row >= rows)
        return where() + "batch_row: expected a value in [0, " + num(rows) + "), found " +
               num(l.batch_row);
    }
    if (l.vocab < 1) return where() + "vocab: expected >= 1, found " + num(l.vocab);
    if (l.top_ids.size() != l.top_values.size())
      return where() + "top_values: expected " + unum(l.top_ids.size()) +
             " entries (as top_ids), found " + unum(l.top_values.size());
    if (l.top_ids.size() > static_cast<size_t>(l.vocab))
      return where() + "top_ids: expected at most vocab = " + num(l.vocab) + " entries, found " +
             unum(l.top_ids.size());
    for (size_t k = 0; k < l.top_ids.size(); ++k) {
      if (l.top_ids[k] < 0 || l.top_ids[k] >= l.vocab)
        return where() + idx("top_ids", k) + ": expected a token id in [0, " + num(l.vocab) +
               "), found " + num(l.top_ids[k]);
      if (k > 0 && l.top_values[k] > l.top_values[k - 1])
        return where() + idx("top_values", k) + ": expected values in descending order, found " +
               std::to_string(l.top_values[k]) + " after " + std::to_string(l.top_values[k - 1]);
    }
    if (l.blob < -1 || l.blob >= blob_count)
      return where() + "blob: expected -1 or a blob id in [0, " + num(blob_count) + "), found " +
             num(l.blob);
  }

  // Op records (1.6).
  if (s.ops.size() > 65536)
    return at + "ops: expected at most 65536 records in a step, found " + unum(s.ops.size());
  for (size_t i = 0; i < s.ops.size(); ++i)
    if (std::string e = op_record_problem(s.ops[i], know_rows ? rows : -1); !e.empty())
      return at + idx("ops", i) + ": " + e;

  // Tokens.
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    const TokenRecord& t = s.tokens[i];
    auto where = [&] { return at + idx("tokens", i) + ": "; };  // built only on failure
    if (!live(t.request)) return where() + "expected a running request, " + why_not_live(t.request);
    if (know_rows) {
      if (!sampled_in_step(t.request))
        return where() + "expected request " + unum(t.request) +
               " to have a sampling segment in this step, found none";
    }
    if (t.token < 0) return where() + "token: expected a token id >= 0, found " + num(t.token);
    if (!(t.uniform == -1.0 || (t.uniform >= 0.0 && t.uniform < 1.0)))
      return where() + "uniform: expected -1 (greedy) or a draw in [0, 1), found " +
             std::to_string(t.uniform);
  }

  // Finishes.
  {
    std::vector<uint64_t>& finishing = scratch_ids_;
    finishing.clear();
    for (const FinishRecord& f : s.finishes) finishing.push_back(f.request);
    std::sort(finishing.begin(), finishing.end());
    for (size_t i = 1; i < finishing.size(); ++i)
      if (finishing[i] == finishing[i - 1])
        return at + "finishes: expected one finish per request, found request " +
               unum(finishing[i]) + " twice";
  }
  for (size_t i = 0; i < s.finishes.size(); ++i) {
    const FinishRecord& f = s.finishes[i];
    auto where = [&] { return at + idx("finishes", i) + ": "; };  // built only on failure
    if (!live(f.request)) return where() + "expected a running request, " + why_not_live(f.request);
    if (static_cast<uint8_t>(f.reason) > 2)
      return where() + "reason: expected 0..2 (eos, max_tokens, aborted), found " +
             num(static_cast<uint8_t>(f.reason));
    if (f.generated < 0) return where() + "generated: expected >= 0, found " + num(f.generated);
  }

  // Valid: apply.
  for (const RequestRecord& r : s.arrivals) {
    by_id_[r.id] = Req{requests_.size(), false};
    requests_.push_back(arrival_summary(r, s.step));
  }
  for (const FinishRecord& f : s.finishes) {
    Req& q = by_id_[f.request];
    q.finished = true;
    apply_finish(requests_[q.index], f, s.step);
  }
  if (!any_) first_step_ = s.step;
  any_ = true;
  last_step_ = s.step;
  ++steps_;
  tokens_ += static_cast<int64_t>(s.tokens.size());
  return {};
}

}  // namespace llmrr::trace::detail

namespace llmrr::trace {

std::string check_plan(const PlanRecord& plan) {
  return detail::plan_problem(plan);
}

}  // namespace llmrr::trace
