// Bisect on planted causes: B is A re-run with A's schedule, plans and routing forced except
// for what the test plants, so the cause is known. Plans of experts the target never uses
// are changed too, as decoys: they differ between A and B, so they are factors, but cannot
// act on the target. Every planted cause must come back exactly, within
// 2·log2(#factors) + 8 replays; two causes that only together reproduce come back both; the
// minimal set of alone vs load is checked for 1-minimality by replays of its own; an
// invariant pair does not split; different models are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "../common/test_paths.h"
#include "llmrr/replayer/bisect.h"
#include "llmrr/replayer/diff.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using replay::BisectReport;
using replay::BisectSession;
using replay::Factor;
using replay::FactorKind;
using rtest::builtin;
using rtest::record;
using rtest::Recorded;
using rtest::RunSpec;
using rtest::temp_path;

constexpr RequestId kTarget = 0;

int replay_bound(int32_t factors) {
  return static_cast<int>(2 * std::log2(std::max(factors, 1)) + 8);
}

// Batch rows of the target at a recorded step (first row, count); count 0 when absent.
std::pair<int64_t, int32_t> target_rows(const MemoryTrace& m, int64_t step) {
  for (const ScheduledStep& s : m.steps()) {
    if (s.step != step) continue;
    int64_t row = 0;
    for (const BatchSegment& g : s.segments) {
      if (g.request == kTarget) return {row, g.count};
      row += g.count;
    }
  }
  return {0, 0};
}

// Experts the target's rows use at (step, layer) in a routing table.
std::set<int32_t> target_experts(const MemoryTrace& m, const rtest::TableRouting& routing,
                                 int64_t step, int32_t layer) {
  std::set<int32_t> out;
  auto [row0, count] = target_rows(m, step);
  auto it = routing.table.find({step, layer});
  if (it == routing.table.end()) return out;
  const ForcedRouting& f = it->second;
  for (int64_t r = row0; r < row0 + count; ++r) {
    for (int i = 0; i < f.k; ++i) out.insert(f.experts[r * f.k + i]);
  }
  return out;
}

Plan other_gemm_plan(const Plan& p) {
  Plan q = p;
  q.splits = p.splits == 1 ? 3 : 1;
  q.arrival.clear();
  q.order = CombineOrder::kFixed;
  return q;
}

struct Planted {
  Recorded a, b;
  int decoys = 0;
};

// A: the target plus load on tiny-moe (production). B: A forced, with `plant` applied to the
// plan table and the routing table, and the plans of experts the target does not use at
// steps [1, decoy_last] (after the edit) changed.
// With `model` and `requests`, that model and those requests instead.
Planted plant(const std::string& name, const std::string& prompt,
              const std::function<void(MemoryTrace&, PlanTable&, rtest::TableRouting&)>& edit,
              int64_t decoy_last, const LoadedModel* model = nullptr,
              std::vector<RequestSpec> requests = {}) {
  const LoadedModel& m = model ? *model : builtin("tiny-moe");
  Planted p;
  RunSpec spec;
  spec.requests = model ? std::move(requests) : rtest::target_and_load(m, prompt, 10, 5);
  p.a = record(m, spec, temp_path(name + "-a.trace"));
  EXPECT_TRUE(p.a.ok);
  if (!p.a.ok) return p;
  PlanTable plans = p.a.mem->plans();
  rtest::TableRouting routing;
  for (auto& [k, f] : p.a.mem->routings()) routing.table[k] = f;
  edit(*p.a.mem, plans, routing);
  for (const auto& [key, plan] : p.a.mem->plans().all()) {
    const auto [step, packed] = key;
    const SiteId site = SiteId::unpack(packed);
    if (step < 1 || step > decoy_last || site.expert < 0) continue;
    if (target_rows(*p.a.mem, step).second == 0) continue;
    if (target_experts(*p.a.mem, routing, step, site.layer).count(site.expert)) continue;
    if (site.kind != SiteKind::kExpertUp) continue;
    plans.set(step, site, other_gemm_plan(plan));
    ++p.decoys;
  }
  RunSpec bspec = spec;
  bspec.policy = "forced";
  bspec.plans = &plans;
  rtest::ListSchedule sched;
  sched.steps = p.a.mem->steps();
  bspec.schedule = &sched;
  bspec.routing = &routing;
  p.b = record(m, bspec, temp_path(name + "-b.trace"));
  EXPECT_TRUE(p.b.ok);
  return p;
}

