// GEMM: every plan × shape × weight type against the fp64 reference (tolerance table) and
// bit for bit against ref::gemm, for every ISA and thread count; row-position invariance;
// plans and arrival orders that change bits exactly as plan.h says.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr {
// gtest prints parameters with this (found by argument-dependent lookup).
inline void PrintTo(const Plan& p, std::ostream* os) {
  *os << plan_to_string(p);
}
}  // namespace llmrr

namespace llmrr::kernels::testing {
namespace {

struct Shape {
  int64_t m, n, k;
};

const Shape kShapes[] = {
    {1, 1, 1},
    {1, 32, 16},
    {1, 33, 17},
    {2, 5, 100},
    {3, 64, 64},
    {5, 31, 257},
    {6, 32, 48},
    {7, 65, 33},
    {8, 100, 31},
    {13, 47, 128},
    {17, 96, 200},
    {0, 10, 10},
    {4, 10, 0},
    {25, 40, 1},
    {12, 64, 96},
    {9, 130, 160},
    // One or two rows over many panels: the wide GEMV kernels, with partial groups.
    {1, 300, 70},
    {2, 257, 129},
    {1, 128, 33},
    {2, 1000, 40},
};

std::vector<Plan> all_plans() {
  return checked({
      gemm_plan(1, 0),
      gemm_plan(1, 16),
      gemm_plan(1, 48),
      gemm_plan(2, 0),
      gemm_plan(3, 0, {2, 0, 1}),
      gemm_plan(4, 32),
      gemm_plan(4, 0, {3, 1, 0, 2}),
      gemm_plan(7, 16),
      gemm_plan(40, 0),  // more splits than 16-blocks of K: empty splits add +0
      gemm_plan(5, 16, {4, 3, 2, 1, 0}),
  });
}

// fp64 value and the magnitude Σ|x·w| that scales its tolerance.
void fp64_gemm(const std::vector<float>& x, int64_t ldx, int64_t m, const PackedWeight& w,
               std::vector<double>& y, std::vector<double>& mag) {
  const int64_t n = w.n(), k = w.k();
  y.assign(m * n, 0.0);
  mag.assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t kk = 0; kk < k; ++kk) {
        const double t = static_cast<double>(x[i * ldx + kk]) * w.at(j, kk);
        y[i * n + j] += t;
        mag[i * n + j] += std::fabs(t);
      }
}

class GemmPlanTest : public ::testing::TestWithParam<Plan> {};

TEST_P(GemmPlanTest, MatchesReferenceBitsAndFp64EveryIsaEveryThreadCount) {
  const Plan plan = GetParam();
  IsaGuard guard;
  std::mt19937 rng(1234);
  for (const Shape& s : kShapes) {
    for (WeightType wt : {WeightType::kF32, WeightType::kBF16}) {
      SCOPED_TRACE(::testing::Message()
                   << "m=" << s.m << " n=" << s.n << " k=" << s.k
                   << (wt == WeightType::kBF16 ? " bf16" : " f32") << " " << plan_to_string(plan));
      // Strided x and y, with sentinels in the gaps that must survive.
      const int64_t ldx = s.k + 3, ldy = s.n + 5;
      auto x = random_vec(rng, s.m * ldx + 1);
      auto wv = random_vec(rng, s.n * s.k + 1);
      const PackedWeight w = PackedWeight::pack(wv.data(), s.n, s.k, wt);
      std::vector<float> want(s.m * ldy + 1, 7.0f);
      ref::gemm(x.data(), ldx, s.m, w, want.data(), ldy, plan);
      std::vector<double> y64, mag;
      fp64_gemm(x, ldx, s.m, w, y64, mag);
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
          ASSERT_LE(std::fabs(want[i * ldy + j] - y64[i * s.n + j]),
                    tolerance("gemm", static_cast<double>(s.k), mag[i * s.n + j]))
              << "row " << i << " col " << j;
        }
      for (Isa isa : all_isas()) {
        set_isa(isa);
        for (ThreadPool* pool : pools()) {
          std::vector<float> got(want.size(), 7.0f);
          gemm(x.data(), ldx, s.m, w, got.data(), ldy, plan, *pool);
          const int64_t d = first_diff(got.data(), want.data(), got.size());
          ASSERT_EQ(d, -1) << isa_name(isa) << " threads=" << pool->size() << " first diff at " << d
                           << ": " << (d >= 0 ? got[d] : 0) << " vs " << (d >= 0 ? want[d] : 0);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, GemmPlanTest, ::testing::ValuesIn(all_plans()),
                         [](const ::testing::TestParamInfo<Plan>& info) {
                           std::string s = "splits" + std::to_string(info.param.splits) + "_ktile" +
                                           std::to_string(info.param.k_tile);
                           if (info.param.order == CombineOrder::kArrival) s += "_arrival";
                           return s;
                         });

// A row's bits never depend on how many rows share the call or where it sits.
TEST(Gemm, RowResultIndependentOfBatchSizeAndPosition) {
  IsaGuard guard;
  std::mt19937 rng(99);
  const int64_t n = 230, k = 150;  // 8 panels: wide kernels for 1–2 rows, tiles beyond
  for (WeightType wt : {WeightType::kF32, WeightType::kBF16}) {
    auto wv = random_vec(rng, n * k);
    const PackedWeight w = PackedWeight::pack(wv.data(), n, k, wt);
    for (const Plan& plan : {gemm_plan(1, 0), gemm_plan(3, 32, {1, 2, 0})}) {
      auto row = random_vec(rng, k);
      for (Isa isa : all_isas()) {
        set_isa(isa);
        std::vector<float> alone(n);
        gemm(row.data(), k, 1, w, alone.data(), n, plan, *pools()[0]);
        for (int64_t m : {1, 2, 3, 5, 6, 7, 8, 9, 11, 12, 13, 17, 24, 31, 64, 100}) {
          for (int64_t at : {int64_t{0}, m / 2, m - 1}) {
            auto x = random_vec(rng, m * k);
            std::copy(row.begin(), row.end(), x.begin() + at * k);
            std::vector<float> y(m * n);
            gemm(x.data(), k, m, w, y.data(), n, plan, *pools()[m % 4]);
            ASSERT_TRUE(same_bits(y.data() + at * n, alone.data(), n))
                << isa_name(isa) << " m=" << m << " at=" << at << " " << plan_to_string(plan);
          }
        }
      }
    }
  }
}

// The point of the project: the plan changes the bits.
TEST(Gemm, SplitKChangesBitsForSomeInputs) {
  std::mt19937 rng(5);
  const int64_t m = 4, n = 256, k = 1024;
  auto x = random_vec(rng, m * k), wv = random_vec(rng, n * k);
  const PackedWeight w = PackedWeight::pack(wv.data(), n, k, WeightType::kF32);
  std::vector<float> y1(m * n), y4(m * n), y4r(m * n), yt(m * n);
  gemm(x.data(), k, m, w, y1.data(), n, gemm_plan(1, 0), ThreadPool::serial());
  gemm(x.data(), k, m, w, y4.data(), n, gemm_plan(4, 0), ThreadPool::serial());
  gemm(x.data(), k, m, w, y4r.data(), n, gemm_plan(4, 0, {3, 2, 1, 0}), ThreadPool::serial());
  gemm(x.data(), k, m, w, yt.data(), n, gemm_plan(1, 64), ThreadPool::serial());
  int diff14 = 0, diff_order = 0, diff_tile = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    diff14 += bits(y1[i]) != bits(y4[i]);
    diff_order += bits(y4[i]) != bits(y4r[i]);
    diff_tile += bits(y1[i]) != bits(yt[i]);
    EXPECT_NEAR(y1[i], y4[i], 1e-3);  // different bits, same value to fp32 accuracy
  }
  EXPECT_GT(diff14, 0);
  EXPECT_GT(diff_order, 0);
  EXPECT_GT(diff_tile, 0);
}

// Partials combine as ((p_a + p_b) + p_c) with (a, b, c) the arrival order.
TEST(Gemm, ArrivalOrderCombinesPartialsExactlyAsListed) {
  // K = 48, three splits of 16. x = 1; W row sums per split: p0 = 1e8, p1 = −1e8, p2 = 1.
  const int64_t k = 48;
  std::vector<float> wv(k, 0.0f), x(k, 1.0f);
  wv[0] = 1e8f;
  wv[16] = -1e8f;
  wv[32] = 1.0f;
  const PackedWeight w = PackedWeight::pack(wv.data(), 1, k, WeightType::kF32);
  auto run = [&](const Plan& p) {
    float y = -1.0f;
    gemm(x.data(), k, 1, w, &y, 1, p, ThreadPool::serial());
    float r = -1.0f;
    ref::gemm(x.data(), k, 1, w, &r, 1, p);
    EXPECT_EQ(bits(y), bits(r)) << plan_to_string(p);
    return y;
  };
  EXPECT_EQ(run(gemm_plan(3, 0)), 1.0f);  // (1e8 + −1e8) + 1
  EXPECT_EQ(run(gemm_plan(3, 0, {0, 1, 2})), 1.0f);
  EXPECT_EQ(run(gemm_plan(3, 0, {2, 0, 1})), 0.0f);  // (1 + 1e8) + −1e8
  EXPECT_EQ(run(gemm_plan(3, 0, {0, 2, 1})), 0.0f);  // (1e8 + 1) + −1e8
  EXPECT_EQ(run(gemm_plan(3, 0, {1, 0, 2})), 1.0f);  // (−1e8 + 1e8) + 1
  EXPECT_EQ(run(gemm_plan(1, 0)), 1.0f);             // sequential: (1e8 − 1e8) + 1
  // k-tiles of 16 inside one split: p = ((0 + t0) + t1) + t2, the same as fixed here.
  EXPECT_EQ(run(gemm_plan(1, 16)), 1.0f);
  // Put the 1 first: sequential fma absorbs it, tiles of 16 do too, order 2 splits differ.
  std::swap(wv[0], wv[32]);  // t0 = 1, t1 = −1e8, t2 = 1e8
  const PackedWeight w2 = PackedWeight::pack(wv.data(), 1, k, WeightType::kF32);
  float y = -1.0f;
  gemm(x.data(), k, 1, w2, &y, 1, gemm_plan(1, 0), ThreadPool::serial());
  EXPECT_EQ(y, 0.0f);  // (1 − 1e8) + 1e8 = 0 in fp32
  gemm(x.data(), k, 1, w2, &y, 1, gemm_plan(3, 0, {1, 2, 0}), ThreadPool::serial());
  EXPECT_EQ(y, 1.0f);  // (−1e8 + 1e8) + 1
}

TEST(Gemm, SplitsLongerThanKAndEmptyRangesAddPositiveZero) {
  // K = 20 with 8 splits: c = round_up(ceil(20/8), 16) = 16 → ranges [0,16), [16,20), rest
  // empty. All-negative-zero products must come out as +0 once an empty split is added.
  const int64_t k = 20;
  std::vector<float> x(k, -0.0f), wv(k, 1.0f);
  const PackedWeight w = PackedWeight::pack(wv.data(), 1, k, WeightType::kF32);
  float y = 1.0f;
  gemm(x.data(), k, 1, w, &y, 1, gemm_plan(8, 0), ThreadPool::serial());
  EXPECT_EQ(bits(y), bits(0.0f));
  for (auto& v : x) v = 2.0f;
  gemm(x.data(), k, 1, w, &y, 1, gemm_plan(8, 0), ThreadPool::serial());
  EXPECT_EQ(y, 40.0f);
}

TEST(Gemm, ZeroRowsWritesNothingAndZeroKWritesZeros) {
  std::vector<float> wv(3 * 4, 1.0f);
  const PackedWeight w = PackedWeight::pack(wv.data(), 3, 4, WeightType::kF32);
  std::vector<float> y(6, 5.0f), x(8, 1.0f);
  gemm(x.data(), 4, 0, w, y.data(), 3, gemm_plan(1, 0), ThreadPool::serial());
  for (float v : y) EXPECT_EQ(v, 5.0f);
  const PackedWeight w0 = PackedWeight::pack(wv.data(), 3, 0, WeightType::kF32);
  gemm(x.data(), 4, 2, w0, y.data(), 3, gemm_plan(2, 16), ThreadPool::serial());
  for (float v : y) EXPECT_EQ(bits(v), bits(0.0f));
}

TEST(Gemm, PaddingNeverLeaksEvenWithInfiniteInputs) {
  // N = 33: the last panel has 31 padded columns. inf·0 = NaN there must never be stored.
  IsaGuard guard;
  const int64_t n = 33, k = 40, m = 7;
  std::mt19937 rng(8);
  auto wv = random_vec(rng, n * k);
  auto x = random_vec(rng, m * k);
  x[3 * k + 5] = std::numeric_limits<float>::infinity();
  for (WeightType wt : {WeightType::kF32, WeightType::kBF16}) {
    const PackedWeight w = PackedWeight::pack(wv.data(), n, k, wt);
    std::vector<float> want(m * (n + 8), 3.0f);
    ref::gemm(x.data(), k, m, w, want.data(), n + 8, gemm_plan(1, 0));
    for (Isa isa : all_isas()) {
      set_isa(isa);
      std::vector<float> y(m * (n + 8), 3.0f);
      gemm(x.data(), k, m, w, y.data(), n + 8, gemm_plan(1, 0), *pools()[2]);
      EXPECT_TRUE(same_bits(y.data(), want.data(), y.size())) << isa_name(isa);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = n; j < n + 8; ++j) EXPECT_EQ(y[i * (n + 8) + j], 3.0f);
    }
  }
}

TEST(PackedWeight, AtReturnsLogicalValuesAndBf16RoundsToNearestEven) {
  std::mt19937 rng(2);
  const int64_t n = 70, k = 19;
  auto wv = random_vec(rng, n * k);
  wv[5] = 1.00390625f;  // 1 + 2^-8: a bf16 tie, rounds to even (1.0)
  wv[6] = 1.01171875f;  // 1 + 3·2^-8: tie, rounds to even (1 + 2^-6)
  const PackedWeight f = PackedWeight::pack(wv.data(), n, k, WeightType::kF32);
  PackedWeight b = PackedWeight::pack(wv.data(), n, k, WeightType::kBF16);
  EXPECT_EQ(f.n(), n);
  EXPECT_EQ(f.k(), k);
  EXPECT_EQ(b.type(), WeightType::kBF16);
  EXPECT_GE(f.bytes(), static_cast<size_t>(n * k * 4));
  EXPECT_GE(b.bytes(), static_cast<size_t>(n * k * 2));
  EXPECT_LT(b.bytes(), f.bytes());
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < k; ++kk) {
      ASSERT_EQ(bits(f.at(j, kk)), bits(wv[j * k + kk]));
      ASSERT_EQ(bits(b.at(j, kk)), bits(numerics::round_to_bf16(wv[j * k + kk])));
    }
  EXPECT_EQ(b.at(0, 5), 1.0f);
  EXPECT_EQ(b.at(0, 6), 1.015625f);
  PackedWeight moved = std::move(b);
  EXPECT_EQ(moved.at(0, 6), 1.015625f);
}

TEST(Gemm, Bf16WeightsEqualFp32GemmOnRoundedWeights) {
  std::mt19937 rng(21);
  const int64_t m = 9, n = 45, k = 70;
  auto wv = random_vec(rng, n * k), x = random_vec(rng, m * k);
  std::vector<float> rounded(wv.size());
  for (size_t i = 0; i < wv.size(); ++i) rounded[i] = numerics::round_to_bf16(wv[i]);
  const PackedWeight b = PackedWeight::pack(wv.data(), n, k, WeightType::kBF16);
  const PackedWeight f = PackedWeight::pack(rounded.data(), n, k, WeightType::kF32);
  std::vector<float> yb(m * n), yf(m * n);
  gemm(x.data(), k, m, b, yb.data(), n, gemm_plan(2, 16), *pools()[1]);
  gemm(x.data(), k, m, f, yf.data(), n, gemm_plan(2, 16), *pools()[1]);
  EXPECT_TRUE(same_bits(yb.data(), yf.data(), yb.size()));
}

// Random shapes and plans (random splits, tiles and arrival permutations), every ISA and
// thread count against the reference: a wider net than the table above.
TEST(Gemm, RandomShapesAndPlansMatchReference) {
  IsaGuard guard;
  std::mt19937 rng(2024);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int c = 0; c < 120; ++c) {
    const int64_t m = uni(0, 20), n = uni(1, 200), k = uni(0, 300);
    Plan plan;
    plan.op = OpKind::kGemm;
    plan.splits = static_cast<uint32_t>(uni(1, 12));
    plan.k_tile = static_cast<uint32_t>(16 * uni(0, 8));
    if (uni(0, 1)) {
      plan.order = CombineOrder::kArrival;
      plan.arrival.resize(plan.splits);
      for (uint32_t i = 0; i < plan.splits; ++i) plan.arrival[i] = static_cast<uint16_t>(i);
      std::shuffle(plan.arrival.begin(), plan.arrival.end(), rng);
    }
    ASSERT_EQ(plan_check(plan), "");
    const WeightType wt = uni(0, 1) ? WeightType::kBF16 : WeightType::kF32;
    const int64_t ldx = k + uni(0, 5), ldy = n + uni(0, 5);
    auto x = random_vec(rng, m * ldx + 1), wv = random_vec(rng, n * k + 1);
    const PackedWeight w = PackedWeight::pack(wv.data(), n, k, wt);
    std::vector<float> want(m * ldy + 1, 2.0f);
    ref::gemm(x.data(), ldx, m, w, want.data(), ldy, plan);
    for (Isa isa : all_isas()) {
      set_isa(isa);
      ThreadPool* pool = pools()[c % 4];
      std::vector<float> got(want.size(), 2.0f);
      gemm(x.data(), ldx, m, w, got.data(), ldy, plan, *pool);
      ASSERT_TRUE(same_bits(got.data(), want.data(), got.size()))
          << "case " << c << " m=" << m << " n=" << n << " k=" << k << " " << plan_to_string(plan)
          << " " << isa_name(isa) << " threads " << pool->size();
    }
  }
}

// Decode-sized shapes (K up to 4096) through every ISA, spot-checked against the reference.
TEST(Gemm, LargeShapesMatchReference) {
  IsaGuard guard;
  std::mt19937 rng(4);
  const int64_t m = 3, n = 160, k = 4096;
  auto x = random_vec(rng, m * k), wv = random_vec(rng, n * k);
  for (WeightType wt : {WeightType::kF32, WeightType::kBF16}) {
    const PackedWeight w = PackedWeight::pack(wv.data(), n, k, wt);
    for (const Plan& plan : {gemm_plan(1, 0), gemm_plan(6, 256, {5, 4, 3, 2, 1, 0})}) {
      std::vector<float> want(m * n);
      ref::gemm(x.data(), k, m, w, want.data(), n, plan);
      for (Isa isa : all_isas()) {
        set_isa(isa);
        std::vector<float> y(m * n);
        gemm(x.data(), k, m, w, y.data(), n, plan, *pools()[1]);
        EXPECT_TRUE(same_bits(y.data(), want.data(), y.size())) << isa_name(isa);
      }
    }
  }
}

}  // namespace
}  // namespace llmrr::kernels::testing
