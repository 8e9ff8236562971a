// Quantized GEMM (kernels/quant.h): for every ggml format, every plan of the GEMM table and
// shapes that cut groups and panels in every way, gemm on the quantized weight equals
// ref::gemm on the weight's values (PackedWeight::at) bit for bit, on every ISA and thread
// count; and the embedding lookup from a packed table reads the same values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/quant.h"
#include "llmrr/kernels/reference.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr::kernels::testing {
namespace {

struct Format {
  const char* name;
  uint32_t type;
  std::vector<int> f16_at;  // byte offsets of binary16 scales in a block
  int f32_at = -1;          // byte offset of a binary32 scale (Q8_K)
};

const Format kFormats[] = {
    {"Q4_0", 2, {0}},      {"Q4_1", 3, {0, 2}},   {"Q5_0", 6, {0}},
    {"Q5_1", 7, {0, 2}},   {"Q8_0", 8, {0}},      {"Q2_K", 10, {80, 82}},
    {"Q3_K", 11, {108}},   {"Q4_K", 12, {0, 2}},  {"Q5_K", 13, {0, 2}},
    {"Q6_K", 14, {208}},   {"Q8_K", 15, {}, 0},
};

// Random blocks whose scales are finite binary16 values of moderate size (random bytes
// elsewhere: every code pattern occurs).
std::vector<uint8_t> random_blocks(std::mt19937& rng, const Format& f, int64_t n, int64_t k,
                                   int64_t* row_bytes) {
  int64_t be = 0, bb = 0;
  EXPECT_TRUE(ggml_quant_block(f.type, &be, &bb)) << f.name;
  *row_bytes = k / be * bb;
  std::vector<uint8_t> out(static_cast<size_t>(n * *row_bytes));
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  for (int64_t blk = 0; blk < n * (k / be); ++blk) {
    uint8_t* p = out.data() + blk * bb;
    for (int at : f.f16_at) {
      const uint32_t sign = rng() & 1, exp = 8 + rng() % 7, mant = rng() & 0x3ff;
      const uint16_t h = static_cast<uint16_t>((sign << 15) | (exp << 10) | mant);
      std::memcpy(p + at, &h, 2);
    }
    if (f.f32_at >= 0) {
      const float d = std::ldexp(static_cast<float>(rng() % 1000) / 1000.0f, -6);
      std::memcpy(p + f.f32_at, &d, 4);
    }
  }
  return out;
}

PackedWeight pack_blocks(const Format& f, const std::vector<uint8_t>& blocks, int64_t n,
                         int64_t k, int64_t row_bytes) {
  std::vector<const uint8_t*> rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) rows[r] = blocks.data() + r * row_bytes;
  return pack_ggml(f.type, rows.data(), n, k);
}

struct Shape {
  int64_t m, n, k;
};

TEST(QuantGemm, MatchesReferenceBitsEveryFormatPlanIsaThreadCount) {
  IsaGuard guard;
  std::mt19937 rng(4321);
  const std::vector<Plan> plans = {gemm_plan(1, 0), gemm_plan(1, 16), gemm_plan(1, 48),
                                   gemm_plan(3, 0, {2, 0, 1}), gemm_plan(4, 32),
                                   gemm_plan(7, 16), gemm_plan(8, 0), gemm_plan(40, 0)};
  // Legacy formats take any multiple of 32 for k; k-quants multiples of 256.
  const Shape legacy[] = {{1, 32, 32}, {1, 33, 64}, {2, 5, 96}, {3, 64, 160}, {4, 100, 32},
                          {9, 70, 128}, {1, 300, 64}, {13, 47, 96}};
  const Shape kquant[] = {{1, 32, 256}, {2, 33, 512}, {5, 64, 256}, {9, 40, 256}};
  for (const Format& f : kFormats) {
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(ggml_quant_block(f.type, &be, &bb));
    const auto& shapes = be == 32 ? std::vector<Shape>(std::begin(legacy), std::end(legacy))
                                  : std::vector<Shape>(std::begin(kquant), std::end(kquant));
    for (const Shape& s : shapes) {
      int64_t row_bytes = 0;
      const auto blocks = random_blocks(rng, f, s.n, s.k, &row_bytes);
      const PackedWeight w = pack_blocks(f, blocks, s.n, s.k, row_bytes);
      ASSERT_EQ(w.type(), WeightType::kQuant);
      ASSERT_EQ(w.n(), s.n);
      ASSERT_EQ(w.k(), s.k);
      const int64_t ldx = s.k + 3, ldy = s.n + 5;
      const auto x = random_vec(rng, s.m * ldx + 1);
      for (const Plan& plan : plans) {
        SCOPED_TRACE(::testing::Message() << f.name << " m=" << s.m << " n=" << s.n
                                          << " k=" << s.k << " " << plan_to_string(plan));
        std::vector<float> want(s.m * ldy + 1, 7.0f);
        ref::gemm(x.data(), ldx, s.m, w, want.data(), ldy, plan);
        for (Isa isa : all_isas()) {
          set_isa(isa);
          for (ThreadPool* pool : pools()) {
            std::vector<float> got(want.size(), 7.0f);
            gemm(x.data(), ldx, s.m, w, got.data(), ldy, plan, *pool);
            const int64_t d = first_diff(got.data(), want.data(), got.size());
            ASSERT_EQ(d, -1) << isa_name(isa) << " threads=" << pool->size() << " first diff at "
                             << d << ": " << (d >= 0 ? got[d] : 0) << " vs "
                             << (d >= 0 ? want[d] : 0);
          }
        }
      }
    }
  }
}

