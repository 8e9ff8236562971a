#include "llmrr/runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "get_plan.h"
#include "impl.h"
#include "llmrr/kernels/sample.h"

namespace llmrr {

std::string step_str(int64_t step) { return "step " + std::to_string(step); }

std::string check_engine_config(const EngineConfig& c) {
  if (c.threads < 1 || c.threads > 256) {
    return "threads must be in [1, 256] (got " + std::to_string(c.threads) + ")";
  }
  if (c.kv_block < 1 || c.kv_block > 65536) {
    return "kv block must be in [1, 65536] positions (got " + std::to_string(c.kv_block) + ")";
  }
  std::string s = check_scheduler_config(c.scheduler);
  if (!s.empty()) return s;
  if (!std::isfinite(c.capacity.factor) || c.capacity.factor < 0) {
    return "capacity factor must be a finite number >= 0";
  }
  if (c.capacity.overflow != Overflow::kNone && !(c.capacity.factor > 0)) {
    return std::string("overflow '") + overflow_name(c.capacity.overflow) +
           "' needs a capacity factor > 0";
  }
  return "";
}

uint64_t Engine::Impl::ask(const StepBatch& b, SiteId site) {
  if (!b.notify || obs.empty()) return 0;
  uint64_t mask = 0;
  for (size_t i = 0; i < obs.size() && i < 64; ++i) {
    if (obs[i]->wants_rows(site)) mask |= uint64_t{1} << i;
  }
  return mask;
}

void Engine::Impl::emit(uint64_t mask, const StepBatch& b, SiteId site, const float* data,
                        int64_t ld, int64_t rows, int64_t cols, const int32_t* batch_rows) {
  if (!mask) return;
  RowsView view;
  view.step = b.step;
  view.site = site;
  view.data = data;
  view.ld = ld;
  view.rows = rows;
  view.cols = cols;
  view.batch_rows = batch_rows;
  for (size_t i = 0; i < obs.size() && i < 64; ++i) {
    if (mask & (uint64_t{1} << i)) obs[i]->on_rows(view);
  }
}

Result<Plan> Engine::Impl::get_plan(const StepBatch& b, PlanQuery q) {
  static const PlanDevice kCpu;  // no GEMM heuristic of its own, no cuBLASLt
  ASSIGN_OR_RETURN(Plan p, llmrr::get_plan(b, *policy, q, kCpu));
  if (b.notify) {
    for (Observer* o : obs) o->on_plan(b.step, q.site, p);
  }
  return p;
}

Result<bool> Engine::Impl::step() {
  auto t0 = std::chrono::steady_clock::now();
  StepBatch b;
  if (schedule) {
    if (schedule_done) return false;
    ASSIGN_OR_RETURN(std::optional<ScheduledStep> next, schedule->next());
    if (!next) {
      schedule_done = true;
      return false;
    }
    if (next->step < next_step) {
      return make_error(ErrorCode::kSemantic, "schedule goes back to " + step_str(next->step) +
                                                  " after step " +
                                                  std::to_string(next_step - 1));
    }
    b.step = next->step;
    b.full = std::move(next->segments);
  } else {
    for (;;) {
      if (sched.idle()) return false;
      b.full = sched.next_batch(next_step);
      if (!b.full.empty()) break;
      std::optional<int64_t> arrival = sched.next_arrival();
      if (!arrival || *arrival <= next_step) {
        return make_error(ErrorCode::kInternal, "scheduler produced an empty batch at " +
                                                    step_str(next_step) +
                                                    " with requests running");
      }
      next_step = *arrival;  // nothing runs until the next arrival: skip the empty steps
    }
    b.step = next_step;
  }
  next_step = b.step + 1;
  RETURN_IF_ERROR(build_batch(b, schedule != nullptr));

  for (RequestId id : order) {
    RequestState& r = reqs[id];
    if (!r.arrived && r.spec.arrival_step <= b.step) {
      r.arrived = true;
      for (Observer* o : obs) o->on_arrival(b.step, r.spec);
    }
  }
  if (b.segs.empty()) return true;  // request-alone replay: the request is not in this step

  StepInfo info;
  info.step = b.step;
  info.segments = b.active_segments;
  info.rows = b.rows();
  for (Observer* o : obs) o->on_step(info);

  RETURN_IF_ERROR(forward(b));

  for (ActiveSeg& s : b.segs) {
    s.req->processed = s.seg.start + s.seg.count;
    if (s.req->first_step < 0) s.req->first_step = b.step;
    if (s.seg.kind == SegmentKind::kDecode) {
      stats.decode_rows += s.seg.count;
    } else {
      stats.prefill_rows += s.seg.count;
    }
  }
  stats.rows += b.rows();
  const int64_t V = w.cfg.vocab;
  std::vector<TokenEvent> tokens;
  for (size_t i = 0; i < b.sampled.size(); ++i) {
    const int32_t row = b.sampled[i];
    const ActiveSeg& s = b.segs[b.row_seg[row]];
    LogitsView lv;
    lv.step = b.step;
    lv.request = s.seg.request;
    lv.position = b.positions[row];
    lv.batch_row = b.sampled_orig[i];
    lv.logits = logits.data() + static_cast<int64_t>(i) * V;
    lv.vocab = V;
    lv.logits_site_row = static_cast<int64_t>(i);  // forward() reported these as the logits site
    for (Observer* o : obs) o->on_logits(lv);
    TokenEvent t;
    t.step = b.step;
    t.request = s.seg.request;
    t.position = b.positions[row] + 1;
    t.sample = kernels::sample(lv.logits, V, s.req->spec.sampling, s.seg.request, t.position);
    t.token = t.sample.token;
    tokens.push_back(t);
  }
  for (const TokenEvent& t : tokens) {
    for (Observer* o : obs) o->on_token(t);
  }
  std::vector<RequestFinish> finishes;
  for (const TokenEvent& t : tokens) {
    RequestState& r = reqs[t.request];
    r.generated.push_back(t.token);
    seqs[t.request].push_back(t.token);
    ++stats.generated;
    bool eos = r.spec.stop_at_eos && w.cfg.eos >= 0 && t.token == w.cfg.eos;
    bool done = eos || static_cast<int32_t>(r.generated.size()) >= r.spec.max_tokens;
    if (done) {
      r.finished = true;
      r.reason = eos ? FinishReason::kEos : FinishReason::kMaxTokens;
      r.finish_step = b.step;
      kv.release(tables[t.request]);
      finishes.push_back(RequestFinish{b.step, t.request, r.reason,
                                       static_cast<int32_t>(r.generated.size())});
    }
    if (!schedule) sched.on_token(t.request, done);
  }
  for (const RequestFinish& f : finishes) {
    for (Observer* o : obs) o->on_finish(f);
  }
  for (Observer* o : obs) o->on_step_end(b.step);
  ++stats.steps;
  stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return true;
}

Status Engine::Impl::add_request(const RequestSpec& spec) {
  const ModelConfig& c = w.cfg;
  const std::string who = "request " + std::to_string(spec.id);
  if (reqs.count(spec.id)) {
    return make_error(ErrorCode::kInvalidArgument, who + ": id already used");
  }
  if (spec.prompt.empty()) return make_error(ErrorCode::kInvalidArgument, who + ": empty prompt");
  for (size_t i = 0; i < spec.prompt.size(); ++i) {
    if (spec.prompt[i] < 0 || spec.prompt[i] >= c.vocab) {
      return make_error(ErrorCode::kInvalidArgument,
                        who + ": prompt token " + std::to_string(i) + " is " +
                            std::to_string(spec.prompt[i]) + ", outside the vocabulary [0, " +
                            std::to_string(c.vocab) + ")");
    }
  }
  if (spec.max_tokens < 1) {
    return make_error(ErrorCode::kInvalidArgument, who + ": max tokens must be >= 1");
  }
  const int64_t need = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens - 1;
  if (need > c.max_positions) {
    return make_error(ErrorCode::kInvalidArgument,
                      who + ": prompt of " + std::to_string(spec.prompt.size()) +
                          " tokens + " + std::to_string(spec.max_tokens) +
                          " new tokens needs " + std::to_string(need) +
                          " positions; the model has " + std::to_string(c.max_positions));
  }
  const kernels::SamplingParams& sp = spec.sampling;
  if (!std::isfinite(sp.temperature) || sp.temperature < 0 || sp.top_k < 0 ||
      !(sp.top_p > 0 && sp.top_p <= 1)) {
    return make_error(ErrorCode::kInvalidArgument,
                      who + ": sampling needs temperature >= 0, top-k >= 0, top-p in (0, 1]");
  }
  if (spec.arrival_step < 0) {
    return make_error(ErrorCode::kInvalidArgument, who + ": arrival step must be >= 0");
  }
  RequestState st;
  st.spec = spec;
  reqs.emplace(spec.id, std::move(st));
  tables[spec.id];
  seqs[spec.id] = spec.prompt;
  order.push_back(spec.id);
  sched.add(spec.id, static_cast<int32_t>(spec.prompt.size()), spec.arrival_step);
  return Status::Ok();
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() {
  // No pool worker may call an observer once the engine is gone.
  if (impl_) impl_->pool->set_idle_task(nullptr);
}

Result<std::unique_ptr<Engine>> Engine::create(const LoadedModel& model,
                                               const EngineConfig& config,
                                               std::shared_ptr<Policy> policy) {
  std::string why = check_engine_config(config);
  if (!why.empty()) return make_error(ErrorCode::kInvalidArgument, why);
  ModelConfig mc = model.config;
  if (config.weight_type) mc.weight_type = *config.weight_type;
  if (config.bf16_activations) mc.bf16_activations = *config.bf16_activations;
  if (config.scoring) mc.scoring = *config.scoring;
  ASSIGN_OR_RETURN(EngineWeights weights, pack_weights(model, mc));
  if (!policy) policy = make_production_policy();
  auto impl = std::make_unique<Impl>(std::move(weights), config, std::move(policy));
  if (config.device != Device::kCpu && mc.mla) {
    // Before the device is probed: the answer does not depend on the machine.
    return make_error(ErrorCode::kUnsupported,
                      model.source + ": --device " + device_name(config.device) +
                          " does not run DeepSeek-V3's latent attention (MLA) or its MoE "
                          "layers; use --device cpu");
  }
  if (config.device != Device::kCpu) {
    RETURN_IF_ERROR(check_device(config.device));
    ASSIGN_OR_RETURN(impl->device, make_device_forward(impl->w, config));
    impl->kv.set_host_storage(false);  // the KV lives on the device; the host keeps the tables
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelConfig& Engine::model_config() const { return impl_->w.cfg; }
const EngineConfig& Engine::config() const { return impl_->cfg; }
Policy& Engine::policy() { return *impl_->policy; }
void Engine::set_policy(std::shared_ptr<Policy> policy) { impl_->policy = std::move(policy); }
void Engine::add_observer(Observer* o, bool lend_idle_threads) {
  impl_->obs.push_back(o);
  if (lend_idle_threads && impl_->pool->size() > 1) {
    impl_->pool->set_idle_task(nullptr);
    impl_->idle.obs.push_back(o);
    impl_->pool->set_idle_task(&impl_->idle);
  }
}
void Engine::remove_observer(Observer* o) {
  auto& v = impl_->obs;
  v.erase(std::remove(v.begin(), v.end(), o), v.end());
  auto& lent = impl_->idle.obs;
  if (std::find(lent.begin(), lent.end(), o) != lent.end()) {
    impl_->pool->set_idle_task(nullptr);
    lent.erase(std::remove(lent.begin(), lent.end(), o), lent.end());
    if (!lent.empty()) impl_->pool->set_idle_task(&impl_->idle);
  }
}
void Engine::set_schedule_source(ScheduleSource* s) {
  impl_->schedule = s;
  impl_->schedule_done = false;
}
void Engine::set_routing_source(RoutingSource* s, RoutingMode mode) {
  impl_->routing_src = s;
  impl_->routing_mode = s ? mode : RoutingMode::kCompute;
}
void Engine::set_isolated_request(std::optional<RequestId> r) { impl_->isolated = r; }
Status Engine::add_request(const RequestSpec& spec) { return impl_->add_request(spec); }
Result<bool> Engine::step() { return impl_->step(); }
Status Engine::run(int64_t max_steps) {
  for (int64_t n = 0; max_steps < 0 || n < max_steps; ++n) {
    ASSIGN_OR_RETURN(bool more, impl_->step());
    if (!more) break;
  }
  return Status::Ok();
}
Result<std::vector<float>> Engine::score_prompt(std::span<const int32_t> prompt) {
  return impl_->score_prompt(prompt);
}
const RequestState* Engine::request(RequestId id) const {
  auto it = impl_->reqs.find(id);
  return it == impl_->reqs.end() ? nullptr : &it->second;
}
std::vector<RequestId> Engine::request_ids() const { return impl_->order; }
const std::optional<RoutingMismatch>& Engine::routing_mismatch() const { return impl_->mismatch; }
const EngineStats& Engine::stats() const { return impl_->stats; }
int64_t Engine::next_step() const { return impl_->next_step; }

}  // namespace llmrr
