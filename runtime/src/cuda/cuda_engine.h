// The CUDA side of the engine (compiled only with LLMRR_CUDA; device.cc and
// device_forward.h are the only callers).
#pragma once

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"

namespace llmrr::cuda_engine {

// Ok when a CUDA device is usable; kNotFound naming what the runtime said otherwise.
Status check_available();
// The run header's device fields for device 0.
Result<trace::DeviceInfo> describe();

}  // namespace llmrr::cuda_engine
