// Fuzz campaigns in process on builtin:tiny-moe (bf16, as production engines compute).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "llmrr/replayer/diff.h"
#include "llmrr/replayer/fuzz.h"
#include "test_common.h"

namespace llmrr {
namespace {

using replay::Composition;
using replay::FuzzCampaign;
using replay::FuzzSummary;
using replay::FuzzVerdict;

FuzzCampaign campaign(PolicyKind policy, int64_t runs) {
  const LoadedModel& m = test::builtin("tiny-moe");
  FuzzCampaign c;
  c.engine.model = &m;
  c.engine.policy = policy;
  c.engine.config.threads = 1;
  c.engine.config.weight_type = kernels::WeightType::kBF16;
  c.engine.config.bf16_activations = true;
  c.model_spec = "builtin:tiny-moe";
  c.dtype = "bf16";
  c.target.prompt = test::bytes("record capital upon answer dog");
  c.target.max_tokens = 16;
  c.space = replay::default_fuzz_space(m.config);
  // Small compositions keep the suite quick; they still split (the README's demo prompt).
  c.space.max_co_requests = 6;
  c.space.max_prompt = 24;
  c.space.max_new = 12;
  c.space.max_arrival = 6;
  c.space.max_target_arrival = 3;
  c.seed = 1;
  c.runs = runs;
  c.jobs = 2;
  c.max_shrink = 0;
  c.shrink_budget = 24;
  return c;
}

TEST(FuzzGenerator, DeterministicForASeedAndIndependentPerIndex) {
  replay::FuzzSpace sp = replay::default_fuzz_space(test::builtin("tiny-moe").config);
  std::set<size_t> sizes;
  for (int64_t i = 0; i < 20; ++i) {
    Composition a = replay::generate_composition(sp, 42, i);
    EXPECT_EQ(a, replay::generate_composition(sp, 42, i)) << "run " << i;
    sizes.insert(a.others.size());
    for (const replay::CoRequest& r : a.others) {
      EXPECT_GE(r.prompt.size(), 1u);
      EXPECT_LE(r.prompt.size(), 48u);
      EXPECT_GE(r.max_tokens, 1);
      EXPECT_LE(r.arrival_step, 12);
      for (int32_t t : r.prompt) {
        EXPECT_GE(t, 32);  // printable bytes for the byte-level vocabulary
        EXPECT_LT(t, 127);
      }
    }
    EXPECT_EQ(a.capacity_factor > 0, a.overflow != Overflow::kNone);
  }
  EXPECT_GT(sizes.size(), 3u) << "the co-request count should vary";
  EXPECT_NE(replay::generate_composition(sp, 42, 3), replay::generate_composition(sp, 43, 3));
  EXPECT_NE(replay::generate_composition(sp, 42, 3), replay::generate_composition(sp, 42, 4));
  // Pinned knobs hold in every run; a dense model is always dropless.
  sp.prefill_chunk = 16;
  sp.capacity_factor = 1.0;
  sp.overflow = Overflow::kReroute;
  for (int64_t i = 0; i < 10; ++i) {
    Composition a = replay::generate_composition(sp, 42, i);
    EXPECT_EQ(a.prefill_chunk, 16);
    EXPECT_EQ(a.capacity_factor, 1.0);
    EXPECT_EQ(a.overflow, Overflow::kReroute);
  }
  replay::FuzzSpace dense = replay::default_fuzz_space(test::builtin("tiny-dense").config);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(replay::generate_composition(dense, 42, i).capacity_factor, 0.0);
  }
}

TEST(FuzzCampaign, ProductionSplitsVisiblyAndTheShrunkCompositionStillSplits) {
  test::TempDir dir("llmrr-fuzz");
  FuzzCampaign c = campaign(PolicyKind::kProduction, 16);
  c.space.capacity_factor = 0.0;  // plans only
  c.max_shrink = 1;
  c.out_dir = dir.path();
  Result<FuzzSummary> s = replay::run_fuzz_campaign(c);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->results.size(), 16u);
  ASSERT_GT(s->visible, 0) << replay::format_fuzz_summary(*s);
  EXPECT_GT(s->unique_completions, 1);
  ASSERT_EQ(s->splits.size(), 1u);
  const replay::FuzzSplit& sp = s->splits.front();
  EXPECT_FALSE(sp.original.smaller_than(sp.shrunk)) << "shrinking made it bigger";
  EXPECT_LE(sp.shrunk.others.size(), sp.original.others.size());
  EXPECT_LE(sp.shrunk.prompt_tokens(), sp.original.prompt_tokens());
  EXPECT_GE(sp.shrunk.others.size(), 1u) << "a solo run cannot split from itself";
  // The shrunk composition, run again from scratch, still splits visibly.
  Result<replay::TargetObservation> base =
      replay::run_composition(c.engine, c.target, sp.shrunk, true);
  Result<replay::TargetObservation> run =
      replay::run_composition(c.engine, c.target, sp.shrunk, false);
  ASSERT_TRUE(base.ok() && run.ok());
  EXPECT_EQ(replay::compare_with_baseline(*base, *run).verdict, FuzzVerdict::kVisible);
  // The saved trace pair: diff sees the same visible split and names a plan.
  const std::string d = dir.path() + "/" + sp.dir;
  for (const char* f : {"solo.trace", "split.trace", "solo.jsonl", "split.jsonl", "repro.sh"}) {
    EXPECT_TRUE(std::filesystem::exists(d + "/" + f)) << f;
  }
  EXPECT_EQ(sp.diff_verdict, "visible split");
  EXPECT_EQ(sp.diff_cause, "plan");
  ASSERT_EQ(sp.commands.size(), 3u);
  EXPECT_NE(sp.commands[1].find("--requests split.jsonl"), std::string::npos);
  Result<replay::DiffReport> dr = replay::diff_traces(d + "/solo.trace", d + "/split.trace");
  ASSERT_TRUE(dr.ok()) << dr.status().to_string();
  EXPECT_FALSE(dr->identical());
}

