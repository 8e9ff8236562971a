#include "llmrr/runtime/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "llmrr/kernels/ops.h"

namespace llmrr {

const char* overflow_name(Overflow o) {
  switch (o) {
    case Overflow::kNone: return "none";
    case Overflow::kDrop: return "drop";
    case Overflow::kReroute: return "reroute";
  }
  return "?";
}

int32_t expert_capacity(int64_t tokens, int32_t k, int32_t experts, double factor) {
  double c = std::ceil(static_cast<double>(tokens) * k / experts * factor);
  return static_cast<int32_t>(std::max(c, 0.0));
}

void Routing::resize(int64_t n, int32_t kk) {
  rows = n;
  k = kk;
  size_t s = static_cast<size_t>(n) * static_cast<size_t>(kk);
  chosen.assign(s, -1);
  experts.assign(s, -1);
  gates.assign(s, 0.0f);
  outcome.assign(s, RouteOutcome::kKept);
}

void compute_gates(const float* scores, int64_t rows, int32_t experts, bool norm, Routing* r) {
  const int k = r->k;
  for (int64_t t = 0; t < rows; ++t) {
    const float* s = scores + t * experts;
    float denom = 0.0f;
    for (int i = 0; i < k; ++i) denom = denom + s[r->chosen[t * k + i]];
    for (int i = 0; i < k; ++i) {
      int32_t e = r->experts[t * k + i];
      float g = e < 0 ? 0.0f : s[e];
      r->gates[t * k + i] = (norm && e >= 0) ? g / denom : g;
    }
  }
}

void route_tokens(const float* scores, int64_t rows, int32_t experts, int32_t k, bool norm,
                  const CapacityConfig& cap, int64_t tokens_for_capacity, Routing* r) {
  r->resize(rows, k);
  std::vector<float> vals(k);
  for (int64_t t = 0; t < rows; ++t) {
    kernels::topk(scores + t * experts, experts, k, r->chosen.data() + t * k, vals.data());
  }
  r->experts = r->chosen;
  r->capacity = 0;
  if (cap.enabled()) {
    r->capacity = expert_capacity(tokens_for_capacity, k, experts, cap.factor);
    std::vector<int32_t> load(experts, 0);
    std::vector<int32_t> order(experts);
    for (int64_t t = 0; t < rows; ++t) {
      const float* s = scores + t * experts;
      bool order_ready = false;
      for (int i = 0; i < k; ++i) {
        int32_t& e = r->experts[t * k + i];
        if (load[e] < r->capacity) {
          ++load[e];
          continue;
        }
        if (cap.overflow == Overflow::kReroute) {
          if (!order_ready) {
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(),
                             [s](int32_t a, int32_t b) { return s[a] > s[b]; });
            order_ready = true;
          }
          int32_t pick = -1;
          for (int32_t cand : order) {
            if (load[cand] >= r->capacity) continue;
            bool used = false;
            for (int j = 0; j < k && !used; ++j) {
              used = r->chosen[t * k + j] == cand || r->experts[t * k + j] == cand;
            }
            if (!used) {
              pick = cand;
              break;
            }
          }
          if (pick >= 0) {
            e = pick;
            ++load[pick];
            r->outcome[t * k + i] = RouteOutcome::kRerouted;
            continue;
          }
        }
        e = -1;
        r->outcome[t * k + i] = RouteOutcome::kDropped;
      }
    }
  }
  compute_gates(scores, rows, experts, norm, r);
}

}  // namespace llmrr
