// MoE combine: __global__ wrapper of moe_combine_block (moe_combine_phases.h) and the entry.
#include "cuda/cuda_internal.h"
#include "cuda/moe_combine_phases.h"

namespace llmrr::kernels::cuda {
namespace {

__global__ void moe_combine_kernel(const detail::CombineParams p) {
  detail::DeviceBlock b = detail::make_device_block(nullptr);
  detail::moe_combine_block(b, p);
}

}  // namespace

Status moe_combine(const float* expert_rows, int64_t ld_expert, const int32_t* src,
                   const float* gates, int64_t rows, int k, int64_t dim, float* out, int64_t ldo,
                   const Plan& plan, Stream stream) {
  if (rows < 0 || k < 0 || dim < 0 || ldo < dim || ld_expert < dim) {
    return detail::bad_arg("cuda::moe_combine: rows " + std::to_string(rows) + ", k " +
                           std::to_string(k) + ", dim " + std::to_string(dim) + ", ldo " +
                           std::to_string(ldo) + ", ld_expert " + std::to_string(ld_expert));
  }
  detail::CombineParams p{expert_rows, ld_expert, src, gates, rows, k, dim, out, ldo, nullptr};
  const std::vector<uint16_t> order = detail::combine_order(plan, rows, k);
  detail::StreamScratch dev_order(stream);
  if (!order.empty() && rows * dim > 0) {
    RETURN_IF_ERROR(
        dev_order.upload(order.data(), order.size() * sizeof(uint16_t), "cuda::moe_combine"));
    p.order = dev_order.as<uint16_t>();
  }
  return detail::launch(moe_combine_kernel, detail::combine_launch(p), p, stream,
                        "cuda::moe_combine");
}

}  // namespace llmrr::kernels::cuda
