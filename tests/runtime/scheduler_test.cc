// Scheduler properties: limits respected, every request finishes, prompts covered exactly by
// their chunks, decodes before prefills, arrivals respected, deterministic — over random
// configurations, driven without a model (and once through the engine).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "llmrr/runtime/scheduler.h"
#include "test_util.h"

namespace llmrr {
namespace {

struct SimRequest {
  RequestId id;
  int32_t prompt_len;
  int64_t arrival;
  int32_t max_tokens;
  int32_t eos_after;  // finishes early after this many tokens (0 = never)
};

struct Trace {
  std::vector<std::pair<int64_t, std::vector<BatchSegment>>> steps;
  bool operator==(const Trace&) const = default;
};

// Runs the scheduler with a fake sampler and checks the properties as it goes.
Trace simulate(const SchedulerConfig& cfg, const std::vector<SimRequest>& reqs) {
  Scheduler s(cfg);
  for (const SimRequest& r : reqs) s.add(r.id, r.prompt_len, r.arrival);
  std::map<RequestId, const SimRequest*> by_id;
  for (const SimRequest& r : reqs) by_id[r.id] = &r;
  std::map<RequestId, int32_t> covered, generated;
  std::map<RequestId, bool> finished;
  Trace t;
  int64_t step = 0;
  for (int guard = 0; !s.idle(); ++guard) {
    if (guard > 100000) {
      ADD_FAILURE() << "scheduler does not finish";
      break;
    }
    std::vector<BatchSegment> batch = s.next_batch(step);
    if (batch.empty()) {
      auto na = s.next_arrival();
      EXPECT_TRUE(na.has_value());
      EXPECT_GT(*na, step) << "empty batch while a request could run";
      step = *na;
      continue;
    }
    int32_t rows = 0;
    bool seen_prefill = false;
    std::map<RequestId, int> in_step;
    for (const BatchSegment& g : batch) {
      const SimRequest& r = *by_id.at(g.request);
      rows += g.count;
      EXPECT_LE(r.arrival, step) << "request " << r.id << " ran before its arrival";
      EXPECT_FALSE(finished[g.request]);
      EXPECT_EQ(++in_step[g.request], 1) << "request twice in one step";
      EXPECT_EQ(g.cached, g.start);
      if (g.kind == SegmentKind::kDecode) {
        EXPECT_FALSE(seen_prefill) << "decode rows come before prefill rows";
        EXPECT_EQ(g.count, 1);
        EXPECT_TRUE(g.sample);
        EXPECT_EQ(g.start, r.prompt_len + generated[g.request] - 1);
      } else {
        seen_prefill = true;
        EXPECT_EQ(g.start, covered[g.request]) << "chunks must be contiguous";
        if (cfg.prefill_chunk > 0) {
          EXPECT_LE(g.count, cfg.prefill_chunk);
        }
        covered[g.request] += g.count;
        EXPECT_LE(covered[g.request], r.prompt_len);
        EXPECT_EQ(g.sample, covered[g.request] == r.prompt_len);
      }
    }
    EXPECT_LE(rows, cfg.max_batch_tokens);
    EXPECT_LE(static_cast<int32_t>(in_step.size()), cfg.max_seqs);
    EXPECT_LE(static_cast<int32_t>(s.running()), cfg.max_seqs);
    for (const BatchSegment& g : batch) {
      if (!g.sample) continue;
      const SimRequest& r = *by_id.at(g.request);
      int32_t n = ++generated[g.request];
      bool done = n >= r.max_tokens || (r.eos_after > 0 && n >= r.eos_after);
      finished[g.request] = done;
      s.on_token(g.request, done);
    }
    t.steps.emplace_back(step, std::move(batch));
    ++step;
  }
  for (const SimRequest& r : reqs) {
    EXPECT_TRUE(finished[r.id]) << "request " << r.id << " never finished";
    EXPECT_EQ(covered[r.id], r.prompt_len) << "prompt of request " << r.id << " not covered";
  }
  return t;
}

TEST(Scheduler, PropertiesOverRandomConfigurations) {
  std::mt19937_64 rng(7);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int c = 0; c < 300; ++c) {
    SchedulerConfig cfg;
    cfg.max_batch_tokens = uni(1, 96);
    cfg.max_seqs = uni(1, 12);
    cfg.prefill_chunk = uni(0, 40);
    std::vector<SimRequest> reqs;
    int n = uni(1, 14);
    for (int i = 0; i < n; ++i) {
      reqs.push_back(SimRequest{static_cast<RequestId>(i * 3 + 1), uni(1, 70), uni(0, 20),
                                uni(1, 12), uni(0, 1) ? uni(1, 6) : 0});
    }
    SCOPED_TRACE("case " + std::to_string(c));
    Trace a = simulate(cfg, reqs);
    Trace b = simulate(cfg, reqs);
    EXPECT_TRUE(a == b) << "not deterministic";
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Scheduler, AdmissionOrderIsArrivalThenSubmission) {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 100;
  cfg.max_seqs = 2;
  cfg.prefill_chunk = 0;
  Scheduler s(cfg);
  s.add(10, 5, 3);
  s.add(11, 5, 0);
  s.add(12, 5, 0);
  s.add(13, 5, 0);
  std::vector<BatchSegment> b0 = s.next_batch(0);
  ASSERT_EQ(b0.size(), 2u);  // max_seqs 2
  EXPECT_EQ(b0[0].request, 11u);
  EXPECT_EQ(b0[1].request, 12u);
  s.on_token(11, true);
  s.on_token(12, false);
  std::vector<BatchSegment> b1 = s.next_batch(1);
  ASSERT_EQ(b1.size(), 2u);
  EXPECT_EQ(b1[0].request, 12u);  // decode first
  EXPECT_EQ(b1[0].kind, SegmentKind::kDecode);
  EXPECT_EQ(b1[1].request, 13u);  // 10 arrives only at step 3
}

TEST(Scheduler, BudgetSplitsPrefillAcrossSteps) {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 8;
  cfg.max_seqs = 4;
  cfg.prefill_chunk = 5;
  Scheduler s(cfg);
  s.add(1, 12, 0);
  s.add(2, 3, 0);
  auto b0 = s.next_batch(0);
  ASSERT_EQ(b0.size(), 2u);
  EXPECT_EQ(b0[0].count, 5);  // chunk limit
  EXPECT_EQ(b0[1].count, 3);  // budget 8 - 5
  EXPECT_TRUE(b0[1].sample);
  s.on_token(2, false);
  auto b1 = s.next_batch(1);
  ASSERT_EQ(b1.size(), 2u);
  EXPECT_EQ(b1[0].request, 2u);  // decode
  EXPECT_EQ(b1[1].request, 1u);
  EXPECT_EQ(b1[1].start, 5);
  EXPECT_EQ(b1[1].count, 5);
  EXPECT_FALSE(b1[1].sample);
}

TEST(Scheduler, ConfigValidation) {
  SchedulerConfig c;
  EXPECT_EQ(check_scheduler_config(c), "");
  c.max_seqs = 0;
  EXPECT_NE(check_scheduler_config(c), "");
  c = {};
  c.max_batch_tokens = 0;
  EXPECT_NE(check_scheduler_config(c), "");
  c = {};
  c.prefill_chunk = -1;
  EXPECT_NE(check_scheduler_config(c), "");
}

// The engine's batches obey the same rules and every request gets exactly its tokens.
TEST(Scheduler, ThroughTheEngine) {
  const LoadedModel& m = testing::builtin("tiny-dense");
  EngineConfig cfg;
  cfg.scheduler.max_batch_tokens = 24;
  cfg.scheduler.max_seqs = 3;
  cfg.scheduler.prefill_chunk = 7;
  std::vector<RequestSpec> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(testing::request(i, testing::bytes(std::string(5 + 4 * i, 'a' + i)), 3 + i, i));
  }
  testing::EngineRun run = testing::run_requests(m, cfg, testing::invariant(), reqs);
  for (const ScheduledStep& st : run.trace->steps()) {
    int32_t rows = 0;
    for (const BatchSegment& g : st.segments) rows += g.count;
    EXPECT_LE(rows, 24);
    EXPECT_LE(st.segments.size(), 3u);
  }
  for (const RequestSpec& r : reqs) {
    const RequestState* s = run.engine->request(r.id);
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->finished);
    EXPECT_EQ(run.trace->tokens(r.id), s->generated);
    if (s->reason == FinishReason::kMaxTokens) {
      EXPECT_EQ(static_cast<int32_t>(s->generated.size()), r.max_tokens);
    }
    EXPECT_GE(s->first_step, r.arrival_step);
  }
}

}  // namespace
}  // namespace llmrr
