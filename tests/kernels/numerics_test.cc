// bf16 rounding, fp16 widening, exp / rsqrt / silu: the scalar definitions and the SIMD
// copies of them.
#include "llmrr/kernels/numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/internal.h"
#include "llmrr/kernels/reference.h"
#include "test_util.h"

namespace llmrr::kernels::testing {
namespace {

using numerics::bf16_to_f32;
using numerics::exp_f32;
using numerics::f32_to_bf16;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, RoundsToNearestEven) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80},                         // 1.0 exact
      {0x3f808000u, 0x3f80},                         // tie, lower kept bit even → down
      {0x3f818000u, 0x3f82},                         // tie, lower kept bit odd → up
      {0x3f807fffu, 0x3f80},                         // just below the tie
      {0x3f808001u, 0x3f81},                         // just above the tie
      {0xbf808000u, 0xbf80},                         // negative tie → even
      {0xbf818000u, 0xbf82}, {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to inf
      {0x7f7f7fffu, 0x7f7f},                         // largest value that stays finite
      {0x7f800000u, 0x7f80},                         // inf
      {0xff800000u, 0xff80},                         // -inf
      {0x00000000u, 0x0000},                         // +0
      {0x80000000u, 0x8000},                         // -0
      {0x00008000u, 0x0000},                         // subnormal tie → even (zero)
      {0x00018000u, 0x0002},                         // subnormal tie → even (up)
      {0x00010001u, 0x0001},                         // subnormal below tie
      {0x007fffffu, 0x0080},  // largest subnormal rounds up to the smallest normal
      {0x80018000u, 0x8002},  // negative subnormal tie
  };
  for (const auto& c : cases) {
    EXPECT_EQ(f32_to_bf16(from_bits(c.in)), c.out) << std::hex << "input 0x" << c.in;
  }
}

TEST(Bf16, NanStaysQuietNan) {
  for (uint32_t in : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    const uint16_t h = f32_to_bf16(from_bits(in));
    const float back = bf16_to_f32(h);
    EXPECT_TRUE(std::isnan(back)) << std::hex << in;
    EXPECT_TRUE(h & 0x0040) << "quiet bit set for 0x" << std::hex << in;
    EXPECT_EQ(h & 0x8000, (in >> 16) & 0x8000) << "sign kept";
  }
}

TEST(Bf16, RoundTripIsExactForBf16Values) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), h);
  }
}

TEST(Bf16, MatchesNearestBf16InDouble) {
  // For random finite floats, the result is a nearest bf16 value (ties checked above).
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = from_bits(rng());
    if (!std::isfinite(f) || std::fabs(f) >= 3.3e38f) continue;
    const float r = numerics::round_to_bf16(f);
    uint16_t h = f32_to_bf16(f);
    const float down = bf16_to_f32(h - 1), up = bf16_to_f32(h + 1);
    const double err = std::fabs(static_cast<double>(r) - f);
    if (std::isfinite(down) && (h & 0x7fff) != 0) {
      EXPECT_LE(err, std::fabs(static_cast<double>(down) - f)) << f;
    }
    if (std::isfinite(up)) {
      EXPECT_LE(err, std::fabs(static_cast<double>(up) - f)) << f;
    }
  }
}

TEST(F16, WidensEveryValueExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float got = numerics::f16_to_f32(static_cast<uint16_t>(h));
    const int sign = (h & 0x8000) ? -1 : 1;
    const int e = (h >> 10) & 0x1f;
    const int m = h & 0x3ff;
    if (e == 0x1f) {
      if (m == 0) {
        EXPECT_EQ(got, sign * std::numeric_limits<float>::infinity());
      } else {
        EXPECT_TRUE(std::isnan(got));
      }
      continue;
    }
    const double want = e == 0 ? sign * std::ldexp(m, -24) : sign * std::ldexp(1024 + m, e - 25);
    EXPECT_EQ(static_cast<double>(got), want) << std::hex << h;
    EXPECT_EQ(std::signbit(got), sign < 0) << std::hex << h;
  }
}

double ulp_error(float got, double want) {
  const float wf = static_cast<float>(want);
  int e;
  std::frexp(wf, &e);
  return std::fabs(static_cast<double>(got) - want) / std::ldexp(1.0, e - 24);
}

TEST(Exp, WithinOneUlpOverADenseSweep) {
  // Every 61st float bit pattern with a normal result: ~ 15 million inputs.
  double worst = 0.0;
  float worst_x = 0.0f;
  int64_t count = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 61) {
    const float x = from_bits(static_cast<uint32_t>(u));
    if (!(x > -87.33f && x < 88.72f)) continue;
    const double want = std::exp(static_cast<double>(x));
    const double e = ulp_error(exp_f32(x), want);
    if (e > worst) {
      worst = e;
      worst_x = x;
    }
    ++count;
  }
  EXPECT_GT(count, 10000000);
  EXPECT_LE(worst, 1.0) << "worst input " << worst_x;
  RecordProperty("max_ulp", std::to_string(worst));
}

