// GGUF: a crafted tiny Llama (name mapping, Q/K un-permutation, config), and malformed files
// — each a clear Status, never a crash or an allocation sized by a lie.
#include <gtest/gtest.h>

#include "llmrr/runtime/gguf.h"
#include "llmrr/runtime/model.h"
#include "loader_test_util.h"

namespace llmrr {
namespace {

// hidden 8, 2 heads / 1 KV head (head_dim 4), MLP 8, vocab 6, one layer, all F32. Tensor
// values encode (tensor index, element index) so that mapping mistakes show.
GgufBuilder tiny_llama(bool with_output = true) {
  GgufBuilder b;
  put_llama_kv(b, {.hidden = 8, .layers = 1, .ffn = 8, .heads = 2, .kv_heads = 1, .vocab = 6,
                   .rope_base = 500000.0f, .eps = 1e-6f});
  int k = 0;
  auto f = [&](const std::string& name, std::vector<uint64_t> ne) {
    const float base = static_cast<float>(++k) * 1000.0f;
    b.f32(name, ne, [base](uint64_t i) { return base + static_cast<float>(i); });
  };
  f("token_embd.weight", {8, 6});
  f("blk.0.attn_norm.weight", {8});
  f("blk.0.attn_q.weight", {8, 8});
  f("blk.0.attn_k.weight", {8, 4});
  f("blk.0.attn_v.weight", {8, 4});
  f("blk.0.attn_output.weight", {8, 8});
  f("blk.0.ffn_norm.weight", {8});
  f("blk.0.ffn_gate.weight", {8, 8});
  f("blk.0.ffn_up.weight", {8, 8});
  f("blk.0.ffn_down.weight", {8, 8});
  f("output_norm.weight", {8});
  if (with_output) f("output.weight", {8, 6});
  return b;
}

Result<LoadedModel> load_bytes(const TempDir& dir, const std::string& bytes,
                               const std::string& name = "m.gguf") {
  write_bytes(dir.file(name), bytes);
  return load_model(dir.file(name));
}

TEST(Gguf, TinyLlamaLoads) {
  TempDir dir;
  auto m = load_bytes(dir, tiny_llama().build());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.hidden, 8);
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.ffn, 8);
  EXPECT_EQ(c.vocab, 6);
  EXPECT_EQ(c.max_positions, 64);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(m->identity, "gguf:m");
  EXPECT_EQ(m->tensors.size(), 12u);
  // HF shape is the reversed ggml shape; the bytes are the same row-major matrix.
  const HostTensor& emb = m->tensors.at("model.embed_tokens.weight");
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(emb.data[9], 1009.0f);
  EXPECT_EQ(m->tensors.at("model.layers.0.mlp.down_proj.weight").data[3], 10003.0f);
  EXPECT_EQ(m->tensors.at("lm_head.weight").data[0], 12000.0f);
}

TEST(Gguf, QkRowPermutationUndoneAsTransformers) {
  TempDir dir;
  auto m = load_bytes(dir, tiny_llama().build());
  ASSERT_TRUE(m.ok());
  // Q: 8 rows, 2 heads, dim = 8/2/2 = 2: HF row h·4 + j·2 + i = GGUF row h·4 + i·2 + j.
  const HostTensor& q = m->tensors.at("model.layers.0.self_attn.q_proj.weight");
  const int expect_q[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(q.data[r * 8], 3000.0f + expect_q[r] * 8) << r;
  // K: 4 rows, 1 KV head, dim 2.
  const HostTensor& k = m->tensors.at("model.layers.0.self_attn.k_proj.weight");
  const int expect_k[4] = {0, 2, 1, 3};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(k.data[r * 8], 4000.0f + expect_k[r] * 8) << r;
  // V is not permuted.
  const HostTensor& v = m->tensors.at("model.layers.0.self_attn.v_proj.weight");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(v.data[r * 8], 5000.0f + r * 8);
}

TEST(Gguf, TiedWhenOutputAbsent) {
  TempDir dir;
  auto m = load_bytes(dir, tiny_llama(false).build());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->config.tied_embeddings);
  EXPECT_EQ(m->tensors.count("lm_head.weight"), 0u);
}

