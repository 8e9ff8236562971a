// Bisect: factors of a request pair, hybrid request-alone replays, and the two ddmin
// searches (bisect.h says what each factor means). The report's text and JSON are in
// report.cc.
#include "llmrr/replayer/bisect.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/recorder/convert.h"
#include "llmrr/replayer/ddmin.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/policy.h"

namespace llmrr::replay {

const char* factor_kind_name(FactorKind kind) {
  switch (kind) {
    case FactorKind::kSchedule:
      return "schedule";
    case FactorKind::kPlan:
      return "plan";
    case FactorKind::kRouting:
      return "routing";
  }
  return "?";
}

namespace {

// One recorded step that computes rows of R.
struct SideStep {
  int64_t step = 0;
  std::vector<trace::Segment> segments;
  trace::Segment own;  // R's segment
  int64_t row0 = 0;    // its first batch row
  std::vector<trace::SitePlan> plans;
  std::vector<trace::Routing> routing;
};

// What one trace says about R.
struct Side {
  std::string path;
  RequestId id = 0;
  trace::RequestRecord arrival;
  bool have_arrival = false;
  std::vector<SideStep> steps;
  std::map<int32_t, trace::LogitsRecord> logits;  // by row position
  std::map<int32_t, int32_t> tokens;              // by token position
};

// A unit of R's timeline: one A step and one B step computing the same positions
// (aligned), or a run of steps of each covering the same positions in different chunks.
struct Unit {
  int32_t first = 0, end = 0;  // positions [first, end)
  std::vector<int32_t> a, b;   // indices into Side::steps
  bool aligned() const { return a.size() == 1 && b.size() == 1; }
};

Status read_side(const trace::TraceReader& reader, RequestId id, int32_t horizon, Side* side) {
  side->path = reader.path();
  side->id = id;
  trace::StepCursor cur = reader.steps();
  trace::StepRecord s;
  for (;;) {
    Result<bool> got = cur.next(&s);
    if (!got.ok()) return got.status().with_context("bisect: reading " + reader.path() + ": ");
    if (!*got) break;
    for (const trace::RequestRecord& r : s.arrivals) {
      if (r.id == id) {
        side->arrival = r;
        side->have_arrival = true;
      }
    }
    for (const trace::LogitsRecord& l : s.logits) {
      if (l.request == id) side->logits[l.position] = l;
    }
    for (const trace::TokenRecord& t : s.tokens) {
      if (t.request == id) side->tokens[t.position] = t.token;
    }
    int64_t row = 0;
    bool past = false;
    for (const trace::Segment& g : s.segments) {
      if (g.request == id) {
        SideStep st;
        st.step = s.step;
        st.segments = s.segments;
        st.own = g;
        st.row0 = row;
        st.plans = s.plans;
        st.routing = s.routing;
        past = g.start + g.count > horizon;
        side->steps.push_back(std::move(st));
        break;
      }
      row += g.count;
    }
    if (past) break;
  }
  if (!side->have_arrival) {
    return make_error(ErrorCode::kSemantic,
                      reader.path() + ": request " + std::to_string(id) + " has no arrival record");
  }
  for (size_t i = 1; i < side->steps.size(); ++i) {
    const trace::Segment &p = side->steps[i - 1].own, &q = side->steps[i].own;
    if (q.start != p.start + p.count) {
      return make_error(ErrorCode::kSemantic,
                        reader.path() + ": request " + std::to_string(id) + " at step " +
                            std::to_string(side->steps[i].step) + " starts at position " +
                            std::to_string(q.start) + ", expected " +
                            std::to_string(p.start + p.count));
    }
  }
  return Status::Ok();
}

std::string seg_text(const trace::Segment& g) {
  return std::string(trace::segment_kind_name(g.kind)) + " [" + std::to_string(g.start) + "," +
         std::to_string(g.start + g.count) + ")";
}

std::string steps_text(const Side& side, const std::vector<int32_t>& idx) {
  std::string s = idx.size() == 1 ? "step " + std::to_string(side.steps[idx[0]].step)
                                  : "steps " + std::to_string(side.steps[idx.front()].step) + "-" +
                                        std::to_string(side.steps[idx.back()].step);
  s += " (";
  for (size_t i = 0; i < idx.size(); ++i) {
    s += (i ? ", " : "") + seg_text(side.steps[idx[i]].own);
  }
  return s + ")";
}

std::string experts_text(const trace::Routing& r, int64_t row) {
  std::string e = "[", o = "(";
  for (int i = 0; i < r.k; ++i) {
    const size_t at = static_cast<size_t>(row) * r.k + i;
    e += (i ? ", " : "") + std::to_string(r.experts[at]);
    o += (i ? ", " : "") + std::string(trace::route_outcome_name(r.outcome[at]));
  }
  return e + "] " + o + ")";
}

bool row_router_decided(const trace::Routing& r, int64_t row) {
  for (int i = 0; i < r.k; ++i) {
    const size_t at = static_cast<size_t>(row) * r.k + i;
    if (r.outcome[at] != trace::RouteOutcome::kKept || r.experts[at] != r.chosen[at]) return false;
  }
  return true;
}

bool same_fingerprint(const trace::Fingerprint& x, const trace::Fingerprint& y) {
  return x.hash == y.hash && std::memcmp(&x.l2, &y.l2, sizeof x.l2) == 0 &&
         std::memcmp(&x.max_abs, &y.max_abs, sizeof x.max_abs) == 0;
}

const trace::Routing* find_routing(const std::vector<trace::Routing>& v, int32_t layer) {
  for (const trace::Routing& r : v) {
    if (r.layer == layer) return &r;
  }
  return nullptr;
}

ForcedRouting to_forced(const trace::Routing& r) {
  ForcedRouting f;
  f.rows = r.rows;
  f.k = r.k;
  f.capacity = r.capacity;
  f.experts = r.experts;
  f.outcome.resize(r.outcome.size());
  for (size_t i = 0; i < r.outcome.size(); ++i)
    f.outcome[i] = static_cast<RouteOutcome>(r.outcome[i]);
  return f;
}

class ListSchedule final : public ScheduleSource {
 public:
  std::vector<ScheduledStep> steps;
  Result<std::optional<ScheduledStep>> next() override {
    if (next_ >= steps.size()) return std::optional<ScheduledStep>();
    return std::optional<ScheduledStep>(steps[next_++]);
  }

