// Selection helpers shared by top-k and sampling (private to kernels/cpu).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace llmrr::kernels::internal {

// a ranks before b: larger value first, then lower id; NaN after every number.
inline bool ranks_before(float va, int32_t a, float vb, int32_t b) {
  const bool na = va != va, nb = vb != vb;
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return a < b;
}

struct Ranked {
  float v;
  int32_t id;
};

// The `k` entries of x[0, n) that rank first, in rank order, appended to `out` (cleared).
// One pass with a bounded heap: O(n log k) worst case, O(n) typical, no allocation beyond k.
inline void select_top(const float* x, int64_t n, int64_t k, std::vector<Ranked>& out) {
  out.clear();
  if (k <= 0) return;
  k = std::min(k, n);
  auto worse = [](const Ranked& a, const Ranked& b) { return ranks_before(a.v, a.id, b.v, b.id); };
  // Max-heap under `worse`: the front is the entry that ranks last among those kept.
  for (int64_t i = 0; i < n; ++i) {
    const Ranked r{x[i], static_cast<int32_t>(i)};
    if (static_cast<int64_t>(out.size()) < k) {
      out.push_back(r);
      std::push_heap(out.begin(), out.end(), worse);
    } else if (ranks_before(r.v, r.id, out.front().v, out.front().id)) {
      std::pop_heap(out.begin(), out.end(), worse);
      out.back() = r;
      std::push_heap(out.begin(), out.end(), worse);
    }
  }
  std::sort_heap(out.begin(), out.end(), worse);
}

inline std::vector<uint32_t>& histogram_scratch() {
  thread_local std::vector<uint32_t> h;
  return h;
}

// Sorts non-NaN (value, id) pairs into rank order (descending value, ties by ascending id)
// with a stable LSD radix sort on the value's bits: O(n), exact. −0 must already be +0.
inline void radix_rank(std::vector<Ranked>& v, std::vector<Ranked>& tmp) {
  const size_t n = v.size();
  tmp.resize(n);
  auto key = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    // Ascending float order → ascending unsigned; inverted for descending.
    const uint32_t asc = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~asc;
  };
  // All three histograms in one pass; a digit every key shares needs no pass.
  std::vector<uint32_t>& count = histogram_scratch();
  count.assign(3 * 2048, 0);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t kk = key(v[i].v);
    ++count[kk & 2047u];
    ++count[2048 + ((kk >> 11) & 2047u)];
    ++count[4096 + (kk >> 22)];
  }
  Ranked* src = v.data();
  Ranked* dst = tmp.data();
  for (int pass = 0; pass < 3; ++pass) {
    uint32_t* c = count.data() + pass * 2048;
    const int shift = pass * 11;
    bool trivial = false;
    uint32_t sum = 0;
    for (int b = 0; b < 2048; ++b) {
      const uint32_t t = c[b];
      if (t == n) trivial = true;
      c[b] = sum;
      sum += t;
    }
    if (trivial) continue;
    for (size_t i = 0; i < n; ++i) dst[c[(key(src[i].v) >> shift) & 2047u]++] = src[i];
    std::swap(src, dst);
  }
  if (src != v.data()) v.swap(tmp);
}
}  // namespace llmrr::kernels::internal