// qwen2moe as llama.cpp writes it: stacked experts (ne = [in, out, E]), shared expert with a
// [H] gate, q/k/v biases, no Q/K permutation, no output.weight (tied).
TEST(Gguf, Qwen2MoeMapping) {
  GgufBuilder b;
  b.kv_str("general.architecture", "qwen2moe");
  b.kv_u32("qwen2moe.context_length", 32);
  b.kv_u32("qwen2moe.embedding_length", 8);
  b.kv_u32("qwen2moe.block_count", 1);
  b.kv_u32("qwen2moe.feed_forward_length", 16);
  b.kv_u32("qwen2moe.attention.head_count", 2);
  b.kv_u32("qwen2moe.attention.head_count_kv", 1);
  b.kv_u32("qwen2moe.expert_count", 2);
  b.kv_u32("qwen2moe.expert_used_count", 1);
  b.kv_u32("qwen2moe.expert_feed_forward_length", 4);
  b.kv_u32("qwen2moe.expert_shared_feed_forward_length", 4);
  b.kv_u32("qwen2moe.vocab_size", 6);
  auto f = [&](const std::string& name, std::vector<uint64_t> ne, float base) {
    b.f32(name, ne, [base](uint64_t i) { return base + static_cast<float>(i); });
  };
  f("token_embd.weight", {8, 6}, 0);
  f("blk.0.attn_norm.weight", {8}, 0);
  f("blk.0.attn_q.weight", {8, 8}, 100);
  f("blk.0.attn_q.bias", {8}, 0);
  f("blk.0.attn_k.weight", {8, 4}, 0);
  f("blk.0.attn_k.bias", {4}, 0);
  f("blk.0.attn_v.weight", {8, 4}, 0);
  f("blk.0.attn_v.bias", {4}, 0);
  f("blk.0.attn_output.weight", {8, 8}, 0);
  f("blk.0.ffn_norm.weight", {8}, 0);
  f("blk.0.ffn_gate_inp.weight", {8, 2}, 0);
  f("blk.0.ffn_gate_exps.weight", {8, 4, 2}, 1000);
  f("blk.0.ffn_up_exps.weight", {8, 4, 2}, 2000);
  f("blk.0.ffn_down_exps.weight", {4, 8, 2}, 3000);
  f("blk.0.ffn_gate_inp_shexp.weight", {8}, 4000);
  f("blk.0.ffn_gate_shexp.weight", {8, 4}, 0);
  f("blk.0.ffn_up_shexp.weight", {8, 4}, 0);
  f("blk.0.ffn_down_shexp.weight", {4, 8}, 0);
  f("output_norm.weight", {8}, 0);
  TempDir dir;
  auto m = load_bytes(dir, b.build());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kQwen2Moe);
  EXPECT_EQ(c.experts, 2);
  EXPECT_EQ(c.top_k, 1);
  EXPECT_EQ(c.moe_ffn, 4);
  EXPECT_EQ(c.shared_ffn, 4);
  EXPECT_TRUE(c.shared_expert_gate);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_TRUE(c.tied_embeddings);
  const std::string p = "model.layers.0.mlp.";
  // Expert 1 is the second [4, 8] slab of the stack.
  EXPECT_EQ(m->tensors.at(p + "experts.1.gate_proj.weight").shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(m->tensors.at(p + "experts.1.gate_proj.weight").data[0], 1032.0f);
  EXPECT_EQ(m->tensors.at(p + "experts.0.up_proj.weight").data[31], 2031.0f);
  EXPECT_EQ(m->tensors.at(p + "experts.1.down_proj.weight").shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(m->tensors.at(p + "experts.1.down_proj.weight").data[0], 3032.0f);
  EXPECT_EQ(m->tensors.at(p + "shared_expert_gate.weight").shape, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(m->tensors.at(p + "shared_expert_gate.weight").data[7], 4007.0f);
  // No permutation outside llama.
  const HostTensor& q = m->tensors.at("model.layers.0.self_attn.q_proj.weight");
  for (int r = 0; r < 8; ++r) EXPECT_EQ(q.data[r * 8], 100.0f + r * 8);
  EXPECT_EQ(m->tensors.at("model.layers.0.self_attn.k_proj.bias").shape,
            (std::vector<int64_t>{4}));
}

// A one-layer qwen3 file (q/k norms of head_dim 4, no Q/K permutation).
GgufBuilder tiny_qwen3(const std::string& arch = "qwen3") {
  GgufBuilder b;
  const std::string a = arch + ".";
  b.kv_str("general.architecture", arch);
  b.kv_u32(a + "context_length", 32);
  b.kv_u32(a + "embedding_length", 8);
  b.kv_u32(a + "block_count", 1);
  b.kv_u32(a + "feed_forward_length", 16);
  b.kv_u32(a + "attention.head_count", 2);
  b.kv_u32(a + "attention.head_count_kv", 1);
  b.kv_u32(a + "attention.key_length", 4);
  b.kv_u32(a + "attention.value_length", 4);
  b.kv_u32(a + "vocab_size", 6);
  auto f = [&](const std::string& name, std::vector<uint64_t> ne, float base) {
    b.f32(name, ne, [base](uint64_t i) { return base + static_cast<float>(i); });
  };
  f("token_embd.weight", {8, 6}, 0);
  f("blk.0.attn_norm.weight", {8}, 0);
  f("blk.0.attn_q.weight", {8, 8}, 100);
  f("blk.0.attn_k.weight", {8, 4}, 0);
  f("blk.0.attn_v.weight", {8, 4}, 0);
  f("blk.0.attn_q_norm.weight", {4}, 500);
  f("blk.0.attn_k_norm.weight", {4}, 600);
  f("blk.0.attn_output.weight", {8, 8}, 0);
  f("blk.0.ffn_norm.weight", {8}, 0);
  f("blk.0.ffn_gate.weight", {8, 16}, 0);
  f("blk.0.ffn_up.weight", {8, 16}, 0);
  f("blk.0.ffn_down.weight", {16, 8}, 0);
  f("output_norm.weight", {8}, 0);
  return b;
}

TEST(Gguf, Qwen3Mapping) {
  TempDir dir;
  auto m = load_bytes(dir, tiny_qwen3().build());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->config.arch, Arch::kQwen3);
  EXPECT_TRUE(m->config.qk_norm);
  EXPECT_EQ(m->config.head_dim, 4);
  EXPECT_EQ(m->tensors.at("model.layers.0.self_attn.k_norm.weight").shape,
            (std::vector<int64_t>{4}));
  EXPECT_EQ(m->tensors.at("model.layers.0.self_attn.k_norm.weight").data[3], 603.0f);
  const HostTensor& q = m->tensors.at("model.layers.0.self_attn.q_proj.weight");
  for (int r = 0; r < 8; ++r) EXPECT_EQ(q.data[r * 8], 100.0f + r * 8);  // not permuted
}

TEST(Gguf, Qwen3RefusalsNameTheKey) {
  TempDir dir;
  auto expect = [&](const GgufBuilder& b, ErrorCode code, const std::string& part) {
    auto m = load_bytes(dir, b.build());
    ASSERT_FALSE(m.ok()) << part;
    EXPECT_EQ(m.status().code(), code) << m.status().to_string();
    EXPECT_NE(m.status().message().find(part), std::string::npos) << m.status().to_string();
  };
  GgufBuilder b = tiny_qwen3();
  b.kv_u32("qwen3.expert_count", 4);
  expect(b, ErrorCode::kUnsupported, "qwen3.expert_count");
  expect(tiny_qwen3("qwen3moe"), ErrorCode::kBadModel, "qwen3moe.expert_count");
  b = tiny_qwen3();
  b.kv_str("qwen3.rope.scaling.type", "yarn");
  expect(b, ErrorCode::kUnsupported, "qwen3.rope.scaling.type = yarn");
  b = tiny_qwen3();
  b.f32("blk.0.attn_q.bias", {8}, [](uint64_t) { return 0.0f; });
  expect(b, ErrorCode::kUnsupported, "attention biases");
}

// A one-layer deepseek2 file as llama.cpp's converter writes it (MLA as MQA metadata, kv_b
// split into attn_k_b / attn_v_b, one MoE layer with exp_probs_b and a shared expert).
// Heads 2, kv_lora 4, nope 2, rope 2, v 3, 4 experts of 4 in 2 groups, top-2.
struct Deepseek2Variant {
  uint32_t gating = 2, groups = 2;
  std::string rope_scaling;  // empty: none
  bool v_b = true;
};
GgufBuilder tiny_deepseek2(const Deepseek2Variant& v = {}) {
  GgufBuilder b;
  const std::string a = "deepseek2.";
  b.kv_str("general.architecture", "deepseek2");
  b.kv_u32(a + "context_length", 32);
  b.kv_u32(a + "embedding_length", 8);
  b.kv_u32(a + "block_count", 1);
  b.kv_u32(a + "feed_forward_length", 16);
  b.kv_u32(a + "attention.head_count", 2);
  b.kv_u32(a + "attention.head_count_kv", 1);
  b.kv_u32(a + "attention.kv_lora_rank", 4);
  b.kv_u32(a + "attention.key_length", 6);
  b.kv_u32(a + "attention.value_length", 4);
  b.kv_u32(a + "attention.key_length_mla", 4);
  b.kv_u32(a + "attention.value_length_mla", 3);
  b.kv_u32(a + "rope.dimension_count", 2);
  b.kv_u32(a + "vocab_size", 6);
  b.kv_u32(a + "leading_dense_block_count", 0);
  b.kv_u32(a + "expert_count", 4);
  b.kv_u32(a + "expert_used_count", 2);
  b.kv_u32(a + "expert_shared_count", 1);
  b.kv_u32(a + "expert_feed_forward_length", 4);
  b.kv_u32(a + "expert_group_count", v.groups);
  b.kv_u32(a + "expert_group_used_count", 1);
  b.kv_u32(a + "expert_gating_func", v.gating);
  if (!v.rope_scaling.empty()) b.kv_str(a + "rope.scaling.type", v.rope_scaling);
  b.kv_f32(a + "expert_weights_scale", 2.5f);
  b.kv_bool(a + "expert_weights_norm", true);
  auto f = [&](const std::string& name, std::vector<uint64_t> ne, float base) {
    b.f32(name, ne, [base](uint64_t i) { return base + static_cast<float>(i); });
  };
  f("token_embd.weight", {8, 6}, 0);
  f("blk.0.attn_norm.weight", {8}, 0);
  f("blk.0.attn_q.weight", {8, 8}, 0);             // no q LoRA: [heads × (nope + rope), H]
  f("blk.0.attn_kv_a_mqa.weight", {8, 6}, 0);      // [kv_lora + rope, H]
  f("blk.0.attn_kv_a_norm.weight", {4}, 0);
  f("blk.0.attn_k_b.weight", {2, 4, 2}, 100);      // HF [heads, kv_lora, nope]
  if (v.v_b) f("blk.0.attn_v_b.weight", {4, 3, 2}, 200);  // HF [heads, v, kv_lora]
  f("blk.0.attn_output.weight", {6, 8}, 0);
  f("blk.0.ffn_norm.weight", {8}, 0);
  f("blk.0.ffn_gate_inp.weight", {8, 4}, 0);
  f("blk.0.exp_probs_b.bias", {4}, 300);
  f("blk.0.ffn_gate_exps.weight", {8, 4, 4}, 0);
  f("blk.0.ffn_up_exps.weight", {8, 4, 4}, 0);
  f("blk.0.ffn_down_exps.weight", {4, 8, 4}, 0);
  f("blk.0.ffn_gate_shexp.weight", {8, 4}, 0);
  f("blk.0.ffn_up_shexp.weight", {8, 4}, 0);
  f("blk.0.ffn_down_shexp.weight", {4, 8}, 0);
  f("output_norm.weight", {8}, 0);
  return b;
}

TEST(Gguf, Deepseek2Mapping) {
  TempDir dir;
  auto m = load_bytes(dir, tiny_deepseek2().build());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kDeepseekV3);
  EXPECT_TRUE(c.mla);
  EXPECT_EQ(c.kv_heads, 2);  // MLA's "MQA" head count is not the model's
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_EQ(c.qk_nope_dim, 2);
  EXPECT_EQ(c.qk_rope_dim, 2);
  EXPECT_EQ(c.v_head_dim, 3);
  EXPECT_EQ(c.n_group, 2);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_EQ(c.routed_scaling, 2.5f);
  EXPECT_TRUE(c.router_bias);
  EXPECT_EQ(c.shared_ffn, 4);
  // kv_b_proj joined back: head h rows [W_UK_h (nope rows of kv_lora) ; W_UV_h (v rows)].
  const HostTensor& kvb = m->tensors.at("model.layers.0.self_attn.kv_b_proj.weight");
  ASSERT_EQ(kvb.shape, (std::vector<int64_t>{2 * (2 + 3), 4}));
  // k_b[h][j][i] = 100 + h·8 + j·2 + i lands at row h·5 + i, column j.
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j)
        EXPECT_EQ(kvb.data[(h * 5 + i) * 4 + j], 100.0f + h * 8 + j * 2 + i);
  // v_b[h][r][j] = 200 + h·12 + r·4 + j at row h·5 + 2 + r.
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < 3; ++r)
      for (int j = 0; j < 4; ++j)
        EXPECT_EQ(kvb.data[(h * 5 + 2 + r) * 4 + j], 200.0f + h * 12 + r * 4 + j);
  EXPECT_EQ(m->tensors.at("model.layers.0.mlp.gate.e_score_correction_bias").data[3], 303.0f);
  EXPECT_TRUE(m->tensors.count("model.layers.0.mlp.shared_experts.down_proj.weight"));
}

