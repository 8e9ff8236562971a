// ggml dequantization: every type against gguf-py's dequantize (what transformers calls) on
// random blocks from the fixtures, bit for bit; and a few hand-built blocks whose values
// follow from ggml's formulas by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fixtures/fixtures.h"
#include "llmrr/runtime/gguf.h"
#include "loader_test_util.h"

namespace llmrr {
namespace {

TEST(Dequant, MatchesGgufPyOnRandomBlocks) {
  const auto& table = fixtures::manifest()["dequant"];
  ASSERT_TRUE(table.is_object());
  EXPECT_EQ(table.size(), 12u);  // Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K F16 BF16
  for (auto it = table.begin(); it != table.end(); ++it) {
    const std::string name = it.key();
    const uint32_t type = it.value()["type"].get<uint32_t>();
    std::string blocks = read_bytes(fixtures::path("dequant/" + name + ".blocks.bin"));
    std::string err;
    auto expected = fixtures::read_npy(fixtures::path("dequant/" + name + ".expected.npy"), &err);
    ASSERT_TRUE(expected.has_value()) << err;
    const int64_t n = expected->numel();
    EXPECT_EQ(ggml_type_name(type), name);
    std::vector<float> out(static_cast<size_t>(n));
    Status s = ggml_dequantize(type, reinterpret_cast<const uint8_t*>(blocks.data()),
                               blocks.size(), n, out.data());
    ASSERT_TRUE(s.ok()) << name << ": " << s.to_string();
    for (int64_t i = 0; i < n; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &out[i], 4);
      std::memcpy(&b, &expected->f32[i], 4);
      ASSERT_EQ(a, b) << name << " value " << i << ": " << out[i] << " vs " << expected->f32[i];
    }
  }
}

std::string half(uint16_t h) {
  std::string s;
  put_u16(s, h);
  return s;
}

TEST(Dequant, Q4_0ByHand) {
  // d = 0.5 (fp16 0x3800); qs[j] = lo j%16, hi 15 - j%16.
  std::string b = half(0x3800);
  for (int j = 0; j < 16; ++j) put_u8(b, static_cast<uint8_t>(j | ((15 - j) << 4)));
  std::vector<float> y(32);
  ASSERT_TRUE(ggml_dequantize(2, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 32,
                              y.data()).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f);
  }
}

TEST(Dequant, Q4_1ByHand) {
  // d = 0.25, m = -1 (0xBC00): y = q·0.25 − 1.
  std::string b = half(0x3400) + half(0xBC00);
  for (int j = 0; j < 16; ++j) put_u8(b, static_cast<uint8_t>(j | (j << 4)));
  std::vector<float> y(32);
  ASSERT_TRUE(ggml_dequantize(3, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 32,
                              y.data()).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.25f - 1.0f);
    EXPECT_EQ(y[j + 16], j * 0.25f - 1.0f);
  }
}

TEST(Dequant, Q5_0ByHand) {
  // d = 1; element j takes bit j of qh as its fifth bit: qh = 0xAAAAAAAA (odd elements).
  std::string b = half(0x3C00);
  put_u32(b, 0xAAAAAAAAu);
  for (int j = 0; j < 16; ++j) put_u8(b, 0x00);
  std::vector<float> y(32);
  ASSERT_TRUE(ggml_dequantize(6, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 32,
                              y.data()).ok());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j % 2 ? 16 : 0) - 16.0f) << j;
}

TEST(Dequant, Q8_0ByHand) {
  std::string b = half(0xC000);  // d = -2
  for (int j = 0; j < 32; ++j) put_u8(b, static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  std::vector<float> y(32);
  ASSERT_TRUE(ggml_dequantize(8, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 32,
                              y.data()).ok());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j - 16) * -2.0f);
}

