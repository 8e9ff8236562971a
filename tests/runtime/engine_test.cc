// The engine: score entry vs generation, thread-count independence, observers, forced
// replay (schedule, plans, routing), atomics, request-alone replay, capacity, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/load.h"
#include "llmrr/runtime/memory_trace.h"
#include "test_util.h"

namespace llmrr {
namespace {

using testing::builtin;
using testing::bytes;
using testing::request;
using testing::EngineRun;

std::vector<RequestSpec> target_and_load(const std::string& prompt, int32_t max_tokens,
                                         int32_t load, uint64_t seed, int64_t target_arrival = 0) {
  std::vector<RequestSpec> reqs{request(0, bytes(prompt), max_tokens, target_arrival)};
  LoadOptions lo;
  lo.count = load;
  lo.seed = seed;
  lo.token_lo = 32;
  lo.token_hi = 127;
  lo.max_prompt = 30;
  lo.max_new = 12;
  lo.max_arrival = 6;
  for (RequestSpec& r : make_load_requests(lo)) reqs.push_back(std::move(r));
  return reqs;
}

void expect_same_logits(const MemoryTrace& a, const MemoryTrace& b) {
  ASSERT_EQ(a.logits().size(), b.logits().size());
  for (const auto& [key, la] : a.logits()) {
    const std::vector<float>* lb = b.logits_at(key.first, key.second);
    ASSERT_NE(lb, nullptr) << "request " << key.first << " position " << key.second;
    ASSERT_TRUE(testing::same_bits(la, *lb))
        << "request " << key.first << " position " << key.second;
  }
}

// ---- basics ---------------------------------------------------------------------------------

class EngineModels : public ::testing::TestWithParam<std::string> {
 protected:
  const LoadedModel& model() {
    if (GetParam() == "qwen2-moe") return testing::synthetic_qwen2_moe();
    if (GetParam() == "qwen3-moe") return testing::synthetic_qwen3_moe();
    return builtin(GetParam());
  }
};

// Under the invariant policy, the logits a request gets while generating (prefill chunks,
// then decode rows) equal the logits of one prefill over the same tokens, bit for bit.
TEST_P(EngineModels, ScorePromptMatchesGenerationUnderInvariant) {
  EngineConfig cfg;
  cfg.scheduler.prefill_chunk = 5;
  std::vector<int32_t> prompt = bytes("The quick brown fox");
  EngineRun run = testing::run_requests(model(), cfg, testing::invariant(), {request(0, prompt, 10)});
  const RequestState* st = run.engine->request(0);
  ASSERT_EQ(st->generated.size(), 10u);
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), st->generated.begin(), st->generated.end() - 1);
  auto scored = run.engine->score_prompt(seq);
  ASSERT_TRUE(scored.ok()) << scored.status().to_string();
  const int64_t V = run.engine->model_config().vocab;
  ASSERT_EQ(static_cast<int64_t>(scored->size()), static_cast<int64_t>(seq.size()) * V);
  for (int32_t p = static_cast<int32_t>(prompt.size()) - 1; p < static_cast<int32_t>(seq.size());
       ++p) {
    const std::vector<float>* got = run.trace->logits_at(0, p);
    ASSERT_NE(got, nullptr) << p;
    std::vector<float> want(scored->begin() + p * V, scored->begin() + (p + 1) * V);
    EXPECT_TRUE(testing::same_bits(*got, want)) << "position " << p;
  }
}

