// Exact GEMM on CUDA cores: the device code is gemm_block (gemm_phases.h), the same text the
// CPU grid tests run; this file is its __global__ wrapper and the public entry.
#include "cuda/cuda_internal.h"
#include "cuda/gemm_phases.h"

namespace llmrr::kernels::cuda {
namespace {

__global__ void gemm_kernel(const detail::GemmParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  detail::DeviceBlock b = detail::make_device_block(smem);
  detail::gemm_block(b, p);
}

}  // namespace

Status gemm(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y,
            int64_t ldy, const Plan& plan, Stream stream) {
  if (m < 0 || ldx < w.k() || ldy < w.n()) {
    return detail::bad_arg("cuda::gemm: m " + std::to_string(m) + ", ldx " + std::to_string(ldx) +
                           " (k " + std::to_string(w.k()) + "), ldy " + std::to_string(ldy) +
                           " (n " + std::to_string(w.n()) + ")");
  }
  detail::GemmParams p{};
  detail::Launch l;
  std::vector<uint16_t> order;
  const std::string why = detail::gemm_prepare(plan, m, w.n(), w.k(), p, l, order);
  if (!why.empty()) return detail::unsupported(why);
  if (m == 0 || w.n() == 0) return Status::Ok();
  p.x = x;
  p.ldx = ldx;
  p.w = w.data();
  p.bf16 = w.type() == WeightType::kBF16;
  p.y = y;
  p.ldy = ldy;
  detail::StreamScratch dev_order(stream);
  if (!order.empty()) {
    RETURN_IF_ERROR(dev_order.upload(order.data(), order.size() * sizeof(uint16_t), "cuda::gemm"));
    p.order = dev_order.as<uint16_t>();
  }
  return detail::launch(gemm_kernel, l, p, stream, "cuda::gemm");
}

}  // namespace llmrr::kernels::cuda
