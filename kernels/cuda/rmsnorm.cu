// Exact RMSNorm: __global__ wrapper of rmsnorm_block (rmsnorm_phases.h) and the entry.
#include "cuda/cuda_internal.h"
#include "cuda/rmsnorm_phases.h"

namespace llmrr::kernels::cuda {
namespace {

__global__ void rmsnorm_kernel(const detail::RmsNormParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  detail::DeviceBlock b = detail::make_device_block(smem);
  detail::rmsnorm_block(b, p);
}

}  // namespace

Status rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* weight,
               float eps, float* y, int64_t ldy, const Plan& plan, Stream stream) {
  if (rows < 0 || dim < 0 || ldx < dim || ldy < dim) {
    return detail::bad_arg("cuda::rmsnorm: rows " + std::to_string(rows) + ", dim " +
                           std::to_string(dim) + ", ldx " + std::to_string(ldx) + ", ldy " +
                           std::to_string(ldy));
  }
  detail::RmsNormParams p{};
  detail::Launch l;
  const std::string why = detail::rmsnorm_prepare(plan, rows, dim, p, l);
  if (!why.empty()) return detail::unsupported(why);
  p.x = x;
  p.ldx = ldx;
  p.w = weight;
  p.eps = eps;
  p.y = y;
  p.ldy = ldy;
  return detail::launch(rmsnorm_kernel, l, p, stream, "cuda::rmsnorm");
}

}  // namespace llmrr::kernels::cuda
