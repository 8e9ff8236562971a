#include "llmrr/replayer/run_config.h"
#include "llmrr/safeio/json.h"

#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>

namespace llmrr::replay {
namespace {

bool file_exists(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

Status bad_header(const std::string& what) {
  return make_error(ErrorCode::kSemantic, "run header: " + what);
}

// extra_config_json under safeio's caps (size, nesting): the trace's producer wrote it.
Result<nlohmann::json> parse_extra(const trace::RunHeader& h) {
  return safeio::parse_json_object(h.extra_config_json, "run header: extra_config_json",
                                   ErrorCode::kSemantic);
}

}  // namespace

std::string weight_hash_text(uint64_t hash) {
  char b[40];
  std::snprintf(b, sizeof b, "xxh3-64:%016" PRIx64, hash);
  return b;
}

bool parse_weight_hash(const std::string& text, uint64_t* hash) {
  size_t colon = text.rfind(':');
  std::string hex = colon == std::string::npos ? text : text.substr(colon + 1);
  if (hex.empty() || hex.size() > 16) return false;
  uint64_t v = 0;
  for (char c : hex) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *hash = v;
  return true;
}

void fill_run_header(trace::RunHeader* h, const LoadedModel& model, const EngineConfig& config,
                     const std::string& policy_name, const VirtualDevice& device,
                     int32_t attn_split, uint64_t seed, int32_t load, int32_t gemm_split) {
  const ModelConfig& mc = model.config;
  h->model.name = model.identity;
  h->model.path = model.source;
  h->model.architecture = arch_name(mc.arch);
  h->model.weight_hash = weight_hash_text(model.weight_hash);
  kernels::WeightType wt = config.weight_type.value_or(mc.weight_type);
  bool bf16 = config.bf16_activations.value_or(mc.bf16_activations);
  h->model.weight_dtype = wt == kernels::WeightType::kBF16 ? "bf16" : "f32";
  h->model.compute_dtype = bf16 ? "bf16" : "f32";
  h->model.layers = mc.layers;
  h->model.hidden = mc.hidden;
  h->model.vocab = mc.vocab;
  h->model.heads = mc.heads;
  h->model.kv_heads = mc.kv_heads;
  h->model.experts = mc.experts;
  h->model.experts_per_token = mc.top_k;

  trace::EngineConfig& e = h->engine;
  e.policy = policy_name;
  e.virtual_sms = device.sms;
  e.blocks_per_sm = device.blocks_per_sm;
  e.threads = config.threads;
  e.max_batch_tokens = config.scheduler.max_batch_tokens;
  e.max_seqs = config.scheduler.max_seqs;
  e.prefill_chunk = config.scheduler.prefill_chunk;
  e.kv_block_size = config.kv_block;
  e.capacity_factor = config.capacity.enabled() ? static_cast<float>(config.capacity.factor) : 0;
  e.overflow = config.capacity.overflow == Overflow::kReroute ? trace::OverflowPolicy::kNextBest
                                                              : trace::OverflowPolicy::kDrop;
  e.atomics = policy_name.find("atomics") != std::string::npos;
  e.seed = seed;
  e.load = load;

  // Keys a caller put there already are kept; anything else is replaced.
  nlohmann::json extra = nlohmann::json::object();
  if (Result<nlohmann::json> old = parse_extra(*h); old.ok()) extra = std::move(old).value();
  if (config.weight_type) {
    extra["weight_type"] = *config.weight_type == kernels::WeightType::kBF16 ? "bf16" : "f32";
  }
  if (config.bf16_activations) extra["bf16_activations"] = *config.bf16_activations;
  if (config.scoring) {
    extra["scoring"] = *config.scoring == RouterScoring::kSigmoid ? "sigmoid" : "softmax";
  }
  if (attn_split > 0) extra["attn_split"] = attn_split;
  if (gemm_split > 0) extra["gemm_split"] = gemm_split;
  if (config.capacity.enabled()) {
    extra["overflow"] = config.capacity.overflow == Overflow::kReroute ? "reroute" : "drop";
  }
  extra["capacity_factor"] = config.capacity.enabled() ? config.capacity.factor : 0.0;
  h->extra_config_json = safeio::dump(extra);
}

Result<EngineConfig> engine_config_from_header(const trace::RunHeader& h, int32_t threads) {
  const trace::EngineConfig& e = h.engine;
  EngineConfig c;
  if (threads > 0) {
    c.threads = threads;
  } else {
    c.threads = static_cast<int32_t>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  }
  // Scheduler limits do not matter under a forced schedule, but a bad value in a header
  // would make the config invalid: keep the defaults then.
  if (e.max_batch_tokens > 0) c.scheduler.max_batch_tokens = e.max_batch_tokens;
  if (e.max_seqs > 0) c.scheduler.max_seqs = e.max_seqs;
  if (e.prefill_chunk >= 0) c.scheduler.prefill_chunk = e.prefill_chunk;
  if (e.kv_block_size > 0) c.kv_block = e.kv_block_size;

  ASSIGN_OR_RETURN(nlohmann::json extra, parse_extra(h));
  auto str = [&](const char* key) -> std::string {
    auto it = extra.find(key);
    return it != extra.end() && it->is_string() ? it->get<std::string>() : std::string();
  };

  double factor = e.capacity_factor;
  if (!std::isfinite(factor) || factor < 0) {
    return bad_header("engine.capacity_factor is " + std::to_string(factor));
  }
  if (factor > 0) {
    c.capacity.factor = factor;
    std::string ov = str("overflow");
    if (ov == "reroute" || ov == "next_best" ||
        (ov.empty() && e.overflow == trace::OverflowPolicy::kNextBest)) {
      c.capacity.overflow = Overflow::kReroute;
    } else if (ov.empty() || ov == "drop") {
      c.capacity.overflow = Overflow::kDrop;
    } else {
      return bad_header("extra_config_json: unknown overflow '" + ov + "'");
    }
  }

  std::string dtype = str("dtype");
  if (dtype == "fp32" || dtype == "f32") {
    c.weight_type = kernels::WeightType::kF32;
    c.bf16_activations = false;
  } else if (dtype == "bf16") {
    c.weight_type = kernels::WeightType::kBF16;
    c.bf16_activations = true;
  } else if (!dtype.empty()) {
    return bad_header("extra_config_json: unknown dtype '" + dtype + "'");
  }
  std::string wt = str("weight_type");
  if (wt == "f32" || wt == "fp32") {
    c.weight_type = kernels::WeightType::kF32;
  } else if (wt == "bf16") {
    c.weight_type = kernels::WeightType::kBF16;
  } else if (!wt.empty()) {
    return bad_header("extra_config_json: unknown weight_type '" + wt + "'");
  }
  if (auto it = extra.find("bf16_activations"); it != extra.end() && it->is_boolean()) {
    c.bf16_activations = it->get<bool>();
  }
  std::string scoring = str("scoring");
  if (scoring == "softmax") {
    c.scoring = RouterScoring::kSoftmax;
  } else if (scoring == "sigmoid") {
    c.scoring = RouterScoring::kSigmoid;
  } else if (!scoring.empty()) {
    return bad_header("extra_config_json: unknown scoring '" + scoring + "'");
  }
  std::string why = check_engine_config(c);
  if (!why.empty()) return bad_header("engine config: " + why);
  return c;
}

Result<std::shared_ptr<Policy>> policy_from_header(const trace::RunHeader& h) {
  const trace::EngineConfig& e = h.engine;
  // The recorded name is the policy's (Policy::name): --atomics records "production+atomics".
  std::string_view name = e.policy;
  bool atomics = e.atomics;
  if (name == "production+atomics") {
    name = "production";
    atomics = true;
  }
  Result<PolicyKind> kind = PolicyKind::parse(name);
  if (!kind.ok()) {
    return make_error(ErrorCode::kUnsupported, "run header: policy '" + e.policy +
                                                   "' cannot be rebuilt (production, "
                                                   "production+atomics or invariant)");
  }
  // Each kind takes its own fields of po (make_policy).
  PolicyOptions po;
  if (e.virtual_sms > 0) po.device.sms = e.virtual_sms;
  if (e.blocks_per_sm > 0) po.device.blocks_per_sm = e.blocks_per_sm;
  po.atomics = atomics;
  if (kind->fixed_split_sizes()) {
    int32_t split = 0;
    int64_t gemm_split = 0;
    ASSIGN_OR_RETURN(nlohmann::json extra, parse_extra(h));
    {
      auto it = extra.find("attn_split");
      if (it != extra.end() && it->is_number_integer()) split = it->get<int32_t>();
      it = extra.find("gemm_split");
      if (it != extra.end()) {
        if (!it->is_number_integer()) {
          return bad_header("extra_config_json: gemm_split must be an integer, got " +
                            safeio::dump(*it));
        }
        gemm_split = it->get<int64_t>();
        std::string why = gemm_split_check(gemm_split);
        if (!why.empty()) {
          return bad_header("extra_config_json: gemm_split " + std::to_string(gemm_split) + " " +
                            why);
        }
      }
    }
    if (split <= 0) split = default_invariant_split_size(h.model.hidden);
    po.attn_split_size = split;
    po.gemm_split_size = static_cast<int32_t>(gemm_split);
  }
  return std::shared_ptr<Policy>(make_policy(*kind, po));
}

Result<std::string> resolve_model_spec(const trace::RunHeader& h,
                                       const std::string& override_spec) {
  if (!override_spec.empty()) return override_spec;
  const trace::ModelInfo& m = h.model;
  if (m.path.rfind("builtin:", 0) == 0) return m.path;
  if (file_exists(m.path)) return m.path;
  if (m.name.rfind("builtin:", 0) == 0) return m.name;
  std::string tried = "recorded path '" + m.path + "'";
  if (m.name.find("SmolLM2") != std::string::npos || m.path.find("SmolLM2") != std::string::npos) {
    std::string cached = find_smollm2();
    if (!cached.empty()) return cached;
    tried += ", the SmolLM2 cache in " + model_cache_dir() + " (run tools/setup/smollm2)";
  }
  return make_error(ErrorCode::kNotFound, "cannot find the model of this trace (" + m.name +
                                              "): tried " + tried + "; pass --model PATH");
}

Status check_weights(const trace::RunHeader& h, const LoadedModel& model, std::string* warning) {
  if (h.model.weight_hash.empty()) {
    if (warning) {
      *warning = "the trace records no weight hash: cannot check that " + model.source +
                 " holds the weights it was recorded with";
    }
    return Status::Ok();
  }
  uint64_t recorded = 0;
  if (!parse_weight_hash(h.model.weight_hash, &recorded)) {
    return bad_header("model.weight_hash '" + h.model.weight_hash + "' is not a hash");
  }
  if (recorded != model.weight_hash) {
    return make_error(ErrorCode::kWeightMismatch,
                      "model weights differ from the trace's: the trace was recorded with " +
                          (h.model.name.empty() ? std::string("a model") : h.model.name) +
                          " (weights " + h.model.weight_hash + "), " + model.source + " is " +
                          model.identity + " (weights " + weight_hash_text(model.weight_hash) +
                          "); refusing to replay (pass --model with the recorded weights)");
  }
  return Status::Ok();
}

Result<LoadedModel> load_model_for(const trace::RunHeader& header, const std::string& override_spec,
                                   std::string* warning) {
  ASSIGN_OR_RETURN(std::string spec, resolve_model_spec(header, override_spec));
  Result<LoadedModel> model = load_model(spec, ModelLoadOptions{.keep_quantized = true});
  if (!model.ok()) return model.status().with_context("loading the model " + spec + ": ");
  RETURN_IF_ERROR(check_weights(header, *model, warning));
  return model;
}

}  // namespace llmrr::replay
