// Embedding lookup: a copy (fp32) or an exact widening (bf16).
#include <cstring>

#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"

namespace llmrr::kernels {

void embedding(const void* table, WeightType type, int64_t vocab, int64_t dim, const int32_t* ids,
               int64_t rows, float* out, int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * ldo;
    const int64_t id = ids[r];
    if (id < 0 || id >= vocab) {
      // Out-of-range ids are a caller bug; give a defined, visible result instead of UB.
      for (int64_t d = 0; d < dim; ++d) o[d] = 0.0f;
      continue;
    }
    if (type == WeightType::kF32) {
      std::memcpy(o, static_cast<const float*>(table) + id * dim, dim * sizeof(float));
    } else {
      const uint16_t* t = static_cast<const uint16_t*>(table) + id * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] = numerics::bf16_to_f32(t[d]);
    }
  }
}

}  // namespace llmrr::kernels
