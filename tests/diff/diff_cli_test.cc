// `llmrr diff` from the command line: exit 0 identical, 1 differ, 2 bad input; --json;
// --request; the story names the split.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::builtin;
using rtest::run_command;
using rtest::temp_path;

struct Pair {
  std::string alone, alone2, loaded;
};

const Pair& traces() {
  static const Pair p = [] {
    const LoadedModel& m = builtin("tiny-moe");
    std::vector<RequestSpec> all = rtest::target_and_load(m, "The quick brown fox", 16, 8);
    rtest::RunSpec alone, loaded;
    alone.requests = {all[0]};
    loaded.requests = all;
    Pair out;
    out.alone = rtest::record(m, alone, temp_path("cli-alone.trace")).path;
    out.alone2 = rtest::record(m, alone, temp_path("cli-alone2.trace")).path;
    out.loaded = rtest::record(m, loaded, temp_path("cli-loaded.trace")).path;
    return out;
  }();
  return p;
}

TEST(DiffCli, IdenticalExitsZero) {
  std::string out;
  int rc =
      run_command(rtest::llmrr_binary() + " diff " + traces().alone + " " + traces().alone2, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("request 0 \"target\": identical"), std::string::npos) << out;
  EXPECT_NE(out.find("no split"), std::string::npos) << out;
}

TEST(DiffCli, DifferExitsOneWithAStory) {
  std::string out;
  int rc =
      run_command(rtest::llmrr_binary() + " diff " + traces().alone + " " + traces().loaded, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("request 0 \"target\""), std::string::npos) << out;
  EXPECT_NE(out.find("First difference at step"), std::string::npos) << out;
  EXPECT_NE(out.find("8 only in B"), std::string::npos) << out;
  EXPECT_NE(out.find("run settings that differ: load: 0 vs 8"), std::string::npos) << out;
}

TEST(DiffCli, JsonAndRequest) {
  std::string out;
  int rc = run_command(
      rtest::llmrr_binary() + " diff --json --request 0 " + traces().alone + " " + traces().loaded,
      &out);
  EXPECT_EQ(rc, 1) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["identical"], false);
  ASSERT_EQ(j["requests"].size(), 1u);
  const nlohmann::json& r = j["requests"][0];
  EXPECT_NE(r["verdict"], "identical");
  EXPECT_TRUE(r["first_difference"]["site"].is_string());
  EXPECT_EQ(r["first_difference"]["cause"], "plan");
  EXPECT_TRUE(r["first_difference"]["batch_differs"]);
}

TEST(DiffCli, BadInputExitsTwo) {
  std::string out;
  int rc =
      run_command(rtest::llmrr_binary() + " diff " + traces().alone + " " + temp_path("nope.trace"),
                  &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("nope.trace"), std::string::npos) << out;
  rc = run_command(
      rtest::llmrr_binary() + " diff --request x " + traces().alone + " " + traces().alone, &out,
      true);
  EXPECT_EQ(rc, 2) << out;
  rc = run_command(rtest::llmrr_binary() + " diff " + traces().alone, &out, true);
  EXPECT_EQ(rc, 2) << out;
}

// A visible split (the demo's first part, recorded with `llmrr record`): position, top-1 and
// top-2 with margins in both runs, the continuations side by side, decoded with the byte
// tokenizer — or as ids with --model none.
TEST(DiffCli, VisibleSplit) {
  const std::string bin = rtest::llmrr_binary();
  const std::string common =
      " record --model builtin:tiny-moe --dtype bf16 --capture all --max-tokens 48 --threads 2 "
      "--prompt 'Once upon a time' -q ";
  const std::string a = temp_path("vis-a.trace"), b = temp_path("vis-b.trace");
  std::string out;
  ASSERT_EQ(run_command(bin + common + "-o " + a, &out, true), 0) << out;
  ASSERT_EQ(run_command(bin + common + "--load 16 -o " + b, &out, true), 0) << out;
  int rc = run_command(bin + " diff --json " + a + " " + b, &out);
  ASSERT_EQ(rc, 1) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  ASSERT_EQ(j["requests"].size(), 1u);
  const nlohmann::json& r = j["requests"][0];
  ASSERT_EQ(r["verdict"], "visible split") << r.dump(2);
  const nlohmann::json& v = r["visible_split"];
  const int position = v["position"];
  EXPECT_EQ(v["token_index"], position - 16);  // "Once upon a time" is 16 bytes
  EXPECT_LT(r["numerical_split"]["position"].get<int>(), position);
  ASSERT_FALSE(v["continuation_a"].empty());
  ASSERT_FALSE(v["continuation_b"].empty());
  EXPECT_NE(v["continuation_a"][0], v["continuation_b"][0]);
  // The tokens chosen are each run's top-1 (greedy), and the margins are top1 - top2.
  EXPECT_EQ(v["continuation_a"][0], v["top1_a"]);
  EXPECT_EQ(v["continuation_b"][0], v["top1_b"]);
  EXPECT_FLOAT_EQ(v["margin_a"].get<float>(),
                  v["top1_value_a"].get<float>() - v["top2_value_a"].get<float>());
  EXPECT_FLOAT_EQ(v["margin_b"].get<float>(),
                  v["top1_value_b"].get<float>() - v["top2_value_b"].get<float>());
  EXPECT_EQ(j["text_decoded"], true);
  const std::string text_a = v["text_a"];
  EXPECT_EQ(static_cast<unsigned char>(text_a[0]), v["continuation_a"][0].get<int>());

  rc = run_command(bin + " diff " + a + " " + b, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("split at token " + std::to_string(position - 16)), std::string::npos) << out;
  EXPECT_NE(out.find("    A:       "), std::string::npos) << out;
  EXPECT_NE(out.find("A top-1 '"), std::string::npos) << out;
  rc = run_command(bin + " diff --model none " + a + " " + b, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("A top-1 #" + std::to_string(v["top1_a"].get<int>())), std::string::npos)
      << out;
}

}  // namespace
}  // namespace llmrr
