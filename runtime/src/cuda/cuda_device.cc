// Device discovery for --device cuda: is there a GPU, and what the run header says about it.
#include <string>

#include "cuda/cuda_engine.h"
#include "llmrr/kernels/cublaslt_gemm.h"
#include "llmrr/kernels/cuda_ops.h"

namespace llmrr::cuda_engine {
namespace {

// 13000 -> "13.0", 12080 -> "12.8" (the CUDA version encoding: 1000 * major + 10 * minor).
std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

Status check_available() {
  if (!kernels::cuda::available()) {
    return make_error(ErrorCode::kNotFound,
                      "--device cuda: no CUDA device found (cudaGetDeviceCount reports none: "
                      "no GPU, no driver, or CUDA_VISIBLE_DEVICES hides it); use --device cpu");
  }
  return Status::Ok();
}

Result<trace::DeviceInfo> describe() {
  RETURN_IF_ERROR(check_available());
  ASSIGN_OR_RETURN(kernels::cuda::DeviceInfo d, kernels::cuda::device_info(0));
  trace::DeviceInfo info;
  info.kind = "cuda";
  info.name = d.name;
  info.sm_count = d.sm_count;
  info.compute_capability = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
  info.driver = cuda_version_text(d.driver_version);
  info.runtime = cuda_version_text(d.runtime_version);
  info.memory_bytes = static_cast<int64_t>(d.global_mem_bytes);
  info.cublaslt = kernels::cuda::CublasLtGemm::version();
  return info;
}

}  // namespace llmrr::cuda_engine