TEST(Gguf, Deepseek2RefusalsNameTheKey) {
  TempDir dir;
  auto expect = [&](const GgufBuilder& b, ErrorCode code, const std::string& part) {
    auto m = load_bytes(dir, b.build());
    ASSERT_FALSE(m.ok()) << part;
    EXPECT_EQ(m.status().code(), code) << m.status().to_string();
    EXPECT_NE(m.status().message().find(part), std::string::npos) << m.status().to_string();
  };
  Deepseek2Variant v;
  v.gating = 1;
  expect(tiny_deepseek2(v), ErrorCode::kUnsupported, "deepseek2.expert_gating_func 1");
  v = {};
  v.rope_scaling = "yarn";
  expect(tiny_deepseek2(v), ErrorCode::kUnsupported, "deepseek2.rope.scaling.type = yarn");
  v = {};
  v.groups = 3;
  expect(tiny_deepseek2(v), ErrorCode::kBadModel, "expert_group_count 3");
  v = {};
  v.v_b = false;  // kv_b_proj has only one of its two parts
  expect(tiny_deepseek2(v), ErrorCode::kShapeMismatch, "attn_k_b / attn_v_b");
}

TEST(Gguf, WeightHashCoversBytesAndNames) {
  TempDir dir;
  auto a = load_bytes(dir, tiny_llama().build(), "a.gguf");
  GgufBuilder changed = tiny_llama();
  changed.tensors[3].data[5] ^= 1;
  auto b = load_bytes(dir, changed.build(), "b.gguf");
  auto c = load_bytes(dir, tiny_llama().build(), "c.gguf");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE(a->weight_hash, b->weight_hash);
  EXPECT_EQ(a->weight_hash, c->weight_hash);  // the path is not part of the identity
}