// DESIGN invariant 1 at the engine level: whole runs, any thread count, any ISA path, same
// bits.
TEST_P(EngineModels, ThreadCountAndIsaDoNotChangeResults) {
  std::vector<RequestSpec> reqs = target_and_load("Thread count", 8, 5, 11);
  EngineConfig cfg;
  cfg.scheduler.prefill_chunk = 9;
  if (model().config.is_moe()) cfg.capacity = CapacityConfig{1.0, Overflow::kReroute};
  std::vector<EngineRun> runs;
  for (int threads : {1, 2, 3}) {
    cfg.threads = threads;
    runs.push_back(testing::run_requests(model(), cfg, testing::production(), reqs));
  }
  // And any SIMD path (invariant 1): the scalar and AVX2 paths give the same whole run.
  cfg.threads = 2;
  const kernels::Isa native = kernels::active_isa();
  for (kernels::Isa isa : {kernels::Isa::kAvx2, kernels::Isa::kScalar}) {
    if (kernels::set_isa(isa) != isa || isa == native) continue;
    runs.push_back(testing::run_requests(model(), cfg, testing::production(), reqs));
  }
  kernels::set_isa(native);
  for (size_t i = 1; i < runs.size(); ++i) {
    expect_same_logits(*runs[0].trace, *runs[i].trace);
    for (const RequestSpec& r : reqs) {
      EXPECT_EQ(runs[0].engine->request(r.id)->generated, runs[i].engine->request(r.id)->generated);
    }
  }
}

// Recording with every site hashed changes nothing.
TEST_P(EngineModels, ObserversDoNotChangeResults) {
  std::vector<RequestSpec> reqs = target_and_load("Observed", 6, 3, 5);
  EngineConfig cfg;
  EngineRun plain = testing::run_requests(model(), cfg, testing::production(), reqs);
  EngineRun hashed = testing::run_requests(model(), cfg, testing::production(), reqs,
                                     MemoryTrace::Options{true, true});
  EXPECT_FALSE(hashed.trace->row_hashes().empty());
  expect_same_logits(*plain.trace, *hashed.trace);
}

// rr-style: record under production with load, replay with forced schedule, plans and
// routing: every logit and every row hash at every site identical.
TEST_P(EngineModels, ForcedReplayReproducesProductionRun) {
  std::vector<RequestSpec> reqs = target_and_load("Replay me", 8, 6, 3);
  EngineConfig cfg;
  cfg.scheduler.prefill_chunk = 6;
  if (model().config.is_moe()) cfg.capacity = CapacityConfig{1.0, Overflow::kDrop};
  EngineRun rec = testing::run_requests(model(), cfg, testing::production(), reqs,
                                  MemoryTrace::Options{true, true});
  for (RoutingMode mode : {RoutingMode::kForce, RoutingMode::kCheck}) {
    cfg.threads = 2;
    EngineRun rep = testing::replay(model(), cfg, *rec.trace, mode, std::nullopt,
                              MemoryTrace::Options{true, true});
    expect_same_logits(*rec.trace, *rep.trace);
    EXPECT_EQ(rec.trace->row_hashes(), rep.trace->row_hashes());
    EXPECT_FALSE(rep.engine->routing_mismatch().has_value());
    for (const RequestSpec& r : reqs) {
      EXPECT_EQ(rec.trace->tokens(r.id), rep.trace->tokens(r.id));
    }
  }
}

