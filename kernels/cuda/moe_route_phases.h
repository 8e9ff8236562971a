// MoE routing on the device, as phases (block_exec.h), exactly runtime/src/moe_router.cc.
// The scores themselves are select_phases.h's score_block (softmax / sigmoid) and the
// router's top-k is its topk_block; this file has the steps around them:
//
//   group_choice_block  DeepSeek-V3's selection scores (group_limited_choice): one thread
//                       per row; a group's score is the sum of its two best biased scores
//                       (topk's ranking, ranks_before), a group is kept when fewer than
//                       topk_group groups rank before it, which is the CPU's top-k set.
//   capacity_drop_block overflow = drop: one block per expert e. The CPU gives slot (t, i)
//                       with expert e room iff fewer than `capacity` slots before it (rows
//                       in order, rank order within a row) chose e; a token chooses e at most
//                       once, so that count is an exclusive prefix sum over rows of "row r
//                       chose e". Rows go in chunks of T: count, prefix (thread 0, carried
//                       across chunks in shared memory), mark.
//   capacity_reroute_block overflow = reroute: a slot's fate depends on every earlier
//                       reroute, so one block walks the rows in order. Per row, threads rank
//                       the experts as the CPU's stable_sort by score descending (rank =
//                       #better + #equal with a lower id), then thread 0 runs the row's
//                       slots as the CPU does, a full expert's slot going to the eligible
//                       expert of least rank. (NaN scores: the CPU's sort order is itself
//                       unspecified there; finite scores, ±inf included, are exact.)
//   gates_block         compute_gates, one thread per row.
//
// Outcome codes are RouteOutcome's (observer.h): 0 kept, 1 rerouted, 2 dropped.
#pragma once

#include <math.h>

#include <cstdint>
#include <string>

#include "block_exec.h"
#include "rope_phases.h"    // elementwise_launch
#include "select_phases.h"  // ranks_before

