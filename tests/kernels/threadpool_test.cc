#include "llmrr/kernels/threadpool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

// Counts its runs; does "work" (a short sleep) while `pending` > 0.
class CountingIdle final : public IdleTask {
 public:
  std::atomic<int> pending{0};
  std::atomic<int> runs{0};
  std::atomic<int> worked{0};
  std::atomic<bool> saw_job{false};
  std::atomic<bool> on_caller{false};
  std::thread::id caller = std::this_thread::get_id();
  bool run(const JobSignal& signal) override {
    runs.fetch_add(1);
    if (std::this_thread::get_id() == caller) on_caller = true;
    if (signal.job_waiting()) saw_job = true;
    int p = pending.load();
    while (p > 0 && !pending.compare_exchange_weak(p, p - 1)) {
    }
    if (p <= 0) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    worked.fetch_add(1);
    return true;
  }
};

// Workers look for idle work only while they wait for jobs awake (they sleep after a few
// hundred microseconds without one): a job wakes them.
void wake(ThreadPool& pool) {
  pool.parallel_for(8, [](int64_t) {});
}

template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 2000 && !pred(); ++i)
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  return pred();
}

TEST(ThreadPoolIdle, IdleWorkersRunTheTaskBetweenJobsNeverTheCaller) {
  ThreadPool pool(3);
  CountingIdle task;
  pool.set_idle_task(&task);
  task.pending = 20;
  wake(pool);
  // No job after that: the workers spin, find none, and take the work.
  EXPECT_TRUE(eventually([&] { return task.worked.load() == 20; }));
  // Jobs go on while idle work is pending, and every index still runs once.
  task.pending = 200;
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<std::atomic<int>> hits(16);
    pool.parallel_for(16, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  EXPECT_TRUE(eventually([&] { return task.pending.load() == 0; }));
  EXPECT_FALSE(task.on_caller.load());
  pool.set_idle_task(nullptr);
  const int runs = task.runs.load();
  task.pending = 5;  // detached: nobody takes it any more
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(task.runs.load(), runs);
  EXPECT_EQ(task.pending.load(), 5);
}

// A task that blocks until released: set_idle_task(nullptr) returns only once the worker
// inside it has left, so the task may be destroyed right after.
class BlockingIdle final : public IdleTask {
 public:
  std::atomic<bool> inside{false};
  std::atomic<bool> release{false};
  std::atomic<bool> left{false};
  bool run(const JobSignal&) override {
    if (left.load()) return false;
    inside = true;
    while (!release.load()) std::this_thread::yield();
    left = true;
    return true;
  }
};

TEST(ThreadPoolIdle, DetachingWaitsForAWorkerInsideTheTask) {
  ThreadPool pool(2);
  BlockingIdle task;
  pool.set_idle_task(&task);
  wake(pool);
  ASSERT_TRUE(eventually([&] { return task.inside.load(); }));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    task.release = true;
  });
  pool.set_idle_task(nullptr);
  EXPECT_TRUE(task.left.load()) << "set_idle_task(nullptr) returned while a worker was inside";
  releaser.join();
}

TEST(ThreadPoolIdle, TheSignalTellsATaskThatAJobWaits) {
  ThreadPool pool(2);
  // Runs until it sees a job published (bounded by a deadline so a failure cannot hang).
  class UntilJob final : public IdleTask {
   public:
    std::atomic<bool> started{false};
    std::atomic<bool> saw{false};
    bool run(const JobSignal& signal) override {
      if (saw.load()) return false;
      started = true;
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!signal.job_waiting() && std::chrono::steady_clock::now() < end)
        std::this_thread::yield();
      saw = signal.job_waiting();
      return true;
    }
  } task;
  pool.set_idle_task(&task);
  wake(pool);
  ASSERT_TRUE(eventually([&] { return task.started.load(); }));
  std::atomic<int> done{0};
  // The caller runs the job alone if the worker is busy: it never waits for it.
  pool.parallel_for(4, [&](int64_t) { done.fetch_add(1); });
  EXPECT_EQ(done.load(), 4);
  EXPECT_TRUE(eventually([&] { return task.saw.load(); }));
  pool.set_idle_task(nullptr);
}

TEST(ThreadPoolIdle, APoolWithoutWorkersNeverRunsIt) {
  ThreadPool pool(1);
  CountingIdle task;
  task.pending = 3;
  pool.set_idle_task(&task);
  pool.parallel_for(10, [](int64_t) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(task.runs.load(), 0);
  pool.set_idle_task(nullptr);
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