// Invariant 3: one request replays alone (its rows only) from the full batch's plans and
// routing, bit for bit at every site — also with atomics (row-indexed combine orders) and
// capacity (routing that depends on other requests).
TEST_P(EngineModels, RequestAloneReplayIsBitIdentical) {
  std::vector<RequestSpec> reqs = target_and_load("Alone", 7, 6, 21, 2);
  EngineConfig cfg;
  cfg.scheduler.prefill_chunk = 4;
  if (model().config.is_moe()) cfg.capacity = CapacityConfig{0.8, Overflow::kReroute};
  EngineRun rec = testing::run_requests(model(), cfg, testing::production(/*atomics=*/true), reqs,
                                  MemoryTrace::Options{true, true});
  for (RequestId id : {RequestId{0}, RequestId{3}}) {
    EngineRun alone = testing::replay(model(), cfg, *rec.trace, RoutingMode::kForce, id,
                                MemoryTrace::Options{true, true});
    // Every row hash of the lone run equals the recorded one at the same (step, site, row).
    size_t compared = 0;
    for (const auto& [key, h] : alone.trace->row_hashes()) {
      auto it = rec.trace->row_hashes().find(key);
      ASSERT_NE(it, rec.trace->row_hashes().end());
      EXPECT_EQ(it->second, h) << "step " << std::get<0>(key) << " site "
                               << site_name(SiteId::unpack(std::get<1>(key))) << " row "
                               << std::get<2>(key);
      ++compared;
    }
    EXPECT_GT(compared, 100u);
    for (const auto& [key, la] : alone.trace->logits()) {
      EXPECT_EQ(key.first, id);
      EXPECT_TRUE(testing::same_bits(la, *rec.trace->logits_at(key.first, key.second)));
    }
    EXPECT_EQ(alone.trace->tokens(id), rec.trace->tokens(id));
    EXPECT_EQ(alone.engine->request(id)->generated.size(),
              static_cast<size_t>(reqs[id].max_tokens));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EngineModels,
                         ::testing::Values("tiny-dense", "tiny-moe", "qwen2-moe", "qwen3-moe",
                                           "tiny-deepseek"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = c == '-' ? '_' : c;
                           return s;
                         });

// Qwen3's q/k norm is planned over rows x heads rows of head_dim: production splits each
// head's sum of squares at small batch (head_dim 64: two chunks while rows x heads < 132 SMs)
// and not at a large prefill; invariant never does.
TEST(EngineQkNorm, PlanFollowsRowsTimesHeads) {
  const LoadedModel& m = testing::synthetic_qwen3_moe();
  RequestSpec r;
  r.id = 0;
  for (int32_t i = 0; i < 40; ++i) r.prompt.push_back(1 + (i * 37) % 250);
  r.max_tokens = 3;
  r.stop_at_eos = false;
  EngineConfig cfg;
  cfg.scheduler.prefill_chunk = 0;  // the whole prompt in one step: 40 x 4 = 160 norm rows
  for (bool prod : {true, false}) {
    EngineRun run = testing::run_requests(
        m, cfg, prod ? testing::production(false) : testing::invariant(), {r});
    const int64_t last = run.trace->steps().back().step;
    for (const char* name : {"L0.attn.q_norm", "L2.attn.k_norm"}) {
      const SiteId site = *parse_site(name);
      const Plan* prefill = run.trace->plans().find(0, site);
      const Plan* decode = run.trace->plans().find(last, site);
      ASSERT_TRUE(prefill && decode) << name;
      EXPECT_EQ(prefill->op, OpKind::kRmsNorm);
      EXPECT_EQ(prefill->splits, 1u) << name;
      EXPECT_EQ(decode->splits, prod ? 2u : 1u) << name << (prod ? " production" : " invariant");
    }
  }
}

// ---- atomics ------------------------------------------------------------------------------

// Two runs of the very same batch under production+atomics differ somewhere; each one
// replays bit for bit from its own recorded arrival orders.
TEST(EngineAtomics, RunsDifferAndEachReplaysFromItsArrivalOrders) {
  const LoadedModel& m = builtin("tiny-moe");
  std::vector<RequestSpec> reqs = target_and_load("Atomic adds", 10, 5, 9);
  EngineConfig cfg;
  EngineRun a = testing::run_requests(m, cfg, testing::production(true), reqs);
  EngineRun b = testing::run_requests(m, cfg, testing::production(true), reqs);
  bool differ = false;
  for (const auto& [key, la] : a.trace->logits()) {
    const std::vector<float>* lb = b.trace->logits_at(key.first, key.second);
    if (!lb || !testing::same_bits(la, *lb)) differ = true;
  }
  EXPECT_TRUE(differ) << "two atomics runs gave identical logits everywhere";
  // Arrival orders are recorded in the plans.
  size_t arrival_plans = 0;
  for (const auto& [key, p] : a.trace->plans().all()) {
    if (p.order == CombineOrder::kArrival) ++arrival_plans;
  }
  EXPECT_GT(arrival_plans, 0u);
  for (EngineRun* r : {&a, &b}) {
    EngineRun rep = testing::replay(m, cfg, *r->trace);
    expect_same_logits(*r->trace, *rep.trace);
  }
  // Without atomics production is run-to-run deterministic.
  EngineRun c = testing::run_requests(m, cfg, testing::production(false), reqs);
  EngineRun d = testing::run_requests(m, cfg, testing::production(false), reqs);
  expect_same_logits(*c.trace, *d.trace);
}

// ---- planted changes ------------------------------------------------------------------------

// Forcing one different plan at one (step, site) changes that site's rows at that step and
// nothing before it in forward order.
TEST(EngineForced, OnePlantedPlanChangesRowsFromItsSiteOn) {
  const LoadedModel& m = builtin("tiny-dense");
  std::vector<RequestSpec> reqs = target_and_load("Plant", 6, 2, 4);
  EngineConfig cfg;
  EngineRun rec = testing::run_requests(m, cfg, testing::production(), reqs,
                                  MemoryTrace::Options{true, true});
  const int64_t step = rec.trace->steps()[3].step;
  const SiteId site{SiteKind::kDown, 2, -1};
  Plan planted = *rec.trace->plans().find(step, site);
  planted.splits = planted.splits == 1 ? 4 : 1;
  rec.trace->plans().set(step, site, planted);
  EngineRun rep = testing::replay(m, cfg, *rec.trace, RoutingMode::kForce, std::nullopt,
                            MemoryTrace::Options{true, true});
  bool before_same = true, at_differs = false;
  for (const auto& [key, h] : rep.trace->row_hashes()) {
    auto [s, packed, row] = key;
    const uint64_t want = rec.trace->row_hashes().at(key);
    SiteId si = SiteId::unpack(packed);
    if (s < step || (s == step && si < site)) before_same = before_same && want == h;
    if (s == step && si == site && want != h) at_differs = true;
  }
  EXPECT_TRUE(before_same);
  EXPECT_TRUE(at_differs);
}

// Forced routing wins over the router; check mode recomputes and names the first token
// whose experts differ from the source.
TEST(EngineForced, RoutingForceAndCheck) {
  const LoadedModel& m = builtin("tiny-moe");
  std::vector<RequestSpec> reqs = target_and_load("Route", 6, 3, 8);
  EngineConfig cfg;
  EngineRun rec = testing::run_requests(m, cfg, testing::production(), reqs);
  // Plant: at the 4th step, layer 1, row 0 uses another expert in rank 0.
  const int64_t step = rec.trace->steps()[3].step;
  ForcedRouting& fr = rec.trace->routings().at({step, 1});
  const int32_t old = fr.experts[0];
  int32_t planted = (old + 1) % m.config.experts;
  while (planted == fr.experts[1]) planted = (planted + 1) % m.config.experts;
  fr.experts[0] = planted;

  struct Watch : Observer {
    int64_t step;
    int32_t seen = -2;
    void on_routing(const RoutingView& v) override {
      if (v.step == step && v.layer == 1) seen = v.experts[0];
    }
  };
  Watch w;
  w.step = step;
  auto e = Engine::create(m, cfg, make_forced_policy(rec.trace.get()));
  ASSERT_TRUE(e.ok());
  for (const RequestSpec& r : rec.trace->arrivals()) ASSERT_TRUE((*e)->add_request(r).ok());
  rec.trace->rewind();
  (*e)->set_schedule_source(rec.trace.get());
  (*e)->set_routing_source(rec.trace.get(), RoutingMode::kForce);
  MemoryTrace forced_trace;
  (*e)->add_observer(&w);
  (*e)->add_observer(&forced_trace);
  ASSERT_TRUE((*e)->run().ok());
  EXPECT_EQ(w.seen, planted);
  const RequestId r0 = rec.trace->steps()[3].segments[0].request;
  const int32_t pos0 = rec.trace->steps()[3].segments[0].start;
  EXPECT_GE(testing::first_logit_difference(*rec.trace, forced_trace, r0), pos0);

  EngineRun check = testing::replay(m, cfg, *rec.trace, RoutingMode::kCheck);
  ASSERT_TRUE(check.engine->routing_mismatch().has_value());
  const RoutingMismatch& mm = *check.engine->routing_mismatch();
  EXPECT_EQ(mm.step, step);
  EXPECT_EQ(mm.layer, 1);
  EXPECT_EQ(mm.batch_row, 0);
  EXPECT_EQ(mm.request, r0);
  EXPECT_EQ(mm.position, pos0);
  EXPECT_EQ(mm.expected[0], planted);
  EXPECT_EQ(mm.found[0], old);
  // Check mode runs with the recomputed routing: the original logits come back.
  expect_same_logits(*rec.trace, *check.trace);
}

// ---- capacity --------------------------------------------------------------------------------

struct RoutingStats : Observer {
  int64_t kept = 0, rerouted = 0, dropped = 0;
  bool over_capacity = false, reroute_to_chosen = false;
  void on_routing(const RoutingView& v) override {
    std::vector<int32_t> load(v.experts_total, 0);
    for (int64_t i = 0; i < v.rows * v.k; ++i) {
      switch (v.outcome[i]) {
        case RouteOutcome::kKept: ++kept; EXPECT_EQ(v.experts[i], v.chosen[i]); break;
        case RouteOutcome::kRerouted: ++rerouted; break;
        case RouteOutcome::kDropped: ++dropped; EXPECT_EQ(v.experts[i], -1); break;
      }
      if (v.experts[i] >= 0) ++load[v.experts[i]];
      if (v.outcome[i] == RouteOutcome::kRerouted) {
        const int64_t r = i / v.k;
        for (int j = 0; j < v.k; ++j) {
          if (v.chosen[r * v.k + j] == v.experts[i]) reroute_to_chosen = true;
        }
      }
    }
    if (v.capacity > 0) {
      for (int32_t l : load) over_capacity = over_capacity || l > v.capacity;
    }
  }
};

TEST(EngineCapacity, DropAndRerouteOutcomesAreVisibleAndRespectCapacity) {
  for (const char* model : {"tiny-moe", "tiny-deepseek"})
  for (Overflow o : {Overflow::kNone, Overflow::kDrop, Overflow::kReroute}) {
    const LoadedModel& m = builtin(model);
    std::vector<RequestSpec> reqs = target_and_load("Capacity pressure", 6, 5, 2);
    SCOPED_TRACE(model);
    EngineConfig cfg;
    cfg.capacity = CapacityConfig{o == Overflow::kNone ? 0.0 : 0.75, o};
    RoutingStats stats;
    auto e = Engine::create(m, cfg, testing::invariant());
    ASSERT_TRUE(e.ok());
    (*e)->add_observer(&stats);
    for (const RequestSpec& r : reqs) ASSERT_TRUE((*e)->add_request(r).ok());
    ASSERT_TRUE((*e)->run().ok());
    SCOPED_TRACE(overflow_name(o));
    EXPECT_FALSE(stats.over_capacity);
    EXPECT_FALSE(stats.reroute_to_chosen);
    EXPECT_GT(stats.kept, 0);
    if (o == Overflow::kNone) {
      EXPECT_EQ(stats.dropped + stats.rerouted, 0);
    } else if (o == Overflow::kDrop) {
      EXPECT_GT(stats.dropped, 0);
      EXPECT_EQ(stats.rerouted, 0);
    } else {
      EXPECT_GT(stats.rerouted, 0);
    }
  }
}

// ---- observers ------------------------------------------------------------------------------

struct OrderLog : Observer {
  SiteId want{SiteKind::kLayerOut, 1, -1};
  std::vector<std::string> errors;
  std::map<int64_t, int> plans_per_step;
  std::map<int64_t, int> rows_per_step;
  int phase = 0;  // 0 before step, 1 in forward, 2 logits, 3 tokens, 4 finishes
  uint64_t last_key = 0;
  int64_t cur = -1;
  bool wants_rows(SiteId site) override { return site == want; }
  void on_arrival(int64_t step, const RequestSpec&) override {
    if (phase != 0) errors.push_back("arrival after on_step at step " + std::to_string(step));
  }
  void on_step(const StepInfo& s) override {
    phase = 1;
    last_key = 0;
    cur = s.step;
  }
  void site(SiteId s) {
    if (phase != 1) errors.push_back("site callback outside forward: " + site_name(s));
    if (s.forward_key() < last_key) errors.push_back("out of forward order: " + site_name(s));
    last_key = s.forward_key();
  }
  void on_plan(int64_t step, SiteId s, const Plan&) override {
    site(s);
    ++plans_per_step[step];
  }
  void on_rows(const RowsView& v) override {
    site(v.site);
    if (!(v.site == want)) errors.push_back("rows of a site nobody asked for");
    ++rows_per_step[v.step];
  }
  void on_routing(const RoutingView& v) override {
    site(SiteId{SiteKind::kRouter, static_cast<int16_t>(v.layer), -1});
  }
  void on_logits(const LogitsView&) override {
    if (phase > 2) errors.push_back("logits after tokens");
    phase = 2;
  }
  void on_token(const TokenEvent&) override {
    if (phase > 3 || phase < 2) errors.push_back("token out of order");
    phase = 3;
  }
  void on_finish(const RequestFinish&) override {
    if (phase < 3) errors.push_back("finish before tokens");
    phase = 4;
  }
  void on_step_end(int64_t step) override {
    if (step != cur) errors.push_back("step end for another step");
    phase = 0;
  }
};

TEST(EngineObserver, CallbackOrderPlansForEveryOpAndRowsOnlyWhenAsked) {
  const LoadedModel& m = builtin("tiny-dense");
  std::vector<RequestSpec> reqs = target_and_load("Order", 5, 3, 6);
  EngineConfig cfg;
  OrderLog log;
  auto e = Engine::create(m, cfg, testing::production());
  ASSERT_TRUE(e.ok());
  MemoryTrace trace;
  (*e)->add_observer(&log);
  (*e)->add_observer(&trace);
  for (const RequestSpec& r : reqs) ASSERT_TRUE((*e)->add_request(r).ok());
  ASSERT_TRUE((*e)->run().ok());
  EXPECT_TRUE(log.errors.empty()) << log.errors.front();
  // Dense: 10 planned ops per layer, plus final norm and lm_head when a row samples.
  for (const ScheduledStep& s : trace.steps()) {
    bool samples = false;
    for (const BatchSegment& g : s.segments) samples = samples || g.sample;
    EXPECT_EQ(log.plans_per_step[s.step], 10 * m.config.layers + (samples ? 2 : 0));
    EXPECT_EQ(log.rows_per_step[s.step], 1);
  }
}

// ---- precision and routing variants ----------------------------------------------------------

TEST(EnginePrecision, Bf16RunsCloseToFp32) {
  const LoadedModel& m = builtin("tiny-moe");
  EngineConfig cfg;
  auto e32 = Engine::create(m, cfg, testing::invariant());
  cfg.weight_type = kernels::WeightType::kBF16;
  cfg.bf16_activations = true;
  auto e16 = Engine::create(m, cfg, testing::invariant());
  ASSERT_TRUE(e32.ok() && e16.ok());
  std::vector<int32_t> p = bytes("bf16 against fp32");
  auto a = (*e32)->score_prompt(p);
  auto b = (*e16)->score_prompt(p);
  ASSERT_TRUE(a.ok() && b.ok());
  double max_diff = 0, lo = 1e30, hi = -1e30;
  for (size_t i = 0; i < a->size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double((*a)[i]) - (*b)[i]));
    lo = std::min(lo, double((*a)[i]));
    hi = std::max(hi, double((*a)[i]));
  }
  EXPECT_GT(max_diff, 0.0);             // bf16 really rounds
  EXPECT_LT(max_diff, 0.1 * (hi - lo));  // and stays close
  // bf16 logits are bf16 values.
  for (float v : *b) ASSERT_EQ(v, numerics::round_to_bf16(v));
}