TEST(Gguf, MetadataGetters) {
  TempDir dir;
  GgufBuilder b = tiny_llama();
  b.kv_str_array("tokenizer.ggml.tokens", {"a", "b"});
  b.kv_i32_array("x.ints", {-1, 7});
  b.kv_bool("x.flag", true);
  write_bytes(dir.file("m.gguf"), b.build());
  auto f = GgufFile::open(dir.file("m.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("llama.block_count"), 1);
  EXPECT_EQ(*f->get_float("llama.rope.freq_base"), 500000.0);
  EXPECT_TRUE(*f->get_bool("x.flag"));
  EXPECT_EQ(f->find("x.ints")->ints, (std::vector<int64_t>{-1, 7}));
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->strings.size(), 2u);
  EXPECT_EQ(f->get_int("general.architecture").status().code(), ErrorCode::kBadModel);
  EXPECT_EQ(f->get_string("nope").status().code(), ErrorCode::kNotFound);
}

// --- malformed files -------------------------------------------------------------------

struct BadCase {
  const char* what;
  ErrorCode code;
  const char* message_part;
};

void expect_error(const Result<LoadedModel>& r, ErrorCode code, const std::string& part) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(part), std::string::npos)
      << "message \"" << r.status().message() << "\" lacks \"" << part << "\"";
}

