// ddmin on synthetic predicates: a single cause anywhere among n elements is found within
// 2·ceil(log2 n) + 2 tests; interactions of two and three elements come back whole; the
// partition snaps its cuts to group boundaries; the answer does not depend on how many
// candidates the test callback evaluates at once.
#include "llmrr/replayer/ddmin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace llmrr::replay {
namespace {

std::vector<DdminKey> flat_keys(int n, int group = 8) {
  std::vector<DdminKey> k;
  for (int i = 0; i < n; ++i) k.push_back({i / group, (i % group) / 4});
  return k;
}

// Reproduces iff the candidate contains every element of `cause`.
struct Oracle {
  std::set<int> cause;
  int tests = 0;
  bool reproduces(const std::vector<int>& c) {
    ++tests;
    for (int x : cause) {
      if (!std::binary_search(c.begin(), c.end(), x)) return false;
    }
    return true;
  }
  DdminTest sequential() {
    return [this](const std::vector<std::vector<int>>& cands) {
      for (size_t i = 0; i < cands.size(); ++i) {
        if (reproduces(cands[i])) return static_cast<int>(i);
      }
      return -1;
    };
  }
};

TEST(Ddmin, SingleCauseWithinTwoLogTests) {
  for (int n : {1, 2, 3, 7, 64, 100, 1000}) {
    const int bound = 2 * static_cast<int>(std::ceil(std::log2(std::max(n, 1)))) + 2;
    for (int cause = 0; cause < n; cause += std::max(1, n / 37)) {
      Oracle o;
      o.cause = {cause};
      std::vector<int> got = ddmin(flat_keys(n), o.sequential());
      EXPECT_EQ(got, std::vector<int>{cause}) << "n " << n;
      EXPECT_LE(o.tests, bound) << "n " << n << ", cause " << cause;
    }
  }
}

TEST(Ddmin, InteractionsComeBackWhole) {
  for (std::set<int> cause : std::vector<std::set<int>>{{3, 90}, {0, 1}, {10, 50, 99}, {42, 43}}) {
    Oracle o;
    o.cause = cause;
    std::vector<int> got = ddmin(flat_keys(100), o.sequential());
    EXPECT_EQ(std::set<int>(got.begin(), got.end()), cause);
  }
}

TEST(Ddmin, PartitionSnapsToGroupBoundaries) {
  // Groups of 10 elements: the halving cut of 0..99 at 50 is a group boundary; of 0..95
  // the ideal 48 moves to the boundary at 50 (within 96/16 = 6 elements).
  std::vector<DdminKey> keys;
  for (int i = 0; i < 100; ++i) keys.push_back({i / 10, 0});
  std::vector<int> set(96);
  for (int i = 0; i < 96; ++i) set[i] = i;
  auto parts = ddmin_partition(keys, set, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].size(), 50u);
  EXPECT_EQ(parts[0].front(), 0);
  EXPECT_EQ(parts[1].front(), 50);
  // More parts than elements: one element each.
  auto many = ddmin_partition(keys, {1, 2, 3}, 8);
  EXPECT_EQ(many.size(), 3u);
}

TEST(Ddmin, AnswerDoesNotDependOnParallelTesting) {
  Oracle seq;
  seq.cause = {17, 300};
  std::vector<int> a = ddmin(flat_keys(400), seq.sequential());
  // A callback that evaluates every candidate of the round, then picks the first.
  Oracle all;
  all.cause = seq.cause;
  std::vector<int> b = ddmin(flat_keys(400), [&](const std::vector<std::vector<int>>& cands) {
    std::vector<bool> ok;
    for (const auto& c : cands) ok.push_back(all.reproduces(c));
    for (size_t i = 0; i < ok.size(); ++i) {
      if (ok[i]) return static_cast<int>(i);
    }
    return -1;
  });
  EXPECT_EQ(a, b);
  EXPECT_GE(all.tests, seq.tests);
}

}  // namespace
}  // namespace llmrr::replay
