// SwiGLU: out = silu(gate) · up, silu(g) = g / (1 + exp(−g)) with llmrr's exp.
#include <algorithm>

#include "cpu/vec_math.h"
#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"

namespace llmrr::kernels {

void swiglu(const float* gate, int64_t ldg, const float* up, int64_t ldu, int64_t rows,
            int64_t cols, float* out, int64_t ldo, ThreadPool& pool) {
  const Isa isa = active_isa();
  auto row = [&](int64_t r) {
    const float* g = gate + r * ldg;
    const float* u = up + r * ldu;
    float* o = out + r * ldo;
    int64_t i = 0;
    if (isa != Isa::kScalar) i = swiglu_avx2(g, u, o, cols);
    for (; i < cols; ++i) o[i] = numerics::silu_f32(g[i]) * u[i];
  };
  if (rows * cols < (1 << 15) || pool.size() == 1) {
    for (int64_t r = 0; r < rows; ++r) row(r);
  } else {
    pool.parallel_for(rows, row);
  }
}

}  // namespace llmrr::kernels
