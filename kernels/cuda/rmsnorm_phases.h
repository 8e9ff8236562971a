// Exact RMSNorm in plan.h's kRmsNorm order, as phases (block_exec.h). One block per row;
// the (chunk, lane) pairs of the sum of squares are spread over the threads.
//   phase 1: lane j of chunk s accumulates fmaf(x_i, x_i, ·) for i ≡ j (mod 16), in order,
//            into shared lanes[s][j];
//   phase 2: one thread per chunk reduces its 16 lanes by halving (8, 4, 2, 1);
//   phase 3: thread 0 adds the chunk sums in chunk order and computes r = 1 / sqrt(mean + eps);
//   phase 4: y_d = w_d · (x_d · r), threads over d.
#pragma once

#include <cstdint>
#include <string>

#include "block_exec.h"
#include "llmrr/kernels/plan.h"

namespace llmrr::kernels::cuda::detail {

inline constexpr int64_t kRmsNormMaxSplits = 512;

struct RmsNormParams {
  const float* x;
  int64_t ldx, rows, dim;
  const float* w;
  float eps;
  float* y;
  int64_t ldy;
  int64_t splits, c;
};

inline std::string rmsnorm_prepare(const Plan& plan, int64_t rows, int64_t dim,
                                   RmsNormParams& p, Launch& l) {
  const int64_t splits = plan.splits == 0 ? 1 : plan.splits;
  if (splits > kRmsNormMaxSplits) {
    return "rmsnorm: " + std::to_string(splits) + " chunks, the CUDA kernel takes at most " +
           std::to_string(kRmsNormMaxSplits);
  }
  p.rows = rows;
  p.dim = dim;
  p.splits = splits;
  p.c = round_up16(ceil_div(dim, splits));
  l.gx = rows;
  l.gy = 1;
  l.threads = static_cast<int>(min64(256, max64(64, (16 * splits + 31) / 32 * 32)));
  SmemSizer z;
  z.take<float>(static_cast<size_t>(16 * splits));  // lanes
  z.take<float>(static_cast<size_t>(splits));       // chunk sums
  z.take<float>(1);                                 // r
  l.smem = z.off;
  return "";
}

template <class Block>
LLMRR_HD void rmsnorm_block(Block& b, const RmsNormParams& p) {
  SmemCarver carve{static_cast<unsigned char*>(b.smem)};
  float* lanes = carve.take<float>(static_cast<size_t>(16 * p.splits));
  float* chunk = carve.take<float>(static_cast<size_t>(p.splits));
  float* r = carve.take<float>(1);
  const float* xr = p.x + b.bx * p.ldx;
  float* yr = p.y + b.bx * p.ldy;
  b.phase([&](int t) {
    for (int64_t q = t; q < 16 * p.splits; q += b.nthreads) {
      const int64_t s = q / 16, j = q % 16;
      const int64_t a = min64(s * p.c, p.dim), e = min64(a + p.c, p.dim);
      float acc = 0.0f;
      for (int64_t i = a + j; i < e; i += 16) acc = fmaf(xr[i], xr[i], acc);
      lanes[q] = acc;
    }
  });
  b.phase([&](int t) {
    for (int64_t s = t; s < p.splits; s += b.nthreads) {
      float* v = lanes + 16 * s;
      for (int w = 8; w >= 1; w /= 2) {
        for (int j = 0; j < w; ++j) v[j] = v[j] + v[j + w];
      }
      chunk[s] = v[0];
    }
  });
  b.phase([&](int t) {
    if (t != 0) return;
    float sum = chunk[0];
    for (int64_t s = 1; s < p.splits; ++s) sum = sum + chunk[s];
    r[0] = 1.0f / sqrtf(sum / static_cast<float>(p.dim) + p.eps);
  });
  b.phase([&](int t) {
    const float rr = r[0];
    for (int64_t d = t; d < p.dim; d += b.nthreads) yr[d] = p.w[d] * (xr[d] * rr);
  });
}

}  // namespace llmrr::kernels::cuda::detail