TEST(GgufErrors, TruncatedAnywhere) {
  // Every prefix of a valid file fails cleanly (header, metadata, tensor infos, data).
  TempDir dir;
  const std::string full = tiny_llama().build();
  for (size_t cut : {size_t{0}, size_t{3}, size_t{7}, size_t{20}, size_t{60}, size_t{200},
                     full.size() / 2, full.size() - 1}) {
    auto r = load_bytes(dir, full.substr(0, cut));
    ASSERT_FALSE(r.ok()) << "prefix " << cut;
    EXPECT_TRUE(r.status().code() == ErrorCode::kTruncated ||
                r.status().code() == ErrorCode::kBadModel ||
                r.status().code() == ErrorCode::kInvalidArgument)
        << cut << ": " << r.status().to_string();
  }
}

TEST(GgufErrors, BadMagicAndVersion) {
  TempDir dir;
  std::string s = tiny_llama().build();
  s[0] = 'X';
  write_bytes(dir.file("m.gguf"), s);
  expect_error(load_model(dir.file("m.gguf")), ErrorCode::kBadModel, "not a GGUF file");
  GgufBuilder v1 = tiny_llama();
  v1.version = 1;
  expect_error(load_bytes(dir, v1.build()), ErrorCode::kUnsupported, "version 1");
  GgufBuilder be = tiny_llama();
  be.version = 0x03000000;  // a big-endian file read little-endian
  expect_error(load_bytes(dir, be.build()), ErrorCode::kUnsupported, "big-endian");
}

