// Diff: identical runs are identical; alone vs under load splits under the production policy
// and not under the invariant one; planted divergences — one plan at one step and site, one
// routing decision, the batch composition — are named exactly (step, site, cause); the
// arrival-order reduction of production --atomics is named; fewer captured sites are said;
// truncated and corrupted traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "../common/test_paths.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/replayer/replay.h"
#include "llmrr/replayer/trace_feed.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using replay::DiffReport;
using replay::RequestDiff;
using replay::Verdict;
using rtest::builtin;
using rtest::record;
using rtest::Recorded;
using rtest::RunSpec;
using rtest::temp_path;

DiffReport diff_ok(const std::string& a, const std::string& b, replay::DiffOptions o = {}) {
  Result<DiffReport> d = replay::diff_traces(a, b, o);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  if (!d.ok()) return {};
  // Every report renders, as text and as JSON.
  std::string story = replay::format_diff_story(*d);
  EXPECT_FALSE(story.empty());
  nlohmann::json j = nlohmann::json::parse(replay::diff_report_json(*d), nullptr, false);
  EXPECT_FALSE(j.is_discarded());
  EXPECT_EQ(j["identical"], d->identical());
  return std::move(d).value();
}

const RequestDiff* find(const DiffReport& d, RequestId id) {
  for (const RequestDiff& r : d.requests) {
    if (r.a == id) return &r;
  }
  return nullptr;
}

std::vector<RequestSpec> target_only(const std::vector<RequestSpec>& all) {
  return {all[0]};
}

// The batch row of (request, position) at a recorded step of a MemoryTrace.
int64_t row_at(const MemoryTrace& m, int64_t step, RequestId request, int32_t position) {
  for (const ScheduledStep& s : m.steps()) {
    if (s.step != step) continue;
    int64_t row = 0;
    for (const BatchSegment& g : s.segments) {
      if (g.request == request && position >= g.start && position < g.start + g.count) {
        return row + position - g.start;
      }
      row += g.count;
    }
  }
  return -1;
}

// The first site (forward order) where the row of (request, position) hashes differently in
// two in-memory runs: an oracle independent of the trace files.
std::string first_differing_site(const MemoryTrace& a, const MemoryTrace& b, int64_t step_a,
                                 int64_t step_b, RequestId request, int32_t position) {
  const int64_t ra = row_at(a, step_a, request, position),
                rb = row_at(b, step_b, request, position);
  std::map<SiteId, std::pair<uint64_t, uint64_t>> sites;
  for (const auto& [key, h] : a.row_hashes()) {
    if (std::get<0>(key) == step_a && std::get<2>(key) == ra) {
      sites[SiteId::unpack(std::get<1>(key))].first = h;
    }
  }
  std::optional<SiteId> first;
  for (const auto& [key, h] : b.row_hashes()) {
    if (std::get<0>(key) == step_b && std::get<2>(key) == rb) {
      auto it = sites.find(SiteId::unpack(std::get<1>(key)));
      if (it != sites.end() && it->second.first != h && (!first || it->first < *first)) {
        first = it->first;
      }
    }
  }
  return first ? site_name(*first) : "";
}

TEST(Diff, IdenticalRunsExitZero) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Same twice", 8, 3);
  Recorded a = record(m, spec, temp_path("same-a.trace"));
  spec.config.threads = 1;  // threads never change a bit
  Recorded b = record(m, spec, temp_path("same-b.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  DiffReport d = diff_ok(a.path, b.path);
  EXPECT_TRUE(d.identical());
  EXPECT_EQ(d.requests.size(), 4u);
  for (const RequestDiff& r : d.requests) {
    EXPECT_EQ(r.verdict, Verdict::kIdentical);
    EXPECT_FALSE(r.root_found);
    EXPECT_GT(r.compared_logits, 0);
  }
  EXPECT_NE(replay::format_diff_story(d).find("no split"), std::string::npos);
}

// The demo's story in a test: the target alone vs under load. Production: the logits split
// and the diff names a plan that differs because the batch does. Invariant: identical.
TEST(Diff, AloneVersusLoad) {
  const LoadedModel& m = builtin("tiny-moe");
  const std::vector<RequestSpec> all = rtest::target_and_load(m, "The quick brown fox", 16, 8);
  for (const char* policy : {"production", "invariant"}) {
    RunSpec alone, loaded;
    alone.policy = loaded.policy = policy;
    alone.requests = target_only(all);
    loaded.requests = all;
    Recorded a = record(m, alone, temp_path(std::string(policy) + "-alone.trace"));
    Recorded b = record(m, loaded, temp_path(std::string(policy) + "-load.trace"));
    ASSERT_TRUE(a.ok && b.ok);
    DiffReport d = diff_ok(a.path, b.path);
    ASSERT_EQ(d.requests.size(), 1u) << policy;
    EXPECT_EQ(d.only_b.size(), 8u);
    const RequestDiff& r = d.requests[0];
    if (std::string(policy) == "invariant") {
      EXPECT_TRUE(d.identical()) << replay::format_diff_story(d);
      EXPECT_EQ(r.verdict, Verdict::kIdentical);
      EXPECT_FALSE(r.root_found) << "rows differ inside: " << r.first_site;
      continue;
    }
    ASSERT_NE(r.verdict, Verdict::kIdentical) << replay::format_diff_story(d);
    EXPECT_FALSE(d.identical());
    ASSERT_TRUE(r.root_found);
    EXPECT_EQ(r.cause, "plan") << replay::format_diff_story(d);
    EXPECT_TRUE(r.batch_differs);
    EXPECT_GT(r.batch_b.rows, r.batch_a.rows);
    // The oracle: the first differing site of that row, from in-memory row hashes.
    EXPECT_EQ(r.first_site, first_differing_site(*a.mem, *b.mem, r.batch_a.step, r.batch_b.step, 0,
                                                 r.root_position));
    // The named plan is the one recorded at that step and site, and it differs.
    ASSERT_FALSE(r.plans.empty());
    const replay::PlanDifference& p = r.plans[0];
    const Plan* pa = a.mem->plans().find(r.batch_a.step, *parse_site(p.site_name));
    const Plan* pb = b.mem->plans().find(r.batch_b.step, *parse_site(p.site_name));
    ASSERT_TRUE(pa && pb);
    EXPECT_NE(*pa, *pb);
    EXPECT_EQ(p.a_text, plan_to_string(*pa));
    EXPECT_EQ(p.b_text, plan_to_string(*pb));
    // The whole story is short and names both plans.
    std::string story = replay::format_diff_story(d);
    EXPECT_NE(story.find("First difference at step"), std::string::npos) << story;
    EXPECT_NE(story.find("A ran " + p.a_text), std::string::npos) << story;
    EXPECT_NE(story.find("B " + p.b_text), std::string::npos) << story;
  }
}

// One plan changed at one step and site (a re-run with a PlanTable that differs in one entry;
// schedule and routing forced to the original): diff names exactly that step, site and plan.
TEST(Diff, PlantedPlanIsNamedExactly) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Plant a plan", 10, 5);
  Recorded a = record(m, spec, temp_path("plant-plan-a.trace"));
  ASSERT_TRUE(a.ok);
  // A step in the middle with several requests.
  int64_t step = -1;
  for (const ScheduledStep& s : a.mem->steps()) {
    if (s.step >= 4 && s.segments.size() >= 3) {
      step = s.step;
      break;
    }
  }
  ASSERT_GE(step, 0);
  const SiteId site = *parse_site("L2.attn.o");
  PlanTable planted = a.mem->plans();
  ASSERT_TRUE(planted.find(step, site));
  const Plan orig = *planted.find(step, site);
  Plan changed = orig;
  changed.splits = orig.splits == 1 ? 3 : 1;
  planted.set(step, site, changed);

  RunSpec bspec = spec;
  bspec.policy = "forced";
  bspec.plans = &planted;
  rtest::ListSchedule sched;
  sched.steps = a.mem->steps();
  bspec.schedule = &sched;
  rtest::TableRouting routing;
  for (auto& [k, f] : a.mem->routings()) routing.table[k] = f;
  bspec.routing = &routing;
  Recorded b = record(m, bspec, temp_path("plant-plan-b.trace"));
  ASSERT_TRUE(b.ok);

  DiffReport d = diff_ok(a.path, b.path);
  EXPECT_FALSE(d.identical());
  int split = 0;
  for (const RequestDiff& r : d.requests) {
    bool in_step = false;
    for (const ScheduledStep& s : a.mem->steps()) {
      for (const BatchSegment& g : s.segments) in_step |= s.step == step && g.request == r.a;
    }
    if (!in_step) {
      EXPECT_EQ(r.verdict, Verdict::kIdentical) << "request " << r.a << " was not in step " << step;
      continue;
    }
    if (r.verdict == Verdict::kIdentical && !r.root_found) continue;  // bits unchanged here
    ++split;
    ASSERT_TRUE(r.root_found) << "request " << r.a;
    EXPECT_EQ(r.batch_a.step, step) << "request " << r.a;
    EXPECT_EQ(r.batch_b.step, step);
    EXPECT_EQ(r.first_site, "L2.attn.o");
    EXPECT_EQ(r.cause, "plan");
    EXPECT_FALSE(r.batch_differs);
    ASSERT_FALSE(r.plans.empty());
    EXPECT_EQ(r.plans[0].site_name, "L2.attn.o");
    EXPECT_TRUE(r.plans[0].is_first_site);
    EXPECT_EQ(r.plans[0].a_text, plan_to_string(orig));
    EXPECT_EQ(r.plans[0].b_text, plan_to_string(changed));
    EXPECT_EQ(r.plans.size(), 1u) << "only the planted plan differs";
  }
  EXPECT_GE(split, 2) << replay::format_diff_story(d);
}

// Qwen3's per-head q norm with another chunking at one decode step (everything else forced
// to the first run): diff names that step, L1.attn.q_norm, and the two RMSNorm plans.
TEST(Diff, PlantedQkNormPlanIsNamed) {
  auto loaded = load_model(LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/tiny-qwen3");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const LoadedModel& m = *loaded;
  RunSpec spec;
  spec.policy = "invariant";
  for (RequestId id = 0; id < 3; ++id) {
    RequestSpec r;
    r.id = id;
    r.prompt = {1, static_cast<int32_t>(17 + 40 * id), 42, 255, static_cast<int32_t>(3 + id)};
    r.max_tokens = 6;
    r.stop_at_eos = false;
    spec.requests.push_back(r);
  }
  Recorded a = record(m, spec, temp_path("plant-qknorm-a.trace"));
  ASSERT_TRUE(a.ok);
  const int64_t step = a.mem->steps().back().step - 2;  // a decode step of all three
  const SiteId site = *parse_site("L1.attn.q_norm");
  PlanTable planted = a.mem->plans();
  ASSERT_TRUE(planted.find(step, site)) << "no k_norm plan at step " << step;
  const Plan orig = *planted.find(step, site);
  EXPECT_EQ(orig.op, OpKind::kRmsNorm);
  Plan changed = orig;
  changed.splits = orig.splits == 1 ? 2 : 1;  // two chunks of 16
  planted.set(step, site, changed);
  RunSpec bspec = spec;
  bspec.policy = "forced";
  bspec.plans = &planted;
  rtest::ListSchedule sched;
  sched.steps = a.mem->steps();
  bspec.schedule = &sched;
  Recorded b = record(m, bspec, temp_path("plant-qknorm-b.trace"));
  ASSERT_TRUE(b.ok);

  DiffReport d = diff_ok(a.path, b.path);
  EXPECT_FALSE(d.identical());
  int split = 0;
  for (const RequestDiff& r : d.requests) {
    if (!r.root_found) continue;
    ++split;
    EXPECT_EQ(r.batch_a.step, step) << "request " << r.a;
    EXPECT_EQ(r.first_site, "L1.attn.q_norm") << replay::format_diff_story(d);
    EXPECT_EQ(r.cause, "plan");
    ASSERT_FALSE(r.plans.empty());
    EXPECT_EQ(r.plans[0].site_name, "L1.attn.q_norm");
    EXPECT_EQ(r.plans[0].a_text, plan_to_string(orig));
    EXPECT_EQ(r.plans[0].b_text, plan_to_string(changed));
  }
  EXPECT_GE(split, 1) << replay::format_diff_story(d);
  EXPECT_NE(replay::format_diff_story(d).find("L1.attn.q_norm"), std::string::npos);
}

// DeepSeek-V3's absorbed MLA (builtin:tiny-deepseek): the per-head W_UK GEMM run with
// another split-K at one step, schedule and routing forced to the first run: diff names
// that step, L1.attn.q_absorb, and the two GEMM plans.
TEST(Diff, PlantedMlaPlanIsNamed) {
  const LoadedModel& m = builtin("tiny-deepseek");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Latent plan", 8, 4);
  Recorded a = record(m, spec, temp_path("plant-mla-a.trace"));
  ASSERT_TRUE(a.ok);
  int64_t step = -1;
  for (const ScheduledStep& s : a.mem->steps()) {
    if (s.step >= 3 && s.segments.size() >= 3) {
      step = s.step;
      break;
    }
  }
  ASSERT_GE(step, 0);
  const SiteId site = *parse_site("L1.attn.q_absorb");
  PlanTable planted = a.mem->plans();
  ASSERT_TRUE(planted.find(step, site));
  const Plan orig = *planted.find(step, site);
  EXPECT_EQ(orig.op, OpKind::kGemm);
  Plan changed = orig;
  changed.splits = orig.splits == 1 ? 2 : 1;  // nope = 32: two halves of 16
  planted.set(step, site, changed);
  RunSpec bspec = spec;
  bspec.policy = "forced";
  bspec.plans = &planted;
  rtest::ListSchedule sched;
  sched.steps = a.mem->steps();
  bspec.schedule = &sched;
  rtest::TableRouting routing;
  for (auto& [k, f] : a.mem->routings()) routing.table[k] = f;
  bspec.routing = &routing;
  Recorded b = record(m, bspec, temp_path("plant-mla-b.trace"));
  ASSERT_TRUE(b.ok);

  DiffReport d = diff_ok(a.path, b.path);
  EXPECT_FALSE(d.identical());
  int split = 0;
  for (const RequestDiff& r : d.requests) {
    if (!r.root_found) continue;
    ++split;
    EXPECT_EQ(r.batch_a.step, step) << "request " << r.a;
    EXPECT_EQ(r.first_site, "L1.attn.q_absorb") << replay::format_diff_story(d);
    EXPECT_EQ(r.cause, "plan");
    ASSERT_FALSE(r.plans.empty());
    EXPECT_EQ(r.plans[0].site_name, "L1.attn.q_absorb");
    EXPECT_EQ(r.plans[0].a_text, plan_to_string(orig));
    EXPECT_EQ(r.plans[0].b_text, plan_to_string(changed));
  }
  EXPECT_GE(split, 1) << replay::format_diff_story(d);
  EXPECT_NE(replay::format_diff_story(d).find("L1.attn.q_absorb"), std::string::npos);
}

// One routing decision changed: the token's slot goes to another expert. Diff names the
// step, the combine of that layer, and routing as the cause.
TEST(Diff, PlantedRoutingIsNamedExactly) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Plant a route", 10, 5);
  Recorded a = record(m, spec, temp_path("plant-route-a.trace"));
  ASSERT_TRUE(a.ok);
  const int64_t step = 5;
  const int32_t layer = 1;
  rtest::TableRouting routing;
  for (auto& [k, f] : a.mem->routings()) routing.table[k] = f;
  ForcedRouting& f = routing.table.at({step, layer});
  ASSERT_GE(f.rows, 2);
  const int64_t row = 1;
  const int K = f.k;
  int32_t new_expert = -1;
  for (int32_t e = 0; e < m.config.experts && new_expert < 0; ++e) {
    bool used_by_row = false, used_in_step = false;
    for (int i = 0; i < K; ++i) used_by_row |= f.experts[row * K + i] == e;
    for (int32_t x : f.experts) used_in_step |= x == e;
    if (!used_by_row && used_in_step) new_expert = e;
  }
  ASSERT_GE(new_expert, 0);
  const std::vector<int32_t> before(f.experts.begin() + row * K, f.experts.begin() + row * K + K);
  f.experts[row * K] = new_expert;
  RunSpec bspec = spec;
  bspec.policy = "forced";
  bspec.plans = &a.mem->plans();
  rtest::ListSchedule sched;
  sched.steps = a.mem->steps();
  bspec.schedule = &sched;
  bspec.routing = &routing;
  Recorded b = record(m, bspec, temp_path("plant-route-b.trace"));
  ASSERT_TRUE(b.ok);

  // Whose row is batch row 1 of that step.
  RequestId who = 0;
  int32_t position = -1;
  for (const ScheduledStep& s : a.mem->steps()) {
    if (s.step != step) continue;
    int64_t r0 = 0;
    for (const BatchSegment& g : s.segments) {
      if (row >= r0 && row < r0 + g.count) {
        who = g.request;
        position = g.start + static_cast<int32_t>(row - r0);
      }
      r0 += g.count;
    }
  }
  DiffReport d = diff_ok(a.path, b.path);
  for (const RequestDiff& r : d.requests) {
    if (r.a != who) {
      EXPECT_EQ(r.verdict, Verdict::kIdentical) << "request " << r.a;
      EXPECT_FALSE(r.root_found) << "request " << r.a << ": " << r.first_site;
      continue;
    }
    ASSERT_TRUE(r.root_found) << replay::format_diff_story(d);
    EXPECT_EQ(r.root_position, position);
    EXPECT_EQ(r.batch_a.step, step);
    EXPECT_EQ(r.first_site, "L1.moe.combine");
    EXPECT_EQ(r.cause, "routing");
    ASSERT_TRUE(r.routing);
    EXPECT_EQ(r.routing->layer, layer);
    EXPECT_EQ(r.routing->experts_a, before);
    EXPECT_EQ(r.routing->experts_b[0], new_expert);
    EXPECT_EQ(r.routing->chosen_a, r.routing->chosen_b);
    EXPECT_TRUE(r.plans.empty()) << r.plans[0].site_name;
    std::string story = replay::format_diff_story(d);
    EXPECT_NE(story.find("routing: at layer 1 this token went to experts"), std::string::npos)
        << story;
  }
}

// The batch composition changed: one more request arrives at step 3. Steps before are the
// same; from step 3 the production policy picks other plans for the bigger batch.
TEST(Diff, ChangedBatchCompositionIsNamed) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Composition", 12, 3);
  for (RequestSpec& r : spec.requests) r.arrival_step = 0;
  Recorded a = record(m, spec, temp_path("compose-a.trace"));
  RequestSpec extra;
  extra.id = 100;
  extra.prompt = rtest::bytes("An extra request with a long prompt that fills the batch up");
  extra.max_tokens = 6;
  extra.arrival_step = 3;
  extra.stop_at_eos = false;
  spec.requests.push_back(extra);
  Recorded b = record(m, spec, temp_path("compose-b.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  // The schedules agree before step 3 and differ at step 3.
  ASSERT_EQ(a.mem->steps()[2].segments, b.mem->steps()[2].segments);
  ASSERT_EQ(b.mem->steps()[3].step, 3);
  ASSERT_NE(a.mem->steps()[3].segments, b.mem->steps()[3].segments);

  DiffReport d = diff_ok(a.path, b.path);
  EXPECT_EQ(d.only_b, std::vector<RequestId>{100});
  int64_t earliest = INT64_MAX;
  for (const RequestDiff& r : d.requests) {
    if (r.verdict == Verdict::kIdentical) continue;
    ASSERT_TRUE(r.root_found) << "request " << r.a;
    earliest = std::min(earliest, r.batch_a.step);
    EXPECT_GE(r.batch_a.step, 3) << "request " << r.a;
    EXPECT_TRUE(r.batch_differs);
    EXPECT_EQ(r.cause, "plan");
    EXPECT_EQ(r.first_site, first_differing_site(*a.mem, *b.mem, r.batch_a.step, r.batch_b.step,
                                                 r.a, r.root_position))
        << "request " << r.a;
    ASSERT_FALSE(r.plans.empty());
    EXPECT_EQ(r.batch_b.rows - r.batch_a.rows, [&] {
      for (const trace::Segment& g : r.batch_b.segments) {
        if (g.request == 100) return static_cast<int64_t>(g.count);
      }
      return int64_t{0};
    }()) << "B's batch is A's plus the extra request's rows";
  }
  EXPECT_EQ(earliest, 3) << replay::format_diff_story(d);
}

// Copies a trace with every step passed through `edit` (its header and requests as they were).
void rewrite(const std::string& in, const std::string& out,
             const std::function<void(trace::StepRecord&)>& edit) {
  auto r = trace::TraceReader::open(in);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto w = trace::TraceWriter::open(out);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_TRUE((*w)->append_run_header((*r)->run_header()).ok());
  trace::StepCursor c = (*r)->steps();
  trace::StepRecord s;
  for (;;) {
    auto more = c.next(&s);
    ASSERT_TRUE(more.ok()) << more.status().to_string();
    if (!*more) break;
    edit(s);
    Status st = (*w)->append_step(s);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  ASSERT_TRUE((*w)->close().ok());
}

// A runtime that records what its ops ran with (format 1.6 op records; llama.cpp's shim does)
// and no plans: the diff compares the op records of the first differing site's layer for the
// row and names the ones that changed, key by key; records that are the same, or that do not
// cover that layer, or another graph's rows, are not named. Planted: a matmul whose src1 has
// one row per batch row (what llama.cpp's graph records), an unchanged norm, a graph record.
TEST(Diff, PlantedOpRecordsAreNamed) {
  const LoadedModel& m = builtin("tiny-dense");
  const std::vector<RequestSpec> all = rtest::target_and_load(m, "Op records", 10, 4);
  RunSpec alone, loaded;
  alone.requests = target_only(all);
  loaded.requests = all;
  Recorded a = record(m, alone, temp_path("ops-alone.trace"));
  Recorded b = record(m, loaded, temp_path("ops-load.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  const int32_t layers = m.config.layers;
  ASSERT_GE(layers, 2);
  auto plant = [&](trace::StepRecord& s) {
    s.plans.clear();  // a runtime whose reduction orders llmrr does not set
    const int32_t rows = static_cast<int32_t>(s.row_count());
    const std::string n = std::to_string(rows);
    s.ops.push_back({0, layers, 0, rows, 0, "kq", "MUL_MAT",
                     "src0=f16:16x32 src1=f32:16x" + n + " dst=f32:32x" + n});
    s.ops.push_back({0, layers, 0, rows, 0, "attn_norm", "RMS_NORM", "src0=f32:64 dst=f32:64"});
    s.ops.push_back({layers + 3, 1, 0, rows, 0, "far", "MUL_MAT", "rows=" + n});
    s.ops.push_back({-1, 1, 0, rows, 0, "graph", "GRAPH", "nodes=99 tokens=" + n});
  };
  const std::string pa = temp_path("ops-alone-planted.trace"), pb = temp_path("ops-load-planted.trace");
  rewrite(a.path, pa, plant);
  rewrite(b.path, pb, plant);
  DiffReport d = diff_ok(pa, pb);
  ASSERT_EQ(d.requests.size(), 1u);
  const RequestDiff& r = d.requests[0];
  ASSERT_NE(r.verdict, Verdict::kIdentical) << replay::format_diff_story(d);
  ASSERT_TRUE(r.root_found);
  ASSERT_TRUE(r.batch_differs);
  EXPECT_EQ(r.cause, "op") << replay::format_diff_story(d);
  EXPECT_TRUE(r.plans.empty());
  const int32_t layer = SiteId::unpack(r.first_site_packed).layer;
  ASSERT_GE(layer, 0) << r.first_site;
  const std::string ra = std::to_string(r.batch_a.rows), rb = std::to_string(r.batch_b.rows);
  ASSERT_EQ(r.ops.size(), 2u) << replay::format_diff_story(d);
  EXPECT_EQ(r.ops[0].name, "kq");
  EXPECT_EQ(r.ops[0].op, "MUL_MAT");
  EXPECT_EQ(r.ops[0].layer, layer);
  EXPECT_EQ(r.ops[0].changes, (std::vector<std::string>{"src1 f32:16x" + ra + " vs f32:16x" + rb,
                                                        "dst f32:32x" + ra + " vs f32:32x" + rb}));
  EXPECT_EQ(r.ops[1].name, "graph");
  EXPECT_EQ(r.ops[1].layer, -1);
  EXPECT_EQ(r.ops[1].changes, (std::vector<std::string>{"tokens " + ra + " vs " + rb}));
  const std::string story = replay::format_diff_story(d);
  EXPECT_NE(story.find("what the ops ran with: kq (MUL_MAT, layer " + std::to_string(layer) +
                       "): src1 f32:16x" + ra + " vs f32:16x" + rb),
            std::string::npos)
      << story;
  nlohmann::json j = nlohmann::json::parse(replay::diff_report_json(d));
  const nlohmann::json& first = j["requests"][0]["first_difference"];
  ASSERT_TRUE(first.contains("ops")) << first.dump();
  EXPECT_EQ(first["cause"], "op");
  EXPECT_EQ(first["ops"][0]["name"], "kq");
  EXPECT_EQ(first["ops"][0]["b"], "src0=f16:16x32 src1=f32:16x" + rb + " dst=f32:32x" + rb);

  // The same records in both runs name nothing: the cause falls back to the batch.
  const std::string pc = temp_path("ops-load-same.trace");
  rewrite(b.path, pc, [&](trace::StepRecord& s) {
    s.plans.clear();
    s.ops.push_back({0, layers, 0, 0, 0, "attn_norm", "RMS_NORM", "src0=f32:64 dst=f32:64"});
  });
  const std::string pd = temp_path("ops-alone-same.trace");
  rewrite(a.path, pd, [&](trace::StepRecord& s) {
    s.plans.clear();
    s.ops.push_back({0, layers, 0, 0, 0, "attn_norm", "RMS_NORM", "src0=f32:64 dst=f32:64"});
  });
  DiffReport e = diff_ok(pd, pc);
  ASSERT_EQ(e.requests.size(), 1u);
  EXPECT_TRUE(e.requests[0].ops.empty());
  EXPECT_EQ(e.requests[0].cause, "batch") << replay::format_diff_story(e);
}

// production --atomics: two runs of the same batch differ; each replays bit for bit from its
// recorded combine order; diff names the arrival-order reduction.
TEST(Diff, AtomicsArrivalOrderIsNamed) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.atomics = true;
  spec.requests = rtest::target_and_load(m, "Atomic adds", 10, 4);
  Recorded a = record(m, spec, temp_path("atomics-a.trace"));
  Recorded b = record(m, spec, temp_path("atomics-b.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  for (const std::string& p : {a.path, b.path}) {
    Result<replay::ReplayReport> r = replay::replay_trace(p, replay::ReplayOptions{});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->bit_exact()) << replay::format_replay_report(*r);
  }
  DiffReport d = diff_ok(a.path, b.path);
  EXPECT_FALSE(d.identical()) << "two atomics runs should differ";
  int named = 0;
  for (const RequestDiff& r : d.requests) {
    if (!r.root_found) continue;
    EXPECT_EQ(r.cause, "arrival-order") << replay::format_diff_story(d);
    EXPECT_FALSE(r.batch_differs);
    ASSERT_FALSE(r.plans.empty());
    EXPECT_TRUE(r.plans[0].arrival_only);
    EXPECT_EQ(r.plans[0].site_name, r.first_site);
    ++named;
  }
  EXPECT_GT(named, 0);
  EXPECT_NE(replay::format_diff_story(d).find("arrival-order reduction"), std::string::npos);
}

// Fewer captured sites: layer outputs only, or nothing but logits.
TEST(Diff, SaysWhatFewerSitesCannotTell) {
  const LoadedModel& m = builtin("tiny-moe");
  const std::vector<RequestSpec> all = rtest::target_and_load(m, "The quick brown fox", 16, 8);
  for (trace::CaptureLevel level : {trace::CaptureLevel::kLayers, trace::CaptureLevel::kNone}) {
    RunSpec alone, loaded;
    alone.capture = loaded.capture = level;
    alone.requests = target_only(all);
    loaded.requests = all;
    std::string tag = trace::capture_level_name(level);
    Recorded a = record(m, alone, temp_path("cap-" + tag + "-a.trace"));
    Recorded b = record(m, loaded, temp_path("cap-" + tag + "-b.trace"));
    ASSERT_TRUE(a.ok && b.ok);
    DiffReport d = diff_ok(a.path, b.path);
    ASSERT_EQ(d.requests.size(), 1u);
    const RequestDiff& r = d.requests[0];
    ASSERT_NE(r.verdict, Verdict::kIdentical);
    std::string story = replay::format_diff_story(d);
    if (level == trace::CaptureLevel::kLayers) {
      ASSERT_TRUE(r.root_found);
      EXPECT_TRUE(is_layer_output(*parse_site(r.first_site))) << r.first_site;
      EXPECT_NE(r.capture_note.find("only layer outputs were captured"), std::string::npos);
      EXPECT_NE(story.find("record with --capture all to name the op"), std::string::npos);
      EXPECT_FALSE(r.plans.empty());
    } else {
      EXPECT_FALSE(r.root_found);
      EXPECT_NE(r.capture_note.find("no row fingerprints were captured"), std::string::npos)
          << story;
      EXPECT_EQ(r.batch_a.step, r.split_step_a);
    }
  }
}

TEST(Diff, ExplicitRequestIds) {
  const LoadedModel& m = builtin("tiny-dense");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Explicit", 6, 2);
  Recorded a = record(m, spec, temp_path("explicit-a.trace"));
  RunSpec other = spec;
  std::swap(other.requests[0].id, other.requests[2].id);  // same prompts, other ids
  Recorded b = record(m, other, temp_path("explicit-b.trace"));
  ASSERT_TRUE(a.ok && b.ok);
  DiffReport d = diff_ok(a.path, b.path);  // aligned by prompt: 0 ↔ 2
  const RequestDiff* r0 = find(d, 0);
  ASSERT_TRUE(r0);
  EXPECT_EQ(r0->b, 2u);
  replay::DiffOptions o;
  o.request = std::make_pair(RequestId{0}, RequestId{2});
  d = diff_ok(a.path, b.path, o);
  ASSERT_EQ(d.requests.size(), 1u);
  EXPECT_EQ(d.alignment, "explicit ids");
  o.request = std::make_pair(RequestId{0}, RequestId{77});
  Result<DiffReport> bad = replay::diff_traces(a.path, b.path, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no request 77"), std::string::npos);
}

TEST(Diff, TruncatedAndCorruptedTraces) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Truncated", 10, 3);
  spec.max_steps_per_chunk = 1;
  Recorded a = record(m, spec, temp_path("trunc-a.trace"));
  ASSERT_TRUE(a.ok);
  std::string bytes = rtest::read_file(a.path);
  std::string cut = temp_path("trunc-b.trace");
  rtest::write_file(cut, bytes.substr(0, bytes.size() / 2));
  DiffReport d = diff_ok(a.path, cut);
  EXPECT_FALSE(d.b_complete);
  std::string story = replay::format_diff_story(d);
  EXPECT_NE(story.find("is truncated (no footer): diffed up to its last whole step"),
            std::string::npos)
      << story;
  for (const RequestDiff& r : d.requests) EXPECT_EQ(r.verdict, Verdict::kIdentical);

  std::string bad = temp_path("trunc-bad.trace");
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x08);
  rtest::write_file(bad, bytes);
  Result<DiffReport> r = replay::diff_traces(a.path, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("trunc-bad.trace"), std::string::npos)
      << r.status().to_string();
}

}  // namespace
}  // namespace llmrr
