#include "llmrr/runtime/device.h"

#include "cuda/cuda_engine.h"
#include "device_forward.h"

namespace llmrr {

const char* device_name(Device d) {
  return d == Device::kCuda ? "cuda" : "cpu";
}

std::optional<Device> parse_device(std::string_view t) {
  if (t == "cpu") return Device::kCpu;
  if (t == "cuda") return Device::kCuda;
  return std::nullopt;
}

bool cuda_engine_built() {
#ifdef LLMRR_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

Status check_device(Device d) {
  if (d == Device::kCpu) return Status::Ok();
#ifdef LLMRR_HAVE_CUDA
  return cuda_engine::check_available();
#else
  return make_error(ErrorCode::kUnsupported,
                    "--device cuda: this llmrr was built without CUDA (configure with "
                    "`cmake --preset cuda` on a machine with the CUDA toolkit)");
#endif
}

Result<trace::DeviceInfo> describe_device(Device d, const std::string& cpu_name) {
  if (d == Device::kCpu) {
    trace::DeviceInfo info;
    info.kind = "cpu";
    info.name = cpu_name;
    return info;
  }
  RETURN_IF_ERROR(check_device(d));
#ifdef LLMRR_HAVE_CUDA
  return cuda_engine::describe();
#else
  return make_error(ErrorCode::kInternal, "unreachable: no CUDA in this build");
#endif
}

#ifndef LLMRR_HAVE_CUDA
Result<std::unique_ptr<DeviceForward>> make_device_forward(const EngineWeights&,
                                                           const EngineConfig& config) {
  RETURN_IF_ERROR(check_device(config.device));
  return make_error(ErrorCode::kInternal, "unreachable: no device forward in this build");
}
#endif

}  // namespace llmrr
