// `llmrr bisect` from the command line: --help with examples, the README's pair (tiny-moe
// bf16, alone vs --load 16) as text and as --json with exit 1, the same minimal sets with
// --jobs 2, an invariant pair exits 0, different models and unknown requests exit 2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::run_command;
using rtest::temp_path;

struct Pair {
  std::string alone, loaded, inv_alone, inv_loaded, dense;
};

const Pair& traces() {
  static const Pair p = [] {
    Pair t;
    const std::string bin = rtest::llmrr_binary();
    const std::string common =
        " record --model builtin:tiny-moe --dtype bf16 --max-tokens 48 --threads 2 "
        "--prompt 'Once upon a time' -q ";
    t.alone = temp_path("cli-alone.trace");
    t.loaded = temp_path("cli-loaded.trace");
    t.inv_alone = temp_path("cli-inv-alone.trace");
    t.inv_loaded = temp_path("cli-inv-loaded.trace");
    t.dense = temp_path("cli-dense.trace");
    std::string out;
    EXPECT_EQ(run_command(bin + common + "-o " + t.alone, &out, true), 0) << out;
    EXPECT_EQ(run_command(bin + common + "--load 16 -o " + t.loaded, &out, true), 0) << out;
    EXPECT_EQ(run_command(bin + common + "--policy invariant -o " + t.inv_alone, &out, true), 0)
        << out;
    EXPECT_EQ(
        run_command(bin + common + "--policy invariant --load 16 -o " + t.inv_loaded, &out, true),
        0)
        << out;
    EXPECT_EQ(run_command(bin +
                              " record --model builtin:tiny-dense --max-tokens 8 --prompt "
                              "'Once upon a time' -q -o " +
                              t.dense,
                          &out, true),
              0)
        << out;
    return t;
  }();
  return p;
}

TEST(BisectCli, Help) {
  std::string out;
  int rc = run_command(rtest::llmrr_binary() + " bisect --help", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("Examples:"), std::string::npos) << out;
  EXPECT_NE(out.find("llmrr bisect alone.trace loaded.trace"), std::string::npos) << out;
  EXPECT_NE(out.find("--jobs"), std::string::npos) << out;
  EXPECT_NE(out.find("--json"), std::string::npos) << out;
  rc = run_command(rtest::llmrr_binary() + " bisect", &out, true);
  EXPECT_EQ(rc, 2) << out;
}

TEST(BisectCli, JsonAndTextOfTheReadmePair) {
  const std::string bin = rtest::llmrr_binary();
  std::string out;
  int rc = run_command(bin + " bisect --json " + traces().alone + " " + traces().loaded, &out);
  ASSERT_EQ(rc, 1) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["verdict"], "visible split");
  EXPECT_EQ(j["routing_mode"], "recomputed");
  ASSERT_TRUE(j["numerical"]["ran"].get<bool>()) << j.dump(2);
  ASSERT_TRUE(j["visible"]["ran"].get<bool>()) << j.dump(2);
  EXPECT_GE(j["numerical"]["minimal"].size(), 1u);
  EXPECT_GE(j["visible"]["minimal"].size(), 1u);
  EXPECT_GT(j["factors"].size(), j["numerical"]["minimal"].size());
  for (const auto& f : j["numerical"]["minimal"]) {
    EXPECT_LE(f["positions"][0].get<int>(), j["split_position"].get<int>());
    EXPECT_FALSE(f["text"].get<std::string>().empty());
  }
  EXPECT_GE(j["replays"].get<int>(), 4);
  EXPECT_EQ(j["numerical"]["replays"].get<int>() + j["visible"]["replays"].get<int>(),
            j["replays"].get<int>());

  // The same answer with two replays at a time.
  std::string out2;
  rc =
      run_command(bin + " bisect --json --jobs 2 " + traces().alone + " " + traces().loaded, &out2);
  ASSERT_EQ(rc, 1) << out2;
  nlohmann::json j2 = nlohmann::json::parse(out2, nullptr, false);
  ASSERT_FALSE(j2.is_discarded()) << out2;
  EXPECT_EQ(j2["numerical"]["minimal"], j["numerical"]["minimal"]);
  EXPECT_EQ(j2["visible"]["minimal"], j["visible"]["minimal"]);

  rc = run_command(bin + " bisect " + traces().alone + " " + traces().loaded, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("visible split at position"), std::string::npos) << out;
  EXPECT_NE(out.find("reproduce"), std::string::npos) << out;
  EXPECT_NE(out.find(" replays ("), std::string::npos) << out;
}

