// Exact attention over a paged KV cache: __global__ wrapper of attention_block
// (attention_phases.h) and the entry, which copies the rows to the device and gives each
// (row, head) its part-state scratch.
#include "cuda/attention_phases.h"
#include "cuda/cuda_internal.h"

namespace llmrr::kernels::cuda {
namespace {

__global__ void attention_kernel(const detail::AttnParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  detail::DeviceBlock b = detail::make_device_block(smem);
  detail::attention_block(b, p);
}

}  // namespace

Status attention(std::span<const AttnRow> rows, const AttnShape& shape, const Plan& plan,
                 Stream stream) {
  if (rows.empty()) return Status::Ok();
  detail::AttnParams p{};
  detail::Launch l;
  const std::string why = detail::attention_prepare(rows, shape, plan, p, l);
  if (!why.empty()) return detail::unsupported(why);
  detail::StreamScratch dev_rows(stream), scratch(stream);
  RETURN_IF_ERROR(dev_rows.upload(rows.data(), rows.size() * sizeof(AttnRow), "cuda::attention"));
  RETURN_IF_ERROR(scratch.alloc(detail::attention_scratch_floats(p) * sizeof(float), "cuda::attention"));
  p.rows = dev_rows.as<AttnRow>();
  p.scratch = scratch.as<float>();
  return detail::launch(attention_kernel, l, p, stream, "cuda::attention");
}

}  // namespace llmrr::kernels::cuda
