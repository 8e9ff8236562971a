// The engine's forward pass on a device other than the CPU (EngineConfig::device). The
// engine (Engine::Impl, engine/impl.h) keeps everything that is not arithmetic — scheduler,
// requests, KV block tables, sampler, observer calls around the step — and hands each step's
// batch to a DeviceForward (in Engine::Impl::forward, engine/forward.cc), which runs it on
// the device and calls the observers for what happens inside the step (on_plan, on_rows, in
// the same order as the CPU forward) before it returns the logits of the sampled rows in
// host memory.
#pragma once

#include <memory>
#include <vector>

#include "engine/weights.h"
#include "llmrr/format/status.h"
#include "llmrr/runtime/engine.h"
#include "step_batch.h"

namespace llmrr {

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  // Runs `b` (KV block tables already cover its rows) with plans from `policy`; calls
  // `observers` when b.notify; fills `logits` with [sampled rows, vocab].
  virtual Status forward(const StepBatch& b, Policy& policy,
                         const std::vector<Observer*>& observers, std::vector<float>* logits) = 0;
};

// The CUDA forward (runtime/src/cuda/, built with LLMRR_CUDA): uploads the weights once.
// kUnsupported in a build without CUDA, or for what the CUDA engine does not run (MoE).
Result<std::unique_ptr<DeviceForward>> make_device_forward(const EngineWeights& weights,
                                                           const EngineConfig& config);

}  // namespace llmrr
