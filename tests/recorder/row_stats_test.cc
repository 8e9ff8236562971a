// The recorder's fast top-K returns exactly what the reference kernels::topk returns: every
// bit, for every row shape and every awkward value (NaN, ±inf, ±0, subnormals, ties).
#include "row_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "llmrr/kernels/ops.h"

namespace llmrr::recording::internal {
namespace {

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

enum class Fill { kNormal, kTies, kSpecials, kSameValue, kAscending };

std::vector<float> make_row(int64_t n, Fill fill, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(n));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(-4, 4);
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (fill) {
      case Fill::kNormal:
        v = normal(rng);
        break;
      case Fill::kTies:
        v = static_cast<float>(small(rng)) * 0.5f;
        break;
      case Fill::kSameValue:
        v = 1.25f;
        break;
      case Fill::kAscending:
        v = static_cast<float>(i);
        break;
      case Fill::kSpecials: {
        const float specials[] = {0.0f,
                                  -0.0f,
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::denorm_min(),
                                  -1e-40f,
                                  3e38f};
        v = (rng() % 4 == 0) ? specials[rng() % 7] : normal(rng);
        break;
      }
    }
    x[static_cast<size_t>(i)] = v;
  }
  return x;
}

TEST(RowStats, TopKIsIdenticalToTheReference) {
  std::mt19937 rng(11);
  const int64_t sizes[] = {1, 2, 31, 32, 33, 129, 258, 259, 1024, 4096, 8191, 49152, 100003};
  for (int64_t n : sizes) {
    for (Fill fill :
         {Fill::kNormal, Fill::kTies, Fill::kSpecials, Fill::kSameValue, Fill::kAscending}) {
      for (int k : {1, 2, 5, 32, 33, 64, 65, 300}) {
        if (k > n) continue;
        for (bool with_nan : {false, true}) {
          std::vector<float> x = make_row(n, fill, rng);
          if (with_nan) x[static_cast<size_t>(rng() % n)] = std::nanf("");
          std::vector<int32_t> want_ids(static_cast<size_t>(k)), got_ids(static_cast<size_t>(k));
          std::vector<float> want_v(static_cast<size_t>(k)), got_v(static_cast<size_t>(k));
          kernels::topk(x.data(), n, k, want_ids.data(), want_v.data());
          top_k(x.data(), n, k, got_ids.data(), got_v.data());
          SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k) + " fill " +
                       std::to_string(static_cast<int>(fill)) + (with_nan ? " nan" : ""));
          ASSERT_EQ(got_ids, want_ids);
          for (int i = 0; i < k; ++i) {
            ASSERT_TRUE(same_bits(got_v[static_cast<size_t>(i)], want_v[static_cast<size_t>(i)]));
          }
        }
      }
    }
  }
}

TEST(RowStats, LogSumExpMatchesLongDoubleOnEveryRowShape) {
  // Against a long-double reference (libm's expl): within 1e-13 absolute for vocabularies up
  // to 152k, peaked rows, flat rows and rows far below their max; the log-prob of the top
  // token of a flat row of n is -ln n.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int64_t n : {1, 2, 7, 256, 49152, 151936}) {
    for (int shape = 0; shape < 3; ++shape) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = shape == 1 ? 2.5f : normal(rng);
      if (shape == 2) x[static_cast<size_t>(n / 2)] = 60.0f;  // one far ahead
      const float m = *std::max_element(x.begin(), x.end());
      long double ref = 0;
      for (float v : x) ref += std::exp(static_cast<long double>(v) - m);
      ref = m + std::log(ref);
      const std::optional<double> got = logsumexp(x.data(), n, m);
      ASSERT_TRUE(got.has_value()) << n;
      EXPECT_NEAR(*got, static_cast<double>(ref), 1e-13) << "n " << n << " shape " << shape;
      if (shape == 1) {
        EXPECT_NEAR(2.5 - *got, -std::log(static_cast<double>(n)), 1e-13);
      }
    }
  }
}

TEST(RowStats, LogSumExpIsAbsentWhereNoLogProbIsDefined) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> with_nan = {1.0f, nan, 2.0f};
  EXPECT_FALSE(logsumexp(with_nan.data(), 3, 2.0f).has_value());
  const std::vector<float> with_inf = {1.0f, inf};
  EXPECT_FALSE(logsumexp(with_inf.data(), 2, inf).has_value());
  const std::vector<float> all_minus_inf = {-inf, -inf};
  EXPECT_FALSE(logsumexp(all_minus_inf.data(), 2, -inf).has_value());
  // -inf entries (masked tokens) add nothing: a row of 0 and -inf has lse 0 exactly.
  const std::vector<float> masked = {0.0f, -inf, -inf};
  EXPECT_EQ(logsumexp(masked.data(), 3, 0.0f).value_or(-1), 0.0);
  EXPECT_FALSE(logsumexp(masked.data(), 0, 0.0f).has_value());
}

}  // namespace
}  // namespace llmrr::recording::internal
