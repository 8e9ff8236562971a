// The run header as the replayer reads it: which model, which engine config, which policy.
//
// A trace is self-describing (DESIGN invariant 5): the header's engine fields plus
// extra_config_json hold everything needed to rebuild the engine that recorded it. The
// keys of extra_config_json that this file reads (all optional; absent = as the model
// says):
//   "dtype":       "fp32" | "bf16"         (EngineConfig::weight_type + bf16_activations)
//   "weight_type": "f32" | "bf16"          (finer form of the above, wins when present)
//   "bf16_activations": true | false
//   "scoring":     "softmax" | "sigmoid"   (EngineConfig::scoring)
//   "attn_split":  N                       (invariant policy's attention split size)
//   "gemm_split":  N                       (invariant policy's K columns per GEMM split;
//                                           absent or 0: no split-K)
//   "overflow":    "drop" | "reroute"      (MoE overflow; the header's enum has no
//                                           "none", capacity_factor 0 means dropless)
// fill_run_header() writes exactly these, so a trace recorded through it round-trips.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/policy.h"

namespace llmrr::replay {

// What a recording needs to say about itself so that it replays: fills header.model,
// header.engine (policy, virtual device, threads, scheduler, capacity, seed, load) and
// header.extra_config_json from the engine's inputs. Capture fields are left to the
// recorder (TraceRecorder::open overwrites them).
void fill_run_header(trace::RunHeader* header, const LoadedModel& model, const EngineConfig& config,
                     const std::string& policy_name, const VirtualDevice& device,
                     int32_t attn_split = 0, uint64_t seed = 0, int32_t load = 0,
                     int32_t gemm_split = 0);

// "xxh3-64:1f2e3d4c5b6a7988".
std::string weight_hash_text(uint64_t hash);
// Parses the hex after the last ':' (or the whole string); false when it is not 1-16 hex
// digits.
bool parse_weight_hash(const std::string& text, uint64_t* hash);

// The engine config the trace was recorded with, the thread count replaced by `threads`
// when > 0. Errors name the header field.
Result<EngineConfig> engine_config_from_header(const trace::RunHeader& header, int32_t threads = 0);

// The policy the header names, rebuilt (production, production+atomics, invariant) — for
// counterfactual runs and tests; a replay uses the forced policy instead.
Result<std::shared_ptr<Policy>> policy_from_header(const trace::RunHeader& header);

// Where the model comes from: `override_spec` when non-empty, else the recorded path when
// it exists, else the recorded identity when it names a builtin model, else the cached
// SmolLM2 when the identity names it. Returns the spec to load, or kNotFound explaining
// what was tried.
Result<std::string> resolve_model_spec(const trace::RunHeader& header,
                                       const std::string& override_spec);

// kWeightMismatch when the model's weights are not the trace's: the message names both
// hashes and both identities. Ok when they match or when the trace holds no hash
// (*warning is then set).
Status check_weights(const trace::RunHeader& header, const LoadedModel& model,
                     std::string* warning = nullptr);

// Loads the model for a trace (resolve_model_spec + load_model + check_weights).
Result<LoadedModel> load_model_for(const trace::RunHeader& header, const std::string& override_spec,
                                   std::string* warning = nullptr);

}  // namespace llmrr::replay
