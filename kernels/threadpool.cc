// A fixed pool whose workers spin briefly, then sleep, between jobs. parallel_for publishes
// one job (a pointer to the caller's function, no allocation), everyone including the caller
// claims indices from one atomic counter, and the caller returns once every worker has
// checked out of the job, so the function it passed may die right after.
#include "llmrr/kernels/threadpool.h"

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace llmrr::kernels {

struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> stop{false};
  // The current job; written by the caller before bumping `generation`.
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t n = 0;
  alignas(64) std::atomic<int64_t> next{0};
  alignas(64) std::atomic<int> pending{0};  // workers that have not finished the job

  void run_tasks() {
    const auto& f = *fn;
    const int64_t count = n;
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      f(i);
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      // Spin a little: the engine issues ops back to back, and waking from a futex costs
      // more than most small ops.
      uint64_t g = generation.load(std::memory_order_acquire);
      if (g == seen && !stop.load(std::memory_order_relaxed)) {
        auto start = std::chrono::steady_clock::now();
        for (int spins = 0; g == seen; ++spins) {
          _mm_pause();
          g = generation.load(std::memory_order_acquire);
          if ((spins & 255) == 255) {
            if (stop.load(std::memory_order_relaxed)) break;
            if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(200)) break;
          }
        }
        if (g == seen) {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] {
            return generation.load(std::memory_order_acquire) != seen ||
                   stop.load(std::memory_order_relaxed);
          });
          g = generation.load(std::memory_order_acquire);
        }
      }
      if (stop.load(std::memory_order_relaxed)) return;
      seen = g;
      run_tasks();
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
};

ThreadPool::ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads) {
  if (threads_ > 1) {
    impl_ = std::make_unique<Impl>();
    impl_->workers.reserve(threads_ - 1);
    for (int i = 0; i < threads_ - 1; ++i) {
      impl_->workers.emplace_back([this] { impl_->worker_loop(); });
    }
  }
}

ThreadPool::~ThreadPool() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop.store(true, std::memory_order_relaxed);
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->workers) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (!impl_ || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Impl& s = *impl_;
  s.fn = &fn;
  s.n = n;
  s.next.store(0, std::memory_order_relaxed);
  s.pending.store(static_cast<int>(s.workers.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.generation.fetch_add(1, std::memory_order_release);
  }
  s.cv.notify_all();
  s.run_tasks();
  for (int spins = 0; s.pending.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

ThreadPool& ThreadPool::serial() {
  static ThreadPool pool(1);
  return pool;
}

}  // namespace llmrr::kernels