TEST(FuzzCampaign, InvariantPolicyWithoutCapacityNeverSplits) {
  FuzzCampaign c = campaign(PolicyKind::kInvariant, 16);
  c.space.capacity_factor = 0.0;
  Result<FuzzSummary> s = replay::run_fuzz_campaign(c);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->identical, 16) << replay::format_fuzz_summary(*s);
  EXPECT_EQ(s->numerical + s->visible, 0);
  EXPECT_EQ(s->unique_completions, 1);
}

TEST(FuzzCampaign, CapacityFactorOneSplitsTheInvariantPolicyThroughRouting) {
  test::TempDir dir("llmrr-fuzz");
  FuzzCampaign c = campaign(PolicyKind::kInvariant, 16);
  c.space.capacity_factor = 1.0;
  c.space.overflow = Overflow::kDrop;
  c.max_shrink = 1;
  c.out_dir = dir.path();
  Result<FuzzSummary> s = replay::run_fuzz_campaign(c);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_GT(s->numerical + s->visible, 0) << replay::format_fuzz_summary(*s);
  // No plan depends on the batch: every split starts where routing differs.
  for (const auto& [cause, n] : s->causes) {
    EXPECT_TRUE(cause == "capacity" || cause == "routing") << cause << " " << n;
  }
  EXPECT_GT(s->causes["capacity"], 0);
  ASSERT_GT(s->visible, 0) << replay::format_fuzz_summary(*s);
  ASSERT_EQ(s->splits.size(), 1u);
  EXPECT_EQ(s->splits.front().diff_cause, "routing") << s->splits.front().diff_cause_text;
}

TEST(FuzzCampaign, ShardsPartitionTheRunsAndMergeToTheSameSummary) {
  FuzzCampaign c = campaign(PolicyKind::kProduction, 9);
  c.max_shrink = 100;  // every distinct split in both forms, so both keep the same ones
  c.shrink_budget = 3;
  Result<FuzzSummary> whole = replay::run_fuzz_campaign(c);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  std::vector<FuzzSummary> parts;
  std::set<int64_t> seen;
  for (int32_t i = 0; i < 3; ++i) {
    FuzzCampaign p = c;
    p.shard = i;
    p.shards = 3;
    Result<FuzzSummary> s = replay::run_fuzz_campaign(p);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    for (const replay::FuzzRunResult& r : s->results) {
      EXPECT_EQ(r.index % 3, i);
      EXPECT_TRUE(seen.insert(r.index).second) << "run " << r.index << " in two shards";
    }
    // Through summary.json, as `llmrr fuzz merge` reads it.
    Result<FuzzSummary> back = replay::parse_fuzz_summary(replay::fuzz_summary_json(*s), "shard");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    parts.push_back(std::move(*back));
  }
  EXPECT_EQ(seen.size(), 9u);
  Result<FuzzSummary> merged = replay::merge_fuzz_summaries(parts, {}, "");
  ASSERT_TRUE(merged.ok()) << merged.status().to_string();
  FuzzSummary a = *whole, b = *merged;
  // Everything but the wall time and the shard bookkeeping is the same.
  a.seconds = b.seconds = 0;
  a.shards = b.shards = 1;
  a.shard_list = b.shard_list = {0};
  EXPECT_EQ(replay::fuzz_summary_json(a), replay::fuzz_summary_json(b));
  EXPECT_EQ(merged->visible + merged->numerical + merged->identical, 9);
  // Shards of another campaign are refused.
  FuzzSummary other = parts[1];
  other.seed = 2;
  EXPECT_FALSE(replay::merge_fuzz_summaries({parts[0], other}, {}, "").ok());
  EXPECT_FALSE(replay::merge_fuzz_summaries({parts[0], parts[0]}, {}, "").ok());
}

}  // namespace
}  // namespace llmrr