 private:
  size_t next_ = 0;
};

class TableRouting final : public RoutingSource {
 public:
  std::map<std::pair<int64_t, int32_t>, ForcedRouting> table;
  const ForcedRouting* routing(int64_t step, int32_t layer) override {
    auto it = table.find({step, layer});
    return it == table.end() ? nullptr : &it->second;
  }
};

// Collects R's logits fingerprint at one row and every token R samples.
class Collector final : public Observer {
 public:
  Collector(RequestId id, int32_t row) : id_(id), row_(row) {}
  void on_logits(const LogitsView& v) override {
    if (v.request == id_ && v.position == row_) {
      logits = trace::fingerprint_row(v.logits, v.vocab);
      have_logits = true;
    }
  }
  void on_token(const TokenEvent& t) override {
    if (t.request == id_) tokens[t.position] = t.token;
  }
  trace::Fingerprint logits;
  bool have_logits = false;
  std::map<int32_t, int32_t> tokens;

 private:
  RequestId id_;
  int32_t row_;
};

std::string key_of(const std::vector<int32_t>& set, int32_t through) {
  std::string k(reinterpret_cast<const char*>(&through), sizeof through);
  k.append(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(int32_t));
  return k;
}

}  // namespace

struct BisectSession::Impl {
  BisectOptions options;
  BisectReport report;
  std::unique_ptr<trace::TraceReader> ra, rb;
  LoadedModel owned_model;
  const LoadedModel* model = nullptr;
  Side a, b;
  std::vector<Unit> units;
  bool force_routing = false;
  EngineConfig config;
  int32_t numerical_universe = 0;  // factors [0, n) act on row P

  std::mutex mu;
  std::unordered_map<std::string, Outcome> memo;
  std::atomic<int64_t> replays{0}, hits{0};

  // Rows the hybrid must compute: through row P (numerical) or V - 1 (visible).
  int32_t default_through() const {
    return report.visible_position >= 0 ? report.visible_position - 1 : report.split_position;
  }

