// llmrr mismatch and diff --align tokens on a planted rollout / trainer pair: a rollout (prompt
// of 3, three decode steps) against a trainer's one forward over the 6 tokens. Position 2's
// logits are the same bits; at position 3 layer 1's output differs (layer 0's does not) and the
// two log-probs are -1 and -1.5; at position 4 only the logits differ and the trainer's top-K
// lacks the token. Every figure the report gives is computed here by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llmrr/format/site.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/replayer/mismatch.h"
#include "sample_records.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using trace::LogitsRecord;
using trace::RequestRecord;
using trace::Segment;
using trace::SiteRows;
using trace::StepRecord;

const std::vector<int32_t> kPrompt = {5, 6, 7};
const std::vector<int32_t> kCompletion = {8, 9, 10};

uint64_t site(const char* name) { return parse_site(name)->packed(); }

// The hash of a row: equal in both runs unless planted.
uint64_t row_hash(int32_t position, int layer, bool trainer) {
  const bool planted = trainer && layer == 1 && position == 3;
  return 1000u * static_cast<uint64_t>(position) + static_cast<uint64_t>(layer) + (planted ? 7 : 0);
}

void add_rows(StepRecord* s, int32_t first, int32_t count, bool trainer) {
  for (int layer = 0; layer < 2; ++layer) {
    SiteRows sr;
    sr.site = site(layer == 0 ? "L0.out" : "L1.out");
    sr.cols = 64;
    for (int32_t p = first; p < first + count; ++p) sr.rows.push_back({row_hash(p, layer, trainer), 1, 1});
    s->rows.push_back(sr);
  }
  trace::Routing ro;  // layer 0, 2 of 4 experts; the rollout sends position 3 elsewhere
  ro.layer = 0;
  ro.rows = count;
  ro.k = 2;
  ro.experts_total = 4;
  for (int32_t p = first; p < first + count; ++p) {
    const bool moved = !trainer && p == 3;
    for (int32_t e : {moved ? 3 : 1, moved ? 2 : 0}) {
      ro.chosen.push_back(e);
      ro.experts.push_back(e);
      ro.gates.push_back(0.5f);
      ro.outcome.push_back(trace::RouteOutcome::kKept);
    }
  }
  s->routing.push_back(ro);
}

// Logits at `position` (batch row `row`): the row predicting the token at position + 1.
LogitsRecord logits(uint64_t request, int32_t position, int32_t row, bool trainer) {
  LogitsRecord l;
  l.request = request;
  l.position = position;
  l.batch_row = row;
  l.vocab = 512;
  const int32_t next = position == 2 ? 8 : position == 3 ? 9 : 10;
  if (position == 2) {  // the same bits in both
    l.top_ids = {next, 1};
    l.top_values = {3.0f, 1.0f};
    l.logsumexp = 3.25;
    l.full.hash = 42;
  } else if (position == 3) {
    l.top_ids = {next, 1};
    l.top_values = {trainer ? 1.5f : 2.0f, 1.0f};
    l.logsumexp = 3.0;
    l.full.hash = trainer ? 44 : 43;
  } else {
    l.top_ids = trainer ? std::vector<int32_t>{1, 2} : std::vector<int32_t>{next, 1};
    l.top_values = {4.0f, 1.0f};
    l.logsumexp = 4.5;
    l.full.hash = trainer ? 46 : 45;
  }
  l.margin = l.top_values[0] - l.top_values[1];
  return l;
}

trace::RunHeader header(const std::string& run_id, const std::string& tool) {
  trace::RunHeader h = trace::testing::sample_header(run_id);
  h.tool_version = tool;
  h.engine.fingerprint = "mixsum64";
  return h;
}

