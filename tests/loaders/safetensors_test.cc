#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "llmrr/runtime/model.h"
#include "llmrr/runtime/safetensors.h"
#include "loader_test_util.h"

namespace llmrr {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

TEST(Safetensors, BuiltinRoundTripKeepsTensorsAndHash) {
  for (const char* name : {"builtin:tiny-dense", "builtin:tiny-moe"}) {
    auto m = load_model(name);
    ASSERT_TRUE(m.ok());
    TempDir dir;
    ASSERT_TRUE(save_safetensors_dir(*m, dir.path()).ok());
    auto r = load_model(dir.path());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // Same name, dtype, shape and bytes: the hash of the export equals the builtin's.
    EXPECT_EQ(r->weight_hash, m->weight_hash) << name;
    EXPECT_EQ(r->config.arch, m->config.arch);
    EXPECT_EQ(r->config.experts, m->config.experts);
    EXPECT_EQ(r->config.moe_ffn, m->config.moe_ffn);
    EXPECT_EQ(r->config.ffn, m->config.ffn);
    EXPECT_EQ(r->config.head_dim, m->config.head_dim);
    EXPECT_EQ(r->config.norm_eps, m->config.norm_eps);
    EXPECT_EQ(r->config.rope_theta, m->config.rope_theta);
    EXPECT_EQ(r->config.bos, 256);
    EXPECT_EQ(r->config.weight_type, kernels::WeightType::kF32);
    ASSERT_EQ(r->tensors.size(), m->tensors.size());
    for (const auto& [tn, t] : m->tensors) {
      const HostTensor& u = r->tensors.at(tn);
      EXPECT_EQ(u.shape, t.shape);
      ASSERT_EQ(0, std::memcmp(u.data.data(), t.data.data(), t.data.size() * 4)) << tn;
    }
    EXPECT_EQ(r->tokenizer, nullptr);
    EXPECT_NE(r->tokenizer_note.find("tokenizer.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace llmrr

namespace llmrr {
namespace {

// A tiny Llama checkpoint written byte by byte: hidden 8, 2 heads / 1 KV head, MLP 8,
// vocab 6, one layer.
struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

std::vector<StEntry> tiny_entries() {
  std::vector<StEntry> e;
  auto f32 = [&](const std::string& n, std::vector<int64_t> shape) {
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    std::string b;
    for (int64_t i = 0; i < k; ++i) put_f32(b, 0.5f + static_cast<float>(i));
    e.push_back({n, "F32", shape, b});
  };
  f32("model.embed_tokens.weight", {6, 8});
  f32("model.norm.weight", {8});
  f32("lm_head.weight", {6, 8});
  const std::string p = "model.layers.0.";
  f32(p + "input_layernorm.weight", {8});
  f32(p + "post_attention_layernorm.weight", {8});
  f32(p + "self_attn.q_proj.weight", {8, 8});
  f32(p + "self_attn.k_proj.weight", {4, 8});
  f32(p + "self_attn.v_proj.weight", {4, 8});
  f32(p + "self_attn.o_proj.weight", {8, 8});
  f32(p + "mlp.gate_proj.weight", {8, 8});
  f32(p + "mlp.up_proj.weight", {8, 8});
  f32(p + "mlp.down_proj.weight", {8, 8});
  return e;
}

json tiny_config() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 6}, {"hidden_size", 8},
          {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
          {"intermediate_size", 8}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
          {"max_position_embeddings", 64}, {"tie_word_embeddings", false}};
}

std::string st_file(const std::vector<StEntry>& entries, const std::string& header_override = "") {
  json h = json::object();
  uint64_t off = 0;
  std::string data;
  for (const auto& e : entries) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape},
                 {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
    data += e.bytes;
  }
  std::string text = header_override.empty() ? h.dump() : header_override;
  std::string s;
  put_u64(s, text.size());
  return s + text + data;
}

void write_dir(const TempDir& d, const std::vector<StEntry>& e, const json& cfg = tiny_config(),
               const std::string& header_override = "") {
  write_bytes(d.file("config.json"), cfg.dump());
  write_bytes(d.file("model.safetensors"), st_file(e, header_override));
}

void expect_error(const Result<LoadedModel>& r, ErrorCode code, const std::string& part) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(part), std::string::npos)
      << "message \"" << r.status().message() << "\" lacks \"" << part << "\"";
}

TEST(Safetensors, TinyLoadsWithF16AndBf16) {
  TempDir d;
  auto e = tiny_entries();
  write_dir(d, e);
  auto m = load_model(d.path());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->config.head_dim, 4);
  EXPECT_EQ(m->tensors.at("model.layers.0.self_attn.k_proj.weight").data[9], 9.5f);
  // F16 norm: 0x3C00 = 1, 0x0001 = 2^-24 (subnormal).
  e[1] = {"model.norm.weight", "F16", {8}, {}};
  for (int i = 0; i < 8; ++i) put_u16(e[1].bytes, i % 2 ? 0x0001 : 0x3C00);
  // BF16 embedding: 0x4049 = 3.140625.
  e[0] = {"model.embed_tokens.weight", "BF16", {6, 8}, {}};
  for (int i = 0; i < 48; ++i) put_u16(e[0].bytes, 0x4049);
  write_dir(d, e);
  auto h = load_model(d.path());
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->tensors.at("model.norm.weight").data[0], 1.0f);
  EXPECT_EQ(h->tensors.at("model.norm.weight").data[1], 0x1p-24f);
  EXPECT_EQ(h->tensors.at("model.embed_tokens.weight").data[47], 3.140625f);
  // Mixed dtypes among the matrices: not a bf16 checkpoint.
  EXPECT_EQ(h->config.weight_type, kernels::WeightType::kF32);
  // Loading the .safetensors file path loads its directory.
  auto via_file = load_model(d.file("model.safetensors"));
  ASSERT_TRUE(via_file.ok()) << via_file.status().to_string();
  EXPECT_EQ(via_file->weight_hash, h->weight_hash);
}

