// Where the engine runs: the CPU (always) or a CUDA GPU (builds with LLMRR_CUDA=ON).
//
// `--device cpu|cuda` (run, record, replay) ends up here. check_device() is the one place
// that says why a device cannot be used: a build without CUDA, or a CUDA build on a machine
// without a usable GPU. describe_device() fills the run header's device fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"

namespace llmrr {

enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

const char* device_name(Device device);  // "cpu", "cuda"
std::optional<Device> parse_device(std::string_view text);

// Whether this build has the CUDA engine.
bool cuda_engine_built();

// Ok when `device` can run here. kUnsupported for a build without CUDA ("built without
// CUDA"), kNotFound for a CUDA build that finds no device; the message says what to do.
Status check_device(Device device);

// The run header's device fields: for kCuda the GPU's name, SMs, compute capability,
// memory, driver, runtime and cuBLASLt versions; for kCpu kind "cpu" and `cpu_name`.
Result<trace::DeviceInfo> describe_device(Device device, const std::string& cpu_name = "");

}  // namespace llmrr
