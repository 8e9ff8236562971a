// How `llmrr diff` pairs requests: at temperature 0 the seed (and top-k, top-p) cannot change
// the output, so they are not part of the key; at temperature > 0 they are. Nothing in
// common is exit 2 with a line that says which keys differed; --align prompt|ids overrides.
#include <gtest/gtest.h>

#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::run_command;
using rtest::temp_path;

std::string record(const std::string& name, const std::string& args) {
  std::string path = temp_path(name);
  std::string out;
  int rc = run_command(rtest::llmrr_binary() +
                           " record --model builtin:tiny-moe --max-tokens 6 --capture layers " +
                           args + " -o " + path,
                       &out, true);
  EXPECT_EQ(rc, 0) << out;
  return path;
}

int diff(const std::string& a, const std::string& b, const std::string& extra, std::string* out) {
  return run_command(rtest::llmrr_binary() + " diff " + extra + " " + a + " " + b, out, true);
}

TEST(DiffAlign, GreedyIgnoresTheSeed) {
  // The report of the original defect: --load 9 --seed 5 against the same prompt alone and
  // without --seed found "0 requests in common".
  std::string a = record("align-seed.trace", "--prompt 'The capital of France' --load 9 --seed 5");
  std::string b = record("align-noseed.trace", "--prompt 'The capital of France'");
  std::string out;
  int rc = diff(a, b, "", &out);
  EXPECT_TRUE(rc == 0 || rc == 1) << out;
  EXPECT_NE(out.find("1 request in common (aligned by prompt hash and sampling params); 9 only in A"),
            std::string::npos)
      << out;
}

TEST(DiffAlign, SampledRunsKeyOnTheSeedAndSayWhy) {
  std::string a = record("align-t-5.trace", "--prompt 'Once upon' --temperature 0.8 --seed 5");
  std::string b = record("align-t-6.trace", "--prompt 'Once upon' --temperature 0.8 --seed 6");
  std::string out;
  EXPECT_EQ(diff(a, b, "", &out), 2) << out;
  EXPECT_NE(out.find("nothing to compare"), std::string::npos) << out;
  EXPECT_NE(out.find("same prompt but different sampling params (seed 5 vs 6)"),
            std::string::npos)
      << out;
  // By prompt alone they pair, and differ (different seeds sample differently, or not: either
  // way the pair is compared, so the exit is 0 or 1, never 2).
  int rc = diff(a, b, "--align prompt", &out);
  EXPECT_TRUE(rc == 0 || rc == 1) << out;
  EXPECT_NE(out.find("1 request in common (aligned by prompt hash)"), std::string::npos) << out;
}

TEST(DiffAlign, DifferentPromptsAreNothingInCommon) {
  std::string a = record("align-p1.trace", "--prompt 'alpha beta'");
  std::string b = record("align-p2.trace", "--prompt 'gamma delta'");
  std::string out;
  EXPECT_EQ(diff(a, b, "", &out), 2) << out;
  EXPECT_NE(out.find("is not the prompt of any request of B"), std::string::npos) << out;
  // By id, request 0 meets request 0: they differ from the first token.
  EXPECT_EQ(diff(a, b, "--align ids", &out), 1) << out;
  EXPECT_NE(out.find("aligned by request id"), std::string::npos) << out;
  EXPECT_EQ(diff(a, b, "--align nonsense", &out), 2) << out;
}

}  // namespace
}  // namespace llmrr
