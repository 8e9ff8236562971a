// plan.h, read aloud. Every function here follows the contract sentence by sentence; the
// fast kernels must match these bits exactly.
#include "llmrr/kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "llmrr/kernels/numerics.h"

namespace llmrr::kernels::ref {

float dot16(const float* a, const float* b, int64_t n) {
  float s[16];
  for (int j = 0; j < 16; ++j) s[j] = 0.0f;
  for (int64_t i = 0; i < n; ++i) s[i % 16] = std::fma(a[i], b[i], s[i % 16]);
  for (int w = 8; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) s[j] = s[j] + s[j + w];
  }
  return s[0];
}

namespace {

int64_t round_up16(int64_t v) {
  return (v + 15) / 16 * 16;
}
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The split order of a kGemm plan: 0..S-1, or the arrival permutation.
std::vector<int64_t> split_order(const Plan& plan) {
  std::vector<int64_t> order(plan.splits);
  for (uint32_t i = 0; i < plan.splits; ++i) {
    order[i] = plan.order == CombineOrder::kArrival ? plan.arrival[i] : i;
  }
  return order;
}

}  // namespace

void gemm(const float* x, int64_t ldx, int64_t m, const float* w, int64_t n, int64_t k, float* y,
          int64_t ldy, const Plan& plan) {
  const int64_t splits = plan.splits;
  const int64_t c = round_up16(ceil_div(k, splits));
  const std::vector<int64_t> order = split_order(plan);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float* xr = x + i * ldx;
      const float* wr = w + j * k;
      float acc = 0.0f;
      for (size_t si = 0; si < order.size(); ++si) {
        int64_t a = std::min(order[si] * c, k), b = std::min(a + c, k);
        float p = 0.0f;
        if (plan.k_tile == 0) {
          float t = 0.0f;
          for (int64_t kk = a; kk < b; ++kk) t = std::fma(xr[kk], wr[kk], t);
          p = t;
        } else {
          for (int64_t t0 = a; t0 < b; t0 += plan.k_tile) {
            int64_t t1 = std::min<int64_t>(t0 + plan.k_tile, b);
            float t = 0.0f;
            for (int64_t kk = t0; kk < t1; ++kk) t = std::fma(xr[kk], wr[kk], t);
            p = p + t;
          }
        }
        acc = si == 0 ? p : acc + p;
      }
      y[i * ldy + j] = acc;
    }
  }
}

void gemm(const float* x, int64_t ldx, int64_t m, const PackedWeight& w, float* y, int64_t ldy,
          const Plan& plan) {
  std::vector<float> dense(static_cast<size_t>(w.n() * w.k()));
  for (int64_t j = 0; j < w.n(); ++j) {
    for (int64_t kk = 0; kk < w.k(); ++kk) dense[j * w.k() + kk] = w.at(j, kk);
  }
  gemm(x, ldx, m, dense.data(), w.n(), w.k(), y, ldy, plan);
}

void rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* weight, float eps,
             float* y, int64_t ldy, const Plan& plan) {
  const int64_t c = round_up16(ceil_div(dim, plan.splits));
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * ldx;
    float sum = 0.0f;
    for (int64_t s = 0; s < static_cast<int64_t>(plan.splits); ++s) {
      int64_t a = std::min(s * c, dim), b = std::min(a + c, dim);
      float chunk = dot16(xr + a, xr + a, b - a);
      sum = s == 0 ? chunk : sum + chunk;
    }
    float r = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    float* yr = y + i * ldy;
    for (int64_t d = 0; d < dim; ++d) yr[d] = weight[d] * (xr[d] * r);
  }
}

namespace {

struct PartState {
  float m;
  float l;
  std::vector<float> o;
};

const float* kv_at(const float* const* blocks, int32_t block_size, int64_t pos, int32_t kv_heads,
                   int32_t head_dim, int32_t g) {
  return blocks[pos / block_size] + ((pos % block_size) * kv_heads + g) * head_dim;
}

// Merges part states in order (plan.h): M = max m_i; l = Σ l_i·exp(m_i − M); o likewise.
PartState merge(const std::vector<PartState>& parts, int32_t head_dim) {
  PartState out{-std::numeric_limits<float>::infinity(), 0.0f, std::vector<float>(head_dim, 0.0f)};
  for (const auto& p : parts) out.m = std::max(out.m, p.m);
  for (const auto& p : parts) {
    float f = numerics::exp_f32(p.m - out.m);
    out.l = out.l + p.l * f;
    for (int32_t d = 0; d < head_dim; ++d) out.o[d] = out.o[d] + p.o[d] * f;
  }
  return out;
}

}  // namespace

