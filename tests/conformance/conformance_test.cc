// Conformance: the engine's logits against Hugging Face transformers' on the committed
// fixtures (tests/fixtures/README.md). fp32: max-abs error ≤ 1e-4 × the logit range, under
// both policies and through both the score entry and the generation path; Qwen3,
// Qwen3-MoE and DeepSeek-V3 (safetensors and GGUF) also 16 greedy steps within 1e-5, both
// policies, chunked and unchunked prefill; bf16: within the
// bounds documented below; SmolLM2 (when fetched): logits and the greedy answer.
//
// Measured on this machine (max-abs error / logit range):
//   see the "[ measured ]" lines this test prints; bench/README.md (engine section) keeps
//   the table.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "fixtures/fixtures.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/memory_trace.h"
#include "llmrr/runtime/model.h"

namespace llmrr {
namespace {

using nlohmann::json;

// bf16 bounds (absolute, on logits): transformers' own bf16 run differs from the same bf16
// weights computed in fp32 by 0.044 on tiny-llama-bf16 (range ~15); our bf16-activation
// engine rounds at other points than torch's kernels, so the bound is that order: 0.15 (1 %
// of the range). Measured: see the test output.
constexpr double kBf16Bound = 0.15;

struct Cmp {
  double max_abs = 0;
  double range = 0;
  int64_t rows = 0;
};

std::string load_spec(const json& entry) {
  if (entry.contains("model")) return entry["model"].get<std::string>();
  return fixtures::path(entry["path"].get<std::string>());
}

// Our logits for `ids` (all positions) compared with the reference rows.
Cmp compare(const std::vector<float>& ours, int64_t vocab, const json& prompt) {
  Cmp c;
  std::string err;
  auto ref = fixtures::read_npy(fixtures::path("reference/" + prompt["logits"].get<std::string>()),
                                &err);
  EXPECT_TRUE(ref.has_value()) << err;
  if (!ref) return c;
  const int64_t first = prompt["first_position"].get<int64_t>();
  EXPECT_EQ(ref->shape.size(), 2u);
  EXPECT_EQ(ref->shape[1], vocab);
  c.rows = ref->shape[0];
  c.range = prompt["logit_range"].get<double>();
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t v = 0; v < vocab; ++v) {
      double d = std::fabs(double(ours[(first + r) * vocab + v]) - ref->f32[r * vocab + v]);
      if (!(d <= c.max_abs)) c.max_abs = d;  // NaN propagates
    }
  }
  return c;
}