  const trace::RunHeader& a_header_for_policy() const { return report.a_header; }
  Status build_units(int32_t horizon);
  void list_factors(int32_t horizon);
  Outcome replay(const std::vector<int32_t>& set, int32_t through);
  void add_side_step(const Side& side, const SideStep& st, bool is_b, ListSchedule* sched,
                     PlanTable* plans, TableRouting* routing) const;
  // `seed`: a set that may already reproduce (the numerical split's, for the visible one).
  SearchResult search(bool visible, int32_t through, int32_t universe,
                      const std::vector<int32_t>& seed = {});
};

Status BisectSession::Impl::build_units(int32_t horizon) {
  size_t i = 0, j = 0;
  while (i < a.steps.size() && j < b.steps.size()) {
    Unit u;
    u.first = a.steps[i].own.start;
    if (b.steps[j].own.start != u.first) break;
    int32_t ea = u.first + a.steps[i].own.count, eb = u.first + b.steps[j].own.count;
    u.a.push_back(static_cast<int32_t>(i++));
    u.b.push_back(static_cast<int32_t>(j++));
    while (ea != eb) {
      if (ea < eb) {
        if (i >= a.steps.size()) break;
        ea += a.steps[i].own.count;
        u.a.push_back(static_cast<int32_t>(i++));
      } else {
        if (j >= b.steps.size()) break;
        eb += b.steps[j].own.count;
        u.b.push_back(static_cast<int32_t>(j++));
      }
    }
    u.end = std::min(ea, eb);
    if (ea != eb) {
      return make_error(ErrorCode::kSemantic, "bisect: " + a.path + " and " + b.path +
                                                  " end request " + std::to_string(a.id) +
                                                  "'s steps at different positions (" +
                                                  std::to_string(ea) + " vs " + std::to_string(eb) +
                                                  ") before the split");
    }
    units.push_back(std::move(u));
    if (units.back().end > horizon) break;
  }
  if (units.empty() || units.back().end <= horizon) {
    return make_error(ErrorCode::kSemantic, "bisect: the traces do not hold request " +
                                                std::to_string(a.id) + "'s rows up to position " +
                                                std::to_string(horizon));
  }
  return Status::Ok();
}

void BisectSession::Impl::list_factors(int32_t horizon) {
  std::vector<Factor>& out = report.factors;
  for (size_t u = 0; u < units.size(); ++u) {
    const Unit& un = units[u];
    if (un.first > horizon) break;
    auto base = [&](FactorKind kind) {
      Factor f;
      f.kind = kind;
      f.unit = static_cast<int32_t>(u);
      f.step_a = a.steps[un.a.front()].step;
      f.step_b = b.steps[un.b.front()].step;
      f.last_step_a = a.steps[un.a.back()].step;
      f.last_step_b = b.steps[un.b.back()].step;
      f.first_position = un.first;
      f.last_position = un.end - 1;
      return f;
    };
    auto at_steps = [&](const Factor& f) {
      std::string s = "step " + std::to_string(f.step_a);
      if (f.step_b != f.step_a) s += " (B's step " + std::to_string(f.step_b) + ")";
      return s;
    };
    if (!un.aligned() || !(a.steps[un.a[0]].own == b.steps[un.b[0]].own)) {
      Factor f = base(FactorKind::kSchedule);
      f.site_name = "schedule";
      f.a_text = steps_text(a, un.a);
      f.b_text = steps_text(b, un.b);
      f.text = "the schedule of positions [" + std::to_string(un.first) + ", " +
               std::to_string(un.end) + "): A computed them in " + f.a_text + ", B in " + f.b_text;
      out.push_back(std::move(f));
      continue;
    }
    const SideStep &sa = a.steps[un.a[0]], &sb = b.steps[un.b[0]];
    // Plans: sites both ran with different plans, in forward order.
    std::vector<std::pair<SiteId, std::pair<const trace::PlanRecord*, const trace::PlanRecord*>>>
        diffs;
    for (const trace::SitePlan& p : sa.plans) {
      const trace::PlanRecord* q = nullptr;
      for (const trace::SitePlan& x : sb.plans) {
        if (x.site == p.site) q = &x.plan;
      }
      if (q && !(*q == p.plan)) diffs.push_back({SiteId::unpack(p.site), {&p.plan, q}});
    }
    std::stable_sort(diffs.begin(), diffs.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    for (const auto& [site, pq] : diffs) {
      Factor f = base(FactorKind::kPlan);
      f.site = site.packed();
      f.site_name = site_name(site);
      f.layer = site.layer;
      f.plan_a = *pq.first;
      f.plan_b = *pq.second;
      f.a_text = plan_to_string(to_plan(f.plan_a));
      f.b_text = plan_to_string(to_plan(f.plan_b));
      f.text =
          "the " + f.a_text + " → " + f.b_text + " change of " + f.site_name + " at " + at_steps(f);
      out.push_back(std::move(f));
    }
    if (!force_routing) continue;
    for (const trace::Routing& x : sa.routing) {
      const trace::Routing* y = find_routing(sb.routing, x.layer);
      if (!y || y->k != x.k) continue;
      std::string a_rows, b_rows, change;
      int differing = 0;
      for (int32_t r = 0; r < sa.own.count; ++r) {
        const int64_t ra_row = sa.row0 + r, rb_row = sb.row0 + r;
        bool same = true;
        for (int i = 0; i < x.k; ++i) {
          const size_t p = static_cast<size_t>(ra_row) * x.k + i,
                       q = static_cast<size_t>(rb_row) * x.k + i;
          same &= x.experts[p] == y->experts[q] && x.outcome[p] == y->outcome[q];
        }
        if (same) continue;
        const std::string pos = "position " + std::to_string(sa.own.start + r) + " ";
        a_rows += (a_rows.empty() ? "" : "; ") + pos + experts_text(x, ra_row);
        b_rows += (b_rows.empty() ? "" : "; ") + pos + experts_text(*y, rb_row);
        if (++differing <= 2) {
          change += (change.empty() ? "" : "; ") + pos + experts_text(x, ra_row) + " → " +
                    experts_text(*y, rb_row);
        }
      }
      if (differing == 0) continue;
      if (differing > 2) change += "; ...";
      Factor f = base(FactorKind::kRouting);
      f.layer = x.layer;
      f.site_name = "routing L" + std::to_string(x.layer);
      f.a_text = a_rows;
      f.b_text = b_rows;
      f.text = "the routing of " +
               (differing == 1 ? std::string("1 token") : std::to_string(differing) + " tokens") +
               " at layer " + std::to_string(x.layer) + " at " + at_steps(f) + " (" + change + ")";
      out.push_back(std::move(f));
    }
  }
}

// Appends one recorded step of A or B to a hybrid: its batch (B's request ids mapped to A's),
// its plans, its routing.
void BisectSession::Impl::add_side_step(const Side& side, const SideStep& st, bool is_b,
                                        ListSchedule* sched, PlanTable* plans,
                                        TableRouting* routing) const {
  const int64_t h = static_cast<int64_t>(sched->steps.size());
  ScheduledStep s;
  s.step = h;
  for (const trace::Segment& g : st.segments) {
    BatchSegment seg = to_segment(g);
    if (is_b) {
      // Other requests are not computed (request-alone replay); they only must not carry
      // A's id of R.
      if (g.request == side.id) {
        seg.request = a.id;
      } else if (g.request == a.id) {
        seg.request = ~uint64_t{0};
      }
    }
    s.segments.push_back(seg);
  }
  sched->steps.push_back(std::move(s));
  for (const trace::SitePlan& p : st.plans) plans->set(h, SiteId::unpack(p.site), to_plan(p.plan));
  if (force_routing) {
    for (const trace::Routing& r : st.routing) routing->table[{h, r.layer}] = to_forced(r);
  }
}

BisectSession::Outcome BisectSession::Impl::replay(const std::vector<int32_t>& set,
                                                   int32_t through) {
  Outcome out;
  std::vector<bool> on(report.factors.size(), false);
  for (int32_t i : set) on[static_cast<size_t>(i)] = true;
  // Factors by unit.
  std::map<int32_t, std::vector<const Factor*>> by_unit;
  for (size_t i = 0; i < report.factors.size(); ++i) {
    if (on[i]) by_unit[report.factors[i].unit].push_back(&report.factors[i]);
  }

  ListSchedule sched;
  PlanTable plans;
  TableRouting routing;
  for (size_t u = 0; u < units.size(); ++u) {
    const Unit& un = units[u];
    if (un.first > through) break;
    auto it = by_unit.find(static_cast<int32_t>(u));
    const std::vector<const Factor*> none;
    const std::vector<const Factor*>& fs = it == by_unit.end() ? none : it->second;
    bool schedule_b = false;
    for (const Factor* f : fs) schedule_b |= f->kind == FactorKind::kSchedule;
    if (!un.aligned() || schedule_b) {
      if (schedule_b) {
        for (int32_t j : un.b) add_side_step(b, b.steps[j], true, &sched, &plans, &routing);
      } else {
        for (int32_t j : un.a) add_side_step(a, a.steps[j], false, &sched, &plans, &routing);
      }
      continue;
    }
    const SideStep &sa = a.steps[un.a[0]], &sb = b.steps[un.b[0]];
    const int64_t h = static_cast<int64_t>(sched.steps.size());
    // B's plans of sites A did not run at this step, then A's (over them), then the swapped.
    for (const trace::SitePlan& p : sb.plans) plans.set(h, SiteId::unpack(p.site), to_plan(p.plan));
    add_side_step(a, sa, false, &sched, &plans, &routing);
    for (const Factor* f : fs) {
      if (f->kind == FactorKind::kPlan) {
        plans.set(h, SiteId::unpack(f->site), to_plan(f->plan_b));
      } else if (f->kind == FactorKind::kRouting) {
        const trace::Routing* y = find_routing(sb.routing, f->layer);
        auto rt = routing.table.find({h, f->layer});
        if (!y || rt == routing.table.end()) continue;
        ForcedRouting& fr = rt->second;
        for (int32_t r = 0; r < sa.own.count; ++r) {
          for (int i = 0; i < fr.k; ++i) {
            const size_t p = static_cast<size_t>(sa.row0 + r) * fr.k + i,
                         q = static_cast<size_t>(sb.row0 + r) * fr.k + i;
            fr.experts[p] = y->experts[q];
            fr.outcome[p] = static_cast<RouteOutcome>(y->outcome[q]);
          }
        }
      }
    }
  }

  RequestSpec spec = to_request_spec(a.arrival);
  spec.arrival_step = 0;
  spec.stop_at_eos = false;  // the schedule, not the sampler, says when R stops
  spec.max_tokens = std::max(a.arrival.max_tokens, b.arrival.max_tokens);
  // A fresh fallback per replay: replays may run on several threads.
  Result<std::shared_ptr<Policy>> fb = policy_from_header(a_header_for_policy());
  std::shared_ptr<Policy> fallback =
      fb.ok() ? *fb : std::shared_ptr<Policy>(make_production_policy());
  std::shared_ptr<Policy> policy = make_forced_policy(&plans, fallback);
  Result<std::unique_ptr<Engine>> created = Engine::create(*model, config, policy);
  if (!created.ok()) {
    out.error = created.status().to_string();
    return out;
  }
  Engine& engine = **created;
  engine.set_schedule_source(&sched);
  if (force_routing) engine.set_routing_source(&routing, RoutingMode::kForce);
  engine.set_isolated_request(a.id);
  if (Status st = engine.add_request(spec); !st.ok()) {
    out.error = st.to_string();
    return out;
  }
  const int32_t P = report.split_position, V = report.visible_position;
  Collector col(a.id, P);
  engine.add_observer(&col);
  if (Status st = engine.run(); !st.ok()) {
    out.error = st.to_string();
    return out;
  }
  out.ok = true;
  const int32_t L = report.prompt_len;
  auto tokens_match = [&](const Side& side, int32_t last) {
    for (int32_t p = L; p <= last; ++p) {
      auto want = side.tokens.find(p);
      auto got = col.tokens.find(p);
      if (want == side.tokens.end() || got == col.tokens.end() || want->second != got->second) {
        return false;
      }
    }
    return true;
  };
  if (P >= 0 && through >= P && col.have_logits) {
    out.logits = col.logits;
    auto la = a.logits.find(P), lb = b.logits.find(P);
    out.numerical =
        lb != b.logits.end() && same_fingerprint(col.logits, lb->second.full) && tokens_match(b, P);
    out.matches_a_numerical =
        la != a.logits.end() && same_fingerprint(col.logits, la->second.full) && tokens_match(a, P);
  }
  if (V >= 0 && through >= V - 1) {
    auto got = col.tokens.find(V);
    if (got != col.tokens.end()) out.token = got->second;
    out.visible = tokens_match(b, V);
    out.matches_a_visible = tokens_match(a, V);
  }
  return out;
}

SearchResult BisectSession::Impl::search(bool visible, int32_t through, int32_t universe,
                                         const std::vector<int32_t>& seed) {
  SearchResult res;
  res.universe = universe;
  res.position = visible ? report.visible_position : report.split_position;
  const int64_t before = replays.load();
  const std::string phase = visible ? "visible" : "numerical";
  auto pred = [&](const Outcome& o) { return visible ? o.visible : o.numerical; };
  auto eval = [&](const std::vector<int32_t>& set) {
    Outcome o;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = memo.find(key_of(set, through));
      if (it != memo.end()) {
        ++hits;
        return it->second;
      }
    }
    o = replay(set, through);
    ++replays;
    std::lock_guard<std::mutex> lock(mu);
    memo.emplace(key_of(set, through), o);
    return o;
  };
  auto tell = [&](int64_t candidates) {
    if (options.progress) options.progress(phase, replays.load(), candidates);
  };

  std::vector<int32_t> all(static_cast<size_t>(universe));
  for (int32_t i = 0; i < universe; ++i) all[static_cast<size_t>(i)] = i;
  const Outcome empty = eval({});
  tell(universe);
  const Outcome full = eval(all);
  tell(universe);
  const bool empty_is_a = visible ? empty.matches_a_visible : empty.matches_a_numerical;
  if (!empty.ok || !empty_is_a) {
    res.conclusion =
        "cannot bisect: the request-alone replay of A " +
        (empty.ok ? std::string("does not reproduce A's ") + (visible ? "tokens" : "logits") +
                        " at position " + std::to_string(res.position)
                  : "failed: " + empty.error);
    res.replays = replays.load() - before;
    return res;
  }
  if (!full.ok || !pred(full)) {
    res.conclusion =
        "not explained by schedule, plans and routing: swapping all " + std::to_string(universe) +
        " factors " +
        (full.ok ? "does not reproduce B's split (B differs from A in something else: the "
                   "engine config, the sampler)"
                 : "fails: " + full.error);
    res.replays = replays.load() - before;
    return res;
  }
  res.ran = true;
  // ddmin's elements: every factor, or the seed when it reproduces already (a 1-minimal
  // subset of it is 1-minimal, whatever set the search started from).
  std::vector<int32_t> elems = all;
  if (!seed.empty() && seed.size() < all.size() && pred(eval(seed))) {
    elems = seed;
    res.seeded = true;
  }
  tell(static_cast<int64_t>(elems.size()));
  std::vector<DdminKey> keys;
  for (int32_t i : elems) {
    const Factor& f = report.factors[static_cast<size_t>(i)];
    // Within a step: embed, then layer by layer, then final_norm and logits, then routing.
    const SiteId site = SiteId::unpack(f.site);
    int64_t fine = f.kind != FactorKind::kPlan     ? 100000
                   : f.layer >= 0                  ? 1 + f.layer
                   : site.kind == SiteKind::kEmbed ? 0
                                                   : 99999;
    keys.push_back({f.unit, fine});
  }
  const int jobs = std::max(1, options.jobs);
  DdminTest test = [&](const std::vector<std::vector<int>>& cands) -> int {
    std::vector<std::vector<int32_t>> sets;
    for (const std::vector<int>& c : cands) {
      std::vector<int32_t> set;
      for (int k : c) set.push_back(elems[static_cast<size_t>(k)]);
      sets.push_back(std::move(set));
    }
    for (size_t from = 0; from < sets.size(); from += static_cast<size_t>(jobs)) {
      const size_t to = std::min(sets.size(), from + static_cast<size_t>(jobs));
      std::vector<char> ok(to - from, 0);
      if (to - from == 1) {
        ok[0] = pred(eval(sets[from]));
      } else {
        std::vector<std::thread> pool;
        for (size_t k = from; k < to; ++k) {
          pool.emplace_back([&, k] { ok[k - from] = pred(eval(sets[k])); });
        }
        for (std::thread& t : pool) t.join();
      }
      tell(static_cast<int64_t>(cands.front().size()));
      for (size_t k = from; k < to; ++k) {
        if (ok[k - from]) return static_cast<int>(k);
      }
    }
    return -1;
  };
  for (int k : ddmin(keys, test)) res.minimal.push_back(elems[static_cast<size_t>(k)]);
  res.replays = replays.load() - before;
  if (res.minimal.size() == 1) {
    res.conclusion =
        report.factors[static_cast<size_t>(res.minimal[0])].text + " alone reproduces it";
  } else {
    std::string s = "together, ";
    for (size_t i = 0; i < res.minimal.size(); ++i) {
      s += (i == 0                        ? ""
            : i + 1 == res.minimal.size() ? "; and "
                                          : "; ") +
           report.factors[static_cast<size_t>(res.minimal[i])].text;
    }
    res.conclusion = s + " reproduce it (none can be left out)";
  }
  return res;
}

BisectSession::BisectSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BisectSession::~BisectSession() = default;

const BisectReport& BisectSession::report() const {
  return impl_->report;
}

BisectSession::Outcome BisectSession::evaluate(const std::vector<int32_t>& set, int32_t through) {
  if (through < 0) through = impl_->default_through();
  std::vector<int32_t> s = set;
  std::sort(s.begin(), s.end());
  ++impl_->replays;
  return impl_->replay(s, through);
}

namespace {

Status check_same_model(const trace::RunHeader& x, const trace::RunHeader& y, const std::string& a,
                        const std::string& b) {
  const trace::ModelInfo &m = x.model, &n = y.model;
  const bool hashes = !m.weight_hash.empty() && !n.weight_hash.empty();
  if ((hashes && m.weight_hash != n.weight_hash) || (!hashes && m.name != n.name)) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "bisect: " + a + " and " + b + " record different models: A is " + m.name + " (weights " +
            (m.weight_hash.empty() ? "?" : m.weight_hash) + "), B is " + n.name + " (weights " +
            (n.weight_hash.empty() ? "?" : n.weight_hash) + "); bisect compares runs of one model");
  }
  return Status::Ok();
}