TEST(Dequant, Q8_KByHand) {
  // Q8_K: f32 d, 256 int8, 16 int16 block sums (ignored by dequantization).
  std::string b;
  put_f32(b, 0.125f);
  for (int j = 0; j < 256; ++j) put_u8(b, static_cast<uint8_t>(static_cast<int8_t>(j - 128)));
  for (int j = 0; j < 16; ++j) put_u16(b, 0x7777);
  ASSERT_EQ(b.size(), 292u);
  std::vector<float> y(256);
  ASSERT_TRUE(ggml_dequantize(15, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 256,
                              y.data()).ok());
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], (j - 128) * 0.125f);
}

TEST(Dequant, Q4_KByHandScaleLayout) {
  // d = 1, dmin = 1; sub-block s has 6-bit scale 9s and min 63 − 9s (high bits used for
  // s ≥ 4), packed in get_scale_min_k4's layout; every quant is 3 → y = 9s·3 − (63 − 9s).
  std::string b = half(0x3C00) + half(0x3C00);
  uint8_t sc[12] = {};
  for (int s = 0; s < 8; ++s) {
    const int ls = 9 * s, lm = 63 - 9 * s;
    if (s < 4) {
      sc[s] = static_cast<uint8_t>(ls);
      sc[s + 4] = static_cast<uint8_t>(lm);
    } else {
      sc[s + 4] = static_cast<uint8_t>((ls & 0xf) | ((lm & 0xf) << 4));
      sc[s - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      sc[s] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  b.append(reinterpret_cast<const char*>(sc), 12);
  b.append(128, static_cast<char>(0x33));
  std::vector<float> y(256);
  ASSERT_TRUE(ggml_dequantize(12, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 256,
                              y.data()).ok());
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32;
    EXPECT_EQ(y[i], static_cast<float>(9 * s * 3 - (63 - 9 * s))) << i;
  }
}

TEST(Dequant, Q6_KByHand) {
  // d = 1; scales 1..16; every 6-bit quant = 33 (ql nibble 1, qh bits 2) → y = scale·1.
  std::string b(128, static_cast<char>(0x11));
  b.append(64, static_cast<char>(0xAA));
  for (int s = 0; s < 16; ++s) put_u8(b, static_cast<uint8_t>(s + 1));
  b += half(0x3C00);
  ASSERT_EQ(b.size(), 210u);
  std::vector<float> y(256);
  ASSERT_TRUE(ggml_dequantize(14, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 256,
                              y.data()).ok());
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], static_cast<float>(i / 16 + 1)) << i;
}

TEST(Dequant, F16Subnormal) {
  std::string b = half(0x0001) + half(0x8400) + half(0x7C00) + half(0x3555);
  std::vector<float> y(4);
  ASSERT_TRUE(ggml_dequantize(1, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 4,
                              y.data()).ok());
  EXPECT_EQ(y[0], 0x1p-24f);
  EXPECT_EQ(y[1], -0x1p-14f);
  EXPECT_TRUE(std::isinf(y[2]));
  EXPECT_EQ(y[3], 0x1.554p-2f);
}

TEST(Dequant, RejectsBadSizesAndTypes) {
  std::vector<float> y(64);
  std::string b(34, '\0');
  EXPECT_EQ(ggml_dequantize(8, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 33, y.data())
                .code(),
            ErrorCode::kBadModel);  // not a whole block
  EXPECT_EQ(ggml_dequantize(8, reinterpret_cast<const uint8_t*>(b.data()), 33, 32, y.data()).code(),
            ErrorCode::kBadModel);  // byte count
  EXPECT_EQ(ggml_dequantize(16, reinterpret_cast<const uint8_t*>(b.data()), b.size(), 32, y.data())
                .code(),
            ErrorCode::kUnsupported);  // IQ2_XXS
  EXPECT_EQ(ggml_type_name(16), "IQ2_XXS");
  EXPECT_EQ(ggml_type_name(99), "type 99");
}

}  // namespace
}  // namespace llmrr
