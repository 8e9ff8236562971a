// SmolLM2-135M-Instruct (Q4_1 GGUF, fetched by tools/setup/smollm2): every tensor equals the
// one transformers builds from the file, and the tokenizer gives transformers' ids. Skips
// when the model has not been fetched.
#include <gtest/gtest.h>

#include "fixtures/fixtures.h"
#include "llmrr/runtime/gguf.h"
#include "llmrr/runtime/model.h"

namespace llmrr {
namespace {

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = find_smollm2();
    if (path.empty()) return;
    auto m = load_model(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = new LoadedModel(std::move(m).value());
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (!model_)
      GTEST_SKIP() << "SmolLM2 not found in " << model_cache_dir()
                   << " (run tools/setup/smollm2, or set LLMRR_MODEL_DIR)";
    ASSERT_TRUE(fixtures::manifest().contains("smollm2")) << "manifest lacks smollm2 fixtures";
  }
  static const nlohmann::json& ref() { return fixtures::manifest()["smollm2"]; }
  static LoadedModel* model_;
};
LoadedModel* SmolLM2::model_ = nullptr;

TEST_F(SmolLM2, Config) {
  const ModelConfig& c = model_->config;
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.heads, 9);
  EXPECT_EQ(c.kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn, 1536);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.max_positions, 8192);
  EXPECT_EQ(c.bos, 1);
  EXPECT_EQ(c.eos, 2);
  EXPECT_EQ(c.weight_type, kernels::WeightType::kF32);
  EXPECT_EQ(model_->identity, "gguf:SmolLM2-135M-Instruct.Q4_1");
  ASSERT_NE(model_->tokenizer, nullptr) << model_->tokenizer_note;
}

TEST_F(SmolLM2, TensorsEqualTransformers) {
  const auto& expected = ref()["tensors"];
  ASSERT_EQ(model_->tensors.size(), expected.size());
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    auto t = model_->tensors.find(it.key());
    ASSERT_NE(t, model_->tensors.end()) << it.key();
    EXPECT_EQ(t->second.shape, it.value()["shape"].get<std::vector<int64_t>>()) << it.key();
    EXPECT_EQ(fixtures::crc32_hex(t->second.data), it.value()["crc32"].get<std::string>())
        << it.key() << " differs from transformers' dequantized tensor";
  }
}

TEST_F(SmolLM2, TensorTypes) {
  auto f = GgufFile::open(find_smollm2());
  ASSERT_TRUE(f.ok());
  std::map<std::string, int> types;
  for (const auto& t : f->tensors()) types[ggml_type_name(t.type)]++;
  EXPECT_EQ(types, (std::map<std::string, int>{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));
}

TEST_F(SmolLM2, TokenizerMatchesTransformers) {
  const Tokenizer& tok = *model_->tokenizer;
  for (const auto& s : ref()["tokenizer"]) {
    const std::string text = s["text"].get<std::string>();
    const auto expected = s["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), expected) << text;
    EXPECT_EQ(tok.decode(expected), text);
  }
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.eos(), 2);
}

// The raw prompt of the llama.cpp comparison: the GGUF says add_bos_token = false, so no BOS;
// the ids are the ones llama.cpp's tokenizer gives for the same text and file
// (llama_cpp.Llama.tokenize(text, add_bos=True), which honours the flag).
TEST_F(SmolLM2, RawPromptIdsMatchLlamaCpp) {
  const Tokenizer& tok = *model_->tokenizer;
  EXPECT_EQ(tok.encode("The capital of France is"),
            (std::vector<int32_t>{504, 3575, 282, 4649, 314}));
}

TEST_F(SmolLM2, ChatPromptMatchesTemplate) {
  const Tokenizer& tok = *model_->tokenizer;
  ASSERT_TRUE(tok.has_chat_template());
  EXPECT_EQ(tok.chat_prompt("What is the capital of France?"),
            ref()["chat_template_render"].get<std::string>());
  EXPECT_EQ(tok.encode(tok.chat_prompt("What is the capital of France?")),
            ref()["prompts"]["chat_france"]["ids"].get<std::vector<int32_t>>());
}

}  // namespace
}  // namespace llmrr
