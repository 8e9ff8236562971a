// Exact attention in plan.h's kAttention order, as phases (block_exec.h). One block per
// (row, query head); the block walks the row's sequences ([0, len), or cached and new KV
// separately) and their parts in order. For each part [a, b), in chunks of `threads`
// positions (one position per thread):
//   pass 1: scores s_j = dot16(q, k_j) · scale into shared, then thread 0 folds the running
//           max m in j order;
//   pass 2: the scores again (same bits), e_j = exp(s_j − m) into shared, then thread 0 adds
//           l = l + e_j in j order while thread d runs o[d] = fmaf(e_j, v_j[d], o[d]);
//   the part's state (m, l, o) goes to a global scratch slot.
// Parts then merge in order (M = max m_i; l, o = Σ_i ·exp(m_i − M), "*" then "+"), each
// thread recomputing M itself; two sequences merge the same way, cached first; out = o / l.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "block_exec.h"
#include "llmrr/kernels/cuda_ops.h"
#include "llmrr/kernels/numerics_hd.h"
#include "llmrr/kernels/plan.h"

namespace llmrr::kernels::cuda::detail {

inline constexpr int kAttnMaxHeadDim = 256;

struct AttnParams {
  const AttnRow* rows;  // device copy of the caller's rows
  int64_t nrows;
  int heads, kv_heads, head_dim;
  float scale;
  bool by_size, separate;
  int64_t splits, split_size;
  float* scratch;     // [nrows][heads][max_parts][2 + head_dim]
  int64_t max_parts;  // part slots per (row, head)
};

// Block-uniform: the sequences of a row, as plan.h defines them. Returns their count.
LLMRR_HD inline int attn_sequences(const AttnParams& p, const AttnRow& row, int64_t s0[2],
                                   int64_t s1[2]) {
  const int64_t len = static_cast<int64_t>(row.pos) + 1;
  if (len <= 0) return 0;
  if (!p.separate) {
    s0[0] = 0;
    s1[0] = len;
    return 1;
  }
  int64_t cached = row.cached;
  cached = cached < 0 ? 0 : (cached > len ? len : cached);
  int n = 0;
  if (cached > 0) {
    s0[n] = 0;
    s1[n++] = cached;
  }
  if (cached < len) {
    s0[n] = cached;
    s1[n++] = len;
  }
  return n;
}

// Part length and count of a sequence of length L (kSize with split_size 0 is one part).
LLMRR_HD inline void attn_parts(const AttnParams& p, int64_t L, int64_t& part, int64_t& nparts) {
  if (p.by_size) {
    part = p.split_size > 0 ? p.split_size : (L > 0 ? L : 1);
    nparts = ceil_div(L, part);
  } else {
    part = ceil_div(L, p.splits);
    nparts = p.splits;
  }
}

inline std::string attention_prepare(std::span<const AttnRow> rows, const AttnShape& shape,
                                     const Plan& plan, AttnParams& p, Launch& l) {
  if (shape.head_dim <= 0 || shape.head_dim > kAttnMaxHeadDim) {
    return "attention: head_dim " + std::to_string(shape.head_dim) + ", the CUDA kernel takes 1.." +
           std::to_string(kAttnMaxHeadDim);
  }
  if (shape.heads <= 0 || shape.kv_heads <= 0 || shape.heads % shape.kv_heads != 0 ||
      shape.heads > 65535) {
    return "attention: heads " + std::to_string(shape.heads) + " must be a positive multiple of kv_heads " +
           std::to_string(shape.kv_heads) + " (at most 65535)";
  }
  p.nrows = static_cast<int64_t>(rows.size());
  p.heads = shape.heads;
  p.kv_heads = shape.kv_heads;
  p.head_dim = shape.head_dim;
  p.scale = shape.scale;
  p.by_size = plan.mode == SplitMode::kSize;
  p.separate = plan.separate_new_kv;
  p.splits = plan.splits == 0 ? 1 : plan.splits;
  p.split_size = plan.split_size;
  p.max_parts = 1;
  for (const AttnRow& row : rows) {
    int64_t s0[2], s1[2];
    const int n = attn_sequences(p, row, s0, s1);
    for (int i = 0; i < n; ++i) {
      int64_t part, nparts;
      attn_parts(p, s1[i] - s0[i], part, nparts);
      p.max_parts = max64(p.max_parts, nparts);
    }
  }
  l.gx = p.nrows;
  l.gy = p.heads;
  l.threads = shape.head_dim <= 128 ? 128 : 256;
  SmemSizer z;
  z.take<float>(static_cast<size_t>(p.head_dim));  // q
  z.take<float>(static_cast<size_t>(l.threads));   // scores / e of one chunk
  z.take<float>(2);                                // m, l of the current part
  z.take<float>(static_cast<size_t>(p.head_dim));  // o of the current part
  z.take<float>(static_cast<size_t>(2 * (2 + p.head_dim)));  // merged state per sequence
  l.smem = z.off;
  return "";
}

inline size_t attention_scratch_floats(const AttnParams& p) {
  return static_cast<size_t>(p.nrows * p.heads * p.max_parts * (2 + p.head_dim));
}

LLMRR_HD inline const float* attn_kv(const float* const* blocks, int32_t block_size, int64_t pos,
                                     int kv_heads, int head_dim, int g) {
  return blocks[pos / block_size] + ((pos % block_size) * kv_heads + g) * head_dim;
}

// Merges `n` states (m, l, o[hd]) laid out with `stride` floats into (m, l, o) at dst, as
// plan.h: M = max m_i; l = Σ l_i·exp(m_i − M); o[d] = Σ o_i[d]·exp(m_i − M), each in i order.
// One phase: thread 0 takes l, thread d takes o[d] (all threads recompute M).
template <class Block>
LLMRR_HD void attn_merge(Block& b, const float* states, int64_t n, int64_t stride, int hd,
                         float* dst) {
  b.phase([&](int t) {
    float M = -INFINITY;
    for (int64_t i = 0; i < n; ++i) M = std_max(M, states[i * stride]);
    if (t == 0) {
      float l = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float f = numerics::hd::exp_f32(states[i * stride] - M);
        l = l + states[i * stride + 1] * f;
      }
      dst[0] = M;
      dst[1] = l;
    }
    for (int d = t; d < hd; d += b.nthreads) {
      float o = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float f = numerics::hd::exp_f32(states[i * stride] - M);
        o = o + states[i * stride + 2 + d] * f;
      }
      dst[2 + d] = o;
    }
  });
}

