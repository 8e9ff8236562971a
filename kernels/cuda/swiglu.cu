// SwiGLU: __global__ wrapper of swiglu_block (swiglu_phases.h) and the entry.
#include "cuda/cuda_internal.h"
#include "cuda/swiglu_phases.h"

namespace llmrr::kernels::cuda {
namespace {

__global__ void swiglu_kernel(const detail::SwigluParams p) {
  detail::DeviceBlock b = detail::make_device_block(nullptr);
  detail::swiglu_block(b, p);
}

}  // namespace

Status swiglu(const float* gate, int64_t ldg, const float* up, int64_t ldu, int64_t rows,
              int64_t cols, float* out, int64_t ldo, Stream stream) {
  if (rows < 0 || cols < 0 || ldg < cols || ldu < cols || ldo < cols) {
    return detail::bad_arg("cuda::swiglu: rows " + std::to_string(rows) + ", cols " +
                           std::to_string(cols) + " with a leading dimension below cols");
  }
  const detail::SwigluParams p{gate, ldg, up, ldu, rows, cols, out, ldo};
  return detail::launch(swiglu_kernel, detail::swiglu_launch(p), p, stream, "cuda::swiglu");
}

}  // namespace llmrr::kernels::cuda