std::string write_rollout(const std::string& name) {
  const std::string path = rtest::temp_path(name);
  auto w = trace::TraceWriter::open(path);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE((*w)->append_run_header(header("rollout-1", "rollout engine")).ok());
  for (int32_t step = 0; step < 3; ++step) {
    StepRecord s;
    s.step = step;
    Segment g;
    g.request = 1;
    g.sample = true;
    if (step == 0) {
      RequestRecord r;
      r.id = 1;
      r.prompt = kPrompt;
      r.max_tokens = 3;
      r.label = "rollout-0";
      s.arrivals.push_back(r);
      g.kind = trace::SegmentKind::kPrefill, g.start = 0, g.count = 3;
    } else {
      g.kind = trace::SegmentKind::kDecode, g.start = 2 + step, g.count = 1, g.cached = 2 + step;
    }
    s.segments.push_back(g);
    add_rows(&s, g.start, g.count, false);
    const int32_t pos = g.start + g.count - 1;
    s.logits.push_back(logits(1, pos, g.count - 1, false));
    s.tokens.push_back({1, pos + 1, kCompletion[static_cast<size_t>(step)], -1.0});
    if (step == 2) s.finishes.push_back({1, trace::FinishReason::kMaxTokens, 3});
    EXPECT_TRUE((*w)->append_step(s).ok());
  }
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

std::string write_trainer(const std::string& name, std::vector<int32_t> sequence) {
  const std::string path = rtest::temp_path(name);
  auto w = trace::TraceWriter::open(path);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE((*w)->append_run_header(header("trainer-1", "trainer forward")).ok());
  StepRecord s;
  s.step = 0;
  RequestRecord r;
  r.id = 7;
  r.prompt = sequence;
  r.max_tokens = 1;
  s.arrivals.push_back(r);
  const int32_t n = static_cast<int32_t>(sequence.size());
  s.segments.push_back({7, 0, n, 0, trace::SegmentKind::kPrefill, true});
  add_rows(&s, 0, n, true);
  for (int32_t p = 2; p <= 4; ++p) s.logits.push_back(logits(7, p, p, true));
  s.finishes.push_back({7, trace::FinishReason::kMaxTokens, 0});
  EXPECT_TRUE((*w)->append_step(s).ok());
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

std::vector<int32_t> full_sequence() {
  std::vector<int32_t> s = kPrompt;
  s.insert(s.end(), kCompletion.begin(), kCompletion.end());
  return s;
}

TEST(Mismatch, EachTokensLogProbsFirstSiteAndTheRlMetrics) {
  const std::string a = write_rollout("mismatch-rollout.trace");
  const std::string b = write_trainer("mismatch-trainer.trace", full_sequence());
  Result<replay::MismatchReport> got = replay::mismatch_traces(a, b, {});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const replay::MismatchReport& m = *got;
  ASSERT_EQ(m.requests.size(), 1u);
  const replay::RequestMismatch& r = m.requests[0];
  EXPECT_EQ(r.a, 1u);
  EXPECT_EQ(r.b, 7u);
  EXPECT_EQ(r.covered, 6);
  ASSERT_EQ(r.tokens.size(), 3u);
  // Position 2: the same bits, log-prob 3 - 3.25 on both sides.
  EXPECT_TRUE(r.tokens[0].logits_equal);
  EXPECT_EQ(r.tokens[0].token, 8);
  EXPECT_DOUBLE_EQ(*r.tokens[0].logp_a, -0.25);
  EXPECT_DOUBLE_EQ(*r.tokens[0].logp_b, -0.25);
  EXPECT_EQ(r.tokens[0].first_site, "");
  // Position 3: layer 1 is where the rows first differ.
  EXPECT_FALSE(r.tokens[1].logits_equal);
  EXPECT_EQ(r.tokens[1].token, 9);
  EXPECT_DOUBLE_EQ(*r.tokens[1].logp_a, -1.0);
  EXPECT_DOUBLE_EQ(*r.tokens[1].logp_b, -1.5);
  EXPECT_EQ(r.tokens[1].first_site, "L1.out");
  EXPECT_EQ(r.tokens[1].first_layer, 1);
  // Position 4: only the logits differ, and B's top-K lacks token 10.
  EXPECT_EQ(r.tokens[2].first_site, "logits");
  EXPECT_DOUBLE_EQ(*r.tokens[2].logp_a, -0.5);
  EXPECT_FALSE(r.tokens[2].logp_b.has_value());
  // The metrics over the two known tokens (log_ratio 0 and -0.5).
  const replay::MismatchStats& s = m.total;
  EXPECT_EQ(s.tokens, 2);
  EXPECT_EQ(s.unknown, 1);
  EXPECT_EQ(s.logits_differ, 2);
  EXPECT_EQ(s.past_threshold, 1);
  EXPECT_DOUBLE_EQ(s.mean_abs_dlogp, 0.25);
  EXPECT_DOUBLE_EQ(s.max_abs_dlogp, 0.5);
  EXPECT_NEAR(s.max_abs_dp, std::exp(-1.0) - std::exp(-1.5), 1e-15);
  EXPECT_NEAR(s.mean_abs_dp, (std::exp(-1.0) - std::exp(-1.5)) / 2, 1e-15);
  EXPECT_NEAR(s.k3_kl, (std::exp(-0.5) - 1 + 0.5) / 2, 1e-15);
  EXPECT_NEAR(s.chi2, (std::exp(-0.5) - 1) * (std::exp(-0.5) - 1) / 2, 1e-15);
  EXPECT_NEAR(s.pearson, 1.0, 1e-12);  // two points
  EXPECT_EQ(m.first_site_histogram.at("L1.out"), 1);
  EXPECT_EQ(m.first_site_histogram.at("logits"), 1);
  EXPECT_EQ(m.first_layer_histogram.at(1), 1);
  EXPECT_EQ(m.first_layer_histogram.at(-1), 1);
  // Routing at layer 0: positions 0..4 both routed, position 3 elsewhere in the rollout.
  ASSERT_EQ(m.routing.size(), 1u);
  EXPECT_EQ(m.routing[0].positions, 5);
  EXPECT_EQ(m.routing[0].same, 4);
  EXPECT_FALSE(m.identical());
}

TEST(Mismatch, ATrainerOverOtherTokensPairsWithNothing) {
  const std::string a = write_rollout("mismatch-rollout-2.trace");
  std::vector<int32_t> other = full_sequence();
  other[4] = 99;  // the completion differs at its second token
  const std::string b = write_trainer("mismatch-trainer-other.trace", other);
  Result<replay::MismatchReport> got = replay::mismatch_traces(a, b, {});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("nothing to compare"), std::string::npos)
      << got.status().to_string();
  // A trainer over the prompt and part of the completion still pairs, over what it covers.
  std::vector<int32_t> shorter = full_sequence();
  shorter.pop_back();
  const std::string c = write_trainer("mismatch-trainer-short.trace", shorter);
  got = replay::mismatch_traces(a, c, {});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->requests[0].covered, 5);
  EXPECT_EQ(got->requests[0].tokens.size(), 3u);  // positions 2..4: inputs in common
}

