// Bisect: a session opened (the request pair diff picks, R's steps read from each trace and
// aligned into units, the factors listed; bisect.h says what each factor means) and run. The
// hybrid replays and the two ddmin searches are in search.cc, the report's text and JSON in
// report.cc.
#include "llmrr/replayer/bisect.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <span>
#include <thread>
#include <utility>

#include "internal.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/recorder/convert.h"
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

}  // namespace

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
      f.a_text = plan_text(f.plan_a);
      f.b_text = plan_text(f.plan_b);
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
  // Header errors name the trace (a_path: run header: ...).
  Result<EngineConfig> ra = engine_config_from_header(rep.a_header);
  if (!ra.ok()) return ra.status().with_context(a_path + ": ");
  Result<EngineConfig> rb = engine_config_from_header(rep.b_header);
  if (!rb.ok()) return rb.status().with_context(b_path + ": ");
  const EngineConfig& ca = *ra;
  const EngineConfig& cb = *rb;
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
  using Searches = BisectOptions::Searches;
  const bool numerical = s.options.searches != Searches::kVisible;
  const bool visible = s.options.searches != Searches::kNumerical;
  auto skip = [](SearchResult* r, int32_t position, int32_t universe, const char* searched) {
    r->skipped = true;
    r->position = position;
    r->universe = universe;
    r->conclusion = std::string("not searched (--search ") + searched + ")";
  };
  if (rep.split_position >= 0) {
    if (numerical) {
      rep.numerical = s.search(false, rep.split_position, s.numerical_universe);
    } else {
      skip(&rep.numerical, rep.split_position, s.numerical_universe, "visible");
    }
    std::string pos = rep.split_position < rep.prompt_len
                          ? "prompt position " + std::to_string(rep.split_position)
                          : "position " + std::to_string(rep.split_position);
    rep.numerical.target = "B's logits at " + pos + ", bit for bit";
  }
  if (rep.visible_position >= 0) {
    const int32_t universe = static_cast<int32_t>(rep.factors.size());
    if (visible) {
      rep.visible = s.search(true, rep.visible_position - 1, universe,
                             rep.numerical.ran ? rep.numerical.minimal : std::vector<int32_t>{});
    } else {
      skip(&rep.visible, rep.visible_position, universe, "numerical");
    }
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
