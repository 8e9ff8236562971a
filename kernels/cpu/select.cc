// Router scoring (softmax, sigmoid) and selection (argmax, top-k) with fixed tie rules.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/select_internal.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"

namespace llmrr::kernels {

void softmax_inplace(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = numerics::exp_f32(x[i] - mx);
    s = s + x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / s;
}

void sigmoid_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = 1.0f / (1.0f + numerics::exp_f32(-x[i]));
}

int32_t argmax(const float* x, int64_t n) {
  int32_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] != x[i]) continue;
    if (best < 0 || x[i] > x[best]) best = static_cast<int32_t>(i);
  }
  // All NaN: a defined answer (the first id) rather than an id the caller cannot use.
  return best < 0 && n > 0 ? 0 : best;
}

void topk(const float* x, int64_t n, int k, int32_t* ids, float* values) {
  if (k <= 0) return;
  thread_local std::vector<internal::Ranked> top;
  internal::select_top(x, n, k, top);
  for (size_t i = 0; i < top.size(); ++i) {
    ids[i] = top[i].id;
    values[i] = top[i].v;
  }
  for (int64_t i = static_cast<int64_t>(top.size()); i < k; ++i) {
    ids[i] = -1;
    values[i] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace llmrr::kernels