BisectReport bisect_ok(const std::string& a, const std::string& b, const LoadedModel& model,
                       replay::BisectOptions o = {}) {
  if (!o.request) o.request = std::make_pair(kTarget, kTarget);
  auto s = BisectSession::open(a, b, o, &model);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return {};
  BisectReport r = (*s)->run();
  // Every report renders.
  EXPECT_FALSE(replay::format_bisect_report(r).empty());
  EXPECT_FALSE(replay::bisect_report_json(r).empty());
  return r;
}

BisectReport bisect_ok(const std::string& a, const std::string& b, const std::string& model,
                       replay::BisectOptions o = {}) {
  return bisect_ok(a, b, builtin(model), o);
}

// A step in the middle of the target's decode, with other requests in the batch.
int64_t middle_step(const MemoryTrace& m, int64_t from) {
  for (const ScheduledStep& s : m.steps()) {
    if (s.step >= from && s.segments.size() >= 3 && target_rows(m, s.step).second == 1) {
      return s.step;
    }
  }
  return -1;
}

TEST(Bisect, PlantedPlanIsNamedExactly) {
  int64_t step = -1;
  const SiteId site = *parse_site("L2.attn.o");
  Plan orig, changed;
  Planted p = plant(
      "plan", "Plant a plan",
      [&](MemoryTrace& m, PlanTable& plans, rtest::TableRouting&) {
        step = middle_step(m, 3);
        ASSERT_GE(step, 0);
        ASSERT_TRUE(plans.find(step, site));
        orig = *plans.find(step, site);
        changed = other_gemm_plan(orig);
        plans.set(step, site, changed);
      },
      /*decoy_last=*/8);
  ASSERT_TRUE(p.a.ok && p.b.ok);
  EXPECT_GT(p.decoys, 4);
  BisectReport r = bisect_ok(p.a.path, p.b.path, "tiny-moe");
  ASSERT_TRUE(r.split()) << replay::format_bisect_report(r);
  ASSERT_TRUE(r.numerical.ran) << replay::format_bisect_report(r);
  EXPECT_GT(r.numerical.universe, 4) << "the decoys are factors";
  ASSERT_EQ(r.numerical.minimal.size(), 1u) << replay::format_bisect_report(r);
  const Factor& f = r.factors[r.numerical.minimal[0]];
  EXPECT_EQ(f.kind, FactorKind::kPlan);
  EXPECT_EQ(f.step_a, step);
  EXPECT_EQ(f.step_b, step);
  EXPECT_EQ(f.site_name, "L2.attn.o");
  EXPECT_EQ(f.a_text, plan_to_string(orig));
  EXPECT_EQ(f.b_text, plan_to_string(changed));
  EXPECT_NE(r.numerical.conclusion.find("change of L2.attn.o at step " + std::to_string(step) +
                                        " alone reproduces it"),
            std::string::npos)
      << r.numerical.conclusion;
  EXPECT_LE(r.numerical.replays, replay_bound(r.numerical.universe))
      << replay::format_bisect_report(r);
  // The decoys never act: every factor but the planted one is a decoy expert plan.
  int decoys = 0;
  for (const Factor& x : r.factors)
    decoys += x.kind == FactorKind::kPlan && x.site_name != "L2.attn.o";
  EXPECT_EQ(decoys + 1, static_cast<int>(r.factors.size()));
}

