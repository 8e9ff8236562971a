// GGUF F16 and BF16 weights kept as stored (ModelLoadOptions::keep_quantized): they stay
// 16-bit in memory and the GEMM widens them exactly, so a model computes the logits of the
// convert-at-load path bit for bit. The model is a generated tiny Llama whose 2-D tensors are
// F16 or BF16 (norms F32, as llama.cpp writes them).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/gguf.h"
#include "llmrr/runtime/model.h"
#include "loader_test_util.h"

namespace llmrr {
namespace {

// hidden 64, 4 heads / 2 KV heads (head_dim 16), MLP 96, vocab 40, two layers; 2-D tensors
// of ggml type `type` (1 F16, 30 BF16) with random finite values of moderate size.
std::string tiny_llama_16bit(uint32_t type, uint32_t seed) {
  GgufBuilder b;
  put_llama_kv(b, {.hidden = 64, .layers = 2, .ffn = 96, .heads = 4, .kv_heads = 2, .vocab = 40,
                   .rope_base = 10000.0f, .eps = 1e-5f});
  std::mt19937 rng(seed);
  auto matrix = [&](const std::string& name, uint64_t in, uint64_t out) {
    GgufBuilder::Tensor t{name, {in, out}, type, {}};
    for (uint64_t i = 0; i < in * out; ++i) {
      const uint32_t sign = rng() & 1;
      const uint16_t h = type == 1
                             ? static_cast<uint16_t>(sign << 15 | (9 + rng() % 6) << 10 |
                                                     (rng() & 0x3ff))
                             : static_cast<uint16_t>(sign << 15 | (0x78 + rng() % 7) << 7 |
                                                     (rng() & 0x7f));
      put_u16(t.data, h);
    }
    b.tensors.push_back(std::move(t));
  };
  auto norm = [&](const std::string& name) {
    b.f32(name, {64}, [&](uint64_t) { return 0.5f + static_cast<float>(rng() % 100) / 100.0f; });
  };
  matrix("token_embd.weight", 64, 40);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight");
    matrix(p + "attn_q.weight", 64, 64);
    matrix(p + "attn_k.weight", 64, 32);
    matrix(p + "attn_v.weight", 64, 32);
    matrix(p + "attn_output.weight", 64, 64);
    norm(p + "ffn_norm.weight");
    matrix(p + "ffn_gate.weight", 64, 96);
    matrix(p + "ffn_up.weight", 64, 96);
    matrix(p + "ffn_down.weight", 96, 64);
  }
  norm("output_norm.weight");
  matrix("output.weight", 64, 40);
  return b.build();
}

std::vector<float> logits_of(const LoadedModel& m, int threads) {
  EngineConfig cfg;
  cfg.threads = threads;
  auto e = Engine::create(m, cfg, make_production_policy());
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return {};
  const std::vector<int32_t> prompt = {1, 5, 9, 3, 7, 2, 8, 30, 12};
  auto l = (*e)->score_prompt(prompt);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return l.ok() ? *l : std::vector<float>{};
}

TEST(HalfWeights, KeptF16AndBf16ComputeTheLogitsOfTheConvertedModel) {
  for (uint32_t type : {1u, 30u}) {
    SCOPED_TRACE(ggml_type_name(type));
    TempDir dir;
    const std::string path = dir.file("m.gguf");
    write_bytes(path, tiny_llama_16bit(type, 7 + type));
    auto dense = load_gguf(path);
    auto kept = load_gguf(path, ModelLoadOptions{.keep_quantized = true});
    ASSERT_TRUE(dense.ok()) << dense.status().to_string();
    ASSERT_TRUE(kept.ok()) << kept.status().to_string();
    EXPECT_EQ(dense->weight_hash, kept->weight_hash);
    // An all-BF16 checkpoint computes as bf16 either way; F16 as fp32.
    EXPECT_EQ(kept->config.weight_type, dense->config.weight_type);
    EXPECT_EQ(kept->config.weight_type,
              type == 30 ? kernels::WeightType::kBF16 : kernels::WeightType::kF32);
    int stored = 0;
    for (const auto& [name, t] : kept->tensors) {
      const HostTensor& d = dense->tensors.at(name);
      if (!t.stored) continue;
      ++stored;
      EXPECT_EQ(t.stored->ggml_type, type) << name;
      EXPECT_TRUE(t.data.empty()) << name;
      auto f32 = t.to_f32();
      ASSERT_TRUE(f32.ok()) << f32.status().to_string();
      ASSERT_EQ(f32->size(), d.data.size()) << name;
      EXPECT_EQ(std::memcmp(f32->data(), d.data.data(), d.data.size() * 4), 0) << name;
    }
    EXPECT_EQ(stored, 2 + 2 * 7);  // embedding, output, 7 matrices per layer
    for (int threads : {1, 2}) {
      const auto a = logits_of(*dense, threads), b = logits_of(*kept, threads);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_FALSE(a.empty());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace llmrr
