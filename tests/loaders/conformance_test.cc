// Loaders against transformers: the tensors our loaders build from the fixture checkpoints
// must be bit-identical to the ones transformers builds from the same files (CRC-32 of the
// fp32 bytes, recorded by tools/conformance/make_fixtures.py in tests/fixtures/manifest.json).
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "fixtures/fixtures.h"
#include "llmrr/runtime/builtin.h"
#include "llmrr/runtime/gguf.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/safetensors.h"

namespace llmrr {
namespace {

using nlohmann::json;

const json& model_entry(const std::string& name) {
  const json& m = fixtures::manifest();
  static const json kNull;
  if (!m.is_object() || !m.contains("models") || !m["models"].contains(name)) return kNull;
  return m["models"][name];
}

// Every tensor in `expected` (name → {shape, crc32}) is in `model` with that shape and bytes,
// and the model holds nothing else.
void expect_tensors_match(const LoadedModel& model, const json& expected, const std::string& tag) {
  ASSERT_TRUE(expected.is_object()) << tag;
  EXPECT_EQ(model.tensors.size(), expected.size()) << tag;
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    auto t = model.tensors.find(it.key());
    ASSERT_NE(t, model.tensors.end()) << tag << ": missing " << it.key();
    EXPECT_EQ(t->second.shape, it.value()["shape"].get<std::vector<int64_t>>())
        << tag << ": " << it.key();
    EXPECT_EQ(fixtures::crc32_hex(t->second.data), it.value()["crc32"].get<std::string>())
        << tag << ": " << it.key() << " differs from transformers' tensor";
  }
}

TEST(Conformance, ManifestPresent) {
  const json& m = fixtures::manifest();
  ASSERT_TRUE(m.is_object()) << "tests/fixtures/manifest.json missing or unreadable";
  for (const char* name : {"tiny-llama", "tiny-llama-bf16", "tiny-mixtral", "tiny-qwen2moe",
                           "tiny-qwen3", "tiny-qwen3moe", "tiny-llama-f32.gguf",
                           "tiny-llama-q8_0.gguf", "tiny-qwen3-f32.gguf", "tiny-qwen3moe-f32.gguf",
                           "builtin-tiny-dense", "builtin-tiny-moe", "tiny-deepseek",
                           "tiny-deepseek-f32.gguf", "tiny-deepseek-qproj"})
    EXPECT_TRUE(m["models"].contains(name)) << name;
}

TEST(Conformance, SafetensorsTinyLlama) {
  auto m = load_model(fixtures::path("tiny-llama"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.ffn, 128);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.weight_type, kernels::WeightType::kF32);
  EXPECT_FALSE(c.bf16_activations);
  expect_tensors_match(*m, model_entry("tiny-llama")["tensors"], "tiny-llama");
}

TEST(Conformance, SafetensorsTinyLlamaBf16) {
  auto m = load_model(fixtures::path("tiny-llama-bf16"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->config.weight_type, kernels::WeightType::kBF16);
  EXPECT_TRUE(m->config.bf16_activations);
  // bf16 values widened exactly: equal to transformers' bf16 tensors cast to fp32.
  expect_tensors_match(*m, model_entry("tiny-llama-bf16")["tensors"], "tiny-llama-bf16");
}

TEST(Conformance, SafetensorsTinyMixtral) {
  auto m = load_model(fixtures::path("tiny-mixtral"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kMixtral);
  EXPECT_EQ(c.experts, 4);
  EXPECT_EQ(c.top_k, 2);
  EXPECT_EQ(c.moe_ffn, 32);
  EXPECT_EQ(c.ffn, 0);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  expect_tensors_match(*m, model_entry("tiny-mixtral")["tensors"], "tiny-mixtral");
}

TEST(Conformance, SafetensorsTinyQwen2Moe) {
  auto m = load_model(fixtures::path("tiny-qwen2moe"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kQwen2Moe);
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.experts, 4);
  EXPECT_EQ(c.top_k, 2);
  EXPECT_EQ(c.moe_ffn, 32);
  EXPECT_EQ(c.shared_ffn, 48);
  EXPECT_TRUE(c.shared_expert_gate);
  EXPECT_EQ(c.ffn, 96);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_TRUE(c.is_moe_layer(0));
  EXPECT_FALSE(c.is_moe_layer(1));  // mlp_only_layers = [1]
  EXPECT_TRUE(c.is_moe_layer(2));
  EXPECT_EQ(m->tensors.count("lm_head.weight"), 0u);
  EXPECT_EQ(m->tensors.at("model.layers.0.self_attn.q_proj.bias").shape,
            (std::vector<int64_t>{64}));
  EXPECT_EQ(m->tensors.at("model.layers.2.mlp.shared_expert_gate.weight").shape,
            (std::vector<int64_t>{1, 64}));
  expect_tensors_match(*m, model_entry("tiny-qwen2moe")["tensors"], "tiny-qwen2moe");
}

TEST(Conformance, SafetensorsTinyQwen3) {
  auto m = load_model(fixtures::path("tiny-qwen3"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 32);  // not hidden / heads
  EXPECT_EQ(c.ffn, 128);
  EXPECT_EQ(c.experts, 0);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(m->tensors.at("model.layers.1.self_attn.q_norm.weight").shape,
            (std::vector<int64_t>{32}));
  EXPECT_EQ(m->tensors.at("model.layers.0.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{128, 64}));
  expect_tensors_match(*m, model_entry("tiny-qwen3")["tensors"], "tiny-qwen3");
}

TEST(Conformance, SafetensorsTinyQwen3Moe) {
  auto m = load_model(fixtures::path("tiny-qwen3moe"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kQwen3Moe);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.experts, 16);
  EXPECT_EQ(c.top_k, 4);
  EXPECT_EQ(c.moe_ffn, 16);
  EXPECT_EQ(c.shared_ffn, 0);
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_TRUE(c.is_moe_layer(0));
  EXPECT_FALSE(c.is_moe_layer(1));  // mlp_only_layers = [1]
  EXPECT_TRUE(c.is_moe_layer(2));
  expect_tensors_match(*m, model_entry("tiny-qwen3moe")["tensors"], "tiny-qwen3moe");
}

// The GGUFs of the Qwen3 models (no Q/K permutation, attn_{q,k}_norm, stacked experts, the
// dense layer found by its missing router): the safetensors tensors bit for bit, the same
// config.
TEST(Conformance, GgufTinyQwen3) {
  for (const char* name : {"tiny-qwen3", "tiny-qwen3moe"}) {
    auto g = load_model(fixtures::path(std::string(name) + "-f32.gguf"));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    auto s = load_model(fixtures::path(name));
    ASSERT_TRUE(s.ok());
    expect_tensors_match(*g, model_entry(name)["tensors"], std::string(name) + "-f32.gguf");
    const ModelConfig &a = g->config, &b = s->config;
    EXPECT_EQ(a.arch, b.arch) << name;
    EXPECT_TRUE(a.qk_norm) << name;
    EXPECT_EQ(a.head_dim, b.head_dim) << name;
    EXPECT_EQ(a.kv_heads, b.kv_heads) << name;
    EXPECT_EQ(a.ffn, b.ffn) << name;
    EXPECT_EQ(a.experts, b.experts) << name;
    EXPECT_EQ(a.top_k, b.top_k) << name;
    EXPECT_EQ(a.moe_ffn, b.moe_ffn) << name;
    EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob) << name;
    EXPECT_EQ(a.tied_embeddings, b.tied_embeddings) << name;
    EXPECT_EQ(a.rope_theta, b.rope_theta) << name;
    EXPECT_EQ(a.norm_eps, b.norm_eps) << name;
    for (int32_t l = 0; l < a.layers; ++l) EXPECT_EQ(a.is_moe_layer(l), b.is_moe_layer(l)) << l;
  }
}

TEST(Conformance, SafetensorsTinyDeepseek) {
  auto m = load_model(fixtures::path("tiny-deepseek"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kDeepseekV3);
  EXPECT_TRUE(c.mla);
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.q_lora_rank, 32);
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.qk_nope_dim, 16);
  EXPECT_EQ(c.qk_rope_dim, 8);
  EXPECT_EQ(c.head_dim, 8);  // the RoPE width
  EXPECT_EQ(c.v_head_dim, 16);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.experts, 16);
  EXPECT_EQ(c.top_k, 4);
  EXPECT_EQ(c.moe_ffn, 16);
  EXPECT_EQ(c.shared_ffn, 16);  // one shared expert
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_EQ(c.scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c.router_bias);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_EQ(c.routed_scaling, 2.5f);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FALSE(c.is_moe_layer(0));  // first_k_dense_replace 1
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(2));
  expect_tensors_match(*m, model_entry("tiny-deepseek")["tensors"], "tiny-deepseek");
}

// The other DeepSeek-V3 paths: q_proj (q_lora_rank null), rope not interleaved, n_group 1,
// norm_topk_prob false, two shared experts, no dense layer.
TEST(Conformance, SafetensorsTinyDeepseekQproj) {
  auto m = load_model(fixtures::path("tiny-deepseek-qproj"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kDeepseekV3);
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_FALSE(c.rope_interleave);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_TRUE(c.router_bias);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling, 1.5f);
  EXPECT_EQ(c.shared_ffn, 32);  // 2 x 16
  EXPECT_TRUE(c.is_moe_layer(0));
  EXPECT_EQ(m->tensors.at("model.layers.0.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{4 * 24, 64}));
  expect_tensors_match(*m, model_entry("tiny-deepseek-qproj")["tensors"], "tiny-deepseek-qproj");
}

// deepseek2 GGUF (llama.cpp's converter: MLA as MQA metadata, kv_b_proj split into attn_k_b
// transposed and attn_v_b, exp_probs_b.bias, stacked experts, *_shexp): the safetensors
// tensors bit for bit and the same config.
TEST(Conformance, GgufTinyDeepseek) {
  auto g = load_model(fixtures::path("tiny-deepseek-f32.gguf"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto s = load_model(fixtures::path("tiny-deepseek"));
  ASSERT_TRUE(s.ok());
  expect_tensors_match(*g, model_entry("tiny-deepseek")["tensors"], "tiny-deepseek-f32.gguf");
  const ModelConfig &a = g->config, &b = s->config;
  EXPECT_EQ(a.arch, Arch::kDeepseekV3);
  for (auto [x, y, what] : {std::tuple{a.heads, b.heads, "heads"},
                            {a.kv_heads, b.kv_heads, "kv_heads"},
                            {a.head_dim, b.head_dim, "head_dim"},
                            {a.q_lora_rank, b.q_lora_rank, "q_lora_rank"},
                            {a.kv_lora_rank, b.kv_lora_rank, "kv_lora_rank"},
                            {a.qk_nope_dim, b.qk_nope_dim, "qk_nope_dim"},
                            {a.qk_rope_dim, b.qk_rope_dim, "qk_rope_dim"},
                            {a.v_head_dim, b.v_head_dim, "v_head_dim"},
                            {a.ffn, b.ffn, "ffn"},
                            {a.experts, b.experts, "experts"},
                            {a.top_k, b.top_k, "top_k"},
                            {a.moe_ffn, b.moe_ffn, "moe_ffn"},
                            {a.shared_ffn, b.shared_ffn, "shared_ffn"},
                            {a.n_group, b.n_group, "n_group"},
                            {a.topk_group, b.topk_group, "topk_group"}})
    EXPECT_EQ(x, y) << what;
  EXPECT_EQ(a.mla, b.mla);
  EXPECT_EQ(a.rope_interleave, b.rope_interleave);
  EXPECT_EQ(a.router_bias, b.router_bias);
  EXPECT_EQ(a.routed_scaling, b.routed_scaling);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.scoring, b.scoring);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.lora_norm_eps, b.lora_norm_eps);
  for (int32_t l = 0; l < a.layers; ++l) EXPECT_EQ(a.is_moe_layer(l), b.is_moe_layer(l)) << l;
}

// The GGUF of the tiny Llama (Q/K permuted the way llama.cpp's converter does): after our
// reverse permutation the tensors equal transformers' — and, for F32, the safetensors ones.
TEST(Conformance, GgufTinyLlamaF32) {
  auto g = load_model(fixtures::path("tiny-llama-f32.gguf"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  expect_tensors_match(*g, model_entry("tiny-llama-f32.gguf")["tensors"], "f32.gguf");
  auto s = load_model(fixtures::path("tiny-llama"));
  ASSERT_TRUE(s.ok());
  for (const auto& [name, t] : s->tensors)
    EXPECT_EQ(0, std::memcmp(t.data.data(), g->tensors.at(name).data.data(), t.data.size() * 4))
        << name;
  EXPECT_EQ(g->config.head_dim, 16);
  EXPECT_EQ(g->config.ffn, 128);
  EXPECT_EQ(g->config.max_positions, 256);
  EXPECT_FALSE(g->config.tied_embeddings);
  EXPECT_EQ(g->identity, "gguf:tiny-llama-f32");
  EXPECT_EQ(g->tokenizer, nullptr);  // the tiny GGUF carries no tokenizer
  EXPECT_FALSE(g->tokenizer_note.empty());
}

TEST(Conformance, GgufTinyLlamaQ8_0) {
  auto g = load_model(fixtures::path("tiny-llama-q8_0.gguf"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  expect_tensors_match(*g, model_entry("tiny-llama-q8_0.gguf")["tensors"], "q8_0.gguf");
  auto f = load_model(fixtures::path("tiny-llama-f32.gguf"));
  ASSERT_TRUE(f.ok());
  EXPECT_NE(g->weight_hash, f->weight_hash);
}

// The Python regeneration of the builtin models (an independent implementation of the
// generator) gives the same bits as ours.
TEST(Conformance, BuiltinMatchesIndependentGenerator) {
  for (const char* name : {"tiny-dense", "tiny-moe"}) {
    auto m = load_builtin(name);
    ASSERT_TRUE(m.ok());
    expect_tensors_match(*m, model_entry(std::string("builtin-") + name)["tensors"], name);
  }
}

TEST(Conformance, ReferenceLogitsReadable) {
  const json& e = model_entry("tiny-llama")["prompts"]["p29"];
  std::string err;
  auto npy = fixtures::read_npy(fixtures::path("reference/" + e["logits"].get<std::string>()), &err);
  ASSERT_TRUE(npy.has_value()) << err;
  EXPECT_EQ(npy->shape, (std::vector<int64_t>{29, 300}));
  EXPECT_EQ(e["ids"].size(), 29u);
  float lo = npy->f32[0], hi = npy->f32[0];
  for (float v : npy->f32) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_FLOAT_EQ(hi - lo, e["logit_range"].get<float>());
}

}  // namespace
}  // namespace llmrr
