// Causes at the first difference: the batch composition of each run's step, the plans of the
// ops that feed the first differing site (arrival orders per row), the routing of the row, the
// op records of that site's layer (what a runtime's ops ran with),
// and the run settings that differ; Explainer::causes names the one that explains it.
#include <algorithm>
#include <map>
#include <string_view>

#include "internal.h"
#include "llmrr/kernels/plan.h"
#include "llmrr/recorder/convert.h"  // to_plan
#include "llmrr/format/site.h"

namespace llmrr::replay::diff_internal {
namespace {

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

// The op records of the graph that computed batch row `row` for `layer` (-1: those outside
// the layers), and the graph's own record.
std::vector<const trace::OpRecord*> ops_of_row(const trace::StepRecord& s, int64_t row,
                                               int32_t layer) {
  std::vector<const trace::OpRecord*> out;
  for (const trace::OpRecord& o : s.ops) {
    if (o.rows > 0 && (row < o.first_row || row >= int64_t{o.first_row} + o.rows)) continue;
    const bool covers = layer < 0 ? o.layer < 0
                                  : o.layer >= 0 && o.layer <= layer && layer < o.layer + o.layers;
    if (covers || (o.layer < 0 && o.name == "graph")) out.push_back(&o);
  }
  return out;
}

std::vector<OpDifference> op_differences(const trace::StepRecord& sa, int64_t ra,
                                         const trace::StepRecord& sb, int64_t rb, int32_t layer) {
  std::vector<OpDifference> out;
  if (sa.ops.empty() && sb.ops.empty()) return out;
  std::vector<const trace::OpRecord*> a = ops_of_row(sa, ra, layer), b = ops_of_row(sb, rb, layer);
  // Pairs by (name, op, occurrence), in A's order; B's unpaired ones after.
  std::vector<char> used(b.size(), 0);
  auto diff = [&](const trace::OpRecord* x, const trace::OpRecord* y) {
    OpDifference d;
    const trace::OpRecord* r = x != nullptr ? x : y;
    d.name = r->name;
    d.op = r->op;
    d.layer = r->layer < 0 ? -1 : layer;
    d.in_a = x != nullptr;
    d.in_b = y != nullptr;
    if (x) d.attrs_a = x->attrs;
    if (y) d.attrs_b = y->attrs;
    if (!x || !y) {
      d.changes.push_back(std::string("ran in ") + (x ? "A only" : "B only"));
      return d;
    }
    auto ka = trace::op_attrs(x->attrs), kb = trace::op_attrs(y->attrs);
    std::map<std::string, std::pair<std::string, std::string>> keys;
    std::vector<std::string> order;
    for (auto& [k, v] : ka) {
      if (!keys.count(k)) order.push_back(k);
      keys[k].first = v;
    }
    for (auto& [k, v] : kb) {
      if (!keys.count(k)) order.push_back(k);
      keys[k].second = v;
    }
    for (const std::string& k : order) {
      const auto& [va, vb] = keys[k];
      if (va != vb) d.changes.push_back(k + " " + (va.empty() ? "-" : va) + " vs " +
                                        (vb.empty() ? "-" : vb));
    }
    return d;
  };
  // B's records by (name, kind), each queue in B's order: pairing is n log n however many
  // records a step holds (a trace is a stranger's file; a step may hold 65536).
  std::map<std::pair<std::string_view, std::string_view>, std::vector<size_t>> by_key;
  for (size_t j = b.size(); j-- > 0;) by_key[{b[j]->name, b[j]->op}].push_back(j);
  for (const trace::OpRecord* x : a) {
    const trace::OpRecord* y = nullptr;
    auto it = by_key.find({x->name, x->op});
    if (it != by_key.end() && !it->second.empty()) {
      const size_t j = it->second.back();
      it->second.pop_back();
      used[j] = 1;
      y = b[j];
    }
    if (y != nullptr && x->attrs == y->attrs) continue;
    out.push_back(diff(x, y));
  }
  for (size_t j = 0; j < b.size(); ++j)
    if (!used[j]) out.push_back(diff(nullptr, b[j]));
  // The graph's own record last: the ops say more.
  std::stable_partition(out.begin(), out.end(),
                        [](const OpDifference& d) { return d.name != "graph"; });
  return out;
}

}  // namespace

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
  cmp("row hash", trace::fingerprint_kind(a.engine), trace::fingerprint_kind(b.engine));
  cmp("capture", trace::capture_level_name(a.engine.capture),
      trace::capture_level_name(b.engine.capture));
  cmp("host ISA", a.host.isa, b.host.isa);
  return out;
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
      pd.a_text = plan_text(xa) + (arr_a.empty() ? "" : ", arrival order " + arrival_str(arr_a));
      pd.b_text = plan_text(xb) + (arr_b.empty() ? "" : ", arrival order " + arrival_str(arr_b));
      if (xa.op == trace::OpKind::kCombine && !arr_a.empty()) {
        pd.a_text = "combine in arrival order " + arrival_str(arr_a);
      }
      if (xb.op == trace::OpKind::kCombine && !arr_b.empty()) {
        pd.b_text = "combine in arrival order " + arrival_str(arr_b);
      }
    } else {
      if (pa) pd.a = *pa;
      if (pb) pd.b = *pb;
      pd.a_text = pa ? plan_text(*pa) : "(did not run)";
      pd.b_text = pb ? plan_text(*pb) : "(did not run)";
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

  // What the ops feeding that site ran with (runtimes that record op records).
  if (ra >= 0 && rb >= 0)
    d->ops = op_differences(sa, ra, sb, rb, first && first->layer >= 0 ? first->layer : -1);
  if (layer_outputs_only && !d->ops.empty() && d->capture_note.rfind("only layer outputs", 0) == 0)
    d->capture_note = "only layer outputs were captured: first difference at " + d->first_site +
                      "; the op records name what ran otherwise in that layer, --capture all "
                      "the first site inside it that differs";

  // The cause.
  const PlanDifference* own = nullptr;
  const PlanDifference* any = nullptr;
  for (const PlanDifference& p : d->plans) {
    if (p.is_first_site) own = &p;
    if (!any && !p.output_checked_equal) any = &p;
  }
  const bool after_router = !first || SiteId{SiteKind::kRouter, first->layer, -1} < *first ||
                            is_layer_output(*first);
  if (d->routing && d->routing->row_differs && after_router) {
    d->cause = "routing";
  } else if (own) {
    d->cause = own->arrival_only ? "arrival-order" : "plan";
  } else if (any) {
    d->cause = any->arrival_only ? "arrival-order" : "plan";
  } else if (!d->ops.empty()) {
    d->cause = "op";
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

}  // namespace llmrr::replay::diff_internal