// Qwen3 (the transformers fixture, head_dim 32): a q_norm plan changed at one step of the
// target's decode and a k_norm plan two steps later. Whichever of the two first changes the
// target's bits (a different chunking need not change a rounded norm), bisect names that one
// alone, as diff locates the split: its step and its site. (head_dim 16 would not do: chunks
// are whole multiples of 16 lanes, so a head of 16 has one chunk whatever the plan says.)
TEST(Bisect, PlantedQkNormPlanIsNamedExactly) {
  auto loaded = load_model(LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/tiny-qwen3");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  std::vector<RequestSpec> reqs;
  for (RequestId id = 0; id < 6; ++id) {
    RequestSpec r;
    r.id = id;
    for (int32_t i = 0; i < 4 + 3 * static_cast<int32_t>(id); ++i)
      r.prompt.push_back(1 + (i * 53 + static_cast<int32_t>(id) * 31) % 290);
    r.max_tokens = 10;
    r.stop_at_eos = false;
    reqs.push_back(r);
  }
  int64_t step = -1;
  const SiteId site = *parse_site("L1.attn.q_norm"), later = *parse_site("L0.attn.k_norm");
  Plan orig, changed;
  auto other = [](Plan p) {
    p.splits = p.splits == 1 ? 2 : 1;
    return p;
  };
  Planted p = plant(
      "qknorm", "",
      [&](MemoryTrace& m, PlanTable& plans, rtest::TableRouting&) {
        step = middle_step(m, 3);
        ASSERT_GE(step, 0);
        ASSERT_TRUE(plans.find(step, site));
        ASSERT_TRUE(plans.find(step + 2, later));
        orig = *plans.find(step, site);
        changed = other(orig);
        plans.set(step, site, changed);
        plans.set(step + 2, later, other(*plans.find(step + 2, later)));
      },
      /*decoy_last=*/8, &*loaded, reqs);
  ASSERT_TRUE(p.a.ok && p.b.ok);
  BisectReport r = bisect_ok(p.a.path, p.b.path, *loaded);
  ASSERT_TRUE(r.split()) << replay::format_bisect_report(r);
  ASSERT_TRUE(r.numerical.ran) << replay::format_bisect_report(r);
  EXPECT_GE(r.numerical.universe, 2) << replay::format_bisect_report(r);
  auto d = replay::diff_traces(p.a.path, p.b.path, {});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const replay::RequestDiff* target = nullptr;
  for (const replay::RequestDiff& x : d->requests)
    if (x.a == kTarget) target = &x;
  ASSERT_TRUE(target && target->root_found);
  ASSERT_TRUE(target->first_site == "L1.attn.q_norm" || target->first_site == "L0.attn.k_norm")
      << target->first_site;
  ASSERT_EQ(r.numerical.minimal.size(), 1u) << replay::format_bisect_report(r);
  const Factor& f = r.factors[r.numerical.minimal[0]];
  EXPECT_EQ(f.kind, FactorKind::kPlan);
  EXPECT_EQ(f.site_name, target->first_site);
  EXPECT_EQ(f.step_a, target->batch_a.step);
  EXPECT_EQ(f.step_a, f.site_name == "L1.attn.q_norm" ? step : step + 2);
  if (f.site_name == "L1.attn.q_norm") {
    EXPECT_EQ(f.a_text, plan_to_string(orig));
    EXPECT_EQ(f.b_text, plan_to_string(changed));
  }
  EXPECT_NE(r.numerical.conclusion.find("change of " + f.site_name + " at step " +
                                        std::to_string(f.step_a) + " alone reproduces it"),
            std::string::npos)
      << r.numerical.conclusion;
}

// DeepSeek-V3's absorbed MLA (builtin:tiny-deepseek): the per-head W_UK GEMM
// (L1.attn.q_absorb) with another split-K at one step of the target's decode, among decoy
// plan changes of experts the target does not use: bisect names that plan alone.
TEST(Bisect, PlantedMlaPlanIsNamedExactly) {
  const LoadedModel& m = builtin("tiny-deepseek");
  int64_t step = -1;
  const SiteId site = *parse_site("L1.attn.q_absorb");
  Plan orig, changed;
  Planted p = plant(
      "mla", "",
      [&](MemoryTrace& mem, PlanTable& plans, rtest::TableRouting&) {
        step = middle_step(mem, 3);
        ASSERT_GE(step, 0);
        ASSERT_TRUE(plans.find(step, site));
        orig = *plans.find(step, site);
        changed = orig;
        changed.splits = orig.splits == 1 ? 2 : 1;  // nope 32: two halves of 16
        plans.set(step, site, changed);
      },
      /*decoy_last=*/8, &m, rtest::target_and_load(m, "Plant a latent plan", 10, 5));
  ASSERT_TRUE(p.a.ok && p.b.ok);
  BisectReport r = bisect_ok(p.a.path, p.b.path, m);
  ASSERT_TRUE(r.split()) << replay::format_bisect_report(r);
  ASSERT_TRUE(r.numerical.ran) << replay::format_bisect_report(r);
  ASSERT_EQ(r.numerical.minimal.size(), 1u) << replay::format_bisect_report(r);
  const Factor& f = r.factors[r.numerical.minimal[0]];
  EXPECT_EQ(f.kind, FactorKind::kPlan);
  EXPECT_EQ(f.step_a, step);
  EXPECT_EQ(f.site_name, "L1.attn.q_absorb");
  EXPECT_EQ(f.a_text, plan_to_string(orig));
  EXPECT_EQ(f.b_text, plan_to_string(changed));
  EXPECT_NE(r.numerical.conclusion.find("change of L1.attn.q_absorb at step " +
                                        std::to_string(step) + " alone reproduces it"),
            std::string::npos)
      << r.numerical.conclusion;
}

TEST(Bisect, PlantedRoutingIsNamedExactly) {
  const LoadedModel& m = builtin("tiny-moe");
  int64_t step = -1;
  const int32_t layer = 1;
  int32_t new_expert = -1;
  Planted p = plant(
      "route", "Plant a route",
      [&](MemoryTrace& mem, PlanTable&, rtest::TableRouting& routing) {
        step = middle_step(mem, 4);
        ASSERT_GE(step, 0);
        ForcedRouting& f = routing.table.at({step, layer});
        const int64_t row = target_rows(mem, step).first;
        const int K = f.k;
        // An expert the row does not use but another row of the step does (so its plan
        // exists at that step).
        for (int32_t e = 0; e < m.config.experts && new_expert < 0; ++e) {
          bool by_row = false, in_step = false;
          for (int i = 0; i < K; ++i) by_row |= f.experts[row * K + i] == e;
          for (int32_t x : f.experts) in_step |= x == e;
          if (!by_row && in_step) new_expert = e;
        }
        ASSERT_GE(new_expert, 0);
        f.experts[row * K] = new_expert;
      },
      /*decoy_last=*/9);
  ASSERT_TRUE(p.a.ok && p.b.ok);
  BisectReport r = bisect_ok(p.a.path, p.b.path, "tiny-moe");
  ASSERT_TRUE(r.numerical.ran) << replay::format_bisect_report(r);
  EXPECT_EQ(r.routing_mode, "forced");
  ASSERT_EQ(r.numerical.minimal.size(), 1u) << replay::format_bisect_report(r);
  const Factor& f = r.factors[r.numerical.minimal[0]];
  EXPECT_EQ(f.kind, FactorKind::kRouting) << f.text;
  EXPECT_EQ(f.step_a, step);
  EXPECT_EQ(f.layer, layer);
  EXPECT_NE(f.b_text.find("[" + std::to_string(new_expert) + ","), std::string::npos) << f.b_text;
  EXPECT_LE(r.numerical.replays, replay_bound(r.numerical.universe))
      << replay::format_bisect_report(r);
}

// The target's prompt prefilled in one step (A) or in chunks of 5 (B), alone: the only
// factor is the target's own schedule.
TEST(Bisect, PlantedScheduleIsNamedExactly) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = {rtest::target_and_load(m, "A schedule of chunks", 8, 0)[0]};
  Recorded a = record(m, spec, temp_path("sched-a.trace"));
  spec.config.scheduler.prefill_chunk = 5;
  Recorded b = record(m, spec, temp_path("sched-b.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  BisectReport r = bisect_ok(a.path, b.path, "tiny-moe");
  ASSERT_TRUE(r.numerical.ran) << replay::format_bisect_report(r);
  ASSERT_EQ(r.numerical.minimal.size(), 1u) << replay::format_bisect_report(r);
  const Factor& f = r.factors[r.numerical.minimal[0]];
  EXPECT_EQ(f.kind, FactorKind::kSchedule);
  EXPECT_EQ(f.first_position, 0);
  const int32_t L = static_cast<int32_t>(spec.requests[0].prompt.size());
  EXPECT_EQ(f.last_position, L - 1);
  EXPECT_EQ(f.step_a, 0);
  EXPECT_EQ(f.last_step_a, 0);
  EXPECT_EQ(f.last_step_b, (L + 4) / 5 - 1);
  EXPECT_NE(f.b_text.find("prefill [0,5), prefill [5,10)"), std::string::npos) << f.b_text;
  EXPECT_LE(r.numerical.replays, replay_bound(r.numerical.universe));
}

// Two planted plans at one step (the norm before layer 1's MLP, layer 3's o projection):
// only together do they reproduce B's logits at the target's row of that step.
TEST(Bisect, TwoCauseInteractionReturnsBoth) {
  int64_t step = -1;
  const SiteId site1 = *parse_site("L1.mlp_norm"), site2 = *parse_site("L3.attn.o");
  Planted p = plant(
      "two", "Two causes at once",
      [&](MemoryTrace& m, PlanTable& plans, rtest::TableRouting&) {
        step = middle_step(m, 3);
        ASSERT_GE(step, 0);
        Plan n1 = *plans.find(step, site1);
        n1.splits = n1.splits == 1 ? 2 : 1;
        plans.set(step, site1, n1);
        plans.set(step, site2, other_gemm_plan(*plans.find(step, site2)));
      },
      /*decoy_last=*/10);
  ASSERT_TRUE(p.a.ok && p.b.ok);
  replay::BisectOptions o;
  o.request = std::make_pair(kTarget, kTarget);
  auto session = BisectSession::open(p.a.path, p.b.path, o, &builtin("tiny-moe"));
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  BisectReport r = (*session)->run();
  ASSERT_TRUE(r.numerical.ran) << replay::format_bisect_report(r);
  std::set<std::pair<int64_t, std::string>> got;
  for (int32_t i : r.numerical.minimal) got.insert({r.factors[i].step_a, r.factors[i].site_name});
  const std::set<std::pair<int64_t, std::string>> want = {{step, "L1.mlp_norm"},
                                                          {step, "L3.attn.o"}};
  EXPECT_EQ(got, want) << replay::format_bisect_report(r);
  EXPECT_NE(r.numerical.conclusion.find("together"), std::string::npos);
  // Each alone does not reproduce B; both do.
  for (int32_t i : r.numerical.minimal) {
    BisectSession::Outcome one = (*session)->evaluate({i}, r.split_position);
    ASSERT_TRUE(one.ok) << one.error;
    EXPECT_FALSE(one.numerical) << r.factors[i].text << " alone";
  }
  BisectSession::Outcome both = (*session)->evaluate(r.numerical.minimal, r.split_position);
  EXPECT_TRUE(both.numerical);
}

// Alone vs load (the README's pair on tiny-moe in bf16; tiny-dense, whose only factors are
// plans, in fp32): the minimal set reproduces B, and leaving out any one of its factors
// does not (1-minimality, checked by replays of its own).
void check_alone_versus_load(const std::string& model, bool bf16, int32_t max_tokens,
                             int32_t load) {
  const LoadedModel& m = builtin(model);
  RunSpec spec;
  if (bf16) {
    spec.config.weight_type = kernels::WeightType::kBF16;
    spec.config.bf16_activations = true;
  }
  auto all = rtest::target_and_load(m, "Once upon a time", max_tokens, load);
  spec.requests = {all[0]};
  Recorded a = record(m, spec, temp_path(model + "-alone.trace"));
  spec.requests = all;
  Recorded b = record(m, spec, temp_path(model + "-loaded.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  replay::BisectOptions o;
  o.request = std::make_pair(kTarget, kTarget);
  o.jobs = 2;
  auto session = BisectSession::open(a.path, b.path, o, &m);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  BisectReport r = (*session)->run();
  ASSERT_TRUE(r.split()) << "this load splits the target (pinned by this test)";
  EXPECT_EQ(r.routing_mode, "recomputed");
  EXPECT_GE(r.factors.size(), 4u) << "a search among several factors";
  for (const auto* s : {&r.numerical, &r.visible}) {
    if (s->position < 0) continue;
    ASSERT_TRUE(s->ran) << replay::format_bisect_report(r);
    const bool visible = s == &r.visible;
    const int32_t through = visible ? r.visible_position - 1 : r.split_position;
    auto hit = [&](const BisectSession::Outcome& x) { return visible ? x.visible : x.numerical; };
    BisectSession::Outcome whole = (*session)->evaluate(s->minimal, through);
    ASSERT_TRUE(whole.ok) << whole.error;
    EXPECT_TRUE(hit(whole)) << replay::format_bisect_report(r);
    for (size_t k = 0; k < s->minimal.size(); ++k) {
      std::vector<int32_t> less = s->minimal;
      less.erase(less.begin() + static_cast<std::ptrdiff_t>(k));
      BisectSession::Outcome o2 = (*session)->evaluate(less, through);
      EXPECT_FALSE(hit(o2)) << "without " << r.factors[s->minimal[k]].text;
    }
  }
}

TEST(Bisect, AloneVersusLoadIsOneMinimal) {
  check_alone_versus_load("tiny-moe", true, 40, 12);
}
// tiny-dense in bf16 keeps this target's logits under this load; in fp32 they split.
TEST(Bisect, AloneVersusLoadIsOneMinimalDense) {
  check_alone_versus_load("tiny-dense", false, 40, 12);
}

// Production against invariant: B differs from A in almost every plan. A replay budget
// stops the numerical search on a set that still reproduces B's logits bit for bit (ddmin
// only ever narrows to reproducing sets), flagged exhausted (bisect_cli_test checks
// --search visible on a pair that splits visibly).
TEST(Bisect, ReplayBudgetAndSearchSelection) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.config.weight_type = kernels::WeightType::kBF16;
  spec.config.bf16_activations = true;
  spec.requests = {rtest::target_and_load(m, "Once upon a time", 24, 0)[0]};
  spec.policy = "production";
  Recorded a = record(m, spec, temp_path("budget-production.trace"));
  spec.policy = "invariant";
  Recorded b = record(m, spec, temp_path("budget-invariant.trace"));
  ASSERT_TRUE(a.ok && b.ok);

  replay::BisectOptions o;
  o.request = std::make_pair(kTarget, kTarget);
  o.max_replays = 3;
  auto session = BisectSession::open(a.path, b.path, o, &m);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  BisectReport r = (*session)->run();
  ASSERT_GE(r.split_position, 0) << "the two policies' logits differ (pinned by this test)";
  ASSERT_GE(r.factors.size(), 20u) << "most plans differ between the policies";
  ASSERT_TRUE(r.numerical.ran) << replay::format_bisect_report(r);
  EXPECT_TRUE(r.numerical.exhausted);
  EXPECT_LE(r.numerical.replays, 2 + 3);
  EXPECT_TRUE(r.explained());
  BisectSession::Outcome whole = (*session)->evaluate(r.numerical.minimal, r.split_position);
  ASSERT_TRUE(whole.ok) << whole.error;
  EXPECT_TRUE(whole.numerical) << "the budget's set reproduces B's logits";
  const std::string text = replay::format_bisect_report(r);
  EXPECT_NE(text.find("stopped at its budget of 3 replays"), std::string::npos) << text;
  EXPECT_NE(replay::bisect_report_json(r).find("\"exhausted\":true"), std::string::npos);

}

TEST(Bisect, InvariantPairDoesNotSplit) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.policy = "invariant";
  spec.config.weight_type = kernels::WeightType::kBF16;
  spec.config.bf16_activations = true;
  auto all = rtest::target_and_load(m, "Once upon a time", 24, 8);
  spec.requests = {all[0]};
  Recorded a = record(m, spec, temp_path("inv-alone.trace"));
  spec.requests = all;
  Recorded b = record(m, spec, temp_path("inv-load.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  BisectReport r = bisect_ok(a.path, b.path, "tiny-moe");
  EXPECT_FALSE(r.split());
  EXPECT_EQ(r.replays, 0);
  EXPECT_NE(replay::format_bisect_report(r).find("no split"), std::string::npos);
}

TEST(Bisect, DifferentModelsAreRefused) {
  RunSpec spec;
  spec.requests = {rtest::target_and_load(builtin("tiny-moe"), "Which model", 4, 0)[0]};
  Recorded a = record(builtin("tiny-moe"), spec, temp_path("model-moe.trace"));
  Recorded b = record(builtin("tiny-dense"), spec, temp_path("model-dense.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  Result<BisectReport> r = replay::bisect_traces(a.path, b.path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  const std::string msg = r.status().to_string();
  EXPECT_NE(msg.find("different models"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tiny-moe"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tiny-dense"), std::string::npos) << msg;
  EXPECT_NE(msg.find("xxh3-64:"), std::string::npos) << msg;
}

TEST(Bisect, UnknownRequestIsRefused) {
  RunSpec spec;
  spec.requests = {rtest::target_and_load(builtin("tiny-moe"), "Which request", 4, 0)[0]};
  Recorded a = record(builtin("tiny-moe"), spec, temp_path("req.trace"));
  ASSERT_TRUE(a.ok);
  replay::BisectOptions o;
  o.request = std::make_pair(RequestId{0}, RequestId{9});
  Result<BisectReport> r = replay::bisect_traces(a.path, a.path, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().to_string().find("no request 9"), std::string::npos)
      << r.status().to_string();
}

}  // namespace
}  // namespace llmrr
