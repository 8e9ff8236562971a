// A small fixed pool. Threads split *outputs*, never a reduction axis (invariant 1), so the
// pool's size never changes a result.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace llmrr::kernels {

class ThreadPool {
 public:
  // threads <= 1 runs everything inline on the caller.
  explicit ThreadPool(int threads = 1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Runs fn(i) for every i in [0, n) and returns when all are done; the caller's thread
  // takes part. Tasks must write disjoint outputs. Not reentrant: a task must not call
  // parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

  // A process-wide inline pool (one thread) for callers that do not care.
  static ThreadPool& serial();

 private:
  struct Impl;
  int threads_ = 1;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrr::kernels
