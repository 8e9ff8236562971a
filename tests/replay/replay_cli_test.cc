// `llmrr replay` from the command line: exit codes, the one-line verdict, --json, the ISA
// and thread overrides, --materialize, the refusal of a wrong model.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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
  int rc = run_command(
      "LLMRR_ISA=avx2 " + rtest::llmrr_binary() + " replay --threads 1 " + cli_trace(), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("bit-exact"), std::string::npos) << out;
  rc = run_command(
      "LLMRR_ISA=scalar " + rtest::llmrr_binary() + " replay --request 2 " + cli_trace(), &out);
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
  int rc = run_command(rtest::llmrr_binary() + " replay --model builtin:tiny-dense " + cli_trace(),
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

// Traces written by `llmrr record` (the run header it writes) replay with every engine
// option that changes numerics: dtype, scoring, capacity, attention split, KV block, prefill
// chunk, atomics, sampling.
TEST(ReplayCli, TracesOfLlmrrRecordReplay) {
  const std::string bin = rtest::llmrr_binary();
  struct Case {
    const char* name;
    const char* options;
  };
  const Case cases[] = {
      {"rec-invariant",
       "--policy invariant --dtype bf16 --scoring sigmoid --capacity-factor 1.0 "
       "--overflow reroute --attn-split 32 --kv-block 8 --prefill-chunk 7 "
       "--load 3"},
      {"rec-atomics", "--atomics --temperature 0.8 --top-p 0.9 --seed 3 --load 2 --capture all"},
      {"rec-dense", "--model builtin:tiny-dense --capture none --max-batch-tokens 24 --load 4"},
      {"rec-gemm-split",
       "--model builtin:tiny-dense --policy invariant --gemm-split 32 --dtype bf16 --load 3"},
  };
  for (const Case& c : cases) {
    std::string path = temp_path(std::string(c.name) + ".trace");
    std::string model = std::string(c.options).find("--model") == std::string::npos
                            ? "--model builtin:tiny-moe "
                            : "";
    std::string out;
    int rc = run_command(bin + " record " + model + c.options +
                             " --prompt 'Recorded by the CLI' --max-tokens 6 -q -o " + path,
                         &out, true);
    ASSERT_EQ(rc, 0) << c.name << ": " << out;
    rc = run_command(bin + " replay " + path, &out);
    EXPECT_EQ(rc, 0) << c.name << ": " << out;
    EXPECT_NE(out.find("bit-exact"), std::string::npos) << c.name << ": " << out;
    rc = run_command("LLMRR_ISA=avx2 " + bin + " replay --threads 1 --request 0 " + path, &out);
    EXPECT_EQ(rc, 0) << c.name << ": " << out;
    EXPECT_NE(out.find("of request 0 alone: bit-exact"), std::string::npos)
        << c.name << ": " << out;
  }
  std::string out;
  int rc = run_command(bin + " replay --check-routing " + temp_path("rec-invariant.trace"), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("routing recomputed"), std::string::npos) << out;
  // The split-K plan is what was recorded and replayed: K = 256 in 8 splits of 32 columns.
  rc = run_command(bin + " dump --steps 0 " + temp_path("rec-gemm-split.trace"), &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("L0.attn.q            split-K 8, k-tile 64"), std::string::npos)
      << out.substr(0, 2000);
}

// --gemm-split takes a multiple of 16 and belongs to the invariant policy: anything else is a
// usage error (one line, exit 2), before any model is loaded.
TEST(ReplayCli, GemmSplitUsageErrors) {
  const std::string bin = rtest::llmrr_binary();
  for (const char* opts :
       {"--policy invariant --gemm-split 100", "--policy invariant --gemm-split -16",
        "--gemm-split 64", "--policy invariant --gemm-split 2097152"}) {
    std::string out;
    int rc = run_command(bin + " record --model builtin:tiny-dense " + opts +
                             " --prompt hi --max-tokens 2 -q -o " + temp_path("gs-bad.trace"),
                         &out, true);
    EXPECT_EQ(rc, 2) << opts << ": " << out;
    EXPECT_NE(out.find("--gemm-split"), std::string::npos) << opts << ": " << out;
  }
}

// A demo script's output cut at its "== 2.", "== 3." and "== 4." banners (empty when one is
// missing), and how often "bit-exact" appears in a text.
std::vector<std::string> demo_parts(const std::string& out) {
  const size_t p2 = out.find("== 2."), p3 = out.find("== 3."), p4 = out.find("== 4.");
  if (p2 == std::string::npos || p3 == std::string::npos || p4 == std::string::npos) return {};
  return {out.substr(0, p2), out.substr(p2, p3 - p2), out.substr(p3, p4 - p3), out.substr(p4)};
}
size_t bit_exact_count(const std::string& text) {
  size_t n = 0;
  for (size_t at = text.find("bit-exact"); at != std::string::npos;
       at = text.find("bit-exact", at + 1)) {
    ++n;
  }
  return n;
}

// The README's main command still tells its story: a split under production named with a
// plan, no split under the invariant policy, a split attributed to routing with expert
// capacity, bit-exact replays.
TEST(DemoCli, TellsTheStory) {
  std::string out;
  int rc = run_command("LLMRR_DEMO_SKIP_SETUP=1 LLMRR_BIN=" + rtest::llmrr_binary() + " " +
                           LLMRR_SOURCE_DIR + "/tools/demo",
                       &out, true);
  ASSERT_EQ(rc, 0) << out;
  const std::vector<std::string> parts = demo_parts(out);
  ASSERT_EQ(parts.size(), 4u) << out;
  const std::string &one = parts[0], &two = parts[1], &three = parts[2], &four = parts[3];
  EXPECT_NE(one.find("split at token"), std::string::npos) << one;
  EXPECT_NE(one.find("A ran split-K"), std::string::npos) << one;
  EXPECT_NE(two.find("no split: every common request is bit-identical"), std::string::npos) << two;
  EXPECT_NE(three.find("split at token"), std::string::npos) << three;
  EXPECT_NE(three.find("routing: at layer"), std::string::npos) << three;
  EXPECT_NE(three.find("expert capacity decided"), std::string::npos) << three;
  EXPECT_EQ(four.find("mismatch"), std::string::npos) << four;
  EXPECT_EQ(bit_exact_count(four), 3u) << four;
}

// The same story on the seed's architecture (LLMRR_DEMO_MODEL=builtin:tiny-deepseek: MLA,
// 16 experts in groups, a shared expert): with capacity, diff says the router chose the
// same experts in both runs and capacity decided.
TEST(DemoCli, TinyDeepseekTellsTheStory) {
  std::string out;
  int rc = run_command("LLMRR_DEMO_SKIP_SETUP=1 LLMRR_DEMO_MODEL=builtin:tiny-deepseek LLMRR_BIN=" +
                           rtest::llmrr_binary() + " " + LLMRR_SOURCE_DIR + "/tools/demo",
                       &out, true);
  ASSERT_EQ(rc, 0) << out;
  const std::vector<std::string> parts = demo_parts(out);
  ASSERT_EQ(parts.size(), 4u) << out;
  const std::string &one = parts[0], &two = parts[1], &three = parts[2], &four = parts[3];
  EXPECT_NE(one.find("builtin:tiny-deepseek"), std::string::npos) << one;
  EXPECT_NE(one.find("split at token"), std::string::npos) << one;
  EXPECT_NE(two.find("no split: every common request is bit-identical"), std::string::npos) << two;
  EXPECT_NE(three.find("routing: at layer"), std::string::npos) << three;
  EXPECT_NE(three.find("in both runs: expert capacity decided"), std::string::npos) << three;
  EXPECT_EQ(four.find("mismatch"), std::string::npos) << four;
  EXPECT_EQ(bit_exact_count(four), 3u) << four;
}

// The real-model demo's story (README "One question, two answers"): SmolLM2 answers the
// France question "Paris" under the production policy and "L'Étoile" under the invariant
// one; bisect names one plan that alone picks the other first token; the invariant answer is
// bit-identical under load; the production policy splits visibly under load; replays are
// bit-exact. Skips without the model.
TEST(DemoCli, SmolLM2TellsTheFranceStory) {
  if (find_smollm2().empty()) {
    GTEST_SKIP() << "SmolLM2 not in " << model_cache_dir() << " (run tools/setup/smollm2)";
  }
  std::string out;
  int rc = run_command("LLMRR_DEMO_SKIP_SETUP=1 LLMRR_BIN=" + rtest::llmrr_binary() + " " +
                           LLMRR_SOURCE_DIR + "/tools/demo-smollm2",
                       &out, true);
  ASSERT_EQ(rc, 0) << out;
  const std::vector<std::string> parts = demo_parts(out);
  ASSERT_EQ(parts.size(), 4u) << out;
  const std::string &one = parts[0], &two = parts[1], &three = parts[2], &four = parts[3];
  EXPECT_NE(one.find("The capital of France is Paris."), std::string::npos) << one;
  EXPECT_NE(one.find("L'Étoile"), std::string::npos) << one;
  EXPECT_NE(one.find("split at token 0"), std::string::npos) << one;
  EXPECT_NE(one.find("Token 0: A 'The'"), std::string::npos) << one;
  EXPECT_NE(two.find("alone reproduces it"), std::string::npos) << two;
  EXPECT_NE(two.find("not searched (--search visible)"), std::string::npos) << two;
  EXPECT_NE(three.find("identical (24 sampled positions, logits bit-identical"),
            std::string::npos)
      << three;
  EXPECT_NE(three.find("split at token"), std::string::npos) << three;
  EXPECT_EQ(four.find("mismatch"), std::string::npos) << four;
  EXPECT_EQ(bit_exact_count(four), 3u) << four;
}

}  // namespace
}  // namespace llmrr
