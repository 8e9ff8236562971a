// A small fixed pool. Threads split *outputs*, never a reduction axis (invariant 1), so the
// pool's size never changes a result.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace llmrr::kernels {

// Whether the pool has published a job since a piece of idle work began: work that can
// stop between small units should then stop, so the worker joins the job.
class JobSignal {
 public:
  virtual bool job_waiting() const = 0;

 protected:
  ~JobSignal() = default;
};

// Work a pool's idle workers may do between jobs (ThreadPool::set_idle_task).
class IdleTask {
 public:
  // Does a bounded piece of pending work on the calling worker and says whether there was
  // any. Called by one or several idle workers at once, never by parallel_for's caller;
  // must not throw and must not call parallel_for on the pool.
  virtual bool run(const JobSignal& signal) = 0;

 protected:
  ~IdleTask() = default;
};

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

  // A worker that has waited kIdleAfterUs for a job runs task->run() (again after each
  // piece of work, until it reports none), then goes on waiting; workers look only while
  // they wait awake (a few hundred microseconds after the last job, then they sleep until
  // the next). A job published meanwhile does not wait for the task: parallel_for's caller
  // never waits for a worker that has not joined, so what idle work costs the caller is the
  // worker's share of the jobs it misses. nullptr detaches; returns once no worker is inside
  // the previous task, so the task may be destroyed then. A pool without workers never
  // runs it.
  void set_idle_task(IdleTask* task);
  static constexpr int64_t kIdleAfterUs = 4;

  // A process-wide inline pool (one thread) for callers that do not care.
  static ThreadPool& serial();

 private:
  struct Impl;
  int threads_ = 1;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrr::kernels
