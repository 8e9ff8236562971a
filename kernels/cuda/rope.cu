// RoPE: __global__ wrapper of rope_block (rope_phases.h) and the entry.
#include "cuda/cuda_internal.h"
#include "cuda/rope_phases.h"

namespace llmrr::kernels::cuda {
namespace {

__global__ void rope_kernel(const detail::RopeParams p) {
  detail::DeviceBlock b = detail::make_device_block(nullptr);
  detail::rope_block(b, p);
}

}  // namespace

Status rope(float* x, int64_t ldx, int64_t rows, const int32_t* positions, int64_t n_heads,
            const DeviceRopeTable& table, Stream stream) {
  if (rows < 0 || n_heads < 0 || ldx < n_heads * table.head_dim()) {
    return detail::bad_arg("cuda::rope: rows " + std::to_string(rows) + ", heads " +
                           std::to_string(n_heads) + " of " + std::to_string(table.head_dim()) +
                           ", ldx " + std::to_string(ldx));
  }
  const detail::RopeParams p{x, ldx, rows, positions, n_heads, table.head_dim(),
                             table.max_positions(), table.cos(), table.sin()};
  return detail::launch(rope_kernel, detail::rope_launch(p), p, stream, "cuda::rope");
}

}  // namespace llmrr::kernels::cuda