TEST(Safetensors, Sharded) {
  TempDir d;
  auto e = tiny_entries();
  std::vector<StEntry> a(e.begin(), e.begin() + 5), b(e.begin() + 5, e.end());
  write_bytes(d.file("config.json"), tiny_config().dump());
  write_bytes(d.file("model-00001-of-00002.safetensors"), st_file(a));
  write_bytes(d.file("model-00002-of-00002.safetensors"), st_file(b));
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  for (const auto& x : a) index["weight_map"][x.name] = "model-00001-of-00002.safetensors";
  for (const auto& x : b) index["weight_map"][x.name] = "model-00002-of-00002.safetensors";
  write_bytes(d.file("model.safetensors.index.json"), index.dump());
  auto m = load_model(d.path());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->tensors.size(), 12u);
  TempDir single;
  write_dir(single, e);
  auto s = load_model(single.path());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(m->weight_hash, s->weight_hash);  // sharding does not change the identity
  index["weight_map"]["lm_head.weight"] = "../evil.safetensors";
  write_bytes(d.file("model.safetensors.index.json"), index.dump());
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "plain file name");
}

TEST(SafetensorsErrors, Headers) {
  TempDir d;
  const auto e = tiny_entries();
  write_bytes(d.file("config.json"), tiny_config().dump());
  std::string huge;
  put_u64(huge, ~uint64_t{0});
  write_bytes(d.file("model.safetensors"), huge + "{}");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "over the limit");
  std::string past;
  put_u64(past, 1000);
  write_bytes(d.file("model.safetensors"), past + "{}");
  expect_error(load_model(d.path()), ErrorCode::kTruncated, "past the end");
  write_bytes(d.file("model.safetensors"), "abc");
  expect_error(load_model(d.path()), ErrorCode::kTruncated, "too short");
  write_dir(d, e, tiny_config(), "{\"a\": ");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "invalid JSON");
  write_dir(d, e, tiny_config(), "[1, 2]");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "expected a JSON object");
  write_dir(d, e, tiny_config(),
            R"({"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0, 1e30]}})");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "data_offsets");
  write_dir(d, e, tiny_config(),
            R"({"model.norm.weight": {"dtype": "F32", "shape": [8], "data_offsets": [0, 36]}})");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "needs 32");
  write_dir(d, e, tiny_config(),
            R"({"x": {"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 4]}})");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "overflows");
  write_dir(d, e, tiny_config(),
            R"({"x": {"dtype": "F32", "shape": [4194304, 1024], "data_offsets": [0, 17179869184]}})");
  expect_error(load_model(d.path()), ErrorCode::kTruncated, "past the end");
  write_dir(d, e, tiny_config(), R"({"x": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "unknown dtype Q4");
  write_dir(d, e, tiny_config(), R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "non-negative");
  write_dir(d, e, tiny_config(), R"({"x": {"dtype": "F32"}})");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "data_offsets");
}