template <class Block>
LLMRR_HD void attention_block(Block& b, const AttnParams& p) {
  const int hd = p.head_dim;
  const AttnRow& row = p.rows[b.bx];
  const int h = static_cast<int>(b.by);
  const int g = h / (p.heads / p.kv_heads);
  float* out = row.out + static_cast<int64_t>(h) * hd;
  int64_t s0[2], s1[2];
  const int nseq = attn_sequences(p, row, s0, s1);
  if (nseq == 0) {
    b.phase([&](int t) {
      for (int d = t; d < hd; d += b.nthreads) out[d] = 0.0f;
    });
    return;
  }
  SmemCarver carve{static_cast<unsigned char*>(b.smem)};
  float* q = carve.take<float>(static_cast<size_t>(hd));
  float* sc = carve.take<float>(static_cast<size_t>(b.nthreads));
  float* ml = carve.take<float>(2);
  float* o = carve.take<float>(static_cast<size_t>(hd));
  float* seq_state = carve.take<float>(static_cast<size_t>(2 * (2 + hd)));
  const int64_t stride = 2 + hd;
  float* slots = p.scratch + (b.bx * p.heads + h) * p.max_parts * stride;
  const float* qg = row.q + static_cast<int64_t>(h) * hd;
  const int64_t C = b.nthreads;

  b.phase([&](int t) {
    for (int d = t; d < hd; d += b.nthreads) q[d] = qg[d];
  });
  for (int si = 0; si < nseq; ++si) {
    const int64_t L = s1[si] - s0[si];
    int64_t part, nparts;
    attn_parts(p, L, part, nparts);
    for (int64_t pi = 0; pi < nparts; ++pi) {
      const int64_t a = s0[si] + min64(pi * part, L), e = s0[si] + min64((pi + 1) * part, L);
      b.phase([&](int t) {
        if (t == 0) {
          ml[0] = -INFINITY;
          ml[1] = 0.0f;
        }
        for (int d = t; d < hd; d += b.nthreads) o[d] = 0.0f;
      });
      // Pass 1: the part's max score.
      for (int64_t c0 = a; c0 < e; c0 += C) {
        const int64_t cn = min64(C, e - c0);
        b.phase([&](int t) {
          if (t >= cn) return;
          const float* kj = attn_kv(row.kv.k_blocks, row.kv.block_size, c0 + t, p.kv_heads, hd, g);
          sc[t] = dot16(q, kj, hd) * p.scale;
        });
        b.phase([&](int t) {
          if (t != 0) return;
          float m = ml[0];
          for (int64_t j = 0; j < cn; ++j) m = std_max(m, sc[j]);
          ml[0] = m;
        });
      }
      // Pass 2: e_j, l and o in j order.
      for (int64_t c0 = a; c0 < e; c0 += C) {
        const int64_t cn = min64(C, e - c0);
        b.phase([&](int t) {
          if (t >= cn) return;
          const float* kj = attn_kv(row.kv.k_blocks, row.kv.block_size, c0 + t, p.kv_heads, hd, g);
          sc[t] = numerics::hd::exp_f32(dot16(q, kj, hd) * p.scale - ml[0]);
        });
        b.phase([&](int t) {
          if (t == 0) {
            float l = ml[1];
            for (int64_t j = 0; j < cn; ++j) l = l + sc[j];
            ml[1] = l;
          }
          for (int d = t; d < hd; d += b.nthreads) {
            float od = o[d];
            for (int64_t j = 0; j < cn; ++j) {
              const float* vj =
                  attn_kv(row.kv.v_blocks, row.kv.block_size, c0 + j, p.kv_heads, hd, g);
              od = fmaf(sc[j], vj[d], od);
            }
            o[d] = od;
          }
        });
      }
      b.phase([&](int t) {
        float* slot = slots + pi * stride;
        if (t == 0) {
          slot[0] = ml[0];
          slot[1] = ml[1];
        }
        for (int d = t; d < hd; d += b.nthreads) slot[2 + d] = o[d];
      });
    }
    attn_merge(b, slots, nparts, stride, hd, seq_state + si * stride);
  }
  const float* fin = seq_state;
  if (nseq == 2) {
    // Both sequence states merge like two parts, cached first; the result reuses the part
    // slots (free again) so it does not overwrite its own inputs.
    attn_merge(b, seq_state, 2, stride, hd, slots);
    fin = slots;
  }
  b.phase([&](int t) {
    for (int d = t; d < hd; d += b.nthreads) out[d] = fin[2 + d] / fin[1];
  });
}

}  // namespace llmrr::kernels::cuda::detail