void attention(std::span<const AttnRow> rows, const AttnShape& shape, const Plan& plan) {
  const int32_t hd = shape.head_dim;
  const int32_t group = shape.heads / shape.kv_heads;
  for (const AttnRow& row : rows) {
    const KvSeqView& kv = *row.kv;
    const int64_t len = static_cast<int64_t>(row.pos) + 1;
    if (len <= 0) {
      std::fill(row.out, row.out + static_cast<int64_t>(shape.heads) * hd, 0.0f);
      continue;
    }
    // The sequences: [0, len) or [0, cached) and [cached, len); empty ones are skipped.
    std::vector<std::pair<int64_t, int64_t>> seqs;
    if (plan.separate_new_kv) {
      int64_t cached = std::clamp<int64_t>(row.cached, 0, len);
      if (cached > 0) seqs.push_back({0, cached});
      if (cached < len) seqs.push_back({cached, len});
    } else {
      seqs.push_back({0, len});
    }
    for (int32_t h = 0; h < shape.heads; ++h) {
      const int32_t g = h / group;
      const float* q = row.q + static_cast<int64_t>(h) * hd;
      std::vector<PartState> seq_states;
      for (auto [s0, s1] : seqs) {
        const int64_t L = s1 - s0;
        const int64_t part = plan.mode == SplitMode::kCount ? ceil_div(L, plan.splits)
                                                            : static_cast<int64_t>(plan.split_size);
        const int64_t nparts = plan.mode == SplitMode::kCount ? plan.splits : ceil_div(L, part);
        std::vector<PartState> parts;
        for (int64_t pi = 0; pi < nparts; ++pi) {
          int64_t a = s0 + std::min(pi * part, L), b = s0 + std::min((pi + 1) * part, L);
          PartState st{-std::numeric_limits<float>::infinity(), 0.0f, std::vector<float>(hd, 0.0f)};
          std::vector<float> s;
          for (int64_t j = a; j < b; ++j) {
            const float* kj = kv_at(kv.k_blocks, kv.block_size, j, shape.kv_heads, hd, g);
            s.push_back(dot16(q, kj, hd) * shape.scale);
          }
          for (float v : s) st.m = std::max(st.m, v);
          for (int64_t j = a; j < b; ++j) {
            float e = numerics::exp_f32(s[j - a] - st.m);
            st.l = st.l + e;
            const float* vj = kv_at(kv.v_blocks, kv.block_size, j, shape.kv_heads, hd, g);
            for (int32_t d = 0; d < hd; ++d) st.o[d] = std::fma(e, vj[d], st.o[d]);
          }
          parts.push_back(std::move(st));
        }
        seq_states.push_back(merge(parts, hd));
      }
      PartState fin = seq_states.size() == 1 ? seq_states[0] : merge(seq_states, hd);
      float* out = row.out + static_cast<int64_t>(h) * hd;
      for (int32_t d = 0; d < hd; ++d) out[d] = fin.o[d] / fin.l;
    }
  }
}

void moe_combine(const float* expert_rows, int64_t ld_expert, const int32_t* src,
                 const float* gates, int64_t rows, int k, int64_t dim, float* out, int64_t ldo,
                 const Plan& plan) {
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * ldo;
    for (int64_t d = 0; d < dim; ++d) o[d] = 0.0f;
    for (int i = 0; i < k; ++i) {
      int slot = plan.order == CombineOrder::kArrival ? plan.arrival[r * k + i] : i;
      int32_t s = src[r * k + slot];
      if (s < 0) continue;
      const float* e = expert_rows + s * ld_expert;
      float gsc = gates[r * k + slot];
      for (int64_t d = 0; d < dim; ++d) o[d] = std::fma(gsc, e[d], o[d]);
    }
  }
}

}  // namespace llmrr::kernels::ref