std::string request_ids(const trace::TraceReader& r) {
  std::string ids;
  for (size_t i = 0; i < r.requests().size() && i < 16; ++i) {
    ids += (i ? ", " : "") + std::to_string(r.requests()[i].id);
  }
  if (r.requests().size() > 16) ids += ", ...";
  return ids.empty() ? "none" : ids;
}

bool has_request(const trace::TraceReader& r, RequestId id) {
  for (const trace::RequestSummary& s : r.requests()) {
    if (s.id == id) return true;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<BisectSession>> BisectSession::open(const std::string& a_path,
                                                           const std::string& b_path,
                                                           const BisectOptions& options,
                                                           const LoadedModel* model) {
  auto impl = std::make_unique<Impl>();
  Impl& s = *impl;
  s.options = options;
  BisectReport& rep = s.report;
  rep.a_path = a_path;
  rep.b_path = b_path;
  ASSIGN_OR_RETURN(s.ra, trace::TraceReader::open(a_path));
  ASSIGN_OR_RETURN(s.rb, trace::TraceReader::open(b_path));
  rep.a_header = s.ra->run_header();
  rep.b_header = s.rb->run_header();
  RETURN_IF_ERROR(check_same_model(rep.a_header, rep.b_header, a_path, b_path));
  ASSIGN_OR_RETURN(EngineConfig ca, engine_config_from_header(rep.a_header));
  ASSIGN_OR_RETURN(EngineConfig cb, engine_config_from_header(rep.b_header));
  if (ca.weight_type != cb.weight_type || ca.bf16_activations != cb.bf16_activations ||
      ca.scoring != cb.scoring) {
    return make_error(ErrorCode::kInvalidArgument,
                      "bisect: " + a_path + " and " + b_path +
                          " were recorded with different precision or router scoring (dtype, "
                          "weight type, bf16 activations, scoring): the split would be theirs, "
                          "not a factor bisect can swap");
  }
  if (options.request) {
    auto [x, y] = *options.request;
    if (!has_request(*s.ra, x)) {
      return make_error(ErrorCode::kInvalidArgument, "--request: " + a_path + " has no request " +
                                                         std::to_string(x) +
                                                         " (requests: " + request_ids(*s.ra) + ")");
    }
    if (!has_request(*s.rb, y)) {
      return make_error(ErrorCode::kInvalidArgument, "--request: " + b_path + " has no request " +
                                                         std::to_string(y) +
                                                         " (requests: " + request_ids(*s.rb) + ")");
    }
  }

  DiffOptions dopt;
  dopt.request = options.request;
  dopt.model = "none";
  ASSIGN_OR_RETURN(DiffReport d, diff_traces(a_path, b_path, dopt));
  const RequestDiff* pick = nullptr;
  for (const RequestDiff& r : d.requests) {
    if (options.request ? (r.a == options.request->first && r.b == options.request->second)
                        : r.verdict != Verdict::kIdentical) {
      pick = &r;
      break;
    }
  }
  if (!pick && options.request) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--request " + std::to_string(options.request->first) + ":" +
                          std::to_string(options.request->second) +
                          ": the two requests do not align (different prompts or sampling "
                          "parameters)");
  }
  if (!pick) {
    if (d.requests.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "bisect: no request of " + a_path + " matches one of " + b_path);
    }
    rep.request_a = d.requests[0].a;
    rep.request_b = d.requests[0].b;
    rep.label = d.requests[0].label;
    rep.prompt_len = d.requests[0].prompt_len;
    rep.notes.push_back("no request splits: all " + std::to_string(d.requests.size()) +
                        " common requests are identical");
    return std::unique_ptr<BisectSession>(new BisectSession(std::move(impl)));
  }
  if (!options.request) {
    int others = -1;
    for (const RequestDiff& r : d.requests) others += r.verdict != Verdict::kIdentical;
    if (others > 0) {
      rep.notes.push_back(std::to_string(others) + " more common request" +
                          (others == 1 ? "" : "s") +
                          " split too; bisect one of them with --request R");
    }
  }
  rep.request_a = pick->a;
  rep.request_b = pick->b;
  rep.label = pick->label;
  rep.prompt_len = pick->prompt_len;
  rep.verdict = pick->verdict;
  rep.split_position = pick->split_position;
  rep.visible_position = pick->visible_position;
  if (rep.verdict == Verdict::kIdentical) {
    return std::unique_ptr<BisectSession>(new BisectSession(std::move(impl)));
  }

  if (model) {
    s.model = model;
    RETURN_IF_ERROR(check_weights(rep.a_header, *model));
  } else {
    std::string warning;
    ASSIGN_OR_RETURN(s.owned_model, load_model_for(rep.a_header, options.model, &warning));
    if (!warning.empty()) rep.notes.push_back(warning);
    s.model = &s.owned_model;
  }
  RETURN_IF_ERROR(check_weights(rep.b_header, *s.model));

  const int32_t horizon = s.default_through();
  RETURN_IF_ERROR(read_side(*s.ra, rep.request_a, horizon, &s.a));
  RETURN_IF_ERROR(read_side(*s.rb, rep.request_b, horizon, &s.b));
  if (rep.visible_position >= 0) {
    auto ta = s.a.tokens.find(rep.visible_position), tb = s.b.tokens.find(rep.visible_position);
    if (ta != s.a.tokens.end()) rep.token_a = ta->second;
    if (tb != s.b.tokens.end()) rep.token_b = tb->second;
  }
  RETURN_IF_ERROR(s.build_units(horizon));

  // Routing: recomputed unless capacity (or an override) decided it somewhere.
  const bool capacity =
      rep.a_header.engine.capacity_factor > 0 || rep.b_header.engine.capacity_factor > 0;
  bool overridden = false;
  for (const Side* side : {&s.a, &s.b}) {
    for (const SideStep& st : side->steps) {
      for (const trace::Routing& r : st.routing) {
        for (int32_t k = 0; k < st.own.count && !overridden; ++k) {
          overridden = !row_router_decided(r, st.row0 + k);
        }
      }
    }
  }
  s.force_routing = capacity || overridden;
  rep.routing_mode = s.force_routing ? "forced" : "recomputed";
  rep.routing_reason = capacity ? "expert capacity: routing depends on the other requests"
                       : overridden
                           ? "a recorded expert is not the router's choice"
                           : "dropless, every expert the router's choice: routing differences "
                             "are consequences";

  s.list_factors(horizon);
  rep.units = static_cast<int32_t>(s.units.size());
  for (const Factor& f : rep.factors) {
    if (f.first_position <= rep.split_position) ++s.numerical_universe;
  }

  ASSIGN_OR_RETURN(s.config, engine_config_from_header(rep.a_header));
  {
    int32_t threads = options.threads;
    if (threads <= 0) {
      const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      threads = std::clamp(hw / std::max(1, options.jobs), 1, 8);
    }
    s.config.threads = threads;
  }
  return std::unique_ptr<BisectSession>(new BisectSession(std::move(impl)));
}

