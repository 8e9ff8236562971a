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

}  // namespace
}  // namespace llmrr
