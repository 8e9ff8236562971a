// Shared pieces of the kernel tests: ISA and thread-count sweeps, random data, and the one
// table of fp64 tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/threadpool.h"

namespace llmrr::kernels::testing {

// Unit roundoff of fp32.
inline constexpr double kU = 0x1p-24;

// The tolerance table: every fp64 comparison in the kernel tests reads its bound here.
// bound = (per_term · terms + fixed) · kU · scale, where `terms` is the length of the longest
// reduction and `scale` the op's natural magnitude (Σ|x·w| for a dot product, |y| for an
// elementwise result, max|v| for attention).
struct OpTolerance {
  const char* op;
  double per_term;
  double fixed;
};
inline constexpr OpTolerance kTolerances[] = {
    {"gemm", 1.0, 4.0},        // sequential fma chains + split/tile adds; scale Σ|x·w|
    {"rmsnorm", 0.5, 8.0},     // sum of squares, then /, +, sqrt, /, ×, ×; scale |y|
    {"attention", 2.0, 32.0},  // exp (≤ 1 ulp) per position, sums in l and o; scale max|v|
    {"softmax", 2.0, 8.0},     // n exps and a sequential sum; scale each output
    {"silu", 0.0, 6.0},        // exp, +, /, ×; scale |y|
    {"rope", 0.0, 4.0},        // table values rounded, 2 products and a sum; scale |x1|+|x2|
    {"combine", 1.0, 2.0},     // k fma; scale Σ|g·y|
};
inline double tolerance(const char* op, double terms, double scale) {
  for (const auto& t : kTolerances) {
    if (std::string(t.op) == op) return (t.per_term * terms + t.fixed) * kU * scale;
  }
  ADD_FAILURE() << "no tolerance for " << op;
  return 0.0;
}

inline std::vector<Isa> all_isas() {
  std::vector<Isa> out;
  Isa before = active_isa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (set_isa(isa) == isa) out.push_back(isa);
  }
  set_isa(before);
  return out;
}

// Restores the ISA in force when it was created.
class IsaGuard {
 public:
  IsaGuard() : saved_(active_isa()) {}
  ~IsaGuard() { set_isa(saved_); }

 private:
  Isa saved_;
};

// Pools of 1, 2, 3 and 7 threads, created once.
inline std::vector<ThreadPool*> pools() {
  static ThreadPool p1(1), p2(2), p3(3), p7(7);
  return {&p1, &p2, &p3, &p7};
}

inline std::vector<float> random_vec(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

inline bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// First index where two float arrays differ in bits, or -1.
inline int64_t first_diff(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (bits(a[i]) != bits(b[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace llmrr::kernels::testing
