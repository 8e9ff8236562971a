// The attention algorithm of plan.h, written once over a few vector primitives (`V`), so the
// scalar, AVX2 and AVX-512 paths share every loop and differ only in how a primitive runs
// its lanes — each primitive computes, element by element, exactly the scalar operations of
// ref::attention.
//
// One task is one (row, KV head): the query heads sharing that KV head are processed
// together so each K and V row is read once for all of them; every head still follows its
// own sequence of operations.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"

namespace llmrr::kernels::attn {

// Primitives a backend provides (each output follows exactly ref::attention's operations):
//   float dot16(const float* a, const float* b, int64_t n)        ref::dot16
//   void dot_block(int hb, int jb, const float* q, const float* const* k, int64_t n,
//                  float* out)
//       out[i·jb + t] = dot16(q + i·n, k[t], n) for i < hb heads, t < jb positions
//       (hb·jb ≤ 4: four independent chains in flight)
//   void exp_shift(float* s, int64_t n, float m)                  s[j] = exp(s[j] − m)
//   void attend(int hb, float* o, const float* e, int64_t es, int64_t n, int64_t hd, F v_at)
//       for i < hb heads, for j < n (in order), for d < hd:
//       o[i·hd + d] = fma(e[i·es + j], v_at(j)[d], o[i·hd + d])
//   void scale_add(float* o, const float* p, float f, int64_t n)  o[d] = o[d] + p[d]·f
//   void divide(float* out, const float* o, float l, int64_t n)   out[d] = o[d] / l

struct State {
  std::vector<float> m, l, o;  // [slot][head], [slot][head], [slot][head][head_dim]
  void reserve(int64_t slots, int64_t heads, int64_t hd) {
    const size_t ml = static_cast<size_t>(slots * heads), oo = ml * static_cast<size_t>(hd);
    if (m.size() < ml) m.resize(ml), l.resize(ml);
    if (o.size() < oo) o.resize(oo);
  }
};

struct Scratch {
  std::vector<float> scores;  // [head][part length]
  State parts;                // the parts of the current sequence
  State seqs;                 // slot 0: cached sequence, slot 1: new (separate_new_kv)
};

inline Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Merges `n` states (slots 0..n-1 of `in`) in order into slot `to` of `out`:
// M = max m_i; l = Σ l_i·exp(m_i − M); o = Σ o_i·exp(m_i − M), sums from +0.
template <class V>
void merge(const State& in, int64_t n, int32_t heads, int32_t hd, State& out, int64_t to) {
  for (int32_t h = 0; h < heads; ++h) {
    float M = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) M = std::max(M, in.m[i * heads + h]);
    float l = 0.0f;
    float* o = out.o.data() + (to * heads + h) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const float f = numerics::exp_f32(in.m[i * heads + h] - M);
      l = l + in.l[i * heads + h] * f;
      V::scale_add(o, in.o.data() + (i * heads + h) * hd, f, hd);
    }
    out.m[to * heads + h] = M;
    out.l[to * heads + h] = l;
  }
}

// Brings a K or V row towards L1 a few positions ahead: rows of one position are
// kv_heads·head_dim floats apart, a stride the hardware prefetchers do not follow across pages.
inline void prefetch_row(const float* p, int32_t hd) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int32_t off = 0; off < hd * 4; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