TEST(SafetensorsErrors, Tensors) {
  TempDir d;
  auto missing = tiny_entries();
  missing.erase(missing.begin() + 6);  // k_proj
  write_dir(d, missing);
  expect_error(load_model(d.path()), ErrorCode::kMissingTensor,
               "model.layers.0.self_attn.k_proj.weight is missing (expected shape [4, 8])");
  auto shape = tiny_entries();
  shape[9] = {shape[9].name, "F32", {8, 4}, shape[9].bytes.substr(0, 128)};
  write_dir(d, shape);
  expect_error(load_model(d.path()), ErrorCode::kShapeMismatch,
               "mlp.gate_proj.weight has shape [8, 4], expected [8, 8]");
  auto dtype = tiny_entries();
  dtype[1].dtype = "I32";
  write_dir(d, dtype);
  expect_error(load_model(d.path()), ErrorCode::kUnsupported, "dtype I32");
  auto f64 = tiny_entries();
  f64[1] = {"model.norm.weight", "F64", {4}, f64[1].bytes};
  write_dir(d, f64);
  expect_error(load_model(d.path()), ErrorCode::kUnsupported, "F64");
  auto bias = tiny_entries();
  bias.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {8}, std::string(32, '\0')});
  write_dir(d, bias);
  expect_error(load_model(d.path()), ErrorCode::kUnsupported, "q_proj.bias");
  auto dup = tiny_entries();
  std::vector<StEntry> a(dup.begin(), dup.end()), b = {dup[0]};
  write_bytes(d.file("config.json"), tiny_config().dump());
  write_bytes(d.file("a.safetensors"), st_file(a));
  write_bytes(d.file("b.safetensors"), st_file(b));
  json index = {{"weight_map", {{"x", "a.safetensors"}, {"y", "b.safetensors"}}}};
  write_bytes(d.file("model.safetensors.index.json"), index.dump());
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "appears twice");
}

TEST(SafetensorsErrors, Config) {
  TempDir d;
  const auto e = tiny_entries();
  json c = tiny_config();
  c.erase("hidden_size");
  write_dir(d, e, c);
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "hidden_size is missing");
  c = tiny_config();
  c["architectures"] = {"GPT2LMHeadModel"};
  write_dir(d, e, c);
  expect_error(load_model(d.path()), ErrorCode::kUnsupported, "GPT2LMHeadModel");
  c = tiny_config();
  c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  write_dir(d, e, c);
  expect_error(load_model(d.path()), ErrorCode::kUnsupported, "llama3");
  c = tiny_config();
  c["num_hidden_layers"] = "two";
  write_dir(d, e, c);
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "must be an integer");
  c = tiny_config();
  c["num_key_value_heads"] = 3;
  write_dir(d, e, c);
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "not a multiple of KV heads");
  c = tiny_config();
  c["hidden_size"] = 2000000000;
  write_dir(d, e, c);
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "out of range");
  c = tiny_config();
  c["hidden_act"] = "gelu";
  write_dir(d, e, c);
  expect_error(load_model(d.path()), ErrorCode::kUnsupported, "gelu");
  write_bytes(d.file("config.json"), "{nope");
  expect_error(load_model(d.path()), ErrorCode::kBadModel, "invalid JSON");
  TempDir empty;
  expect_error(load_model(empty.path()), ErrorCode::kNotFound, "no config.json");
  write_bytes(empty.file("config.json"), tiny_config().dump());
  expect_error(load_model(empty.path()), ErrorCode::kNotFound, "model.safetensors");
}

