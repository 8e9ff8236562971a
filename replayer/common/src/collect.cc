#include "collect.h"

#include <algorithm>

#include "llmrr/kernels/plan.h"
#include "llmrr/recorder/convert.h"
#include "llmrr/format/site.h"

namespace llmrr::report {

const RequestData* TraceData::find(uint64_t id) const {
  for (const RequestData& r : requests) {
    if (r.record.id == id) return &r;
  }
  return nullptr;
}

std::string plan_label(const trace::PlanRecord& plan) {
  trace::PlanRecord p = plan;
  const bool arrival = !p.arrival.empty();
  p.arrival.clear();
  if (arrival) p.order = trace::CombineOrder::kFixed;
  const std::string s = plan_text(p);
  return arrival ? s + ", arrival order" : s;
}

Result<TraceData> collect(const trace::TraceReader& reader, const std::set<uint64_t>& interest) {
  TraceData d;
  d.path = reader.path();
  d.header = reader.run_header();
  d.complete = reader.complete();
  d.lossy = reader.lossy();
  d.lossy_reason = reader.lossy_reason();
  d.tokens = reader.token_count();
  d.file_bytes = reader.file_size();
  d.layers = std::max(d.header.model.layers, 0);
  d.experts = std::max(d.header.model.experts, 0);
  d.expert_load.assign(static_cast<size_t>(d.layers) * d.experts, 0);
  std::map<uint64_t, size_t> index;
  for (const trace::RequestSummary& s : reader.requests()) {
    index[s.id] = d.requests.size();
    RequestData r;
    r.summary = s;
    r.record.id = s.id;
    d.requests.push_back(std::move(r));
  }
  auto req = [&](uint64_t id) -> RequestData* {
    auto it = index.find(id);
    return it == index.end() ? nullptr : &d.requests[it->second];
  };
  trace::StepCursor cur = reader.steps();
  trace::StepRecord s;
  std::vector<uint64_t> owner;
  std::vector<int32_t> pos;
  for (;;) {
    ASSIGN_OR_RETURN(bool got, cur.next(&s));
    if (!got) break;
    for (const trace::RequestRecord& a : s.arrivals) {
      if (RequestData* r = req(a.id)) r->record = a;
    }
    StepData st;
    st.step = s.step;
    owner.clear();
    pos.clear();
    std::set<uint64_t> reqs;
    for (const trace::Segment& g : s.segments) {
      st.rows += g.count;
      reqs.insert(g.request);
      (g.kind == trace::SegmentKind::kPrefill ? st.prefill : st.decode) += 1;
      for (int32_t j = 0; j < g.count; ++j) {
        owner.push_back(g.request);
        pos.push_back(g.start + j);
      }
    }
    st.requests = static_cast<int32_t>(reqs.size());
    // Plans are sorted by site, i.e. by packed value; keep the lowest layer / expert of
    // each kind.
    std::map<int, std::pair<uint64_t, const trace::PlanRecord*>> best;
    for (const trace::SitePlan& sp : s.plans) {
      const SiteId id = SiteId::unpack(sp.site);
      const int kind = static_cast<int>(id.kind);
      auto it = best.find(kind);
      const uint64_t key = id.forward_key();
      if (it == best.end() || key < it->second.first) best[kind] = {key, &sp.plan};
    }
    for (const auto& [kind, v] : best) st.plans[kind] = plan_label(*v.second);
    for (const trace::Routing& r : s.routing) {
      for (size_t i = 0; i < r.outcome.size(); ++i) {
        if (r.outcome[i] == trace::RouteOutcome::kRerouted) ++st.rerouted;
        if (r.outcome[i] == trace::RouteOutcome::kDropped) ++st.dropped;
        const int32_t e = i < r.experts.size() ? r.experts[i] : -1;
        if (e >= 0 && e < d.experts && r.layer >= 0 && r.layer < d.layers) {
          ++d.expert_load[static_cast<size_t>(r.layer) * d.experts + e];
        }
      }
      for (int32_t row = 0; row < r.rows && row < static_cast<int32_t>(owner.size()); ++row) {
        if (!interest.count(owner[row])) continue;
        RequestData* q = req(owner[row]);
        if (!q) continue;
        std::vector<int32_t>& ex = q->experts[{pos[row], r.layer}];
        ex.assign(r.experts.begin() + static_cast<size_t>(row) * r.k,
                  r.experts.begin() + static_cast<size_t>(row + 1) * r.k);
      }
    }
    if (!interest.empty()) {
      for (const trace::SiteRows& sr : s.rows) {
        if (!is_layer_output(SiteId::unpack(sr.site))) continue;
        for (size_t i = 0; i < sr.rows.size(); ++i) {
          const size_t row = sr.batch_rows.empty() ? i : static_cast<size_t>(sr.batch_rows[i]);
          if (row >= owner.size() || !interest.count(owner[row])) continue;
          if (RequestData* q = req(owner[row])) q->layer_rows[{pos[row], sr.site}] = sr.rows[i];
        }
      }
    }
    for (const trace::LogitsRecord& l : s.logits) {
      RequestData* q = req(l.request);
      if (!q) continue;
      Sample sm;
      sm.position = l.position;
      sm.step = s.step;
      sm.margin = l.margin;
      sm.top1 = l.top_ids.empty() ? -1 : l.top_ids[0];
      sm.top2 = l.top_ids.size() < 2 ? -1 : l.top_ids[1];
      sm.has_logits = true;
      q->samples.push_back(sm);
    }
    for (const trace::TokenRecord& t : s.tokens) {
      if (RequestData* q = req(t.request)) q->tokens.emplace_back(t.position, t.token);
    }
    d.steps.push_back(std::move(st));
  }
  for (RequestData& r : d.requests) {
    std::sort(r.samples.begin(), r.samples.end(),
              [](const Sample& a, const Sample& b) { return a.position < b.position; });
  }
  return d;
}

}  // namespace llmrr::report
