// Internal to the engine sources: the engine's state (Engine::Impl) and its member functions,
// by file. engine.cc: the step loop (scheduler or forced schedule, sampling, finishes),
// requests and the observer plumbing; engine/batch.cc: a step's batch from its segments
// (request-alone replay, forced-schedule checks); engine/forward.cc: the CPU forward pass
// (dense layers) and score_prompt; engine/moe.cc: MoE layers (routing computed, forced or
// checked against a trace; experts; combine).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_forward.h"
#include "weights.h"
#include "kv_cache.h"
#include "step_batch.h"
#include "llmrr/runtime/engine.h"

namespace llmrr {

// Rounds a [rows, cols] block with leading dimension ld to bf16 in place (engine/forward.cc).
void bf16_round(float* p, int64_t rows, int64_t cols, int64_t ld);
// "step N", for messages (engine.cc).
std::string step_str(int64_t step);

struct Engine::Impl {
  EngineWeights w;
  EngineConfig cfg;
  std::shared_ptr<Policy> policy;
  std::unique_ptr<kernels::ThreadPool> pool;
  KvCache kv;
  Scheduler sched;
  std::vector<Observer*> obs;
  // The observers lent the pool's idle workers; changed only while detached from the pool.
  struct IdleLender final : kernels::IdleTask {
    std::vector<Observer*> obs;
    bool run(const kernels::JobSignal& signal) override {
      bool any = false;
      for (Observer* o : obs) {
        if (signal.job_waiting()) break;
        any = o->on_idle(signal) || any;
      }
      return any;
    }
  } idle;
  ScheduleSource* schedule = nullptr;
  bool schedule_done = false;
  RoutingSource* routing_src = nullptr;
  RoutingMode routing_mode = RoutingMode::kCompute;
  std::optional<RequestId> isolated;
  std::unordered_map<RequestId, RequestState> reqs;
  std::unordered_map<RequestId, std::vector<int32_t>> tables;
  std::unordered_map<RequestId, std::vector<int32_t>> seqs;  // prompt then generated
  std::vector<RequestId> order;
  std::optional<RoutingMismatch> mismatch;
  EngineStats stats;
  int64_t next_step = 0;

  // Workspace, reused across steps.
  std::vector<float> x, h, q, k, v, att, tmp, gate, up, act;
  std::vector<float> router_logits, scores, choice, eb, eg, eu, ea, eo, comb, sg, su, sa, sd, sscale;
  std::vector<float> xs, hs, logits;
  std::vector<float> qa, kva, qlat, qabs, latt, lat;  // MLA
  std::vector<int32_t> src, emap, erows;
  Routing routing;
  Plan sliced;
  std::unique_ptr<DeviceForward> device;  // set when the forward pass runs on a GPU

  Impl(EngineWeights weights, const EngineConfig& c, std::shared_ptr<Policy> p)
      : w(std::move(weights)),
        cfg(c),
        policy(std::move(p)),
        pool(std::make_unique<kernels::ThreadPool>(c.threads)),
        kv(w.cfg.layers, w.cfg.cache_heads(), w.cfg.cache_dim(), c.kv_block, w.cfg.mla),
        sched(c.scheduler) {}

  // ---- observer plumbing (engine.cc) ----------------------------------------------------

  uint64_t ask(const StepBatch& b, SiteId site);
  void emit(uint64_t mask, const StepBatch& b, SiteId site, const float* data, int64_t ld,
            int64_t rows, int64_t cols, const int32_t* batch_rows);
  // The plan of get_plan.h (the one lookup the CUDA forward shares), told to the observers.
  Result<Plan> get_plan(const StepBatch& b, PlanQuery q);

  // ---- ops at sites (engine/forward.cc) ----------------------------------------------------

  Status gemm_site(const StepBatch& b, SiteId site, const float* xin, int64_t ldx, int64_t m,
                   int64_t plan_m, const kernels::PackedWeight& wt, float* y, int64_t ldy,
                   const std::vector<float>* bias, bool expert, const int32_t* row_map);
  Status norm_site(const StepBatch& b, SiteId site, const float* xin, int64_t rows,
                   int64_t plan_rows, const std::vector<float>& weight, float* y,
                   const int32_t* row_map);
  Status head_norm_site(const StepBatch& b, SiteId site, float* xio, int64_t rows, int32_t heads,
                        const std::vector<float>& weight, const int32_t* row_map);
  void residual_add(float* xio, const float* d, int64_t rows);
  void plain_site(const StepBatch& b, SiteId site, const float* data, int64_t ld, int64_t rows,
                  int64_t cols, const int32_t* row_map);

  // ---- forward (engine/forward.cc; route and moe_mlp in engine/moe.cc) ---------------------

  Status attention_layer(StepBatch& b, int32_t l);
  // DeepSeek-V3 multi-head latent attention, absorbed form (engine/mla.cc).
  Status mla_attention_layer(StepBatch& b, int32_t l);
  // RMSNorm of `dim` columns of `rows` rows (leading dimension ld), in place, at `site`.
  Status lora_norm_site(const StepBatch& b, SiteId site, float* xio, int64_t ld, int64_t rows,
                        int64_t dim, const std::vector<float>& weight, const int32_t* row_map);
  // One GEMM per head with one plan (weights[h]: n × k), x head h at x + h·x_step, y head h
  // at y + h·y_step; the site's rows are the heads side by side (ldy wide).
  Status head_gemm_site(const StepBatch& b, SiteId site, const float* xin, int64_t ldx,
                        int64_t x_step, int64_t rows, const std::vector<kernels::PackedWeight>& wts,
                        float* y, int64_t ldy, int64_t y_step, const int32_t* row_map);
  Status dense_mlp(StepBatch& b, int32_t l);
  Status route(StepBatch& b, int32_t l);
  Status moe_mlp(StepBatch& b, int32_t l);
  // Runs the batch; fills `logits` ([sampled rows, vocab]).
  Status forward(StepBatch& b);
  Result<std::vector<float>> score_prompt(std::span<const int32_t> prompt);

  // ---- steps (engine/batch.cc: build_batch, check_segment; engine.cc) ---------------------

  // Builds the computed rows of `b` from b.full. Validates forced segments.
  Status build_batch(StepBatch& b, bool forced);
  Status check_segment(const StepBatch& b, size_t i, const BatchSegment& seg,
                       const RequestState& r);
  Result<bool> step();
  Status add_request(const RequestSpec& spec);
};

}  // namespace llmrr
