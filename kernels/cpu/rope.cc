// Rotary embedding, Hugging Face "rotate_half" layout: for i < half,
//   out[i]        = x[i]·cos_i − x[i+half]·sin_i
//   out[i + half] = x[i+half]·cos_i + x[i]·sin_i
// each product rounded, then the sum (no fma), as PyTorch computes q·cos + rotate_half(q)·sin.
#include <cmath>
#include <memory>

#include "llmrr/kernels/ops.h"

namespace llmrr::kernels {

RopeTable::RopeTable(int64_t head_dim, double theta, int64_t max_positions)
    : head_dim_(head_dim), max_pos_(max_positions) {
  const int64_t half = head_dim / 2;
  cos_ = std::shared_ptr<float[]>(new float[std::max<int64_t>(1, half * max_positions)]);
  sin_ = std::shared_ptr<float[]>(new float[std::max<int64_t>(1, half * max_positions)]);
  for (int64_t i = 0; i < half; ++i) {
    // HF: inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in fp32.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float powv = static_cast<float>(
        std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(expo)));
    const float inv_freq = 1.0f / powv;
    for (int64_t p = 0; p < max_positions; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      cos_[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void rope(float* x, int64_t ldx, int64_t rows, const int32_t* positions, int64_t n_heads,
          const RopeTable& table) {
  const int64_t hd = table.head_dim(), half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = table.cos_row(positions[r]);
    const float* s = table.sin_row(positions[r]);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + r * ldx + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        const float a = x1 * c[i], b = x2 * s[i];
        const float d = x2 * c[i], e = x1 * s[i];
        v[i] = a - b;
        v[i + half] = d + e;
      }
    }
  }
}

}  // namespace llmrr::kernels