json qwen3_config(bool moe) {
  json c = {{"architectures", {moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}},
            {"model_type", moe ? "qwen3_moe" : "qwen3"}, {"vocab_size", 10}, {"hidden_size", 8},
            {"num_hidden_layers", 3}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
            {"head_dim", 6}, {"intermediate_size", 16}, {"rms_norm_eps", 1e-6},
            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
            {"attention_bias", false}, {"use_sliding_window", false},
            {"layer_types", {"full_attention", "full_attention", "full_attention"}}};
  if (moe) {
    c["num_experts"] = 8;
    c["num_experts_per_tok"] = 3;
    c["moe_intermediate_size"] = 4;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = {1};
  }
  return c;
}

TEST(SafetensorsConfig, Qwen3AndQwen3Moe) {
  auto d = parse_hf_config(qwen3_config(false).dump(), "cfg");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->arch, Arch::kQwen3);
  EXPECT_TRUE(d->qk_norm);
  EXPECT_EQ(d->head_dim, 6);
  EXPECT_EQ(d->experts, 0);
  EXPECT_FALSE(d->attention_bias);
  auto m = parse_hf_config(qwen3_config(true).dump(), "cfg");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->arch, Arch::kQwen3Moe);
  EXPECT_TRUE(m->qk_norm);
  EXPECT_EQ(m->experts, 8);
  EXPECT_EQ(m->top_k, 3);
  EXPECT_EQ(m->shared_ffn, 0);
  EXPECT_TRUE(m->norm_topk_prob);
  EXPECT_FALSE(m->attention_bias);  // no qkv_bias default as in Qwen2-MoE
  EXPECT_TRUE(m->is_moe_layer(0));
  EXPECT_FALSE(m->is_moe_layer(1));
  EXPECT_TRUE(m->is_moe_layer(2));
  // transformers 5 writes num_local_experts; norm_topk_prob defaults to false.
  json c = qwen3_config(true);
  c.erase("num_experts");
  c.erase("norm_topk_prob");
  c["num_local_experts"] = 8;
  m = parse_hf_config(c.dump(), "cfg");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->experts, 8);
  EXPECT_FALSE(m->norm_topk_prob);
  // Only model_type, no architectures.
  c = qwen3_config(false);
  c.erase("architectures");
  d = parse_hf_config(c.dump(), "cfg");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->arch, Arch::kQwen3);
}

// What Qwen3 checkpoints may ask for that the engine does not implement: refused, naming
// the config key.
TEST(SafetensorsConfig, Qwen3UnsupportedVariantsNameTheKey) {
  auto refused = [](const json& c, const std::string& part) {
    auto r = parse_hf_config(c.dump(), "cfg");
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported) << r.status().to_string();
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().to_string();
  };
  json c = qwen3_config(false);
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  refused(c, "rope_scaling.rope_type yarn");
  c = qwen3_config(false);
  c["rope_parameters"] = {{"type", "dynamic"}, {"rope_theta", 10000.0}};
  refused(c, "rope_parameters.type dynamic");
  c = qwen3_config(false);
  c["use_sliding_window"] = true;
  refused(c, "use_sliding_window");
  c = qwen3_config(false);
  c["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  refused(c, "layer_types entry \"sliding_attention\"");
  c = qwen3_config(true);
  c["attention_bias"] = true;
  refused(c, "attention_bias");
  c = qwen3_config(true);
  c["shared_expert_intermediate_size"] = 16;
  refused(c, "shared_expert_intermediate_size");
}

TEST(SafetensorsConfig, HfFields) {
  // transformers ≥ 5 nests rope_theta; eos may be a list; head_dim may be null.
  auto c = parse_hf_config(R"({"architectures": ["Qwen2MoeForCausalLM"], "vocab_size": 10,
      "hidden_size": 8, "num_hidden_layers": 4, "num_attention_heads": 2,
      "num_key_value_heads": 2, "head_dim": null, "intermediate_size": 16,
      "rope_parameters": {"rope_type": "default", "rope_theta": 1234.0},
      "eos_token_id": [7, 8], "num_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 4, "shared_expert_intermediate_size": 0,
      "decoder_sparse_step": 2, "mlp_only_layers": [3], "qkv_bias": false})",
                           "cfg");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_theta, 1234.0);
  EXPECT_EQ(c->eos, 7);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->shared_expert_gate);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_FALSE(c->is_moe_layer(0));
  EXPECT_TRUE(c->is_moe_layer(1));
  EXPECT_FALSE(c->is_moe_layer(2));
  EXPECT_FALSE(c->is_moe_layer(3));  // (3+1) % 2 == 0, but listed in mlp_only_layers
  auto w = parse_hf_config(R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 10,
      "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
      "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
      "sliding_window": 1024})",
                           "cfg");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->max_positions, 1024);  // a window caps the positions we promise to get right
  EXPECT_EQ(w->moe_ffn, 16);
}