// --search visible: the numerical split is left unsearched, the visible one is explained
// (exit 1) with the visible minimal set of the full search; bad values exit 2.
TEST(BisectCli, SearchVisibleOnlyAndReplayBudget) {
  const std::string bin = rtest::llmrr_binary();
  const std::string pair = " " + traces().alone + " " + traces().loaded;
  std::string out, full_out;
  ASSERT_EQ(run_command(bin + " bisect --json" + pair, &full_out), 1) << full_out;
  nlohmann::json full = nlohmann::json::parse(full_out, nullptr, false);
  ASSERT_FALSE(full.is_discarded()) << full_out;
  int rc = run_command(bin + " bisect --json --search visible" + pair, &out);
  ASSERT_EQ(rc, 1) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_FALSE(j["numerical"]["ran"].get<bool>());
  EXPECT_TRUE(j["numerical"]["skipped"].get<bool>());
  EXPECT_EQ(j["numerical"]["replays"].get<int>(), 0);
  ASSERT_TRUE(j["visible"]["ran"].get<bool>()) << j.dump(2);
  EXPECT_FALSE(j["visible"]["seeded"].get<bool>());
  EXPECT_FALSE(j["visible"]["exhausted"].get<bool>());
  EXPECT_GE(j["visible"]["minimal"].size(), 1u);
  rc = run_command(bin + " bisect --search visible" + pair, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("not searched (--search visible)"), std::string::npos) << out;

  // A budget of one replay per search: each search still names a reproducing set.
  rc = run_command(bin + " bisect --json --max-replays 1" + pair, &out);
  ASSERT_EQ(rc, 1) << out;
  j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_LE(j["numerical"]["replays"].get<int>(), 2 + 1);
  EXPECT_GE(j["numerical"]["minimal"].size(), full["numerical"]["minimal"].size());

  for (const char* bad : {" --search both-ways", " --search ''", " --max-replays -1"}) {
    rc = run_command(bin + " bisect" + bad + pair, &out, true);
    EXPECT_EQ(rc, 2) << bad << ": " << out;
  }
}

TEST(BisectCli, InvariantPairExitsZero) {
  std::string out;
  int rc = run_command(
      rtest::llmrr_binary() + " bisect " + traces().inv_alone + " " + traces().inv_loaded, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("no split"), std::string::npos) << out;
}

TEST(BisectCli, BadInputExitsTwo) {
  const std::string bin = rtest::llmrr_binary();
  std::string out;
  int rc = run_command(bin + " bisect " + traces().alone + " " + traces().dense, &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("different models"), std::string::npos) << out;
  EXPECT_NE(out.find("builtin:tiny-dense"), std::string::npos) << out;
  rc = run_command(bin + " bisect --request 5 " + traces().alone + " " + traces().loaded, &out,
                   true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("no request 5"), std::string::npos) << out;
  rc = run_command(bin + " bisect --request x " + traces().alone + " " + traces().loaded, &out,
                   true);
  EXPECT_EQ(rc, 2) << out;
  rc = run_command(bin + " bisect " + traces().alone + " /nonexistent.trace", &out, true);
  EXPECT_EQ(rc, 2) << out;
}

}  // namespace
}  // namespace llmrr
