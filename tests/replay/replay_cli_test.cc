// `llmrr replay` from the command line: exit codes, the one-line verdict, --json, the ISA
// and thread overrides, --materialize, the refusal of a wrong model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "llmrr/format/trace_reader.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::builtin;
using rtest::run_command;
using rtest::temp_path;

const std::string& cli_trace() {
  static const std::string path = [] {
    const LoadedModel& m = builtin("tiny-moe");
    rtest::RunSpec spec;
    spec.requests = rtest::target_and_load(m, "From the command line", 6, 3);
    rtest::Recorded rec = rtest::record(m, spec, temp_path("cli.trace"));
    EXPECT_TRUE(rec.ok);
    return rec.path;
  }();
  return path;
}

int64_t cli_tokens() {
  auto r = trace::TraceReader::open(cli_trace());
  EXPECT_TRUE(r.ok());
  return r.ok() ? (*r)->token_count() : -1;
}

TEST(ReplayCli, BitExactExitsZero) {
  std::string out;
  int rc = run_command(rtest::llmrr_binary() + " replay " + cli_trace(), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("steps, " + std::to_string(cli_tokens()) + " tokens: bit-exact"),
            std::string::npos)
      << out;
}

TEST(ReplayCli, Avx2PathAndOneThread) {
  std::string out;
  int rc = run_command("LLMRR_ISA=avx2 " + rtest::llmrr_binary() + " replay --threads 1 " +
                           cli_trace(),
                       &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("bit-exact"), std::string::npos) << out;
  rc = run_command("LLMRR_ISA=scalar " + rtest::llmrr_binary() + " replay --request 2 " +
                       cli_trace(),
                   &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("of request 2 alone: bit-exact"), std::string::npos) << out;
}

TEST(ReplayCli, Json) {
  std::string out;
  int rc = run_command(rtest::llmrr_binary() + " replay --json " + cli_trace(), &out);
  EXPECT_EQ(rc, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["bit_exact"], true);
  EXPECT_EQ(j["tokens"], cli_tokens());
  EXPECT_TRUE(j["mismatch"].is_null());
}

TEST(ReplayCli, WrongModelExitsTwo) {
  std::string out;
  int rc = run_command(rtest::llmrr_binary() + " replay --model builtin:tiny-dense " +
                           cli_trace(),
                       &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("weight_mismatch"), std::string::npos) << out;
  EXPECT_NE(out.find("refusing to replay"), std::string::npos) << out;
}

TEST(ReplayCli, MismatchExitsOne) {
  std::string bad = temp_path("cli-tampered.trace");
  ASSERT_TRUE(rtest::rewrite_trace(cli_trace(), bad, nullptr, [](trace::StepRecord& s) {
                if (s.step == 2 && !s.logits.empty()) s.logits[0].full.hash ^= 0x10;
              }).ok());
  std::string out;
  int rc = run_command(rtest::llmrr_binary() + " replay " + bad, &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("mismatch at step 2"), std::string::npos) << out;
  EXPECT_NE(out.find("site logits: full-vocab fingerprint"), std::string::npos) << out;
  EXPECT_NE(out.find("expected (trace)"), std::string::npos) << out;
}

TEST(ReplayCli, MaterializeWritesNpy) {
  std::string dir = temp_path("cli-mat");
  std::string out;
  int rc = run_command(rtest::llmrr_binary() + " replay " + cli_trace() +
                           " --materialize L3.out@2 --materialize logits@2 -o " + dir,
                       &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("wrote " + dir + "/L3.out@2.npy"), std::string::npos) << out;
  EXPECT_NE(out.find("wrote " + dir + "/logits@2.npy"), std::string::npos) << out;
  EXPECT_FALSE(rtest::read_file(dir + "/logits@2.rows.npy").empty());
  rc = run_command(rtest::llmrr_binary() + " replay " + cli_trace() + " --materialize L3.out@2",
                   &out, true);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("-o DIR"), std::string::npos) << out;
  rc = run_command(rtest::llmrr_binary() + " replay " + temp_path("absent.trace"), &out, true);
  EXPECT_EQ(rc, 2) << out;
}

}  // namespace
}  // namespace llmrr
