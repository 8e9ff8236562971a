// A fixed pool whose workers spin briefly, then sleep, between jobs. parallel_for publishes
// one job (a pointer to the caller's function, no allocation); everyone including the caller
// claims indices from one atomic counter. The caller never waits for a worker that has not
// joined the job yet (on a busy machine a sleeping or preempted worker would otherwise stall
// every call): it waits until every index is done, closes the job, and then waits only for
// workers that had already joined to leave. A worker that has waited kIdleAfterUs for a job
// lends itself to the idle task, if one is set (a recorder completing its steps in the
// engine's serial phases instead of preempting it).
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
  std::atomic<bool> stop{false};
  alignas(64) std::atomic<uint64_t> generation{0};  // bumped once per job
  alignas(64) std::atomic<uint64_t> open{0};        // generation of the open job, 0 = none
  alignas(64) std::atomic<int> active{0};           // workers inside the open job
  // The current job; written by the caller only while no worker is inside a job.
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t n = 0;
  alignas(64) std::atomic<int64_t> next{0};
  alignas(64) std::atomic<int64_t> done{0};
  alignas(64) std::atomic<IdleTask*> idle{nullptr};
  std::atomic<int> in_idle{0};  // workers inside idle->run()

  struct Signal final : JobSignal {
    const std::atomic<uint64_t>* generation;
    uint64_t seen;
    bool job_waiting() const override {
      return generation->load(std::memory_order_relaxed) != seen;
    }
  };

  // Dekker-style with set_idle_task: announce, then look; the setter stores, then waits
  // until nobody is inside.
  bool run_idle(uint64_t seen) {
    if (idle.load(std::memory_order_relaxed) == nullptr) return false;
    in_idle.fetch_add(1, std::memory_order_seq_cst);
    IdleTask* t = idle.load(std::memory_order_seq_cst);
    Signal signal;
    signal.generation = &generation;
    signal.seen = seen;
    const bool did = t != nullptr && t->run(signal);
    in_idle.fetch_sub(1, std::memory_order_release);
    return did;
  }

  void run_tasks() {
    const auto& f = *fn;
    const int64_t count = n;
    int64_t finished = 0;
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      f(i);
      ++finished;
    }
    if (finished) done.fetch_add(finished, std::memory_order_release);
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = generation.load(std::memory_order_acquire);
      if (g == seen) {
        // Spin a little: the engine issues ops back to back, and a futex wake costs more
        // than most small ops.
        using clock = std::chrono::steady_clock;
        auto start = clock::now();
        for (int spins = 1; g == seen; ++spins) {
          _mm_pause();
          g = generation.load(std::memory_order_acquire);
          if ((spins & 31) == 0 && g == seen) {
            if (stop.load(std::memory_order_relaxed)) return;
            const auto waited = clock::now() - start;
            if (waited > std::chrono::microseconds(kIdleAfterUs) && run_idle(seen)) {
              start = clock::now();  // a serial phase may go on: wait (and help) again
              g = generation.load(std::memory_order_acquire);
              continue;
            }
            if (waited > std::chrono::microseconds(300)) break;
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
      // Join, then make sure the job is still open: if the caller has closed it, it may
      // already be rewriting fn and n, so leave without touching them.
      active.fetch_add(1, std::memory_order_seq_cst);
      if (open.load(std::memory_order_seq_cst) == g) run_tasks();
      active.fetch_sub(1, std::memory_order_release);
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
  set_idle_task(nullptr);
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
  s.done.store(0, std::memory_order_relaxed);
  const uint64_t g = s.generation.load(std::memory_order_relaxed) + 1;
  s.open.store(g, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.generation.store(g, std::memory_order_release);
  }
  s.cv.notify_all();
  s.run_tasks();
  for (int spins = 0; s.done.load(std::memory_order_acquire) != n; ++spins) {
    if (spins < 1 << 14) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
  s.open.store(0, std::memory_order_seq_cst);
  for (int spins = 0; s.active.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins < 1 << 14) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::set_idle_task(IdleTask* task) {
  if (!impl_) return;
  Impl& s = *impl_;
  s.idle.store(task, std::memory_order_seq_cst);
  for (int spins = 0; s.in_idle.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins < 1 << 14) {
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