TEST(MismatchCli, TextJsonExitCodesAndDiffAlignTokens) {
  const std::string a = write_rollout("mismatch-cli-rollout.trace");
  const std::string b = write_trainer("mismatch-cli-trainer.trace", full_sequence());
  const std::string llmrr = rtest::llmrr_binary();
  std::string out;
  EXPECT_EQ(rtest::run_command(llmrr + " mismatch " + a + " " + b, &out, true), 1) << out;
  EXPECT_NE(out.find("1 request(s) paired by tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("L1.out"), std::string::npos) << out;
  EXPECT_NE(out.find("outside top-K"), std::string::npos) << out;
  EXPECT_EQ(rtest::run_command(llmrr + " mismatch --json " + a + " " + b, &out, false), 1);
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["total"]["tokens"], 2);
  EXPECT_EQ(j["requests"][0]["tokens"][1]["first_site"], "L1.out");
  EXPECT_EQ(j["first_layer_histogram"]["L1"], 1);
  EXPECT_TRUE(j["requests"][0]["tokens"][2]["logp_b"].is_null());
  // A trace against itself: every token the same bits, exit 0.
  EXPECT_EQ(rtest::run_command(llmrr + " mismatch " + a + " " + a, &out, true), 0) << out;
  EXPECT_NE(out.find("bit-identical"), std::string::npos) << out;
  // Bad input: exit 2 naming it.
  EXPECT_EQ(rtest::run_command(llmrr + " mismatch " + a + " /nonexistent.trace", &out, true), 2);
  EXPECT_NE(out.find("/nonexistent.trace"), std::string::npos) << out;
  EXPECT_EQ(rtest::run_command(llmrr + " mismatch --threshold -1 " + a + " " + b, &out, true), 2);
  // diff pairs the same two by tokens, splits at position 3 and names layer 1.
  EXPECT_EQ(rtest::run_command(llmrr + " diff --align tokens --json " + a + " " + b, &out, false), 1);
  const nlohmann::json d = nlohmann::json::parse(out);
  EXPECT_EQ(d["alignment"], "token sequence") << out;
  ASSERT_EQ(d["requests"].size(), 1u) << out;
  EXPECT_EQ(d["requests"][0]["numerical_split"]["position"], 3) << out;
  EXPECT_EQ(d["requests"][0]["first_difference"]["site"], "L1.out") << out;
  // By prompt they do not pair (the trainer's prompt holds the completion).
  EXPECT_EQ(rtest::run_command(llmrr + " diff " + a + " " + b, &out, true), 2) << out;
}

}  // namespace
}  // namespace llmrr