TEST(EngineRouting, SigmoidScoringChangesRouting) {
  const LoadedModel& m = builtin("tiny-moe");
  EngineConfig cfg;
  auto soft = Engine::create(m, cfg, testing::invariant());
  cfg.scoring = RouterScoring::kSigmoid;
  auto sig = Engine::create(m, cfg, testing::invariant());
  ASSERT_TRUE(soft.ok() && sig.ok());
  std::vector<int32_t> p = bytes("sigmoid scoring");
  auto a = (*soft)->score_prompt(p);
  auto b = (*sig)->score_prompt(p);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(testing::same_bits(*a, *b));
}

// ---- errors --------------------------------------------------------------------------------

TEST(EngineErrors, BadRequestsAreRefusedWithReasons) {
  const LoadedModel& m = builtin("tiny-dense");
  auto e = Engine::create(m, EngineConfig{}, testing::invariant());
  ASSERT_TRUE(e.ok());
  Engine& en = **e;
  EXPECT_TRUE(en.add_request(request(1, {1, 2}, 4)).ok());
  EXPECT_EQ(en.add_request(request(1, {1, 2}, 4)).code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(en.add_request(request(2, {}, 4)).ok());
  Status bad_token = en.add_request(request(3, {1, 9999}, 4));
  EXPECT_NE(bad_token.message().find("9999"), std::string::npos);
  EXPECT_FALSE(en.add_request(request(4, {1}, 0)).ok());
  EXPECT_FALSE(en.add_request(request(5, std::vector<int32_t>(4000, 1), 200)).ok());
  RequestSpec hot = request(6, {1}, 2);
  hot.sampling.top_p = 0;
  EXPECT_FALSE(en.add_request(hot).ok());

  EngineConfig bad;
  bad.kv_block = 0;
  EXPECT_FALSE(Engine::create(m, bad).ok());
  bad = {};
  bad.capacity = CapacityConfig{0.0, Overflow::kDrop};
  EXPECT_FALSE(Engine::create(m, bad).ok());
}

TEST(EngineErrors, InconsistentForcedScheduleIsRefused) {
  const LoadedModel& m = builtin("tiny-dense");
  EngineRun rec = testing::run_requests(m, EngineConfig{}, testing::invariant(),
                                  {request(0, bytes("abcdef"), 3)});
  // Shift the second step's start: the replay must name the step and what is wrong.
  MemoryTrace& t = *rec.trace;
  auto steps = t.steps();
  ASSERT_GE(steps.size(), 2u);
  struct Shifted : ScheduleSource {
    std::vector<ScheduledStep> s;
    size_t i = 0;
    Result<std::optional<ScheduledStep>> next() override {
      if (i >= s.size()) return std::optional<ScheduledStep>();
      return std::optional<ScheduledStep>(s[i++]);
    }
  } src;
  src.s = steps;
  src.s[1].segments[0].start += 1;
  src.s[1].segments[0].cached += 1;
  auto e = Engine::create(m, EngineConfig{}, make_forced_policy(&t));
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE((*e)->add_request(t.arrivals()[0]).ok());
  (*e)->set_schedule_source(&src);
  Status st = (*e)->run();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("step " + std::to_string(steps[1].step)), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("KV cache"), std::string::npos) << st.message();

  // Forced plans missing: the error names step and site.
  PlanTable empty;
  auto e2 = Engine::create(m, EngineConfig{}, make_forced_policy(&empty));
  ASSERT_TRUE(e2.ok());
  ASSERT_TRUE((*e2)->add_request(request(0, bytes("abc"), 2)).ok());
  Status st2 = (*e2)->run();
  EXPECT_NE(st2.message().find("no forced plan for step 0 site L0.attn_norm"), std::string::npos)
      << st2.message();
}

}  // namespace
}  // namespace llmrr
