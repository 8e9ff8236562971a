// The `llmrr fuzz` and `llmrr fuzz merge` command lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_cli.h"
#include "test_common.h"

namespace llmrr {
namespace {

using testing::run_llmrr;

std::vector<std::string> base(const std::string& out) {
  return {"fuzz",          "--model", "builtin:tiny-moe", "--dtype", "bf16", "--prompt",
          "record capital upon answer dog", "--max-tokens", "12", "--co-requests", "4",
          "--max-prompt",  "16",      "--max-new",  "8",       "--out",  out,  "-q"};
}

std::vector<std::string> with(std::vector<std::string> v, const std::vector<std::string>& more) {
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

TEST(FuzzCli, HelpHasExamples) {
  testing::CliResult r = run_llmrr({"fuzz", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Examples:"), std::string::npos);
  EXPECT_NE(r.out.find("--shard"), std::string::npos);
  r = run_llmrr({"fuzz", "merge", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Examples:"), std::string::npos);
}

TEST(FuzzCli, BadOptionsExit2WithOneLine) {
  test::TempDir dir("llmrr-fuzz-cli");
  const std::string out = dir.file("o");
  const std::vector<std::vector<std::string>> bad = {
      {"--runs", "-1"},
      {"--runs", "4", "--shard", "3/2"},
      {"--runs", "4", "--shard", "x"},
      {"--runs", "4", "--jobs", "0"},
      {"--runs", "4", "--prefill-chunk", "lots"},
      {"--runs", "4", "--capacity-factor", "-1"},
      {"--runs", "4", "--overflow", "spill"},
      {"--runs", "4", "--capacity-factor", "0", "--overflow", "drop"},
      {"--runs", "4", "--policy", "fast"},
      {"--runs", "4", "--dtype", "fp8"},
      {"--runs", "4", "--max-tokens", "0"},
      {"--runs", "4", "--co-requests", "-2"},
      {"--runs", "4", "--bogus"},
  };
  for (const auto& extra : bad) {
    testing::CliResult r = run_llmrr(with(base(out), extra));
    std::string what;
    for (const auto& e : extra) what += e + " ";
    EXPECT_EQ(r.exit_code, 2) << what << r.err;
    EXPECT_FALSE(r.err.empty()) << what;
  }
  // Missing --runs / --out, a dense model with a capacity factor, an unknown model.
  EXPECT_EQ(run_llmrr({"fuzz", "--model", "builtin:tiny-moe", "--prompt", "a", "--out", out})
                .exit_code,
            2);
  EXPECT_EQ(run_llmrr({"fuzz", "--model", "builtin:tiny-moe", "--prompt", "a", "--runs", "2"})
                .exit_code,
            2);
  EXPECT_EQ(run_llmrr({"fuzz", "--model", "builtin:tiny-dense", "--prompt", "a", "--runs", "2",
                       "--capacity-factor", "1", "--out", out})
                .exit_code,
            2);
  EXPECT_EQ(run_llmrr({"fuzz", "--model", "builtin:nope", "--prompt", "a", "--runs", "2", "--out",
                       out})
                .exit_code,
            2);
  // merge: nothing to merge, not a summary.
  EXPECT_EQ(run_llmrr({"fuzz", "merge"}).exit_code, 2);
  EXPECT_EQ(run_llmrr({"fuzz", "merge", dir.path()}).exit_code, 2);
}

TEST(FuzzCli, ShardedCampaignMergesLikeOneRun) {
  test::TempDir dir("llmrr-fuzz-cli");
  const std::vector<std::string> camp = {"--runs", "6", "--seed", "3", "--max-shrink", "0"};
  testing::CliResult whole = run_llmrr(with(base(dir.file("whole")), camp));
  ASSERT_TRUE(whole.exit_code == 0 || whole.exit_code == 1) << whole.err;
  EXPECT_NE(whole.out.find("unique completions"), std::string::npos) << whole.out;
  for (int i = 0; i < 2; ++i) {
    testing::CliResult r = run_llmrr(with(
        base(dir.file("shard-" + std::to_string(i))),
        with(camp, {"--shard", std::to_string(i) + "/2", "--jobs", "2", "--threads", "1"})));
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
  }
  testing::CliResult m = run_llmrr({"fuzz", "merge", dir.file("shard-0"), dir.file("shard-1"),
                                    "--out", dir.file("merged")});
  EXPECT_EQ(m.exit_code, whole.exit_code) << m.err;
  auto load = [&](const std::string& d) {
    return nlohmann::json::parse(testing::slurp(dir.file(d) + "/summary.json"));
  };
  nlohmann::json a = load("whole"), b = load("merged");
  EXPECT_EQ(a["stats"], b["stats"]);
  EXPECT_EQ(a["results"], b["results"]);
  EXPECT_EQ(a["completions"], b["completions"]);
  EXPECT_EQ(b["shard_list"], nlohmann::json::array({0, 1}));
  // One shard twice is refused.
  EXPECT_EQ(run_llmrr({"fuzz", "merge", dir.file("shard-0"), dir.file("shard-0")}).exit_code, 2);
}

}  // namespace
}  // namespace llmrr