namespace llmrr::kernels::cuda::detail {

inline constexpr uint8_t kRouteKept = 0, kRouteRerouted = 1, kRouteDropped = 2;

struct GroupChoiceParams {
  const float* scores;  // rows × experts
  const float* bias;    // experts, or nullptr (0)
  int64_t rows;
  int32_t experts, n_group, topk_group;
  float* out;  // rows × experts
};

inline constexpr int32_t kMaxExpertGroups = 64;

inline std::string group_choice_prepare(const GroupChoiceParams& p, Launch& l) {
  if (p.n_group > kMaxExpertGroups) {
    return "moe group choice: " + std::to_string(p.n_group) + " groups, at most " +
           std::to_string(kMaxExpertGroups);
  }
  l = elementwise_launch(p.rows);
  return "";
}

// The value topk(x, n, 2) puts second: the second best by ranks_before, −inf when n < 2.
LLMRR_HD inline float group_top2_sum(const float* x, int32_t n) {
  float v0 = x[0], v1 = -INFINITY;
  int32_t i0 = 0, i1 = -1;
  for (int32_t i = 1; i < n; ++i) {
    if (ranks_before(x[i], i, v0, i0)) {
      v1 = v0;
      i1 = i0;
      v0 = x[i];
      i0 = i;
    } else if (i1 < 0 || ranks_before(x[i], i, v1, i1)) {
      v1 = x[i];
      i1 = i;
    }
  }
  return v0 + v1;
}

template <class Block>
LLMRR_HD void group_choice_block(Block& b, const GroupChoiceParams& p) {
  b.phase([&](int t) {
    const int64_t r = b.bx * b.nthreads + t;
    if (r >= p.rows) return;
    const int32_t E = p.experts;
    float* o = p.out + r * E;
    const float* s = p.scores + r * E;
    for (int32_t e = 0; e < E; ++e) o[e] = p.bias != nullptr ? s[e] + p.bias[e] : s[e];
    if (p.n_group <= 1) return;
    const int32_t per = E / p.n_group;
    uint64_t drop = 0;  // decided on the unmasked sums, as the CPU's top-k of them
    for (int32_t g = 0; g < p.n_group; ++g) {
      const float gs = group_top2_sum(o + g * per, per);
      int32_t before = 0;
      for (int32_t h = 0; h < p.n_group; ++h) {
        before += h != g && ranks_before(group_top2_sum(o + h * per, per), h, gs, g) ? 1 : 0;
      }
      if (before >= p.topk_group) drop |= uint64_t{1} << g;
    }
    for (int32_t g = 0; g < p.n_group; ++g) {
      if (!((drop >> g) & 1u)) continue;
      for (int32_t e = g * per; e < (g + 1) * per; ++e) o[e] = -INFINITY;
    }
  });
}

struct CapacityParams {
  const float* select;    // rows × experts (reroute order)
  const int32_t* chosen;  // rows × k, the router's top-k
  int64_t rows;
  int32_t experts, k, capacity;
  int32_t* experts_out;  // rows × k
  uint8_t* outcome;      // rows × k
};

// Host side: what the kernels take (experts ≥ k, so every chosen id is a real expert).
inline std::string capacity_check(const CapacityParams& p) {
  if (p.k > p.experts) {
    return "moe capacity: top-k " + std::to_string(p.k) + " > " + std::to_string(p.experts) +
           " experts";
  }
  return "";
}

inline constexpr int kCapacityThreads = 128;

inline Launch capacity_drop_launch(const CapacityParams& p) {
  Launch l;
  l.gx = p.experts;
  l.threads = kCapacityThreads;
  l.smem = (kCapacityThreads + 1) * sizeof(int64_t);
  return l;
}

template <class Block>
LLMRR_HD void capacity_drop_block(Block& b, const CapacityParams& p) {
  int64_t* before = static_cast<int64_t*>(b.smem);  // [T] exclusive prefix, [T] carry
  const int32_t e = static_cast<int32_t>(b.bx);
  const int T = b.nthreads;
  b.phase([&](int t) {
    if (t == 0) before[T] = 0;
  });
  for (int64_t r0 = 0; r0 < p.rows; r0 += T) {
    b.phase([&](int t) {
      const int64_t r = r0 + t;
      int64_t hit = 0;
      for (int i = 0; r < p.rows && i < p.k; ++i) hit += p.chosen[r * p.k + i] == e ? 1 : 0;
      before[t] = hit;
    });
    b.phase([&](int t) {
      if (t != 0) return;
      int64_t run = before[T];
      for (int j = 0; j < T; ++j) {
        const int64_t h = before[j];
        before[j] = run;
        run += h;
      }
      before[T] = run;
    });
    b.phase([&](int t) {
      const int64_t r = r0 + t;
      if (r >= p.rows) return;
      for (int i = 0; i < p.k; ++i) {
        const int64_t at = r * p.k + i;
        if (p.chosen[at] != e) continue;
        const bool room = before[t] < p.capacity;
        p.experts_out[at] = room ? e : -1;
        p.outcome[at] = room ? kRouteKept : kRouteDropped;
      }
    });
  }
}

inline Launch capacity_reroute_launch(const CapacityParams& p) {
  Launch l;
  l.threads = kCapacityThreads;
  SmemSizer z;
  z.take<int32_t>(p.experts);  // load
  z.take<int32_t>(p.experts);  // rank
  l.smem = z.off;
  return l;
}

template <class Block>
LLMRR_HD void capacity_reroute_block(Block& b, const CapacityParams& p) {
  SmemCarver carve{static_cast<unsigned char*>(b.smem)};
  int32_t* load = carve.take<int32_t>(p.experts);
  int32_t* rank = carve.take<int32_t>(p.experts);
  const int32_t E = p.experts;
  const int k = p.k;
  b.phase([&](int t) {
    for (int32_t e = t; e < E; e += b.nthreads) load[e] = 0;
    for (int64_t at = t; at < p.rows * k; at += b.nthreads) {
      p.experts_out[at] = p.chosen[at];
      p.outcome[at] = kRouteKept;
    }
  });
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* s = p.select + r * E;
    b.phase([&](int t) {
      for (int32_t e = t; e < E; e += b.nthreads) {
        int32_t n = 0;
        for (int32_t f = 0; f < E; ++f) {
          n += (s[f] > s[e] || (f < e && !(s[e] > s[f]))) ? 1 : 0;
        }
        rank[e] = n;
      }
    });
    b.phase([&](int t) {
      if (t != 0) return;
      const int32_t* ch = p.chosen + r * k;
      int32_t* ex = p.experts_out + r * k;
      for (int i = 0; i < k; ++i) {
        const int32_t e = ex[i];
        if (load[e] < p.capacity) {
          ++load[e];
          continue;
        }
        int32_t pick = -1;
        for (int32_t cand = 0; cand < E; ++cand) {
          if (load[cand] >= p.capacity) continue;
          bool used = false;
          for (int j = 0; j < k && !used; ++j) used = ch[j] == cand || ex[j] == cand;
          if (!used && (pick < 0 || rank[cand] < rank[pick])) pick = cand;
        }
        if (pick >= 0) {
          ex[i] = pick;
          ++load[pick];
          p.outcome[r * k + i] = kRouteRerouted;
        } else {
          ex[i] = -1;
          p.outcome[r * k + i] = kRouteDropped;
        }
      }
    });
  }
}

struct GatesParams {
  const float* scores;  // rows × experts (unbiased)
  const int32_t* chosen;
  const int32_t* experts_used;  // after capacity (or chosen)
  int64_t rows;
  int32_t experts, k;
  bool norm_topk_prob;
  float scale, denom_eps;
  float* gates;  // rows × k
};

inline Launch gates_launch(const GatesParams& p) {
  return elementwise_launch(p.rows);
}

template <class Block>
LLMRR_HD void gates_block(Block& b, const GatesParams& p) {
  b.phase([&](int t) {
    const int64_t r = b.bx * b.nthreads + t;
    if (r >= p.rows) return;
    const float* s = p.scores + r * p.experts;
    const int k = p.k;
    float denom = 0.0f;
    for (int i = 0; i < k; ++i) denom = denom + s[p.chosen[r * k + i]];
    denom = denom + p.denom_eps;
    for (int i = 0; i < k; ++i) {
      const int32_t e = p.experts_used[r * k + i];
      float g = e < 0 ? 0.0f : s[e];
      g = (p.norm_topk_prob && e >= 0) ? g / denom : g;
      p.gates[r * k + i] = p.scale == 1.0f ? g : g * p.scale;
    }
  });
}

}  // namespace llmrr::kernels::cuda::detail