TEST(GgufErrors, LyingCounts) {
  TempDir dir;
  GgufBuilder t = tiny_llama();
  t.tensor_count_override = uint64_t{1} << 60;
  expect_error(load_bytes(dir, t.build()), ErrorCode::kBadModel, "tensor count");
  GgufBuilder k = tiny_llama();
  k.kv_count_override = uint64_t{1} << 63;
  expect_error(load_bytes(dir, k.build()), ErrorCode::kBadModel, "metadata count");
  GgufBuilder more = tiny_llama();
  more.kv_count_override = more.n_kv + 3;  // reads tensor infos as metadata, then runs out
  EXPECT_FALSE(load_bytes(dir, more.build()).ok());
}

TEST(GgufErrors, LyingStringAndArrayLengths) {
  TempDir dir;
  GgufBuilder s = tiny_llama();
  s.key("x.s", 8);
  put_u64(s.kv, uint64_t{1} << 62);  // string length far past the end
  expect_error(load_bytes(dir, s.build()), ErrorCode::kBadModel, "runs past the end");
  GgufBuilder a = tiny_llama();
  a.key("x.a", 9);
  put_u32(a.kv, 4);
  put_u64(a.kv, uint64_t{1} << 61);  // 2^61 u32 elements
  expect_error(load_bytes(dir, a.build()), ErrorCode::kBadModel, "cannot fit");
  GgufBuilder sa = tiny_llama();
  sa.key("x.sa", 9);
  put_u32(sa.kv, 8);
  put_u64(sa.kv, uint64_t{1} << 40);  // 2^40 strings
  expect_error(load_bytes(dir, sa.build()), ErrorCode::kBadModel, "cannot fit");
  GgufBuilder bad_type = tiny_llama();
  bad_type.key("x.t", 77);
  expect_error(load_bytes(dir, bad_type.build()), ErrorCode::kBadModel, "value type 77");
  GgufBuilder dup = tiny_llama();
  dup.kv_u32("llama.block_count", 1);
  expect_error(load_bytes(dir, dup.build()), ErrorCode::kBadModel, "appears twice");
}