// The quantized weight is the fp32 weight of its values: gemm gives the bits of a plain fp32
// PackedWeight packed from at() (the engine relies on this: keeping weights quantized never
// changes a result).
TEST(QuantGemm, EqualsFp32WeightOfTheSameValues) {
  IsaGuard guard;
  std::mt19937 rng(77);
  for (const Format& f : kFormats) {
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(ggml_quant_block(f.type, &be, &bb));
    const int64_t m = 6, n = 70, k = be == 32 ? 192 : 512;
    int64_t row_bytes = 0;
    const auto blocks = random_blocks(rng, f, n, k, &row_bytes);
    const PackedWeight q = pack_blocks(f, blocks, n, k, row_bytes);
    std::vector<float> dense(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) dense[r * k + c] = q.at(r, c);
    const PackedWeight d = PackedWeight::pack(dense.data(), n, k, WeightType::kF32);
    const auto x = random_vec(rng, m * k);
    for (Isa isa : all_isas()) {
      set_isa(isa);
      for (const Plan& plan : {gemm_plan(1, 0), gemm_plan(8, 0), gemm_plan(2, 64)}) {
        std::vector<float> a(m * n), b(m * n);
        gemm(x.data(), k, m, q, a.data(), n, plan, *pools()[1]);
        gemm(x.data(), k, m, d, b.data(), n, plan, *pools()[1]);
        ASSERT_EQ(first_diff(a.data(), b.data(), a.size()), -1)
            << f.name << " " << isa_name(isa) << " " << plan_to_string(plan);
      }
    }
  }
}

// The AVX-512 kernels decode binary16-scaled formats with fma(A, c, B) and 8-bit codes as
// (A·2^-24)·(c·2^24), which equal the contract's A·float(c) then + B only because those
// products are exact for every binary16 A: zero, subnormal and near-maximal scales included.
TEST(QuantGemm, ExtremeBinary16ScalesKeepTheirBits) {
  IsaGuard guard;
  std::mt19937 rng(99);
  const uint16_t kScales[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x0200, 0x0400, 0x7bff,
                              0xfbff, 0x3c00, 0x1234, 0xb800};
  for (const Format& f : kFormats) {
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(ggml_quant_block(f.type, &be, &bb));
    if (be != 32) continue;  // the legacy formats: binary16 d (and m)
    const int64_t m = 3, n = 40, k = 96;
    int64_t row_bytes = 0;
    auto blocks = random_blocks(rng, f, n, k, &row_bytes);
    for (int64_t blk = 0; blk < n * (k / be); ++blk)
      for (int at : f.f16_at) {
        const uint16_t h = kScales[rng() % std::size(kScales)];
        std::memcpy(blocks.data() + blk * bb + at, &h, 2);
      }
    const PackedWeight w = pack_blocks(f, blocks, n, k, row_bytes);
    const auto x = random_vec(rng, m * k);
    for (const Plan& plan : {gemm_plan(1, 0), gemm_plan(2, 16)}) {
      std::vector<float> want(m * n);
      ref::gemm(x.data(), k, m, w, want.data(), n, plan);
      for (Isa isa : all_isas()) {
        set_isa(isa);
        for (int64_t rows = 1; rows <= m; ++rows) {
          std::vector<float> got(m * n);
          gemm(x.data(), k, rows, w, got.data(), n, plan, *pools()[0]);
          ASSERT_EQ(first_diff(got.data(), want.data(), rows * n), -1)
              << f.name << " " << isa_name(isa) << " rows=" << rows << " "
              << plan_to_string(plan);
        }
      }
    }
  }
}

TEST(QuantGemm, EmbeddingFromPackedTable) {
  std::mt19937 rng(5);
  const Format& f = kFormats[4];  // Q8_0, the tied table of SmolLM2
  const int64_t n = 50, k = 64;
  int64_t row_bytes = 0;
  const auto blocks = random_blocks(rng, f, n, k, &row_bytes);
  const PackedWeight w = pack_blocks(f, blocks, n, k, row_bytes);
  const int32_t ids[] = {0, 49, 17, -1, 50, 33};
  std::vector<float> out(6 * (k + 2), 9.0f);
  embedding_packed(w, ids, 6, out.data(), k + 2);
  for (int r = 0; r < 6; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const bool valid = ids[r] >= 0 && ids[r] < n;
      EXPECT_EQ(bits(out[r * (k + 2) + c]), bits(valid ? w.at(ids[r], c) : 0.0f)) << r << "," << c;
    }
  EXPECT_EQ(out[k], 9.0f);  // the gap between rows is left alone
}

TEST(QuantGemm, RejectsWhatItCannotPack) {
  int64_t be = 0, bb = 0;
  EXPECT_FALSE(ggml_quant_block(0, &be, &bb));   // F32
  EXPECT_FALSE(ggml_quant_block(1, &be, &bb));   // F16
  EXPECT_FALSE(ggml_quant_block(30, &be, &bb));  // BF16
  EXPECT_FALSE(ggml_quant_block(16, &be, &bb));  // IQ2_XXS
  std::vector<uint8_t> block(20, 0);
  const uint8_t* row = block.data();
  EXPECT_EQ(pack_ggml(3, &row, 1, 48).n(), 0);  // k not a multiple of the block
  EXPECT_EQ(pack_ggml(1, &row, 1, 32).n(), 0);  // not a quantized format
}

}  // namespace
}  // namespace llmrr::kernels::testing
