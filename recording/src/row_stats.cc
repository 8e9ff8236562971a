#include "row_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace llmrr::recording::internal {

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

// Rows up to this length take the ranked path below when k is small, else the insertion
// path: ~k·ln(n/k) insertions on real logits, a bounded n·k moves on adversarial
// (ascending) rows.
constexpr int64_t kSmallRow = 1024;

#if defined(__AVX2__)
// Rank-order key of a number (not NaN) as a signed integer: larger value, then lower id,
// compares greater; −0 and +0 map to the same value bits. The id sits in the low half.
inline int64_t rank_key(float v, int64_t id) {
  const float canonical = v + 0.0f;  // −0 → +0
  uint32_t b;
  std::memcpy(&b, &canonical, sizeof b);
  // Unsigned order of the float's bits, then the top bit flipped for a signed compare.
  const uint32_t ordered = ((b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u)) ^ 0x80000000u;
  const uint64_t key =
      static_cast<uint64_t>(ordered) << 32 | static_cast<uint32_t>(~static_cast<uint32_t>(id));
  return static_cast<int64_t>(key);
}

constexpr int kMaxRanked = 64;

// Short rows with a small k: the k-th largest maximum T of pairs bounds the top k from
// below (k pairs each hold a value >= T), which leaves ~1.4·k candidates on real logits
// (blocks of four leave ~3·k: neighbouring logits are alike); each candidate's rank is the
// count of candidates whose key is greater (keys are distinct: ids are), four compares at
// a time, without a branch on the data. Returns false (nothing written) when more than
// kMaxRanked candidates pass.
bool top_k_ranked(const float* x, int64_t n, int k, int32_t* ids, float* values) {
  const int64_t pairs = n / 2;
  float maxima[kSmallRow / 2];
  int64_t p = 0;
  const __m256i evens = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  for (; 2 * p + 8 <= n; p += 4) {
    const __m256 v = _mm256_loadu_ps(x + 2 * p);
    const __m256 m = _mm256_max_ps(v, _mm256_permute_ps(v, 0xB1));  // pair max in both lanes
    const __m256 packed = _mm256_permutevar8x32_ps(m, evens);
    _mm_storeu_ps(maxima + p, _mm256_castps256_ps128(packed));
  }
  for (; p < pairs; ++p) maxima[p] = x[2 * p] > x[2 * p + 1] ? x[2 * p] : x[2 * p + 1];
  std::nth_element(maxima, maxima + (k - 1), maxima + pairs,
                   [](float a, float b) { return a > b; });
  const float t = maxima[k - 1];
  // The padding after the candidates (INT64_MIN) is never greater.
  alignas(32) int64_t keys[kMaxRanked + 4];
  int m = 0;
  const __m256 tv = _mm256_set1_ps(t);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), tv, _CMP_GE_OQ));
    if (m + __builtin_popcount(static_cast<unsigned>(mask)) > kMaxRanked) return false;
    while (mask != 0) {
      const int j = __builtin_ctz(static_cast<unsigned>(mask));
      keys[m++] = rank_key(x[i + j], i + j);
      mask &= mask - 1;
    }
  }
  for (; i < n; ++i) {
    if (!(x[i] >= t)) continue;
    if (m == kMaxRanked) return false;
    keys[m++] = rank_key(x[i], i);
  }
  const int padded = (m + 3) & ~3;
  for (int j = m; j < padded; ++j) keys[j] = std::numeric_limits<int64_t>::min();
  for (int c = 0; c < m; ++c) {
    const __m256i v = _mm256_set1_epi64x(keys[c]);
    int rank = 0;
    for (int j = 0; j < padded; j += 4) {
      const __m256i greater =
          _mm256_cmpgt_epi64(_mm256_load_si256(reinterpret_cast<const __m256i*>(keys + j)), v);
      const int lanes = _mm256_movemask_pd(_mm256_castsi256_pd(greater));
      rank += __builtin_popcount(static_cast<unsigned>(lanes));
    }
    if (rank < k) {
      const int32_t id = static_cast<int32_t>(~static_cast<uint32_t>(keys[c]));
      ids[rank] = id;
      values[rank] = x[id];
    }
  }
  return true;
}
#endif

// The rank order itself (the engine's kernels::topk, which this module does not link, ranks
// the same way): NaN after every number, larger value first, ties by lower id; k > n pads
// with id −1 and −inf.
void top_k_reference(const float* x, int64_t n, int k, int32_t* ids, float* values) {
  thread_local std::vector<Ranked> all;
  all.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = {x[i], static_cast<int32_t>(i)};
  auto before = [](const Ranked& a, const Ranked& b) {
    const bool na = a.v != a.v, nb = b.v != b.v;
    if (na != nb) return nb;
    if (!na && a.v != b.v) return a.v > b.v;
    return a.id < b.id;
  };
  const int64_t m = std::min<int64_t>(k, n);
  std::partial_sort(all.begin(), all.begin() + m, all.end(), before);
  for (int64_t i = 0; i < m; ++i) {
    ids[i] = all[static_cast<size_t>(i)].id;
    values[i] = all[static_cast<size_t>(i)].v;
  }
  for (int64_t i = m; i < k; ++i) {
    ids[i] = -1;
    values[i] = -std::numeric_limits<float>::infinity();
  }
}

constexpr int64_t kBlock = 64;

}  // namespace

void top_k(const float* x, int64_t n, int k, int32_t* ids, float* values) {
  if (k <= 0) return;
  // NaN ranks after every number; rare enough to leave to the reference.
  if (k > n || any_nan(x, n)) {
    top_k_reference(x, n, k, ids, values);
    return;
  }
#if defined(__AVX2__)
  if (n <= kSmallRow && k <= kMaxRanked && n / 2 >= k && top_k_ranked(x, n, k, ids, values))
    return;
#endif
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

namespace {

// exp(r) for r <= 0 in fp64: r = k ln2 + f with |f| <= ln2/2 (Cody-Waite, ln2 in two parts),
// a degree-13 Taylor polynomial in Horner form (error < 1e-16 there), scaled by 2^k.
double exp_nonpositive(double r) {
  if (r < -745.0) return 0.0;  // below the smallest subnormal
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 0.693147180369123816490;   // ln2's top bits: k * hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double k = std::nearbyint(r * kLog2e);
  const double f = (r - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  constexpr double kInvFact[13] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                   1.0 / 362880.0,    1.0 / 40320.0,    1.0 / 5040.0,
                                   1.0 / 720.0,       1.0 / 120.0,      1.0 / 24.0,
                                   1.0 / 6.0,         0.5,              1.0,
                                   1.0};
  for (double c : kInvFact) p = p * f + c;
  return std::ldexp(p, static_cast<int>(k));
}

}  // namespace

std::optional<double> logsumexp(const float* x, int64_t n, float max) {
  if (n <= 0 || !std::isfinite(max)) return std::nullopt;
  const double m = max;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - m;
    if (d != d) return std::nullopt;  // a NaN the max did not see
    sum += exp_nonpositive(d);
  }
  return m + std::log(sum);  // sum is in [1, n]: log's own rounding is ~1 ulp of a small value
}

}  // namespace llmrr::recording::internal