TEST(GgufErrors, TensorInfos) {
  TempDir dir;
  GgufBuilder dims = tiny_llama();
  dims.tensors[1].ne = {8, 1, 1, 1, 1};
  expect_error(load_bytes(dir, dims.build()), ErrorCode::kBadModel, "5 dimensions");
  GgufBuilder zero = tiny_llama();
  zero.tensors[1].ne = {0};
  expect_error(load_bytes(dir, zero.build()), ErrorCode::kBadModel, "dimension 0 is 0");
  GgufBuilder overflow = tiny_llama();
  overflow.tensors[1].ne = {uint64_t{1} << 40, uint64_t{1} << 40};
  expect_error(load_bytes(dir, overflow.build()), ErrorCode::kBadModel, "dimension 1");
  GgufBuilder huge = tiny_llama();
  huge.tensors[2].ne = {uint64_t{1} << 30, uint64_t{1} << 5};  // 128 GiB of F32 declared
  expect_error(load_bytes(dir, huge.build()), ErrorCode::kTruncated, "past the end");
  GgufBuilder type = tiny_llama();
  type.tensors[2].type = 16;  // IQ2_XXS
  expect_error(load_bytes(dir, type.build()), ErrorCode::kUnsupported, "IQ2_XXS");
  GgufBuilder type2 = tiny_llama();
  type2.tensors[2].type = 1234;
  expect_error(load_bytes(dir, type2.build()), ErrorCode::kUnsupported, "type 1234");
  GgufBuilder rows = tiny_llama();
  rows.tensors[2].type = 8;  // Q8_0 needs rows of 32
  expect_error(load_bytes(dir, rows.build()), ErrorCode::kBadModel, "block size 32");
  GgufBuilder past = tiny_llama();
  past.tensors[4].offset = 1 << 20;
  expect_error(load_bytes(dir, past.build()), ErrorCode::kTruncated, "blk.0.attn_v.weight");
  GgufBuilder wrap = tiny_llama();
  wrap.tensors[4].offset = ~uint64_t{0} - 31;  // offset + size wraps around
  expect_error(load_bytes(dir, wrap.build()), ErrorCode::kTruncated, "past the end");
  GgufBuilder misaligned = tiny_llama();
  misaligned.tensors[4].offset = 4;
  expect_error(load_bytes(dir, misaligned.build()), ErrorCode::kBadModel, "alignment");
  GgufBuilder overlap = tiny_llama();
  overlap.tensors[5].offset = 0;
  expect_error(load_bytes(dir, overlap.build()), ErrorCode::kBadModel, "overlap");
  GgufBuilder align = tiny_llama();
  align.kv_u32("general.alignment_x", 1);  // harmless extra key
  EXPECT_TRUE(load_bytes(dir, align.build()).ok());
}