BisectReport BisectSession::run() {
  Impl& s = *impl_;
  BisectReport& rep = s.report;
  if (!rep.split()) return rep;
  if (rep.split_position >= 0) {
    rep.numerical = s.search(false, rep.split_position, s.numerical_universe);
    std::string pos = rep.split_position < rep.prompt_len
                          ? "prompt position " + std::to_string(rep.split_position)
                          : "position " + std::to_string(rep.split_position);
    rep.numerical.target = "B's logits at " + pos + ", bit for bit";
  }
  if (rep.visible_position >= 0) {
    rep.visible = s.search(true, rep.visible_position - 1, static_cast<int32_t>(rep.factors.size()),
                           rep.numerical.ran ? rep.numerical.minimal : std::vector<int32_t>{});
    std::string tok = std::to_string(rep.token_b);
    if (s.model && s.model->tokenizer && rep.token_b >= 0) {
      const int32_t id = rep.token_b;
      tok = "'" + s.model->tokenizer->decode(std::span<const int32_t>(&id, 1)) + "'";
    }
    rep.visible.target =
        "B's token " + tok + " at position " + std::to_string(rep.visible_position);
  }
  rep.replays = s.replays.load();
  rep.cache_hits = s.hits.load();
  return rep;
}

Result<BisectReport> bisect_traces(const std::string& a_path, const std::string& b_path,
                                   const BisectOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<BisectSession> session,
                   BisectSession::open(a_path, b_path, options));
  BisectReport r = session->run();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace llmrr::replay
