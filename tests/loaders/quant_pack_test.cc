// Weights kept quantized (ModelLoadOptions::keep_quantized, kernels/quant.h) hold exactly the
// values the dequantizer writes: every format against gguf-py's dequantization (fixtures)
// and against ggml_dequantize, bit for bit; a GGUF model loaded either way computes the same
// logits bit for bit; SmolLM2 (when fetched) generates the same tokens either way.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "fixtures/fixtures.h"
#include "llmrr/kernels/quant.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/gguf.h"
#include "loader_test_util.h"

namespace llmrr {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(QuantPack, ValuesEqualGgufPyDequantization) {
  const auto& table = fixtures::manifest()["dequant"];
  int checked = 0;
  for (auto it = table.begin(); it != table.end(); ++it) {
    const uint32_t type = it.value()["type"].get<uint32_t>();
    int64_t be = 0, bb = 0;
    if (!kernels::ggml_quant_block(type, &be, &bb)) continue;  // F16, BF16
    const std::string name = it.key();
    const std::string blocks = read_bytes(fixtures::path("dequant/" + name + ".blocks.bin"));
    std::string err;
    auto expected = fixtures::read_npy(fixtures::path("dequant/" + name + ".expected.npy"), &err);
    ASSERT_TRUE(expected.has_value()) << err;
    const int64_t n = static_cast<int64_t>(blocks.size()) / bb;  // one block per row
    ASSERT_EQ(n * be, expected->numel()) << name;
    std::vector<const uint8_t*> rows;
    for (int64_t r = 0; r < n; ++r)
      rows.push_back(reinterpret_cast<const uint8_t*>(blocks.data()) + r * bb);
    const kernels::PackedWeight w = kernels::pack_ggml(type, rows.data(), n, be);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < be; ++c)
        ASSERT_EQ(bits(w.at(r, c)), bits(expected->f32[r * be + c]))
            << name << " row " << r << " col " << c;
    ++checked;
  }
  EXPECT_EQ(checked, 10);  // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K
}

TEST(QuantPack, ValuesEqualGgmlDequantizeOnRandomBlocks) {
  std::mt19937 rng(11);
  for (uint32_t type : {2u, 3u, 6u, 7u, 8u, 10u, 11u, 12u, 13u, 14u, 15u}) {
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(kernels::ggml_quant_block(type, &be, &bb));
    const int64_t n = 37, k = 2 * be;
    std::vector<uint8_t> raw(static_cast<size_t>(n * 2 * bb));
    for (auto& b : raw) b = static_cast<uint8_t>(rng());
    std::vector<float> want(static_cast<size_t>(n * k));
    ASSERT_TRUE(ggml_dequantize(type, raw.data(), raw.size(), n * k, want.data()).ok());
    std::vector<const uint8_t*> rows;
    for (int64_t r = 0; r < n; ++r) rows.push_back(raw.data() + r * 2 * bb);
    const kernels::PackedWeight w = kernels::pack_ggml(type, rows.data(), n, k);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        // Random bytes make NaN scales too; a NaN must stay a NaN (its payload may not).
        const float a = w.at(r, c), b = want[r * k + c];
        if (std::isnan(b)) {
          ASSERT_TRUE(std::isnan(a)) << ggml_type_name(type) << " " << r << "," << c;
        } else {
          ASSERT_EQ(bits(a), bits(b)) << ggml_type_name(type) << " " << r << "," << c << ": " << a
                                      << " vs " << b;
        }
      }
  }
}

std::vector<float> logits_of(const LoadedModel& m, const std::vector<int32_t>& prompt) {
  EngineConfig cfg;
  cfg.threads = 2;
  auto e = Engine::create(m, cfg, make_production_policy());
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return {};
  auto l = (*e)->score_prompt(prompt);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return l.ok() ? *l : std::vector<float>{};
}

class GgufKeptQuantized : public ::testing::TestWithParam<std::string> {};

// tiny-llama-q8_0.gguf, and tiny-deepseek-q8_0.gguf (deepseek2: quantized q_a / q_b /
// kv_a_mqa / o and stacked experts kept as blocks; attn_v_b quantized but read through the
// dequantizer to join kv_b_proj, whose per-head parts the engine packs from fp32).
TEST_P(GgufKeptQuantized, ComputesTheSameLogits) {
  const std::string path = fixtures::path(GetParam());
  auto dense = load_gguf(path);
  auto kept = load_gguf(path, ModelLoadOptions{.keep_quantized = true});
  ASSERT_TRUE(dense.ok()) << dense.status().to_string();
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_EQ(dense->weight_hash, kept->weight_hash);
  int stored = 0;
  for (const auto& [name, t] : kept->tensors) {
    const HostTensor& d = dense->tensors.at(name);
    EXPECT_EQ(t.shape, d.shape) << name;
    if (!t.stored) continue;
    ++stored;
    EXPECT_TRUE(t.data.empty()) << name;
    auto f32 = t.to_f32();
    ASSERT_TRUE(f32.ok()) << f32.status().to_string();
    ASSERT_EQ(f32->size(), d.data.size()) << name;
    EXPECT_EQ(std::memcmp(f32->data(), d.data.data(), d.data.size() * 4), 0) << name;
  }
  EXPECT_GT(stored, 0);
  const std::vector<int32_t> prompt = {1, 5, 9, 3, 7, 2, 8};
  const auto a = logits_of(*dense, prompt), b = logits_of(*kept, prompt);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufKeptQuantized,
                         ::testing::Values("tiny-llama-q8_0.gguf", "tiny-deepseek-q8_0.gguf"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST(QuantPack, SmolLM2KeptQuantizedGeneratesTheSameTokens) {
  const std::string path = find_smollm2();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 not found in " << model_cache_dir();
  // "The capital of France is" (transformers' ids for the raw text).
  const std::vector<int32_t> prompt = {504, 3575, 282, 4649, 314};
  std::vector<float> a;
  {
    auto dense = load_model(path);  // fp32 tensors: dropped before the second load
    ASSERT_TRUE(dense.ok()) << dense.status().to_string();
    a = logits_of(*dense, prompt);
  }
  auto kept = load_model(path, ModelLoadOptions{.keep_quantized = true});
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  const auto b = logits_of(*kept, prompt);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

}  // namespace
}  // namespace llmrr
