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
