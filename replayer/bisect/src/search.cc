// Bisect's hybrid request-alone replays and the two ddmin searches (bisect.h says what each
// factor means). Opening and running a session (reading the sides, listing the factors) is in
// bisect.cc.
#include "llmrr/replayer/bisect.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "internal.h"
#include "llmrr/format/fingerprint.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/recorder/convert.h"
#include "llmrr/replayer/ddmin.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/policy.h"

namespace llmrr::replay {

namespace bisect_internal {

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

}  // namespace bisect_internal

namespace {

bool same_fingerprint(const trace::Fingerprint& x, const trace::Fingerprint& y) {
  return x.hash == y.hash && std::memcmp(&x.l2, &y.l2, sizeof x.l2) == 0 &&
         std::memcmp(&x.max_abs, &y.max_abs, sizeof x.max_abs) == 0;
}

ForcedRouting to_forced(const trace::Routing& r) {
  ForcedRouting f;
  f.rows = r.rows;
  f.k = r.k;
  f.capacity = r.capacity;
  f.experts = r.experts;
  f.outcome = r.outcome;
  return f;
}

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
            fr.outcome[p] = y->outcome[q];
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
  const int64_t checked = replays.load();  // the budget counts what follows the two checks
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
      const int64_t left = options.max_replays - (replays.load() - checked);
      if (options.max_replays > 0 && left <= 0) {
        res.exhausted = true;  // answer "none reproduces": ddmin ends on the set it holds
        return -1;
      }
      size_t to = std::min(sets.size(), from + static_cast<size_t>(jobs));
      if (options.max_replays > 0) to = std::min(to, from + static_cast<size_t>(left));
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
    // A long set is named by its first factors; --json lists every one.
    constexpr size_t kNamed = 8;
    const size_t named = std::min(res.minimal.size(), kNamed);
    std::string s = "together, ";
    for (size_t i = 0; i < named; ++i) {
      s += (i == 0                                             ? ""
            : i + 1 == named && named == res.minimal.size() ? "; and "
                                                              : "; ") +
           report.factors[static_cast<size_t>(res.minimal[i])].text;
    }
    if (named < res.minimal.size()) {
      s += "; and " + std::to_string(res.minimal.size() - named) + " more (--json lists them)";
    }
    res.conclusion = s + (res.exhausted ? " reproduce it (the search stopped at its budget of " +
                                              std::to_string(options.max_replays) +
                                              " replays: some may be dispensable)"
                                        : " reproduce it (none can be left out)");
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

}  // namespace llmrr::replay
