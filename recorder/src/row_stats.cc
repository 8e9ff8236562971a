#include "row_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "llmrr/kernels/ops.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace llmrr::recorder_internal {

namespace {

bool any_nan(const float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm256_or_ps(acc, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(acc) != 0) return true;
#endif
  for (; i < n; ++i) {
    if (x[i] != x[i]) return true;
  }
  return false;
}

struct Ranked {
  float v;
  int32_t id;
};

// Rank order among numbers: larger value first, then lower id (−0 and +0 tie, by id).
bool before(const Ranked& a, const Ranked& b) {
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}

constexpr int64_t kBlock = 64;
// Rows up to this length take the insertion path: ~k·ln(n/k) insertions on real logits,
// and a bounded n·k moves on adversarial (ascending) rows.
constexpr int64_t kSmallRow = 1024;

}  // namespace

void top_k(const float* x, int64_t n, int k, int32_t* ids, float* values) {
  if (k <= 0) return;
  // NaN ranks after every number; rare enough to leave to the reference.
  if (k > n || any_nan(x, n)) {
    kernels::topk(x, n, k, ids, values);
    return;
  }
  thread_local std::vector<Ranked> c;
  c.clear();
  if (n <= kSmallRow) {
    // Small rows (byte-level vocabularies): keep the best k in rank order. Ids ascend, so a
    // newcomer ranks after every kept entry of equal value: it goes before the first kept
    // value that is smaller, and only a value above the k-th kept one enters at all.
    c.resize(static_cast<size_t>(k));
    Ranked* best = c.data();
    auto insert = [best, k](int filled, float v, int32_t id) {
      int lo = 0, hi = filled;  // first position whose value is < v
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (best[mid].v < v) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      const int last = filled < k ? filled : k - 1;
      if (last > lo) std::memmove(best + lo + 1, best + lo, sizeof(Ranked) * (last - lo));
      best[lo] = {v, id};
    };
    for (int i = 0; i < k; ++i) insert(i, x[i], i);
    int64_t i = k;
#if defined(__AVX2__)
    // Most entries are not above the k-th kept value: test eight at a time.
    __m256 tv = _mm256_set1_ps(best[k - 1].v);
    for (; i + 8 <= n; i += 8) {
      int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), tv, _CMP_GT_OQ));
      if (mask == 0) continue;
      do {
        const int j = __builtin_ctz(static_cast<unsigned>(mask));
        const float v = x[i + j];
        if (v > best[k - 1].v) insert(k, v, static_cast<int32_t>(i + j));
        mask &= mask - 1;
      } while (mask != 0);
      tv = _mm256_set1_ps(best[k - 1].v);
    }
#endif
    for (; i < n; ++i) {
      if (x[i] > best[k - 1].v) insert(k, x[i], static_cast<int32_t>(i));
    }
    for (int r = 0; r < k; ++r) {
      ids[r] = best[r].id;
      values[r] = best[r].v;
    }
    return;
  }
  const int64_t blocks = n / kBlock;
  if (blocks >= 4 * static_cast<int64_t>(k)) {
    // The k-th largest block maximum T: k blocks each hold a value >= T, so the k-th ranked
    // value is >= T and every entry of the top k is among the values >= T.
    thread_local std::vector<float> maxima;
    maxima.resize(static_cast<size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) {
      const float* p = x + b * kBlock;
#if defined(__AVX2__)
      // No NaN here (checked above), so max_ps is the plain maximum.
      __m256 m0 = _mm256_loadu_ps(p), m1 = _mm256_loadu_ps(p + 8);
      for (int64_t i = 16; i < kBlock; i += 16) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(p + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(p + i + 8));
      }
      float lanes[8];
      _mm256_storeu_ps(lanes, _mm256_max_ps(m0, m1));
      float m = lanes[0];
      for (int j = 1; j < 8; ++j) m = lanes[j] > m ? lanes[j] : m;
#else
      float m = p[0];
      for (int64_t i = 1; i < kBlock; ++i) m = p[i] > m ? p[i] : m;
#endif
      maxima[static_cast<size_t>(b)] = m;
    }
    std::nth_element(maxima.begin(), maxima.begin() + (k - 1), maxima.end(),
                     [](float a, float b) { return a > b; });
    const float t = maxima[static_cast<size_t>(k - 1)];
    int64_t i = 0;
#if defined(__AVX2__)
    const __m256 tv = _mm256_set1_ps(t);
    for (; i + 8 <= n; i += 8) {
      int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), tv, _CMP_GE_OQ));
      while (mask != 0) {
        const int j = __builtin_ctz(static_cast<unsigned>(mask));
        c.push_back({x[i + j], static_cast<int32_t>(i + j)});
        mask &= mask - 1;
      }
    }
#endif
    for (; i < n; ++i) {
      if (x[i] >= t) c.push_back({x[i], static_cast<int32_t>(i)});
    }
  } else {
    c.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) c[static_cast<size_t>(i)] = {x[i], static_cast<int32_t>(i)};
  }
  if (static_cast<int64_t>(c.size()) > k) {
    std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), before);
  }
  std::sort(c.begin(), c.begin() + k, before);
  for (int i = 0; i < k; ++i) {
    ids[i] = c[static_cast<size_t>(i)].id;
    values[i] = c[static_cast<size_t>(i)].v;
  }
}

}  // namespace llmrr::recorder_internal
