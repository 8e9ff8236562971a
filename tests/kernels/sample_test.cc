// Sampling: the counter-based draw is a pure function of (seed, request, position); greedy
// at T = 0; temperature, top-k and top-p keep exactly the candidates sample.h says.
#include "llmrr/kernels/sample.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"
#include "test_util.h"

namespace llmrr::kernels::testing {
namespace {

TEST(SamplingUniform, IsAPureFunctionOfItsKeys) {
  EXPECT_EQ(sampling_uniform(1, 2, 3), sampling_uniform(1, 2, 3));
  std::set<double> seen;
  for (uint64_t seed : {0ull, 1ull, 42ull})
    for (uint64_t req : {0ull, 1ull, 7ull})
      for (int64_t pos : {0, 1, 2, 1000}) seen.insert(sampling_uniform(seed, req, pos));
  EXPECT_EQ(seen.size(), 36u) << "every key changes the draw";
  // Pinned values: traces replay these draws, so they must never change.
  const double pinned[3] = {sampling_uniform(0, 0, 0), sampling_uniform(42, 3, 17),
                            sampling_uniform(~0ull, ~0ull, -1)};
  const double want[3] = {0x1.1c13ade1c7e5cp-3, 0x1.3cbf8ee3af0d6p-1, 0x1.656c5fd21f038p-2};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pinned[i], want[i]) << i;
}

TEST(SamplingUniform, IsUniformOnTheUnitInterval) {
  double sum = 0.0;
  int buckets[10] = {};
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = sampling_uniform(9, 1, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++buckets[static_cast<int>(u * 10)];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  for (int b : buckets) EXPECT_NEAR(b, n / 10, n / 100);
}

TEST(Sample, GreedyAtZeroTemperature) {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = 1;
  const SampleResult r = sample(l.data(), 4, p, 0, 0);
  EXPECT_EQ(r.token, 1);  // lowest id wins the tie
  EXPECT_EQ(r.uniform, -1.0);
  p.temperature = -1.0f;
  EXPECT_EQ(sample(l.data(), 4, p, 0, 0).token, 1);
}

TEST(Sample, DeterministicAndReportsItsDraw) {
  std::mt19937 rng(1);
  auto l = random_vec(rng, 1000, 2.0f);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 50;
  p.top_p = 0.9f;
  p.seed = 123;
  for (int64_t pos = 0; pos < 50; ++pos) {
    const SampleResult a = sample(l.data(), 1000, p, 5, pos);
    const SampleResult b = sample(l.data(), 1000, p, 5, pos);
    EXPECT_EQ(a.token, b.token);
    EXPECT_EQ(a.uniform, sampling_uniform(123, 5, pos));
  }
}

TEST(Sample, TopKOneAndTinyTopPAreGreedy) {
  std::mt19937 rng(2);
  auto l = random_vec(rng, 500);
  const int32_t best = argmax(l.data(), 500);
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 1;
  for (int64_t pos = 0; pos < 100; ++pos) EXPECT_EQ(sample(l.data(), 500, p, 0, pos).token, best);
  p.top_k = 0;
  p.top_p = 1e-6f;
  for (int64_t pos = 0; pos < 100; ++pos) EXPECT_EQ(sample(l.data(), 500, p, 0, pos).token, best);
}

TEST(Sample, TopKKeepsOnlyTheKLargest) {
  std::vector<float> l = {1.0f, 4.0f, 3.0f, 4.0f, 0.0f, 2.0f};
  SamplingParams p;
  p.temperature = 100.0f;  // nearly uniform among the kept
  p.top_k = 3;             // ids 1, 3 (tie, both kept) and 2
  std::set<int32_t> got;
  for (int64_t pos = 0; pos < 2000; ++pos) got.insert(sample(l.data(), 6, p, 1, pos).token);
  EXPECT_EQ(got, (std::set<int32_t>{1, 2, 3}));
  p.top_k = 2;  // the tie at 4.0: both ids 1 and 3
  got.clear();
  for (int64_t pos = 0; pos < 2000; ++pos) got.insert(sample(l.data(), 6, p, 1, pos).token);
  EXPECT_EQ(got, (std::set<int32_t>{1, 3}));
}

TEST(Sample, TopPKeepsTheShortestPrefixReachingP) {
  // Probabilities (T = 1) ∝ e^{log p}: 0.5, 0.3, 0.15, 0.05.
  std::vector<float> l = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.75f;  // 0.5 + 0.3 = 0.8 ≥ 0.75 → ids 1 and 3
  std::set<int32_t> got;
  for (int64_t pos = 0; pos < 3000; ++pos) got.insert(sample(l.data(), 4, p, 2, pos).token);
  EXPECT_EQ(got, (std::set<int32_t>{1, 3}));
  p.top_p = 0.85f;  // needs 0.15 too
  got.clear();
  for (int64_t pos = 0; pos < 3000; ++pos) got.insert(sample(l.data(), 4, p, 2, pos).token);
  EXPECT_EQ(got, (std::set<int32_t>{0, 1, 3}));
}

TEST(Sample, FrequenciesFollowTheTemperedSoftmax) {
  std::vector<float> l = {0.0f, 1.0f, 2.0f};
  for (float t : {0.5f, 1.0f, 2.0f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 77;
    int count[3] = {};
    const int n = 60000;
    for (int64_t pos = 0; pos < n; ++pos) ++count[sample(l.data(), 3, p, 0, pos).token];
    double z = 0;
    for (float v : l) z += std::exp(v / t);
    for (int i = 0; i < 3; ++i) {
      const double want = std::exp(l[i] / t) / z;
      EXPECT_NEAR(count[i] / static_cast<double>(n), want, 0.01) << "T=" << t << " id " << i;
    }
  }
}

TEST(Sample, PicksTheFirstCumulativeSumAboveTheDraw) {
  // With uniform u, the pick is the first i (descending order) with cumsum_i > u·total.
  std::vector<float> l = {0.5f, -0.25f, 1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  for (int64_t pos = 0; pos < 500; ++pos) {
    const SampleResult r = sample(l.data(), 4, p, 3, pos);
    const int order[4] = {2, 0, 3, 1};
    const float mx = 1.0f / 0.7f;
    float cum[4], total = 0.0f;
    for (int i = 0; i < 4; ++i) {
      total = total + numerics::exp_f32(l[order[i]] / 0.7f - mx);
      cum[i] = total;
    }
    int want = -1;
    for (int i = 0; i < 4; ++i) {
      if (static_cast<double>(cum[i]) > r.uniform * cum[3]) {
        want = order[i];
        break;
      }
    }
    ASSERT_EQ(r.token, want) << pos;
  }
}

TEST(Sample, NanLogitsAreNeverPicked) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> l = {nan, 0.0f, nan, 0.1f};
  SamplingParams p;
  p.temperature = 1.0f;
  for (int64_t pos = 0; pos < 500; ++pos) {
    const int32_t t = sample(l.data(), 4, p, 0, pos).token;
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
  std::vector<float> all_nan = {nan, nan};
  EXPECT_EQ(sample(all_nan.data(), 2, p, 0, 0).token, 0);
  EXPECT_EQ(sample(l.data(), 0, p, 0, 0).token, -1);
}

}  // namespace
}  // namespace llmrr::kernels::testing