TEST(GgufErrors, BadAlignment) {
  TempDir dir;
  GgufBuilder b;
  b.kv_u32("general.alignment", 48);
  expect_error(load_bytes(dir, b.build()), ErrorCode::kBadModel, "power of two");
}

TEST(GgufErrors, ModelLevel) {
  TempDir dir;
  GgufBuilder missing = tiny_llama();
  missing.tensors.erase(missing.tensors.begin() + 8);  // blk.0.ffn_up
  expect_error(load_bytes(dir, missing.build()), ErrorCode::kMissingTensor,
               "model.layers.0.mlp.up_proj.weight");
  GgufBuilder shape = tiny_llama();
  shape.tensors[7].ne = {8, 7};  // ffn_gate out 7, config says 8
  shape.tensors[7].data.resize(8 * 7 * 4);
  expect_error(load_bytes(dir, shape.build()), ErrorCode::kShapeMismatch, "expected [8, 8]");
  GgufBuilder extra = tiny_llama();
  extra.f32("rope_freqs.weight", {2}, [](uint64_t) { return 1.0f; });
  expect_error(load_bytes(dir, extra.build()), ErrorCode::kUnsupported, "rope_freqs.weight");
  GgufBuilder arch;
  arch.kv_str("general.architecture", "mamba");
  expect_error(load_bytes(dir, arch.build()), ErrorCode::kUnsupported, "mamba");
  GgufBuilder no_hidden;
  no_hidden.kv_str("general.architecture", "llama");
  expect_error(load_bytes(dir, no_hidden.build()), ErrorCode::kBadModel, "embedding_length");
  GgufBuilder heads = tiny_llama();
  heads.kv_u32("llama.attention.head_count", 3);  // duplicate key → rejected first
  EXPECT_FALSE(load_bytes(dir, heads.build()).ok());
  GgufBuilder scaling = tiny_llama();
  scaling.kv_str("llama.rope.scaling.type", "yarn");
  expect_error(load_bytes(dir, scaling.build()), ErrorCode::kUnsupported, "yarn");
  GgufBuilder wrong_type = tiny_llama();
  wrong_type.kv_str("llama.expert_count", "eight");
  expect_error(load_bytes(dir, wrong_type.build()), ErrorCode::kBadModel, "expected an integer");
}

// Corrupting bytes anywhere (counts, lengths, types, offsets, data) gives a load or a clear
// error — never a crash, a hang or an out-of-bounds read (run under ASan in the asan preset).
TEST(GgufErrors, RandomCorruptionIsContained) {
  TempDir dir;
  const std::string good = tiny_llama().build();
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  int failed = 0;
  for (int iter = 0; iter < 250; ++iter) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = next() % bad.size();
      bad[at] = static_cast<char>(next() % 3 == 0 ? 0xff : next() & 0xff);
    }
    auto r = load_bytes(dir, bad);
    if (!r.ok()) {
      ++failed;
      EXPECT_FALSE(r.status().message().empty());
      EXPECT_NE(r.status().code(), ErrorCode::kInternal) << r.status().to_string();
    }
  }
  EXPECT_GT(failed, 60);  // most corruptions are caught
}

TEST(GgufErrors, NotAFile) {
  TempDir dir;
  expect_error(load_model(dir.file("absent.gguf")), ErrorCode::kNotFound, "absent.gguf");
  write_bytes(dir.file("empty.gguf"), "");
  auto r = load_model(dir.file("empty.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTruncated) << r.status().to_string();
}

}  // namespace
}  // namespace llmrr
