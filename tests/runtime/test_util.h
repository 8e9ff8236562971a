// Shared helpers of the engine tests: cached builtin models, running a set of requests into
// a MemoryTrace, comparing logits bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/memory_trace.h"
#include "llmrr/runtime/model.h"
#include "test_common.h"

namespace llmrr::testing {

using test::builtin;  // loaded once per process
using test::bytes;

RequestSpec request(RequestId id, const std::vector<int32_t>& prompt, int32_t max_tokens,
                    int64_t arrival = 0);

struct EngineRun {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<MemoryTrace> trace;
};

// Builds an engine, adds `requests`, runs to the end. Fails the test on any error.
EngineRun run_requests(const LoadedModel& model, const EngineConfig& config,
                       std::shared_ptr<Policy> policy, const std::vector<RequestSpec>& requests,
                       MemoryTrace::Options options = {});

// Replays `recorded` with its schedule, plans and routing forced.
EngineRun replay(const LoadedModel& model, const EngineConfig& config, MemoryTrace& recorded,
                 RoutingMode routing = RoutingMode::kForce,
                 std::optional<RequestId> isolated = std::nullopt,
                 MemoryTrace::Options options = {});

bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

// First position at which `request`'s logits differ between two traces (-1: none; both must
// hold the same positions).
int32_t first_logit_difference(const MemoryTrace& a, const MemoryTrace& b, RequestId request);

std::shared_ptr<Policy> production(bool atomics = false);
std::shared_ptr<Policy> invariant();

// A Qwen2-MoE-shaped model (attention biases, shared expert with sigmoid gate, a dense layer
// via decoder_sparse_step 2) with weights from a fixed seed.
const LoadedModel& synthetic_qwen2_moe();
// A Qwen3-MoE-shaped model (per-head q/k norms over head_dim 64, 8 experts top-3
// renormalized, no shared expert, layer 1 dense via mlp_only_layers), weights from a seed.
const LoadedModel& synthetic_qwen3_moe();

}  // namespace llmrr::testing
