// The inference engine: Llama-style dense and MoE (Mixtral, Qwen2-MoE, sigmoid-scored
// DeepSeek-style) forward passes over batches of rows from many requests, a paged KV cache,
// continuous batching (scheduler.h), MoE capacity (moe_router.h), and a plan from the
// Policy for every op at every site (policy.h).
//
// Driving it:
//   auto engine = Engine::create(model, config, policy);
//   engine->add_observer(&recorder);           // optional; nothing extra runs without one
//   engine->add_request(spec) ...;             // arrival_step says when each may start
//   engine->run();                             // or step() until it returns false
//
// Replaying a trace (the replayer's sequence):
//   auto engine = Engine::create(model, recorded_config, make_forced_policy(&plans));
//   engine->add_request(arrival) for every recorded arrival (prompt, sampling, max_tokens,
//       arrival_step as recorded);
//   engine->set_schedule_source(&schedule);    // recorded segments per step
//   engine->set_routing_source(&routing, RoutingMode::kForce);   // or kCheck
//   engine->set_isolated_request(id);          // request-alone replay (DESIGN invariant 3)
//   engine->add_observer(&verifier);           // compares fingerprints, logits, tokens
//   engine->run();
// Under a ScheduleSource the engine takes each step's batch from it, the prompt tokens
// from the requests it was given, and the tokens it feeds back from its own sampler.
//
// Sites and plans. Every op asks the Policy for its plan at its site and reports it with
// on_plan, every step: per layer attn_norm, q, k, v, attn.core, o, mlp_norm, then the dense
// MLP's gate, up, down, or the MoE's router, the expert GEMMs of every expert that received
// tokens this step (experts with none run nothing and report nothing), the shared expert's
// gate, up, down, scale, and moe.combine; final_norm and logits when a row samples. Rows of
// a site go to observers that asked wants_rows(site) that step, in forward order; expert
// sites carry only the rows routed to the expert (RowsView::batch_rows says which), and
// moe.combine's rows are the MoE block's output (routed sum plus the scaled shared expert).
// Steps where the batch would be empty are skipped (no callbacks; the step counter jumps to
// the next arrival). score_prompt calls no observer.
//
// Precision. Linear weights are fp32 or bf16 (kernels::WeightType), accumulation is fp32.
// With bf16 activations (a bf16 checkpoint as Hugging Face computes it) the engine rounds
// to bf16: the output of every GEMM (after its bias), q and k after RoPE (so the KV cache
// holds bf16 values), the attention output, the SwiGLU output, every RMSNorm output, the
// MoE combine output, the shared-expert scale and scaled output, every residual sum, and
// the logits. Router scores, gates and softmax statistics stay fp32 (HF computes routing
// weights in fp32).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/runtime/device.h"
#include "llmrr/runtime/model.h"
#include "llmrr/runtime/moe_router.h"
#include "llmrr/runtime/observer.h"
#include "llmrr/runtime/policy.h"
#include "llmrr/runtime/scheduler.h"

