// Selection on the device, as phases (block_exec.h): top-k and fingerprints of logits rows,
// and the router's softmax / sigmoid.
//
// top-k, one block per row: phase 1, thread t keeps the k best of x[t], x[t + T], ... in its
// own shared list (insertion, topk's ranking); then log2(T) phases, each merging list
// t + w into list t for t < w; list 0 is the answer. The ranking is a strict total order on
// (value, id), so the result is the CPU's for every T and every merge shape.
//
// fingerprint, eight threads per row (four rows per block): phase 1, thread i runs lane i of
// XXH3's long path (xxh3_hd.h) and lane i of the sum of squares / max |x| (i ≡ lane mod 8,
// the lanes of format's fingerprint_row); phase 2, lane 0 merges both.
#pragma once

#include <math.h>

#include <cstdint>
#include <string>

#include "block_exec.h"
#include "llmrr/kernels/cuda_ops.h"
#include "llmrr/kernels/numerics_hd.h"
#include "rope_phases.h"  // elementwise_launch
#include "xxh3_hd.h"

namespace llmrr::kernels::cuda::detail {

struct RankedHd {
  float v;
  int32_t id;
};

// topk's ranks_before: larger value first, then lower id; NaN after every number.
LLMRR_HD inline bool ranks_before(float va, int32_t a, float vb, int32_t b) {
  const bool na = va != va, nb = vb != vb;
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return a < b;
}

// Fills empty list entries; ranks after every real entry (NaN, largest id), and becomes
// (−1, −inf) in the output, as topk pads k > n.
inline constexpr int32_t kNoId = 0x7fffffff;

struct TopkParams {
  const float* x;
  int64_t ldx, rows, n;
  int k;
  int32_t* ids;
  float* values;
};

inline std::string topk_prepare(TopkParams& p, Launch& l) {
  if (p.k > kMaxTopK) {
    return "select_rows: k = " + std::to_string(p.k) + ", the CUDA top-k takes at most " +
           std::to_string(kMaxTopK);
  }
  int t = 256;
  while (t > 32 && static_cast<int64_t>(t) * p.k > 6144) t /= 2;
  l.gx = p.rows;
  l.gy = 1;
  l.threads = t;
  l.smem = static_cast<size_t>(t) * static_cast<size_t>(p.k) * sizeof(RankedHd);
  return "";
}

template <class Block>
LLMRR_HD void topk_block(Block& b, const TopkParams& p) {
  RankedHd* lists = static_cast<RankedHd*>(b.smem);  // [T][k]
  const float* xr = p.x + b.bx * p.ldx;
  const int k = p.k;
  b.phase([&](int t) {
    RankedHd* L = lists + static_cast<int64_t>(t) * k;
    const float nan = ::llmrr::hd::f32_from_bits(0x7fc00000u);
    for (int i = 0; i < k; ++i) L[i] = RankedHd{nan, kNoId};
    for (int64_t i = t; i < p.n; i += b.nthreads) {
      const float v = xr[i];
      const int32_t id = static_cast<int32_t>(i);
      if (!ranks_before(v, id, L[k - 1].v, L[k - 1].id)) continue;
      int j = k - 1;
      while (j > 0 && ranks_before(v, id, L[j - 1].v, L[j - 1].id)) {
        L[j] = L[j - 1];
        --j;
      }
      L[j] = RankedHd{v, id};
    }
  });
  for (int w = b.nthreads / 2; w >= 1; w /= 2) {
    b.phase([&](int t) {
      if (t >= w) return;
      RankedHd* A = lists + static_cast<int64_t>(t) * k;
      const RankedHd* B = lists + static_cast<int64_t>(t + w) * k;
      // How many of the k best come from A and from B, then an in-place merge from the back
      // (each write lands at or after the A entry it could overwrite).
      int ia = 0, ib = 0;
      for (int r = 0; r < k; ++r) {
        if (ranks_before(B[ib].v, B[ib].id, A[ia].v, A[ia].id)) {
          ++ib;
        } else {
          ++ia;
        }
      }
      int i = ia - 1, j = ib - 1;
      for (int wi = k - 1; j >= 0; --wi) {
        if (i >= 0 && ranks_before(B[j].v, B[j].id, A[i].v, A[i].id)) {
          A[wi] = A[i--];
        } else {
          A[wi] = B[j--];
        }
      }
    });
  }
  b.phase([&](int t) {
    for (int i = t; i < k; i += b.nthreads) {
      const RankedHd e = lists[i];
      const bool none = e.id == kNoId;
      p.ids[b.bx * k + i] = none ? -1 : e.id;
      p.values[b.bx * k + i] = none ? -INFINITY : e.v;
    }
  });
}

inline constexpr int kFpRowsPerBlock = 4;

struct FingerprintParams {
  const float* x;
  int64_t ldx, rows, n;
  RowFingerprint* out;
  const uint8_t* secret;  // XXH3's default secret (LLMRR_XXH3_SECRET_BYTES), device memory
};

inline Launch fingerprint_launch(const FingerprintParams& p) {
  Launch l;
  l.gx = ceil_div(p.rows, kFpRowsPerBlock);
  l.threads = 8 * kFpRowsPerBlock;
  SmemSizer z;
  z.take<uint64_t>(8 * kFpRowsPerBlock);  // hash lanes
  z.take<double>(8 * kFpRowsPerBlock);    // sum-of-squares lanes
  z.take<float>(8 * kFpRowsPerBlock);     // max |x| lanes
  z.take<int>(8 * kFpRowsPerBlock);       // NaN seen
  l.smem = z.off;
  return l;
}

template <class Block>
LLMRR_HD void fingerprint_block(Block& b, const FingerprintParams& p) {
  SmemCarver carve{static_cast<unsigned char*>(b.smem)};
  uint64_t* acc = carve.take<uint64_t>(8 * kFpRowsPerBlock);
  double* sq = carve.take<double>(8 * kFpRowsPerBlock);
  float* mx = carve.take<float>(8 * kFpRowsPerBlock);
  int* nan = carve.take<int>(8 * kFpRowsPerBlock);
  const size_t len = static_cast<size_t>(p.n > 0 ? p.n : 0) * sizeof(float);
  b.phase([&](int t) {
    const int64_t r = b.bx * kFpRowsPerBlock + t / 8;
    const int lane = t % 8;
    if (r >= p.rows) return;
    const float* xr = p.x + r * p.ldx;
    if (len > 240) {
      acc[t] = xxh3::xxh3_long_lane(reinterpret_cast<const uint8_t*>(xr), len, p.secret, lane);
    }
    double s = 0.0;
    float m = 0.0f;
    int seen = 0;
    for (int64_t i = lane; i < p.n; i += 8) {
      const float v = xr[i];
      const double d = static_cast<double>(v);
      s = s + d * d;
      const float a = fabsf(v);
      m = a > m ? a : m;
      seen |= v != v;
    }
    sq[t] = s;
    mx[t] = m;
    nan[t] = seen;
  });
  b.phase([&](int t) {
    const int64_t r = b.bx * kFpRowsPerBlock + t / 8;
    if (t % 8 != 0 || r >= p.rows) return;
    const float* xr = p.x + r * p.ldx;
    RowFingerprint f;
    f.hash = len > 240 ? xxh3::xxh3_long_merge(acc + t, len, p.secret)
                       : xxh3::xxh3_short(reinterpret_cast<const uint8_t*>(xr), len, p.secret);
    if (len == 0) {
      p.out[r] = f;
      return;
    }
    const double* L = sq + t;
    const double sum = ((L[0] + L[1]) + (L[2] + L[3])) + ((L[4] + L[5]) + (L[6] + L[7]));
    float m = mx[t];
    int seen = nan[t];
    for (int j = 1; j < 8; ++j) {
      m = mx[t + j] > m ? mx[t + j] : m;
      seen |= nan[t + j];
    }
    if (seen) {
      f.l2 = ::llmrr::hd::f32_from_bits(0x7fc00000u);
      f.max_abs = f.l2;
    } else {
      f.l2 = static_cast<float>(sqrt(sum));
      f.max_abs = m;
    }
    p.out[r] = f;
  });
}

// Router scoring, one thread per row, the CPU's sequential order (kernels/cpu/select.cc).
struct ScoreParams {
  float* x;
  int64_t ldx, rows, n;
  bool softmax;
};

inline Launch score_launch(const ScoreParams& p) {
  return p.softmax ? elementwise_launch(p.rows) : elementwise_launch(p.rows * p.n);
}

template <class Block>
LLMRR_HD void score_block(Block& b, const ScoreParams& p) {
  b.phase([&](int t) {
    const int64_t idx = b.bx * b.nthreads + t;
    if (!p.softmax) {
      if (idx >= p.rows * p.n) return;
      float* v = p.x + (idx / p.n) * p.ldx + idx % p.n;
      *v = 1.0f / (1.0f + numerics::hd::exp_f32(-*v));
      return;
    }
    if (idx >= p.rows || p.n <= 0) return;
    float* x = p.x + idx * p.ldx;
    float mxv = x[0];
    for (int64_t i = 1; i < p.n; ++i) mxv = x[i] > mxv ? x[i] : mxv;
    float s = 0.0f;
    for (int64_t i = 0; i < p.n; ++i) {
      x[i] = numerics::hd::exp_f32(x[i] - mxv);
      s = s + x[i];
    }
    for (int64_t i = 0; i < p.n; ++i) x[i] = x[i] / s;
  });
}

}  // namespace llmrr::kernels::cuda::detail