// DeepSeek-V3 as transformers 5 writes it (DeepSeek-V3's own config: rope_scaling yarn,
// scoring_func / topk_method, num_nextn_predict_layers).
json deepseek_config() {
  return {{"architectures", {"DeepseekV3ForCausalLM"}}, {"model_type", "deepseek_v3"},
          {"vocab_size", 10}, {"hidden_size", 8}, {"num_hidden_layers", 3},
          {"num_attention_heads", 2}, {"num_key_value_heads", 2}, {"head_dim", 4},
          {"intermediate_size", 16}, {"moe_intermediate_size", 4}, {"rms_norm_eps", 1e-6},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
          {"q_lora_rank", 6}, {"kv_lora_rank", 4}, {"qk_nope_head_dim", 2},
          {"qk_rope_head_dim", 4}, {"v_head_dim", 3}, {"n_routed_experts", 8},
          {"num_experts_per_tok", 2}, {"n_shared_experts", 2}, {"n_group", 4},
          {"topk_group", 2}, {"first_k_dense_replace", 1}, {"norm_topk_prob", true},
          {"routed_scaling_factor", 2.5}, {"rope_interleave", true}, {"attention_bias", false},
          {"num_nextn_predict_layers", 1}};
}

TEST(SafetensorsConfig, DeepseekV3) {
  auto r = parse_hf_config(deepseek_config().dump(), "cfg");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->arch, Arch::kDeepseekV3);
  EXPECT_TRUE(r->mla);
  EXPECT_EQ(r->head_dim, 4);  // qk_rope_head_dim
  EXPECT_EQ(r->q_lora_rank, 6);
  EXPECT_EQ(r->shared_ffn, 8);
  EXPECT_EQ(r->n_group, 4);
  EXPECT_EQ(r->topk_group, 2);
  EXPECT_FALSE(r->is_moe_layer(0));
  EXPECT_TRUE(r->is_moe_layer(1));
  json c = deepseek_config();
  c["q_lora_rank"] = nullptr;  // q_proj
  r = parse_hf_config(c.dump(), "cfg");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->q_lora_rank, 0);
}

TEST(SafetensorsConfig, DeepseekV3UnsupportedVariantsNameTheKey) {
  auto refused = [](const json& c, ErrorCode code, const std::string& part) {
    auto r = parse_hf_config(c.dump(), "cfg");
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().to_string();
  };
  json c = deepseek_config();
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 40.0}, {"mscale_all_dim", 1.0}};
  refused(c, ErrorCode::kUnsupported, "rope_scaling.type yarn");
  c = deepseek_config();
  c["scoring_func"] = "softmax";
  refused(c, ErrorCode::kUnsupported, "scoring_func");
  c = deepseek_config();
  c["topk_method"] = "greedy";
  refused(c, ErrorCode::kUnsupported, "topk_method");
  c = deepseek_config();
  c["moe_layer_freq"] = 2;
  refused(c, ErrorCode::kUnsupported, "moe_layer_freq");
  c = deepseek_config();
  c["attention_bias"] = true;
  refused(c, ErrorCode::kUnsupported, "attention_bias");
  c = deepseek_config();
  c["n_group"] = 3;  // does not divide 8 experts
  refused(c, ErrorCode::kBadModel, "n_group 3");
  c = deepseek_config();
  c["qk_rope_head_dim"] = 3;
  refused(c, ErrorCode::kBadModel, "MLA sizes");
  c = deepseek_config();
  c.erase("kv_lora_rank");
  refused(c, ErrorCode::kBadModel, "kv_lora_rank");
}

}  // namespace
}  // namespace llmrr