namespace llmrr {

struct EngineConfig {
  int32_t threads = 1;             // never changes a result (invariant 1)
  SchedulerConfig scheduler;
  int32_t kv_block = 16;           // positions per KV cache block (page)
  CapacityConfig capacity;         // MoE expert capacity (default: dropless)
  // Precision and routing overrides of the checkpoint's config (e.g. run an fp32
  // checkpoint as bf16 to compare with a bf16 reference; sigmoid scoring on any MoE).
  std::optional<kernels::WeightType> weight_type;
  std::optional<bool> bf16_activations;
  std::optional<RouterScoring> scoring;
  // Where the forward pass runs (device.h). kCuda: weights uploaded once, KV cache on the
  // GPU, exact kernels for exact plans and cuBLASLt for the production policy's GEMMs;
  // observers get rows as device fingerprints (RowsView::fingerprints). Dense models only.
  Device device = Device::kCpu;
};

// Empty string when valid, else why not.
std::string check_engine_config(const EngineConfig& config);

// ---- forced sources (replay) ----------------------------------------------------------

// One recorded step: the full batch, segments in batch row order.
struct ScheduledStep {
  int64_t step = 0;
  std::vector<BatchSegment> segments;
};

class ScheduleSource {
 public:
  virtual ~ScheduleSource() = default;
  // The next step's batch, or nullopt when the schedule is over. Step numbers increase.
  virtual Result<std::optional<ScheduledStep>> next() = 0;
};

// Routing of one MoE layer at one recorded step, indexed by the step's batch rows.
struct ForcedRouting {
  int64_t rows = 0;
  int32_t k = 0;
  int32_t capacity = 0;
  std::vector<int32_t> experts;       // rows × k, -1 = dropped
  std::vector<RouteOutcome> outcome;  // rows × k
};

class RoutingSource {
 public:
  virtual ~RoutingSource() = default;
  // The routing recorded for (step, layer), or nullptr. Valid until the next call.
  virtual const ForcedRouting* routing(int64_t step, int32_t layer) = 0;
};

enum class RoutingMode : uint8_t {
  kCompute = 0,  // the router and the capacity logic decide (normal runs)
  kForce = 1,    // experts and outcomes from the RoutingSource; gates recomputed
  kCheck = 2,    // computed, then compared with the source: the first difference is kept
};

// The first token whose experts differ from the source (RoutingMode::kCheck).
struct RoutingMismatch {
  int64_t step = 0;
  int32_t layer = 0;
  int64_t batch_row = 0;
  RequestId request = 0;
  int32_t position = 0;
  std::vector<int32_t> expected;  // from the source
  std::vector<int32_t> found;     // recomputed
};

// ---- results ------------------------------------------------------------------------------

struct RequestState {
  RequestSpec spec;
  std::vector<int32_t> generated;
  int32_t processed = 0;       // positions in the KV cache
  bool arrived = false;        // on_arrival reported
  bool finished = false;
  FinishReason reason = FinishReason::kMaxTokens;
  int64_t first_step = -1;     // first step with one of its rows
  int64_t finish_step = -1;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t rows = 0;            // rows computed (prefill + decode)
  int64_t prefill_rows = 0;
  int64_t decode_rows = 0;
  int64_t generated = 0;       // tokens sampled
  double seconds = 0;          // wall time inside step()
};

class Engine {
 public:
  // Packs the model's weights (the LoadedModel may be dropped afterwards). `policy` may be
  // null: production against the default virtual device.
  static Result<std::unique_ptr<Engine>> create(const LoadedModel& model,
                                                const EngineConfig& config,
                                                std::shared_ptr<Policy> policy = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The model config with the EngineConfig overrides applied.
  const ModelConfig& model_config() const;
  const EngineConfig& config() const;
  Policy& policy();
  void set_policy(std::shared_ptr<Policy> policy);

  // Observers are called in the order added. Not owned. With lend_idle_threads, the
  // engine's pool workers also call observer->on_idle() whenever they have waited a while
  // for work (the engine's serial phases: sampling, scheduling, planning, routing); the
  // observer must then stay alive until remove_observer() or the engine's destruction,
  // since a worker may call it between steps. Without pool workers (threads 1) it never is.
  void add_observer(Observer* observer, bool lend_idle_threads = false);
  // Returns once no pool worker is inside the observer's on_idle().
  void remove_observer(Observer* observer);

  // nullptr: the engine's own Scheduler decides the batches.
  void set_schedule_source(ScheduleSource* source);
  void set_routing_source(RoutingSource* source, RoutingMode mode);
  // Request-alone replay: of every forced step compute only the rows of `request`; plans
  // and routing (both forced) keep referring to the full recorded batch, so its rows come
  // out bit-identical (invariant 3). Needs a ScheduleSource. nullopt: every row.
  void set_isolated_request(std::optional<RequestId> request);

  // Validates (non-empty prompt, ids < vocab, prompt + max_tokens ≤ max positions, unique
  // id) and queues the request; it may start at spec.arrival_step.
  Status add_request(const RequestSpec& spec);

  // Runs one step. false when nothing is left to run (or the schedule source is over).
  Result<bool> step();
  // Steps until nothing is left (or max_steps steps ran, when ≥ 0).
  Status run(int64_t max_steps = -1);

  // Logits of every position of `prompt` from one prefill ([T, vocab], row-major), run
  // outside any schedule (plans asked at step -1, no observer called). For tests and
  // conformance.
  Result<std::vector<float>> score_prompt(std::span<const int32_t> prompt);

  const RequestState* request(RequestId id) const;
  std::vector<RequestId> request_ids() const;  // submission order
  const std::optional<RoutingMismatch>& routing_mismatch() const;
  const EngineStats& stats() const;
  // The step number the next step() will use at the earliest.
  int64_t next_step() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrr
