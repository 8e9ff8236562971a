// Record → replay → compare (rr's method) on the builtin models and the conformance
// checkpoints: every policy, several thread counts and both SIMD paths, temperature > 0,
// request-alone replay, --materialize, --check-routing, and the refusals: wrong model,
// tampered, truncated and corrupted traces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "../common/test_paths.h"
#include "llmrr/format/fingerprint.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/kernels/isa.h"
#include "llmrr/replayer/npy.h"
#include "llmrr/replayer/replay.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/replayer/trace_feed.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using replay::ReplayOptions;
using replay::ReplayReport;
using rtest::builtin;
using rtest::record;
using rtest::RunSpec;
using rtest::temp_path;

std::unique_ptr<trace::TraceReader> open_trace(const std::string& path) {
  auto r = trace::TraceReader::open(path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

ReplayReport replay_ok(const std::string& path, const LoadedModel& model,
                       const ReplayOptions& o = {}) {
  auto reader = open_trace(path);
  if (!reader) return {};
  Result<ReplayReport> r = replay::replay_trace(*reader, model, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  EXPECT_TRUE(r->bit_exact()) << replay::format_replay_report(*r);
  return std::move(r).value();
}

// ---- record → replay across policies and models ----------------------------------------------

struct PolicyCase {
  const char* model;
  const char* policy;
  bool atomics;
  const char* name;
};

void PrintTo(const PolicyCase& c, std::ostream* os) { *os << c.name; }

class RecordReplay : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(RecordReplay, BitExactWithEveryRecordChecked) {
  const PolicyCase& c = GetParam();
  const LoadedModel& m = builtin(c.model);
  RunSpec spec;
  spec.policy = c.policy;
  spec.atomics = c.atomics;
  spec.requests = rtest::target_and_load(m, "The quick brown fox", 8, 4);
  rtest::Recorded rec = record(m, spec, temp_path(std::string(c.name) + ".trace"));
  ASSERT_TRUE(rec.ok);
  auto reader = open_trace(rec.path);
  ASSERT_TRUE(reader);
  ReplayOptions o;
  o.threads = 3;  // recorded with 2
  ReplayReport r = replay_ok(rec.path, m, o);
  EXPECT_EQ(r.steps, reader->step_count());
  EXPECT_EQ(r.tokens, reader->token_count());
  EXPECT_GT(r.tokens, 8 * 5 - 1);
  EXPECT_GT(r.rows_checked, 1000);
  EXPECT_EQ(r.logits_checked, r.tokens);
  EXPECT_GT(r.plans_checked, 0);
  if (m.config.is_moe()) {
    EXPECT_EQ(r.routings_checked, r.steps * m.config.layers);
  }
  EXPECT_NE(replay::format_replay_report(r).find("bit-exact"), std::string::npos);
  EXPECT_EQ(r.logit_blobs_checked, 0);
}

// --logits full: the whole logit rows are stored as blobs and compared bit for bit.
TEST(Replay, FullLogitBlobsAreCompared) {
  const LoadedModel& m = builtin("tiny-dense");
  RunSpec spec;
  spec.logits = trace::LogitsMode::kFull;
  spec.requests = rtest::target_and_load(m, "Full logits", 4, 2);
  rtest::Recorded rec = record(m, spec, temp_path("full-logits.trace"));
  ASSERT_TRUE(rec.ok);
  ReplayReport r = replay_ok(rec.path, m);
  EXPECT_EQ(r.logit_blobs_checked, r.tokens);
  EXPECT_GT(r.tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, RecordReplay,
    ::testing::Values(PolicyCase{"tiny-moe", "production", false, "moe_production"},
                      PolicyCase{"tiny-moe", "production", true, "moe_atomics"},
                      PolicyCase{"tiny-moe", "invariant", false, "moe_invariant"},
                      PolicyCase{"tiny-dense", "production", false, "dense_production"},
                      PolicyCase{"tiny-dense", "production", true, "dense_atomics"},
                      PolicyCase{"tiny-dense", "invariant", false, "dense_invariant"}),
    [](const auto& info) { return std::string(info.param.name); });

// Recorded with one thread on the best SIMD path; replayed with other thread counts and with
// the AVX2 and scalar paths forced (DESIGN invariant 1).
TEST(Replay, OtherThreadCountsAndIsas) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.config.threads = 1;
  spec.requests = rtest::target_and_load(m, "Thread counts never change a bit.", 6, 3);
  rtest::Recorded rec = record(m, spec, temp_path("threads.trace"));
  ASSERT_TRUE(rec.ok);
  auto reader = open_trace(rec.path);
  ASSERT_TRUE(reader);
  const kernels::Isa best = kernels::active_isa();
  for (int threads : {1, 2, 4}) {
    ReplayOptions o;
    o.threads = threads;
    ReplayReport r = replay_ok(rec.path, m, o);
    EXPECT_EQ(r.tokens, reader->token_count()) << threads << " threads";
  }
  for (kernels::Isa isa : {kernels::Isa::kAvx2, kernels::Isa::kScalar}) {
    kernels::Isa in_force = kernels::set_isa(isa);
    ASSERT_EQ(in_force, isa) << "this CPU cannot run " << kernels::isa_name(isa);
    ReplayOptions o;
    o.threads = 2;
    ReplayReport r = replay_ok(rec.path, m, o);
    EXPECT_EQ(r.tokens, reader->token_count()) << kernels::isa_name(isa);
  }
  kernels::set_isa(best);
  EXPECT_EQ(reader->run_header().host.isa, kernels::isa_name(best));
}

TEST(Replay, TemperatureWithSeeds) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Sampling at temperature 0.9", 10, 3);
  for (size_t i = 0; i < spec.requests.size(); ++i) {
    spec.requests[i].sampling.temperature = 0.9f;
    spec.requests[i].sampling.top_p = 0.95f;
    spec.requests[i].sampling.top_k = i % 2 ? 20 : 0;
    spec.requests[i].sampling.seed = 1000 + i;
  }
  rtest::Recorded rec = record(m, spec, temp_path("temperature.trace"));
  ASSERT_TRUE(rec.ok);
  ReplayReport r = replay_ok(rec.path, m);
  EXPECT_EQ(r.tokens, open_trace(rec.path)->token_count());
  EXPECT_GT(r.tokens, 10);
  // The draws are recorded and checked: a changed draw is a mismatch.
  std::string tampered = temp_path("temperature-draw.trace");
  bool changed = false;
  ASSERT_TRUE(rtest::rewrite_trace(rec.path, tampered, nullptr, [&](trace::StepRecord& s) {
                if (!changed && s.step == 4 && !s.tokens.empty()) {
                  s.tokens[0].uniform = std::nextafter(s.tokens[0].uniform, 2.0);
                  changed = true;
                }
              }).ok());
  ASSERT_TRUE(changed);
  auto reader = open_trace(tampered);
  Result<ReplayReport> t = replay::replay_trace(*reader, m, {});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(t->mismatch);
  EXPECT_EQ(t->mismatch->step, 4);
  EXPECT_EQ(t->mismatch->site, "token");
  EXPECT_NE(t->mismatch->expected.find("draw"), std::string::npos);
}

// Invariant 3: with plans and routing forced, each request replays alone, bit for bit.
TEST(Replay, RequestAlone) {
  for (const char* name : {"tiny-moe", "tiny-dense"}) {
    const LoadedModel& m = builtin(name);
    RunSpec spec;
    spec.requests = rtest::target_and_load(m, "Alone, from the recorded plans.", 6, 4);
    spec.atomics = std::string(name) == "tiny-moe";  // arrival orders sliced to the request
    rtest::Recorded rec = record(m, spec, temp_path(std::string("alone-") + name + ".trace"));
    ASSERT_TRUE(rec.ok);
    auto reader = open_trace(rec.path);
    ASSERT_TRUE(reader);
    for (const trace::RequestSummary& q : reader->requests()) {
      ReplayOptions o;
      o.request = q.id;
      ReplayReport r = replay_ok(rec.path, m, o);
      EXPECT_EQ(r.tokens, q.generated) << name << " request " << q.id;
      EXPECT_GT(r.rows_checked, 0);
      EXPECT_NE(replay::format_replay_report(r).find("alone: bit-exact"), std::string::npos);
    }
    ReplayOptions bad;
    bad.request = 99;
    Result<ReplayReport> r = replay::replay_trace(*reader, m, bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("no such request"), std::string::npos);
  }
}

// --materialize: the regenerated rows read back (with our own .npy reader) and their
// fingerprints equal those the trace recorded.
TEST(Replay, MaterializeMatchesFingerprints) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Materialize me", 5, 3);
  rtest::Recorded rec = record(m, spec, temp_path("materialize.trace"));
  ASSERT_TRUE(rec.ok);
  auto reader = open_trace(rec.path);
  // A step with several requests in the batch.
  int64_t step = -1;
  for (const ScheduledStep& s : rec.mem->steps()) {
    if (s.segments.size() >= 3) {
      step = s.step;
      break;
    }
  }
  ASSERT_GE(step, 0);
  const std::vector<std::string> sites = {"L1.moe.combine", "L2.attn.core", "logits",
                                          "L0.moe.router"};
  for (bool alone : {false, true}) {
    ReplayOptions o;
    o.out_dir = temp_path(alone ? "mat-alone" : "mat");
    if (alone) o.request = 0;
    for (const std::string& s : sites) {
      auto spec_or = replay::parse_materialize(s + "@" + std::to_string(step));
      ASSERT_TRUE(spec_or.ok()) << spec_or.status().to_string();
      o.materialize.push_back(*spec_or);
    }
    ReplayReport r = replay_ok(rec.path, m, o);
    ASSERT_EQ(r.written.size(), 2 * sites.size());
    trace::StepRecord srec;
    ASSERT_TRUE(reader->read_step(step, &srec).ok());
    std::set<int32_t> target_rows;
    {
      int32_t row = 0;
      for (const trace::Segment& g : srec.segments) {
        for (int32_t j = 0; j < g.count; ++j, ++row) {
          if (g.request == 0) target_rows.insert(row);
        }
      }
    }
    for (const std::string& s : sites) {
      const std::string base = o.out_dir + "/" + s + "@" + std::to_string(step);
      Result<replay::NpyArray> data = replay::read_npy(base + ".npy");
      Result<replay::NpyArray> rows = replay::read_npy(base + ".rows.npy");
      ASSERT_TRUE(data.ok()) << data.status().to_string();
      ASSERT_TRUE(rows.ok()) << rows.status().to_string();
      ASSERT_EQ(data->descr, "<f4");
      ASSERT_EQ(rows->descr, "<i4");
      ASSERT_EQ(data->shape.size(), 2u);
      ASSERT_EQ(rows->shape.size(), 1u);
      ASSERT_EQ(data->shape[0], rows->shape[0]);
      const trace::SiteRows* rec_rows = srec.find_rows(parse_site(s)->packed());
      ASSERT_NE(rec_rows, nullptr) << s;
      ASSERT_EQ(data->shape[1], rec_rows->cols) << s;
      const int64_t n = data->shape[0], cols = data->shape[1];
      int64_t expect_n = 0;
      for (size_t i = 0; i < rec_rows->rows.size(); ++i) {
        int32_t b =
            rec_rows->batch_rows.empty() ? static_cast<int32_t>(i) : rec_rows->batch_rows[i];
        if (!alone || target_rows.count(b)) ++expect_n;
      }
      EXPECT_EQ(n, expect_n) << s;
      ASSERT_GT(n, 0) << s;
      for (int64_t i = 0; i < n; ++i) {
        int32_t b;
        std::memcpy(&b, rows->bytes.data() + i * 4, 4);
        std::vector<float> row(static_cast<size_t>(cols));
        std::memcpy(row.data(), data->bytes.data() + i * cols * 4, cols * 4);
        trace::Fingerprint fp = trace::fingerprint_row(row.data(), cols);
        bool found = false;
        for (size_t k = 0; k < rec_rows->rows.size(); ++k) {
          int32_t rb =
              rec_rows->batch_rows.empty() ? static_cast<int32_t>(k) : rec_rows->batch_rows[k];
          if (rb != b) continue;
          found = true;
          EXPECT_EQ(fp, rec_rows->rows[k]) << s << " batch row " << b;
        }
        EXPECT_TRUE(found) << s << " batch row " << b;
        if (alone) {
          EXPECT_TRUE(target_rows.count(b)) << s << " batch row " << b;
        }
      }
    }
  }
  // Logits rows equal the recorded full-vocab fingerprints too.
  ReplayOptions bad;
  bad.out_dir = temp_path("mat-bad");
  bad.materialize.push_back(*replay::parse_materialize("L1.mlp.down@0"));  // dense site, MoE model
  Result<ReplayReport> r = replay::replay_trace(*reader, m, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no rows of that site"), std::string::npos);
  EXPECT_FALSE(replay::parse_materialize("L1.nothing@3").ok());
  EXPECT_FALSE(replay::parse_materialize("logits").ok());
  EXPECT_FALSE(replay::parse_materialize("logits@x").ok());
}

TEST(Npy, RoundTripAndRejects) {
  std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  std::string p = temp_path("rt.npy");
  ASSERT_TRUE(replay::write_npy_f32(p, {2, 3}, v.data()).ok());
  Result<replay::NpyArray> a = replay::read_npy(p);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(a->bytes.data(), v.data(), v.size() * 4), 0);
  // Header is 64-byte aligned, as NumPy writes it.
  std::string bytes = rtest::read_file(p);
  EXPECT_EQ((bytes.size() - 24) % 64, 0u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  std::vector<int32_t> ids = {7};
  ASSERT_TRUE(replay::write_npy_i32(p, {1}, ids.data()).ok());
  a = replay::read_npy(p);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->shape, (std::vector<int64_t>{1}));
  EXPECT_NE(rtest::read_file(p).find("(1,)"), std::string::npos);
  rtest::write_file(p, bytes.substr(0, bytes.size() - 4));
  EXPECT_FALSE(replay::read_npy(p).ok());
  rtest::write_file(p, "not numpy at all");
  EXPECT_FALSE(replay::read_npy(p).ok());
}

// --check-routing: recomputed routing agrees with a normal recording (also under expert
// capacity), and names the one token whose experts were planted differently.
TEST(Replay, CheckRouting) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.config.capacity.factor = 1.0;
  spec.config.capacity.overflow = Overflow::kReroute;
  spec.requests = rtest::target_and_load(m, "Capacity and rerouting", 6, 5);
  rtest::Recorded a = record(m, spec, temp_path("capacity.trace"));
  ASSERT_TRUE(a.ok);
  ReplayOptions check;
  check.check_routing = true;
  ReplayReport clean = replay_ok(a.path, m, check);
  EXPECT_GT(clean.routings_checked, 0);
  bool rerouted = false;
  for (auto& [key, f] : a.mem->routings()) {
    for (RouteOutcome o : f.outcome) rerouted |= o == RouteOutcome::kRerouted;
  }
  EXPECT_TRUE(rerouted) << "capacity factor 1.0 should reroute some slots";

  // Plant: step 3, layer 2, batch row 1, slot 0 goes to an expert the row does not use.
  rtest::TableRouting planted;
  for (auto& [key, f] : a.mem->routings()) planted.table[key] = f;
  ForcedRouting& f = planted.table.at({3, 2});
  ASSERT_GE(f.rows, 2);
  const int K = f.k;
  const int32_t old_expert = f.experts[1 * K + 0];
  int32_t new_expert = -1;
  for (int32_t e = 0; e < m.config.experts && new_expert < 0; ++e) {
    bool used_by_row = false, used_in_step = false;
    for (int i = 0; i < K; ++i) used_by_row |= f.experts[1 * K + i] == e;
    for (int32_t x : f.experts) used_in_step |= x == e;
    if (!used_by_row && used_in_step) new_expert = e;
  }
  ASSERT_GE(new_expert, 0);
  f.experts[1 * K + 0] = new_expert;
  f.outcome[1 * K + 0] = RouteOutcome::kKept;
  RunSpec bspec = spec;
  bspec.policy = "forced";
  bspec.plans = &a.mem->plans();
  rtest::ListSchedule sched;
  sched.steps = a.mem->steps();
  bspec.schedule = &sched;
  bspec.routing = &planted;
  rtest::Recorded b = record(m, bspec, temp_path("planted-routing.trace"));
  ASSERT_TRUE(b.ok);
  // Forced, B replays bit for bit from its own recorded routing ...
  replay_ok(b.path, m);
  // ... recomputed, the planted token is the first whose experts differ.
  auto reader = open_trace(b.path);
  Result<ReplayReport> r = replay::replay_trace(*reader, m, check);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->routing_mismatch) << replay::format_replay_report(*r);
  EXPECT_FALSE(r->bit_exact());
  const RoutingMismatch& mm = *r->routing_mismatch;
  EXPECT_EQ(mm.step, 3);
  EXPECT_EQ(mm.layer, 2);
  EXPECT_EQ(mm.batch_row, 1);
  EXPECT_EQ(mm.expected[0], new_expert);
  EXPECT_EQ(mm.found[0], old_expert);
  const ScheduledStep& s3 = *std::find_if(a.mem->steps().begin(), a.mem->steps().end(),
                                          [](const ScheduledStep& s) { return s.step == 3; });
  int64_t row = 0;
  for (const BatchSegment& g : s3.segments) {
    if (row + g.count > 1) {
      EXPECT_EQ(mm.request, g.request);
      EXPECT_EQ(mm.position, g.start + (1 - row));
      break;
    }
    row += g.count;
  }
  std::string text = replay::format_replay_report(*r);
  EXPECT_NE(text.find("routing differs at step 3, layer 2"), std::string::npos) << text;
}

TEST(Replay, WrongModelIsRefused) {
  const LoadedModel& moe = builtin("tiny-moe");
  const LoadedModel& dense = builtin("tiny-dense");
  RunSpec spec;
  spec.requests = rtest::target_and_load(moe, "Which weights?", 3, 0);
  rtest::Recorded rec = record(moe, spec, temp_path("wrong-model.trace"));
  ASSERT_TRUE(rec.ok);
  auto reader = open_trace(rec.path);
  Result<ReplayReport> r = replay::replay_trace(*reader, dense, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kWeightMismatch);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find(replay::weight_hash_text(moe.weight_hash)), std::string::npos) << msg;
  EXPECT_NE(msg.find(replay::weight_hash_text(dense.weight_hash)), std::string::npos) << msg;
  EXPECT_NE(msg.find("builtin:tiny-moe"), std::string::npos) << msg;
  EXPECT_NE(msg.find("builtin:tiny-dense"), std::string::npos) << msg;
  // Through the path API with --model, the same refusal.
  ReplayOptions o;
  o.model = "builtin:tiny-dense";
  r = replay::replay_trace(rec.path, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kWeightMismatch);
  // And the recorded model is found without --model.
  r = replay::replay_trace(rec.path, ReplayOptions{});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->bit_exact());
  EXPECT_EQ(r->model, "builtin:tiny-moe");
}

// A trace whose records were changed after recording: the replay names the first one.
TEST(Replay, TamperedRecordsAreNamed) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Tamper", 5, 3);
  rtest::Recorded rec = record(m, spec, temp_path("tamper-src.trace"));
  ASSERT_TRUE(rec.ok);
  const uint64_t site = parse_site("L2.moe.combine")->packed();

  // One fingerprint at step 5.
  std::string fp_path = temp_path("tamper-fp.trace");
  int64_t row = -1;
  ASSERT_TRUE(rtest::rewrite_trace(rec.path, fp_path, nullptr, [&](trace::StepRecord& s) {
                if (s.step != 5) return;
                for (trace::SiteRows& sr : s.rows) {
                  if (sr.site != site) continue;
                  size_t i = sr.rows.size() - 1;
                  sr.rows[i].hash ^= 1;
                  row = sr.batch_rows.empty() ? static_cast<int64_t>(i) : sr.batch_rows[i];
                }
              }).ok());
  ASSERT_GE(row, 0);
  auto reader = open_trace(fp_path);
  Result<ReplayReport> r = replay::replay_trace(*reader, m, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->mismatch);
  EXPECT_EQ(r->mismatch->step, 5);
  EXPECT_EQ(r->mismatch->site, "L2.moe.combine");
  EXPECT_EQ(r->mismatch->batch_row, row);
  EXPECT_EQ(r->mismatch->what, "fingerprint");
  EXPECT_EQ(rec.mem->batch_row_of(r->mismatch->request, r->mismatch->position), row);
  std::string text = replay::format_replay_report(*r);
  EXPECT_NE(text.find("mismatch at step 5, request"), std::string::npos) << text;
  EXPECT_NE(text.find("site L2.moe.combine"), std::string::npos) << text;

  // One token.
  std::string tok_path = temp_path("tamper-token.trace");
  ASSERT_TRUE(rtest::rewrite_trace(rec.path, tok_path, nullptr, [&](trace::StepRecord& s) {
                if (s.step == 6 && !s.tokens.empty()) s.tokens[0].token ^= 1;
              }).ok());
  reader = open_trace(tok_path);
  r = replay::replay_trace(*reader, m, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->mismatch);
  EXPECT_EQ(r->mismatch->step, 6);
  EXPECT_EQ(r->mismatch->site, "token");

  // One plan: the replay forces it, so the rows it feeds no longer match the recorded ones.
  std::string plan_path = temp_path("tamper-plan.trace");
  const uint64_t o_site = parse_site("L1.attn.o")->packed();
  ASSERT_TRUE(rtest::rewrite_trace(rec.path, plan_path, nullptr, [&](trace::StepRecord& s) {
                if (s.step != 4) return;
                for (trace::SitePlan& p : s.plans) {
                  if (p.site == o_site) p.plan.splits = p.plan.splits == 1 ? 3 : 1;
                }
              }).ok());
  reader = open_trace(plan_path);
  r = replay::replay_trace(*reader, m, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->mismatch);
  EXPECT_EQ(r->mismatch->step, 4);
  EXPECT_EQ(r->mismatch->site, "L1.attn.o");
}

// A trace cut short (no footer): replayed up to its last whole step, and the report says so.
TEST(Replay, TruncatedTraceReplaysItsWholeSteps) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Cut me short", 8, 2);
  spec.max_steps_per_chunk = 1;
  rtest::Recorded rec = record(m, spec, temp_path("full.trace"));
  ASSERT_TRUE(rec.ok);
  std::string bytes = rtest::read_file(rec.path);
  std::string cut = temp_path("cut.trace");
  rtest::write_file(cut, bytes.substr(0, bytes.size() * 6 / 10));
  auto reader = open_trace(cut);
  ASSERT_TRUE(reader);
  ASSERT_FALSE(reader->complete());
  ASSERT_GT(reader->step_count(), 2);
  ASSERT_LT(reader->step_count(), static_cast<int64_t>(rec.mem->steps().size()));
  ReplayReport r = replay_ok(cut, m);
  EXPECT_EQ(r.steps, reader->step_count());
  EXPECT_FALSE(r.trace_complete);
  std::string text = replay::format_replay_report(r);
  EXPECT_NE(text.find("truncated"), std::string::npos) << text;
  EXPECT_NE(text.find("last whole step, step " + std::to_string(reader->last_step())),
            std::string::npos)
      << text;
}

TEST(Replay, CorruptedTraceIsAnError) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.requests = rtest::target_and_load(m, "Flip a byte", 8, 2);
  spec.max_steps_per_chunk = 1;
  rtest::Recorded rec = record(m, spec, temp_path("tocorrupt.trace"));
  ASSERT_TRUE(rec.ok);
  std::string bytes = rtest::read_file(rec.path);
  auto reader0 = open_trace(rec.path);
  // Flip a byte inside the payload of a step chunk in the middle.
  const auto& frames = reader0->frames();
  ASSERT_GT(frames.size(), 6u);
  const auto& fr = frames[frames.size() / 2];
  size_t at = static_cast<size_t>(fr.offset + trace::kFrameHeaderBytes + fr.stored_size / 2);
  ASSERT_LT(at, bytes.size());
  bytes[at] = static_cast<char>(bytes[at] ^ 0x40);
  std::string bad = temp_path("corrupt.trace");
  rtest::write_file(bad, bytes);
  Result<ReplayReport> r = replay::replay_trace(bad, ReplayOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kChecksumMismatch) << r.status().to_string();
  EXPECT_NE(r.status().message().find("corrupt.trace"), std::string::npos);
  // Not a trace at all.
  std::string junk = temp_path("junk.trace");
  rtest::write_file(junk, "hello, this is not a trace");
  r = replay::replay_trace(junk, ReplayOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kBadMagic) << r.status().to_string();
}

// The run header carries the whole engine config: capacity, dtype and scoring overrides
// come back from it.
TEST(RunConfig, HeaderRoundTrip) {
  const LoadedModel& m = builtin("tiny-moe");
  EngineConfig c;
  c.threads = 2;
  c.kv_block = 8;
  c.scheduler.max_batch_tokens = 100;
  c.scheduler.prefill_chunk = 7;
  c.capacity.factor = 1.25;
  c.capacity.overflow = Overflow::kReroute;
  c.weight_type = kernels::WeightType::kBF16;
  c.bf16_activations = true;
  c.scoring = RouterScoring::kSigmoid;
  trace::RunHeader h;
  VirtualDevice d{64, 4};
  replay::fill_run_header(&h, m, c, "invariant", d, 32, 5, 3);
  Result<EngineConfig> back = replay::engine_config_from_header(h, 3);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->threads, 3);
  EXPECT_EQ(back->kv_block, 8);
  EXPECT_EQ(back->scheduler.max_batch_tokens, 100);
  EXPECT_EQ(back->scheduler.prefill_chunk, 7);
  EXPECT_EQ(back->capacity.factor, 1.25);
  EXPECT_EQ(back->capacity.overflow, Overflow::kReroute);
  EXPECT_EQ(back->weight_type, kernels::WeightType::kBF16);
  EXPECT_EQ(back->bf16_activations, true);
  EXPECT_EQ(back->scoring, RouterScoring::kSigmoid);
  EXPECT_EQ(h.engine.virtual_sms, 64);
  EXPECT_EQ(h.model.weight_hash, replay::weight_hash_text(m.weight_hash));
  Result<std::shared_ptr<Policy>> p = replay::policy_from_header(h);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->name(), "invariant");
  PlanQuery gq;
  gq.op = OpKind::kGemm;
  gq.rows = 1;
  gq.n = 8;
  gq.k = 1024;
  EXPECT_EQ((*p)->plan(gq)->splits, 1u);
  // The invariant GEMM split size round-trips; a stranger's header with a bad one is refused.
  {
    trace::RunHeader g;
    replay::fill_run_header(&g, m, c, "invariant", d, 32, 5, 3, 256);
    Result<std::shared_ptr<Policy>> q = replay::policy_from_header(g);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    EXPECT_EQ((*q)->plan(gq)->splits, 4u);
    for (const char* bad : {R"({"gemm_split": 17})", R"({"gemm_split": -16})",
                            R"({"gemm_split": "64"})", R"({"gemm_split": 99999999999})"}) {
      g.extra_config_json = bad;
      Result<std::shared_ptr<Policy>> r = replay::policy_from_header(g);
      ASSERT_FALSE(r.ok()) << bad;
      EXPECT_NE(r.status().to_string().find("gemm_split"), std::string::npos)
          << r.status().to_string();
    }
  }
  h.extra_config_json = "[1,2]";
  EXPECT_FALSE(replay::engine_config_from_header(h).ok());
  h.extra_config_json = R"({"scoring": "cosine"})";
  EXPECT_FALSE(replay::engine_config_from_header(h).ok());
  uint64_t x = 0;
  EXPECT_TRUE(replay::parse_weight_hash("xxh3-64:00ff", &x));
  EXPECT_EQ(x, 0xffu);
  EXPECT_FALSE(replay::parse_weight_hash("xxh3-64:zz", &x));
}

// A bf16-activation run with sigmoid scoring, capacity with drops: the header's overrides
// rebuild the same engine.
TEST(Replay, EngineOverridesFromTheHeader) {
  const LoadedModel& m = builtin("tiny-moe");
  RunSpec spec;
  spec.config.weight_type = kernels::WeightType::kBF16;
  spec.config.bf16_activations = true;
  spec.config.scoring = RouterScoring::kSigmoid;
  spec.config.capacity.factor = 0.8;
  spec.config.capacity.overflow = Overflow::kDrop;
  spec.config.kv_block = 4;
  spec.requests = rtest::target_and_load(m, "bf16 and sigmoid", 5, 3);
  rtest::Recorded rec = record(m, spec, temp_path("overrides.trace"));
  ASSERT_TRUE(rec.ok);
  bool dropped = false;
  for (auto& [key, f] : rec.mem->routings()) {
    for (RouteOutcome o : f.outcome) dropped |= o == RouteOutcome::kDropped;
  }
  EXPECT_TRUE(dropped);
  replay_ok(rec.path, m);
  // Without the overrides the replay differs at once (the header is what makes it work).
  std::string stripped = temp_path("overrides-stripped.trace");
  ASSERT_TRUE(
      rtest::rewrite_trace(
          rec.path, stripped, [](trace::RunHeader& h) { h.extra_config_json = "{}"; }, nullptr)
          .ok());
  auto reader = open_trace(stripped);
  Result<ReplayReport> r = replay::replay_trace(*reader, m, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->mismatch);
}

// Conformance checkpoints (Hugging Face layouts) record and replay like the builtins.
TEST(Replay, ConformanceCheckpoints) {
  int ran = 0;
  for (const char* name : {"tiny-mixtral", "tiny-qwen2moe", "tiny-llama-bf16"}) {
    std::string dir = LLMRR_PATH(LLMRR_FIXTURES_DIR) + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    Result<LoadedModel> m = load_model(dir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    RunSpec spec;
    RequestSpec a, b;
    a.id = 0;
    a.prompt = {1, 5, 9, 13, 2, 7};
    a.max_tokens = 5;
    a.stop_at_eos = false;
    b = a;
    b.id = 1;
    b.prompt = {3, 4, 5};
    b.arrival_step = 2;
    spec.requests = {a, b};
    rtest::Recorded rec = record(*m, spec, temp_path(std::string("fixture-") + name + ".trace"));
    ASSERT_TRUE(rec.ok);
    ReplayOptions o;
    o.model = dir;
    ReplayReport r = replay_ok(rec.path, *m, o);
    EXPECT_EQ(r.tokens, 10) << name;
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no conformance checkpoints in " << LLMRR_PATH(LLMRR_FIXTURES_DIR);
}

TEST(Replay, SmolLM2WhenPresent) {
  std::string path = find_smollm2();
  if (path.empty()) {
    GTEST_SKIP() << "SmolLM2 not in " << model_cache_dir() << " (run tools/setup/smollm2)";
  }
  Result<LoadedModel> m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(m->tokenizer);
  RunSpec spec;
  spec.capture = trace::CaptureLevel::kLayers;
  RequestSpec t;
  t.id = 0;
  t.prompt = m->tokenizer->encode("The capital of France is");
  t.max_tokens = 4;
  t.stop_at_eos = false;
  RequestSpec l = t;
  l.id = 1;
  l.prompt = m->tokenizer->encode("Once upon a time");
  l.arrival_step = 1;
  spec.requests = {t, l};
  rtest::Recorded rec = record(*m, spec, temp_path("smollm2.trace"));
  ASSERT_TRUE(rec.ok);
  ReplayReport r = replay_ok(rec.path, *m);
  EXPECT_EQ(r.tokens, 8);
  ReplayOptions alone;
  alone.request = 1;
  r = replay_ok(rec.path, *m, alone);
  EXPECT_EQ(r.tokens, 4);
}

}  // namespace
}  // namespace llmrr