template <class V>
void row_group(const AttnRow& row, int32_t g, const AttnShape& shape, const Plan& plan) {
  const int32_t hd = shape.head_dim;
  const int32_t group = shape.heads / shape.kv_heads;
  const KvSeqView& kv = *row.kv;
  const int64_t len = static_cast<int64_t>(row.pos) + 1;
  const int64_t kv_stride = static_cast<int64_t>(shape.kv_heads) * hd;
  const int64_t bs = kv.block_size;
  auto k_at = [&](int64_t pos) { return kv.k_blocks[pos / bs] + (pos % bs) * kv_stride + g * hd; };
  auto v_at = [&](int64_t pos) { return kv.v_blocks[pos / bs] + (pos % bs) * kv_stride + g * hd; };
  const float* q0 = row.q + static_cast<int64_t>(g) * group * hd;
  float* out0 = row.out + static_cast<int64_t>(g) * group * hd;
  if (len <= 0) {  // pos < 0: nothing to attend to (ops.h: zeros)
    std::fill(out0, out0 + static_cast<int64_t>(group) * hd, 0.0f);
    return;
  }

  int64_t seq_begin[2], seq_end[2];
  int nseq = 0;
  if (plan.separate_new_kv) {
    const int64_t cached = std::clamp<int64_t>(row.cached, 0, len);
    if (cached > 0) seq_begin[nseq] = 0, seq_end[nseq++] = cached;
    if (cached < len) seq_begin[nseq] = cached, seq_end[nseq++] = len;
  } else {
    seq_begin[nseq] = 0, seq_end[nseq++] = len;
  }

  Scratch& sc = scratch();
  sc.seqs.reserve(2, group, hd);
  for (int si = 0; si < nseq; ++si) {
    const int64_t s0 = seq_begin[si], L = seq_end[si] - s0;
    int64_t plen, nparts;
    if (plan.mode == SplitMode::kCount) {
      nparts = std::max<uint32_t>(plan.splits, 1);
      plen = (L + nparts - 1) / nparts;
    } else {
      plen = std::max<uint32_t>(plan.split_size, 1);
      nparts = (L + plen - 1) / plen;
    }
    // One part is its own merged state: merging multiplies by exp(0) = 1 and adds to +0,
    // which changes no bit (o never holds −0), so the part is computed in place.
    State& dst = nparts == 1 ? sc.seqs : sc.parts;
    const int64_t base = nparts == 1 ? si : 0;
    if (nparts > 1) sc.parts.reserve(nparts, group, hd);
    const size_t need = static_cast<size_t>(group) * std::max<int64_t>(std::min(plen, L), 1);
    if (sc.scores.size() < need) sc.scores.resize(need);
    const int64_t sstride = std::max<int64_t>(std::min(plen, L), 1);
    for (int64_t pi = 0; pi < nparts; ++pi) {
      const int64_t a = s0 + std::min(pi * plen, L), b = s0 + std::min((pi + 1) * plen, L);
      const int64_t n = b - a;
      const int64_t slot = base + pi;
      float* po = dst.o.data() + slot * group * hd;
      // Scores of up to 4 heads per pass over K, four dot chains in flight (heads ×
      // positions), each a plain dot16; then per head m, exp, l in position order.
      for (int32_t h0 = 0; h0 < group; h0 += 4) {
        const int hb = std::min<int32_t>(4, group - h0);
        const int jb = hb == 1 ? 4 : (hb == 2 ? 2 : 1);
        const float* q = q0 + h0 * hd;
        float* s0 = sc.scores.data() + h0 * sstride;
        int64_t j = 0;
        for (; j + jb <= n; j += jb) {
          if (h0 == 0) {
            for (int64_t t = j + 4; t < std::min(j + 4 + jb, n); ++t) prefetch_row(k_at(a + t), hd);
          }
          const float* ks[4];
          for (int t = 0; t < jb; ++t) ks[t] = k_at(a + j + t);
          float d[4];
          V::dot_block(hb, jb, q, ks, hd, d);
          for (int i = 0; i < hb; ++i)
            for (int t = 0; t < jb; ++t) s0[i * sstride + j + t] = d[i * jb + t] * shape.scale;
        }
        for (; j < n; ++j) {
          const float* kj = k_at(a + j);
          for (int i = 0; i < hb; ++i) {
            s0[i * sstride + j] = V::dot16(q + i * hd, kj, hd) * shape.scale;
          }
        }
      }
      for (int32_t h = 0; h < group; ++h) {
        float* s = sc.scores.data() + h * sstride;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
        V::exp_shift(s, n, m);
        float l = 0.0f;
        for (int64_t j = 0; j < n; ++j) l = l + s[j];
        dst.m[slot * group + h] = m;
        dst.l[slot * group + h] = l;
        std::fill(po + h * hd, po + (h + 1) * hd, 0.0f);
      }
      // o for up to 4 heads per pass over V.
      for (int32_t h0 = 0; h0 < group; h0 += 4) {
        const int hb = std::min<int32_t>(4, group - h0);
        V::attend(hb, po + h0 * hd, sc.scores.data() + h0 * sstride, sstride, n, hd,
                  [&](int64_t j) {
                    if (h0 == 0 && j + 4 < n) prefetch_row(v_at(a + j + 4), hd);
                    return v_at(a + j);
                  });
      }
    }
    if (nparts > 1) merge<V>(sc.parts, nparts, group, hd, sc.seqs, si);
  }
  if (nseq == 2) {
    // Cached first, then new: the two sequence states merge like two parts (into slot 0 of
    // the part buffer, which is free now).
    sc.parts.reserve(1, group, hd);
    merge<V>(sc.seqs, 2, group, hd, sc.parts, 0);
    for (int32_t h = 0; h < group; ++h) {
      V::divide(out0 + h * hd, sc.parts.o.data() + h * hd, sc.parts.l[h], hd);
    }
  } else {
    for (int32_t h = 0; h < group; ++h) {
      V::divide(out0 + h * hd, sc.seqs.o.data() + h * hd, sc.seqs.l[h], hd);
    }
  }
}

}  // namespace llmrr::kernels::attn
