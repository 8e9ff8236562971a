#include "llmrr/runtime/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

void compute_gates(const float* scores, int64_t rows, int32_t experts, const GateRule& rule,
                   Routing* r) {
  const int k = r->k;
  for (int64_t t = 0; t < rows; ++t) {
    const float* s = scores + t * experts;
    float denom = 0.0f;
    for (int i = 0; i < k; ++i) denom = denom + s[r->chosen[t * k + i]];
    denom = denom + rule.denom_eps;
    for (int i = 0; i < k; ++i) {
      int32_t e = r->experts[t * k + i];
      float g = e < 0 ? 0.0f : s[e];
      g = (rule.norm_topk_prob && e >= 0) ? g / denom : g;
      r->gates[t * k + i] = rule.scale == 1.0f ? g : g * rule.scale;
    }
  }
}

void compute_gates(const float* scores, int64_t rows, int32_t experts, bool norm, Routing* r) {
  compute_gates(scores, rows, experts, GateRule{norm, 1.0f, 0.0f}, r);
}

void group_limited_choice(const float* scores, int64_t rows, int32_t experts, const float* bias,
                          int32_t n_group, int32_t topk_group, float* out) {
  const int32_t per = experts / n_group;
  std::vector<float> group_score(n_group);
  std::vector<int32_t> keep(topk_group);
  std::vector<float> vals(std::max(topk_group, 2));
  int32_t top2[2];
  for (int64_t t = 0; t < rows; ++t) {
    float* o = out + t * experts;
    for (int32_t e = 0; e < experts; ++e) o[e] = bias ? scores[t * experts + e] + bias[e] : scores[t * experts + e];
    if (n_group <= 1) continue;
    for (int32_t g = 0; g < n_group; ++g) {
      kernels::topk(o + g * per, per, 2, top2, vals.data());
      group_score[g] = vals[0] + vals[1];
    }
    kernels::topk(group_score.data(), n_group, topk_group, keep.data(), vals.data());
    for (int32_t g = 0; g < n_group; ++g) {
      if (std::find(keep.begin(), keep.end(), g) != keep.end()) continue;
      std::fill(o + g * per, o + (g + 1) * per, -std::numeric_limits<float>::infinity());
    }
  }
}

void route_tokens(const float* scores, int64_t rows, int32_t experts, int32_t k, bool norm,
                  const CapacityConfig& cap, int64_t tokens_for_capacity, Routing* r) {
  route_tokens(scores, scores, rows, experts, k, GateRule{norm, 1.0f, 0.0f}, cap,
               tokens_for_capacity, r);
}

void route_tokens(const float* select, const float* scores, int64_t rows, int32_t experts,
                  int32_t k, const GateRule& rule, const CapacityConfig& cap,
                  int64_t tokens_for_capacity, Routing* r) {
  r->resize(rows, k);
  std::vector<float> vals(k);
  for (int64_t t = 0; t < rows; ++t) {
    kernels::topk(select + t * experts, experts, k, r->chosen.data() + t * k, vals.data());
  }
  r->experts = r->chosen;
  r->capacity = 0;
  if (cap.enabled()) {
    r->capacity = expert_capacity(tokens_for_capacity, k, experts, cap.factor);
    std::vector<int32_t> load(experts, 0);
    std::vector<int32_t> order(experts);
    for (int64_t t = 0; t < rows; ++t) {
      const float* s = select + t * experts;
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
  compute_gates(scores, rows, experts, rule, r);
}

}  // namespace llmrr
