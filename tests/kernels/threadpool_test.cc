#include "llmrr/kernels/threadpool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "cpu/internal.h"
#include "llmrr/kernels/isa.h"

namespace llmrr::kernels {
namespace {

TEST(ThreadPool, RunsEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 8, 100, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << threads << " " << n;
    }
  }
}

TEST(ThreadPool, InlineOnTheCallerForOneThreadOrOneTask) {
  const auto me = std::this_thread::get_id();
  ThreadPool one(1);
  one.parallel_for(50, [&](int64_t) { EXPECT_EQ(std::this_thread::get_id(), me); });
  ThreadPool four(4);
  four.parallel_for(1, [&](int64_t) { EXPECT_EQ(std::this_thread::get_id(), me); });
  ThreadPool::serial().parallel_for(5, [&](int64_t) { EXPECT_EQ(std::this_thread::get_id(), me); });
  EXPECT_EQ(ThreadPool::serial().size(), 1);
  EXPECT_EQ(ThreadPool(0).size(), 1);
}

TEST(ThreadPool, CallerTakesPartAndWorkersToo) {
  ThreadPool pool(3);
  std::atomic<bool> caller{false};
  std::atomic<int> others{0};
  const auto me = std::this_thread::get_id();
  // Slow tasks so that every thread gets some.
  pool.parallel_for(64, [&](int64_t) {
    if (std::this_thread::get_id() == me) {
      caller = true;
    } else {
      others.fetch_add(1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  });
  EXPECT_TRUE(caller.load());
  EXPECT_GT(others.load(), 0);
}

TEST(ThreadPool, ManySmallJobsBackToBack) {
  ThreadPool pool(3);
  int64_t total = 0;
  std::vector<int64_t> part(8);
  for (int rep = 0; rep < 20000; ++rep) {
    pool.parallel_for(8, [&](int64_t i) { part[i] = i + rep; });
    for (int64_t v : part) total += v;
  }
  int64_t want = 0;
  for (int rep = 0; rep < 20000; ++rep)
    for (int i = 0; i < 8; ++i) want += i + rep;
  EXPECT_EQ(total, want);
}

TEST(ThreadPool, ReturnsOnlyWhenAllTasksAreDone) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 200; ++rep) {
    std::atomic<int> done{0};
    pool.parallel_for(17, [&](int64_t i) {
      if (i % 5 == 0) std::this_thread::yield();
      done.fetch_add(1);
    });
    ASSERT_EQ(done.load(), 17);
  }
}

TEST(Isa, SetIsaClampsAndNames) {
  const Isa saved = active_isa();
  EXPECT_EQ(set_isa(Isa::kScalar), Isa::kScalar);
  EXPECT_EQ(active_isa(), Isa::kScalar);
  const Isa best = set_isa(Isa::kAvx512);
  EXPECT_GE(static_cast<int>(best), static_cast<int>(Isa::kAvx2))
      << "the x86-64-v3 baseline always has AVX2";
  EXPECT_EQ(active_isa(), best);
  set_isa(saved);
  EXPECT_STREQ(isa_name(Isa::kScalar), "scalar");
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
}

TEST(Isa, ParsesTheEnvironmentVariable) {
  EXPECT_EQ(internal::parse_isa_env("scalar"), Isa::kScalar);
  EXPECT_EQ(internal::parse_isa_env("avx2"), Isa::kAvx2);
  EXPECT_EQ(internal::parse_isa_env("avx512"), Isa::kAvx512);
  const Isa best = internal::parse_isa_env(nullptr);
  EXPECT_EQ(internal::parse_isa_env(""), best);
  EXPECT_EQ(internal::parse_isa_env("sse9"), best);
}

}  // namespace
}  // namespace llmrr::kernels
