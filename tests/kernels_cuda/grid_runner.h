// The CPU grid runner: runs an exact CUDA kernel's block body (kernels/cuda/*_phases.h) over
// every block of its launch, phase by phase over every thread index, with the block's
// shared memory emulated by a buffer that is poisoned (NaN bytes) before each block so that
// a read of shared memory no earlier phase wrote shows up in the result. Threads run in
// index order, or reversed (and blocks too): a result that depends on that order means two
// threads of one phase communicate, i.e. a missing barrier on the GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <vector>

#include "cuda/block_exec.h"
#include "llmrr/kernels/plan.h"

namespace llmrr {
// gtest prints plan parameters with this (found by argument-dependent lookup).
inline void PrintTo(const Plan& p, std::ostream* os) {
  *os << plan_to_string(p);
}
}  // namespace llmrr

namespace llmrr::kernels::cuda::testing {

enum class ThreadOrder { kForward, kReverse };

struct HostBlock {
  int64_t bx, by;
  int nthreads;
  void* smem;
  ThreadOrder order;

  template <class F>
  void phase(F&& f) {
    if (order == ThreadOrder::kForward) {
      for (int t = 0; t < nthreads; ++t) f(t);
    } else {
      for (int t = nthreads - 1; t >= 0; --t) f(t);
    }
  }
};

template <class Body>
void run_grid(const detail::Launch& l, ThreadOrder order, Body&& body) {
  std::vector<std::max_align_t> smem(l.smem / sizeof(std::max_align_t) + 1);
  for (int64_t i = 0; i < l.gx * l.gy; ++i) {
    const int64_t b = order == ThreadOrder::kForward ? i : l.gx * l.gy - 1 - i;
    std::memset(smem.data(), 0xff, smem.size() * sizeof(std::max_align_t));
    HostBlock blk{b % l.gx, b / l.gx, l.threads, smem.data(), order};
    body(blk);
  }
}

inline constexpr ThreadOrder kOrders[] = {ThreadOrder::kForward, ThreadOrder::kReverse};

}  // namespace llmrr::kernels::cuda::testing