TEST(Exp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits(exp_f32(0.0f)), bits(1.0f));
  EXPECT_EQ(bits(exp_f32(-0.0f)), bits(1.0f));
  EXPECT_EQ(exp_f32(1e-45f), 1.0f);  // subnormal input
  EXPECT_EQ(exp_f32(-1e-45f), 1.0f);
  EXPECT_EQ(exp_f32(-inf), 0.0f);
  EXPECT_FALSE(std::signbit(exp_f32(-inf)));
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_f32(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_f32(88.73f), inf);  // just past ln(FLT_MAX)
  EXPECT_EQ(exp_f32(1000.0f), inf);
  EXPECT_EQ(exp_f32(3e38f), inf);
  EXPECT_TRUE(std::isfinite(exp_f32(88.72f)));
  EXPECT_GT(exp_f32(88.72f), 3.3e38f);
  EXPECT_EQ(exp_f32(-88.0f), 0.0f);  // e^-88 is subnormal: flushed
  EXPECT_EQ(exp_f32(-103.0f), 0.0f);
  EXPECT_EQ(exp_f32(-1000.0f), 0.0f);
  EXPECT_EQ(exp_f32(-3e38f), 0.0f);
  EXPECT_GE(exp_f32(-87.33f), 0x1p-126f);  // the smallest normal results survive
  EXPECT_NEAR(exp_f32(1.0f), 2.718281828f, 3e-7);
  // exp(n·ln2) for integer n is 2^n to within an ulp.
  for (int n = -125; n <= 127; ++n) {
    const float x = static_cast<float>(n * 0.6931471805599453);
    EXPECT_LE(ulp_error(exp_f32(x), std::exp(static_cast<double>(x))), 1.0) << n;
  }
}

TEST(Exp, SimdPathsMatchScalarBitForBit) {
  IsaGuard guard;
  // A strided sweep of all bit patterns plus dense windows around the thresholds.
  std::vector<float> xs;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1021)
    xs.push_back(from_bits(static_cast<uint32_t>(u)));
  for (float c : {-104.0f, -103.97f, -87.34f, -87.33f, -88.0f, 88.72f, 88.73f, 89.0f, 0.0f,
                  0.3465736f, -0.3465736f}) {
    uint32_t b = bits(c);
    for (int d = -3000; d <= 3000; ++d) xs.push_back(from_bits(b + d));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float s : {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-45f, -1e-45f}) {
    xs.push_back(s);
  }
  std::vector<float> want(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) want[i] = exp_f32(xs[i]);
  for (Isa isa : all_isas()) {
    std::vector<float> got(xs.size());
    internal::exp_array(xs.data(), got.data(), static_cast<int64_t>(xs.size()), isa);
    const int64_t d = first_diff(got.data(), want.data(), xs.size());
    EXPECT_EQ(d, -1) << isa_name(isa) << " differs at x = " << (d >= 0 ? xs[d] : 0.0f);
  }
}

TEST(Rsqrt, IsOneOverSqrt) {
  EXPECT_EQ(numerics::rsqrt_f32(4.0f), 0.5f);
  EXPECT_EQ(numerics::rsqrt_f32(0.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(numerics::rsqrt_f32(-1.0f)));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(1e-6f, 1e6f);
  for (int i = 0; i < 10000; ++i) {
    const float x = ud(rng);
    const float s = std::sqrt(x);
    EXPECT_EQ(bits(numerics::rsqrt_f32(x)), bits(1.0f / s));
  }
}

TEST(Silu, MatchesDefinitionAndLimits) {
  EXPECT_EQ(numerics::silu_f32(0.0f), 0.0f);
  EXPECT_EQ(numerics::silu_f32(100.0f), 100.0f);
  EXPECT_EQ(numerics::silu_f32(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(numerics::silu_f32(std::numeric_limits<float>::quiet_NaN())));
  for (float x = -20.0f; x <= 20.0f; x += 0.01f) {
    const float want = x / (1.0f + exp_f32(-x));
    EXPECT_EQ(bits(numerics::silu_f32(x)), bits(want));
    const double w64 = x / (1.0 + std::exp(-static_cast<double>(x)));
    EXPECT_LE(std::fabs(numerics::silu_f32(x) - w64), tolerance("silu", 0, std::fabs(w64)) + 1e-45);
  }
}

TEST(Dot16, FollowsSixteenLanesThenHalvingTree) {
  // Lane 0 sees +1e8 then −1e8 (→ 0) before any other lane is added; a sequential sum
  // would absorb the 1 into 1e8 and return 0.
  std::vector<float> a(32, 0.0f), one(32, 1.0f);
  a[0] = 1e8f;
  a[16] = -1e8f;
  a[1] = 1.0f;
  EXPECT_EQ(ref::dot16(a.data(), one.data(), 32), 1.0f);
  // The tree adds lane 8 to lane 0 first: (1e8 + −1e8) + (1 + 0) = 1.
  std::vector<float> b(16, 0.0f);
  b[0] = 1e8f;
  b[8] = -1e8f;
  b[1] = 1.0f;
  EXPECT_EQ(ref::dot16(b.data(), one.data(), 16), 1.0f);
  // And lanes 0 + 4 before 0 + 1: lane 4 = −1e8, lane 2 = 1 → (1e8 + −1e8) + ... = 1.
  std::vector<float> c(16, 0.0f);
  c[0] = 1e8f;
  c[4] = -1e8f;
  c[2] = 1.0f;
  EXPECT_EQ(ref::dot16(c.data(), one.data(), 16), 1.0f);
  float seq = 0.0f;
  for (int i = 0; i < 16; ++i) seq = seq + c[i];
  EXPECT_EQ(seq, 0.0f) << "the case must distinguish the orders";
}

TEST(Dot16, SimdPathsMatchReferenceForEveryLength) {
  IsaGuard guard;
  std::mt19937 rng(11);
  for (int64_t n = 0; n <= 300; ++n) {
    auto a = random_vec(rng, n + 1), b = random_vec(rng, n + 1);
    const float want = ref::dot16(a.data(), b.data(), n);
    for (Isa isa : all_isas()) {
      EXPECT_EQ(bits(internal::dot16(a.data(), b.data(), n, isa)), bits(want))
          << isa_name(isa) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace llmrr::kernels::testing
