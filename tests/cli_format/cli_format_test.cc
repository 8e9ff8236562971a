// `llmrr inspect`, `dump` and `verify` on the golden traces: exit codes, what they print,
// --help with examples, usage errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "run_cli.h"

namespace llmrr {
namespace {

using testing::run_llmrr;

std::string golden(const std::string& f) {
  std::string p = LLMRR_GOLDEN_DIR;
  p += '/';
  p += f;
  return p;
}

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

TEST(CliVerify, ValidTracesExitZero) {
  for (const char* f : {"minimal.trace", "moe_run.trace", "xor_reference.trace", "lossy.trace",
                        "uncompressed.trace"}) {
    auto r = run_llmrr({"verify", golden(f)});
    EXPECT_EQ(r.exit_code, 0) << f << ": " << r.err;
    EXPECT_TRUE(contains(r.out, ": ok: format 1.0")) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
  auto m = run_llmrr({"verify", golden("moe_run.trace")});
  EXPECT_TRUE(contains(m.out, "11 steps, 24 tokens, 4 requests, 7 blobs")) << m.out;
  auto q = run_llmrr({"verify", "-q", golden("minimal.trace")});
  EXPECT_EQ(q.exit_code, 0);
  EXPECT_TRUE(q.out.empty());
}

TEST(CliVerify, IncompleteTraceNeedsTheFlag) {
  auto r = run_llmrr({"verify", golden("crashed.trace")});
  EXPECT_EQ(r.exit_code, 2);
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, "truncated (102)")) << r.err;
  EXPECT_TRUE(contains(r.err, "torn: declares")) << r.err;
  auto ok = run_llmrr({"verify", "--allow-incomplete", golden("crashed.trace")});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(contains(ok.out, "incomplete")) << ok.out;
  EXPECT_TRUE(contains(ok.err, "warning")) << ok.err;
}

TEST(CliInspect, ShowsHeaderRequestsAndSizes) {
  auto r = run_llmrr({"inspect", golden("moe_run.trace")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s :
       {"format 1.0, complete", "run id golden-moe", "builtin:tiny-moe", "qwen2_moe",
        "8 experts top-2", "xxh3-64:0123456789abcdef", "policy production",
        "virtual device 132 SMs x 2 blocks", "capacity factor 1.25 (next_best)",
        "requests   4 (4 finished)", "target", "steps      11 (0..11), tokens 24", "compression",
        "bytes per token by record kind", "fingerprints", "plans", "routing", "tensor blob"})
    EXPECT_TRUE(contains(r.out, s)) << "missing '" << s << "' in:\n" << r.out;
  auto lossy = run_llmrr({"inspect", golden("lossy.trace")});
  EXPECT_TRUE(contains(lossy.out, "LOSSY: recorder stopped after an I/O error")) << lossy.out;
  auto crashed = run_llmrr({"inspect", golden("crashed.trace")});
  EXPECT_EQ(crashed.exit_code, 0);
  EXPECT_TRUE(contains(crashed.out, "incomplete (no footer)")) << crashed.out;
  EXPECT_TRUE(contains(crashed.err, "warning")) << crashed.err;
}

TEST(CliInspect, JsonIsOneObject) {
  auto r = run_llmrr({"inspect", "--json", golden("moe_run.trace")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["steps"], 11);
  EXPECT_EQ(j["tokens"], 24);
  EXPECT_EQ(j["complete"], true);
  EXPECT_EQ(j["requests"].size(), 4u);
  EXPECT_EQ(j["run_header"]["engine"]["virtual_sms"], 132);
  EXPECT_GT(j["record_kinds"]["fingerprints"]["raw_bytes_per_token"].get<double>(), 0.0);
}

TEST(CliDump, TextAndStepRange) {
  auto r = run_llmrr({"dump", golden("minimal.trace")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"step 0: 3 rows | req 1 prefill 0..2 cached 0 sample", "plan     L0.attn.q",
                        "split-K 2, k-tile 32", "rows     L0.out", "routing  L0", "e1 dropped",
                        "logits   req 1 pos 2 row 2", "top 2:3.5 0:1", "token    req 1 pos 3: 2",
                        "finish   req 1: max_tokens"})
    EXPECT_TRUE(contains(r.out, s)) << "missing '" << s << "' in:\n" << r.out;
  auto range = run_llmrr({"dump", "--steps", "2:3", golden("moe_run.trace")});
  ASSERT_EQ(range.exit_code, 0);
  EXPECT_TRUE(contains(range.out, "\nstep 2:"));
  EXPECT_TRUE(contains(range.out, "\nstep 3:"));
  EXPECT_FALSE(contains(range.out, "\nstep 1:"));
  EXPECT_FALSE(contains(range.out, "\nstep 4:"));
}

TEST(CliDump, JsonLines) {
  auto r = run_llmrr({"dump", "--json", golden("moe_run.trace")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  int steps = 0, blobs = 0, tokens = 0;
  std::string first_type, last_type;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);  // every line is one JSON object
    if (first_type.empty()) first_type = j["type"];
    last_type = j["type"];
    if (j["type"] == "step") {
      ++steps;
      tokens += static_cast<int>(j["tokens"].size());
      for (const auto& p : j["plans"]) EXPECT_TRUE(p.contains("site") && p.contains("splits"));
    }
    if (j["type"] == "blob") ++blobs;
  }
  EXPECT_EQ(first_type, "header");
  EXPECT_EQ(last_type, "summary");
  EXPECT_EQ(steps, 11);
  EXPECT_EQ(tokens, 24);
  EXPECT_EQ(blobs, 7);
}

TEST(CliUsage, HelpAndErrors) {
  for (const char* cmd : {"inspect", "dump", "verify"}) {
    auto h = run_llmrr({cmd, "--help"});
    EXPECT_EQ(h.exit_code, 0) << cmd;
    EXPECT_TRUE(contains(h.out, "Examples:")) << h.out;
    std::string usage = "llmrr ";
    usage += cmd;
    EXPECT_TRUE(contains(h.out, usage)) << h.out;
    auto none = run_llmrr({cmd});
    EXPECT_EQ(none.exit_code, 2) << cmd;
    EXPECT_EQ(none.err_lines().size(), 1u) << none.err;
    auto bad = run_llmrr({cmd, "--no-such-flag", golden("minimal.trace")});
    EXPECT_EQ(bad.exit_code, 2) << cmd;
  }
  auto range = run_llmrr({"dump", "--steps", "5:2", golden("minimal.trace")});
  EXPECT_EQ(range.exit_code, 2);
  EXPECT_TRUE(contains(range.err, "--steps")) << range.err;
  auto missing = run_llmrr({"inspect", "/nonexistent/x.trace"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(contains(missing.err, "not_found")) << missing.err;
}

}  // namespace
}  // namespace llmrr