std::unique_ptr<Engine> engine_for(const LoadedModel& m, std::shared_ptr<Policy> policy,
                                   const EngineConfig& cfg = {}) {
  auto e = Engine::create(m, cfg, std::move(policy));
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

// The logits of the last prompt position as generation produces them (chunked prefill, the
// last row sampling): the path `llmrr run` takes, next to the score entry.
std::vector<float> generation_last_row(const LoadedModel& m, const std::vector<int32_t>& ids,
                                       std::shared_ptr<Policy> policy) {
  EngineConfig cfg;
  cfg.scheduler.prefill_chunk = 5;
  auto e = engine_for(m, std::move(policy), cfg);
  MemoryTrace trace;
  e->add_observer(&trace);
  RequestSpec r;
  r.id = 0;
  r.prompt = ids;
  r.max_tokens = 1;
  EXPECT_TRUE(e->add_request(r).ok());
  EXPECT_TRUE(e->run().ok());
  const std::vector<float>* l = trace.logits_at(0, static_cast<int32_t>(ids.size()) - 1);
  return l ? *l : std::vector<float>();
}

std::string test_name(std::string s) {
  for (char& ch : s) {
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

class Fp32Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp32Conformance, LogitsWithin1e4OfTheRange) {
  const json& entry = fixtures::manifest()["models"][GetParam()];
  ASSERT_FALSE(entry.is_null()) << "no fixture " << GetParam() << " in " << fixtures::dir();
  auto m = load_model(load_spec(entry));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int64_t V = m->config.vocab;
  for (const auto& [pname, prompt] : entry["prompts"].items()) {
    std::vector<int32_t> ids = prompt["ids"].get<std::vector<int32_t>>();
    for (bool inv : {true, false}) {
      std::shared_ptr<Policy> policy =
          inv ? std::shared_ptr<Policy>(make_invariant_policy(
                    default_invariant_split_size(m->config.hidden)))
              : std::shared_ptr<Policy>(make_production_policy());
      auto e = engine_for(*m, policy);
      auto ours = e->score_prompt(ids);
      ASSERT_TRUE(ours.ok()) << ours.status().to_string();
      Cmp c = compare(*ours, V, prompt);
      std::printf("[ measured ] %s %s (%s): max-abs %.3g, logit range %.3g, ratio %.3g\n",
                  GetParam().c_str(), pname.c_str(), inv ? "invariant" : "production",
                  c.max_abs, c.range, c.max_abs / c.range);
      EXPECT_LE(c.max_abs, 1e-4 * c.range) << GetParam() << " " << pname;
      // Generation path: the last prompt row, as sampled during a chunked prefill.
      std::vector<float> last = generation_last_row(*m, ids, policy);
      ASSERT_EQ(static_cast<int64_t>(last.size()), V);
      const int64_t T = static_cast<int64_t>(ids.size());
      if (prompt["first_position"].get<int64_t>() + prompt["shape"][0].get<int64_t>() == T) {
        double worst = 0;
        auto ref = fixtures::read_npy(
            fixtures::path("reference/" + prompt["logits"].get<std::string>()));
        ASSERT_TRUE(ref.has_value());
        const int64_t r = ref->shape[0] - 1;
        for (int64_t v = 0; v < V; ++v) {
          worst = std::max(worst, std::fabs(double(last[v]) - ref->f32[r * V + v]));
        }
        EXPECT_LE(worst, 1e-4 * c.range) << "generation path, " << pname;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp32Conformance,
                         ::testing::Values("tiny-llama", "tiny-mixtral", "tiny-qwen2moe",
                                           "tiny-qwen3", "tiny-qwen3moe", "tiny-llama-f32.gguf",
                                           "tiny-llama-q8_0.gguf", "tiny-qwen3-f32.gguf",
                                           "tiny-qwen3moe-f32.gguf", "tiny-deepseek",
                                           "tiny-deepseek-f32.gguf", "tiny-deepseek-qproj",
                                           "builtin-tiny-dense",
                                           "builtin-tiny-moe"),
                         [](const auto& info) { return test_name(info.param); });

// Greedy generation against transformers' (the fixture's `greedy` entry: prompt p7 and 16
// greedy tokens): the same tokens, and at every step the sampled row's fp32 logits within
// kGreedyBound of transformers' logits at that position; the prompt rows through the score
// entry too. Under the invariant and the production policy, with the prefill cut into chunks
// of 3 and with no limit (--prefill-chunk 0).
constexpr double kGreedyBound = 1e-5;

class GreedyConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(GreedyConformance, SixteenStepsWithin1e5) {
  const json& entry = fixtures::manifest()["models"][GetParam()];
  ASSERT_FALSE(entry.is_null()) << "no fixture " << GetParam() << " in " << fixtures::dir();
  ASSERT_TRUE(entry.contains("greedy")) << GetParam();
  const json& g = entry["greedy"];
  auto m = load_model(load_spec(entry));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int64_t V = m->config.vocab;
  std::string err;
  auto ref = fixtures::read_npy(fixtures::path("reference/" + g["logits"].get<std::string>()),
                                &err);
  ASSERT_TRUE(ref.has_value()) << err;
  const std::vector<int32_t> seq = g["ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = g["generated"].get<std::vector<int32_t>>();
  const std::vector<int32_t> prompt(seq.begin(), seq.end() - static_cast<int64_t>(want.size()));
  ASSERT_EQ(ref->shape[0], static_cast<int64_t>(seq.size()));
  auto row_diff = [&](const std::vector<float>& ours, int64_t ours_row, int64_t ref_row) {
    double worst = 0;
    for (int64_t v = 0; v < V; ++v) {
      double d = std::fabs(double(ours[ours_row * V + v]) - ref->f32[ref_row * V + v]);
      if (!(d <= worst)) worst = d;
    }
    return worst;
  };
  for (bool inv : {true, false}) {
    for (int32_t chunk : {3, 0}) {
      std::shared_ptr<Policy> policy =
          inv ? std::shared_ptr<Policy>(make_invariant_policy(
                    default_invariant_split_size(m->config.hidden)))
              : std::shared_ptr<Policy>(make_production_policy());
      const std::string tag = GetParam() + (inv ? " invariant" : " production") +
                              " prefill-chunk " + std::to_string(chunk);
      EngineConfig cfg;
      cfg.scheduler.prefill_chunk = chunk;
      auto e = engine_for(*m, policy, cfg);
      auto scored = e->score_prompt(prompt);
      ASSERT_TRUE(scored.ok()) << scored.status().to_string();
      double prompt_worst = 0;
      for (int64_t r = 0; r < static_cast<int64_t>(prompt.size()); ++r)
        prompt_worst = std::max(prompt_worst, row_diff(*scored, r, r));
      MemoryTrace trace;
      e->add_observer(&trace);
      RequestSpec r;
      r.id = 0;
      r.prompt = prompt;
      r.max_tokens = static_cast<int32_t>(want.size());
      r.stop_at_eos = false;
      ASSERT_TRUE(e->add_request(r).ok());
      ASSERT_TRUE(e->run().ok());
      EXPECT_EQ(e->request(0)->generated, want) << tag;
      double step_worst = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const int32_t pos = static_cast<int32_t>(prompt.size() + i) - 1;
        const std::vector<float>* l = trace.logits_at(0, pos);
        ASSERT_NE(l, nullptr) << tag << " position " << pos;
        ASSERT_EQ(static_cast<int64_t>(l->size()), V);
        step_worst = std::max(step_worst, row_diff(*l, 0, pos));
      }
      std::printf("[ measured ] %s: prompt max-abs %.3g, 16 greedy steps max-abs %.3g\n",
                  tag.c_str(), prompt_worst, step_worst);
      EXPECT_LE(prompt_worst, kGreedyBound) << tag;
      EXPECT_LE(step_worst, kGreedyBound) << tag;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GreedyConformance,
                         ::testing::Values("tiny-qwen3", "tiny-qwen3moe", "tiny-qwen3-f32.gguf",
                                           "tiny-qwen3moe-f32.gguf", "tiny-deepseek",
                                           "tiny-deepseek-f32.gguf", "tiny-deepseek-qproj"),
                         [](const auto& info) { return test_name(info.param); });

// The builtin models' greedy continuation of "hello" equals transformers' on the same
// weights (independent re-implementation of the generator).
TEST(Conformance, BuiltinGreedyMatchesTransformers) {
  for (const char* name : {"builtin-tiny-dense", "builtin-tiny-moe"}) {
    const json& entry = fixtures::manifest()["models"][name];
    ASSERT_FALSE(entry.is_null());
    auto m = load_model(load_spec(entry));
    ASSERT_TRUE(m.ok());
    auto want = entry["greedy_hello_24"].get<std::vector<int32_t>>();
    auto e = engine_for(*m, make_invariant_policy(64));
    RequestSpec r;
    r.id = 0;
    r.prompt = entry["prompts"]["hello"]["ids"].get<std::vector<int32_t>>();
    r.max_tokens = static_cast<int32_t>(want.size());
    r.stop_at_eos = false;
    ASSERT_TRUE(e->add_request(r).ok());
    ASSERT_TRUE(e->run().ok());
    EXPECT_EQ(e->request(0)->generated, want) << name;
  }
}

// A bf16 checkpoint: its weights computed in fp32 match transformers' fp32 compute of the
// same weights (1e-4 of the range); with bf16 activations, within kBf16Bound of
// transformers' bf16 run.
TEST(Conformance, Bf16Checkpoint) {
  const json& entry = fixtures::manifest()["models"]["tiny-llama-bf16"];
  ASSERT_FALSE(entry.is_null());
  auto m = load_model(load_spec(entry));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->config.weight_type, kernels::WeightType::kBF16);
  const int64_t V = m->config.vocab;
  for (const auto& [pname, prompt] : entry["prompts"].items()) {
    std::vector<int32_t> ids = prompt["ids"].get<std::vector<int32_t>>();
    EngineConfig fp32_compute;
    fp32_compute.bf16_activations = false;
    auto e32 = engine_for(*m, make_invariant_policy(64), fp32_compute);
    Cmp c32 = compare(*e32->score_prompt(ids), V, entry["prompts_fp32_compute"][pname]);
    EngineConfig bf16;
    bf16.bf16_activations = true;
    auto e16 = engine_for(*m, make_invariant_policy(64), bf16);
    Cmp c16 = compare(*e16->score_prompt(ids), V, prompt);
    std::printf("[ measured ] tiny-llama-bf16 %s: fp32 compute max-abs %.3g (range %.3g); "
                "bf16 compute max-abs %.3g (bound %.3g)\n",
                pname.c_str(), c32.max_abs, c32.range, c16.max_abs, kBf16Bound);
    EXPECT_LE(c32.max_abs, 1e-4 * c32.range) << pname;
    EXPECT_LE(c16.max_abs, kBf16Bound) << pname;
  }
}

// SmolLM2-135M-Instruct (Q4_1 GGUF): logits within 1e-4 of the range of transformers'
// (which dequantizes the same blocks), and the greedy chat answer "The capital of France is
// Paris." token for token.
TEST(Conformance, SmolLM2) {
  const std::string file = find_smollm2();
  if (file.empty()) {
    GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf is not in " << model_cache_dir()
                 << " (run tools/setup/smollm2)";
  }
  const json& entry = fixtures::manifest()["smollm2"];
  ASSERT_FALSE(entry.is_null());
  auto m = load_model(file);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int64_t V = m->config.vocab;
  EngineConfig cfg;
  cfg.threads = 2;
  auto e = engine_for(*m, make_production_policy(), cfg);
  for (const auto& [pname, prompt] : entry["prompts"].items()) {
    std::vector<int32_t> ids = prompt["ids"].get<std::vector<int32_t>>();
    auto ours = e->score_prompt(ids);
    ASSERT_TRUE(ours.ok()) << ours.status().to_string();
    Cmp c = compare(*ours, V, prompt);
    std::printf("[ measured ] smollm2 %s: max-abs %.3g, logit range %.3g, ratio %.3g\n",
                pname.c_str(), c.max_abs, c.range, c.max_abs / c.range);
    EXPECT_LE(c.max_abs, 1e-4 * c.range) << pname;
  }
  auto want = entry["greedy_chat_france_16"].get<std::vector<int32_t>>();
  RequestSpec r;
  r.id = 0;
  r.prompt = entry["prompts"]["chat_france"]["ids"].get<std::vector<int32_t>>();
  r.max_tokens = 16;
  ASSERT_TRUE(e->add_request(r).ok());
  ASSERT_TRUE(e->run().ok());
  EXPECT_EQ(e->request(0)->generated, want);
  EXPECT_EQ(e->request(0)->reason, FinishReason::kEos);
  if (m->tokenizer) {
    std::string text = m->tokenizer->decode(e->request(0)->generated);
    EXPECT_NE(text.find("Paris"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace llmrr
