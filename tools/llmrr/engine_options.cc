#include "engine_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>

#include "cli/cli.h"
#include "llmrr/runtime/load.h"

namespace llmrr::cli {

void add_engine_options(CLI::App& app, EngineOptions& o, bool with_prompt) {
  app.add_option("--model", o.model, "builtin:<name>, a safetensors directory or a .gguf file")
      ->required();
  if (with_prompt) {
    app.add_option("--prompt", o.prompt, "prompt text");
    app.add_option("--prompt-ids", o.prompt_ids, "prompt as token ids, e.g. 1,2,3");
  }
  app.add_option("--policy", o.policy, "production | invariant (default production)");
  app.add_flag("--atomics", o.atomics,
               "production: combine split-K partials and expert outputs in arrival order");
  app.add_option("--load", o.load, "synthetic concurrent requests sharing the batches");
  app.add_option("--arrival", o.arrival,
                 "step at which the prompt's request arrives (default 0; later arrivals queue "
                 "behind the load)");
  app.add_option("--seed", o.seed, "sampling seed; also derives the synthetic load")
      ->check(non_negative());
  app.add_option("--max-tokens", o.max_tokens, "tokens to generate (default 32)");
  app.add_option("--temperature", o.temperature, "0 = greedy (default)");
  app.add_option("--top-k", o.top_k, "0 = off");
  app.add_option("--top-p", o.top_p, "1 = off");
  app.add_option("--capacity-factor", o.capacity_factor,
                 "MoE expert capacity factor (default: dropless)");
  app.add_option("--overflow", o.overflow, "drop | reroute (with --capacity-factor)");
  app.add_option("--threads", o.threads, "CPU threads (never changes results)");
  app.add_option("--max-batch-tokens", o.max_batch_tokens, "rows per step (default 256)");
  app.add_option("--max-seqs", o.max_seqs, "requests running at once (default 16)");
  app.add_option("--prefill-chunk", o.prefill_chunk,
                 "prompt rows per request per step (default 64, 0 = no limit)");
  app.add_option("--kv-block", o.kv_block, "KV cache block size in positions (default 16)");
  app.add_option("--sms", o.sms, "virtual device: SM count (default 132)");
  app.add_option("--blocks-per-sm", o.blocks_per_sm, "virtual device: CTAs per SM (default 2)");
  app.add_option("--attn-split", o.attn_split,
                 "invariant policy: attention positions per split (default 64 for models "
                 "narrower than 512, else 256)");
  app.add_option("--gemm-split", o.gemm_split,
                 "invariant policy: K columns per GEMM split, a multiple of 16 (default 0: "
                 "no split-K); the split count follows K alone, never the batch");
  app.add_option("--dtype", o.dtype, "fp32 | bf16 (default: as stored)");
  app.add_option("--scoring", o.scoring, "MoE router scoring: softmax | sigmoid");
  app.add_flag("--chat", o.chat,
               "wrap the prompt in the model's chat template (one user turn and the assistant "
               "header); without it the prompt is plain text to continue");
  app.add_flag("--raw", o.raw, "use the prompt as is (the default)");
  app.add_option("--device", o.device,
                 "cpu | cuda (default cpu; cuda needs a CUDA build and a GPU: exact kernels for "
                 "the invariant policy, cuBLASLt for production)");
}

Result<std::vector<int32_t>> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    int32_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--prompt-ids: '" + item + "' is not a token id (expected e.g. 1,2,3)");
    }
    ids.push_back(v);
    i = j + 1;
  }
  return ids;
}

std::vector<RequestSpec> make_load_for(const LoadedModel& model, int32_t count, uint64_t seed,
                                       RequestId first_id) {
  return make_load_for_model(model.config, count, seed, first_id);
}

namespace {

Status bad(const std::string& what) { return make_error(ErrorCode::kInvalidArgument, what); }

}  // namespace

Result<EngineSetup> make_engine_setup(const EngineOptions& o, bool need_prompt) {
  EngineSetup s;
  // Values first, so that a typo fails before the model loads.
  ASSIGN_OR_RETURN(const PolicyKind policy, PolicyKind::parse(o.policy));
  if (o.atomics && !policy.supports_atomics()) {
    return bad("--atomics applies to the production policy only");
  }
  if (o.load < 0 || o.load > 4096) return bad("--load must be in [0, 4096]");
  if (o.max_tokens < 1) return bad("--max-tokens must be >= 1");
  if (o.arrival < 0) return bad("--arrival must be >= 0");
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    return bad("--temperature must be >= 0");
  }
  if (o.top_k < 0) return bad("--top-k must be >= 0");
  if (!(o.top_p > 0 && o.top_p <= 1)) return bad("--top-p must be in (0, 1]");
  if (!std::isfinite(o.capacity_factor) || o.capacity_factor < 0) {
    return bad("--capacity-factor must be >= 0");
  }
  Overflow overflow = Overflow::kNone;
  if (o.overflow.empty()) {
    overflow = o.capacity_factor > 0 ? Overflow::kDrop : Overflow::kNone;
  } else if (o.overflow == "drop") {
    overflow = Overflow::kDrop;
  } else if (o.overflow == "reroute") {
    overflow = Overflow::kReroute;
  } else if (o.overflow == "none") {
    overflow = Overflow::kNone;
  } else {
    return bad("--overflow must be drop, reroute or none (got '" + o.overflow + "')");
  }
  if (overflow != Overflow::kNone && !(o.capacity_factor > 0)) {
    return bad("--overflow " + o.overflow + " needs --capacity-factor F (F > 0)");
  }
  if (o.threads < 0 || o.threads > 256) return bad("--threads must be in [0, 256]");
  if (o.max_batch_tokens < 1) return bad("--max-batch-tokens must be >= 1");
  if (o.max_seqs < 1) return bad("--max-seqs must be >= 1");
  if (o.prefill_chunk < 0) return bad("--prefill-chunk must be >= 0 (0 = no limit)");
  if (o.kv_block < 1 || o.kv_block > 65536) return bad("--kv-block must be in [1, 65536]");
  if (o.sms < 1 || o.sms > 100000) return bad("--sms must be in [1, 100000]");
  if (o.blocks_per_sm < 1 || o.blocks_per_sm > 64) return bad("--blocks-per-sm must be in [1, 64]");
  if (o.attn_split < 0) return bad("--attn-split must be >= 0");
  if (std::string why = gemm_split_check(o.gemm_split); !why.empty()) {
    return bad("--gemm-split " + std::to_string(o.gemm_split) + " " + why);
  }
  if (o.gemm_split > 0 && !policy.fixed_split_sizes()) {
    return bad("--gemm-split is for the invariant policy (got --policy " + o.policy + ")");
  }
  if (!o.dtype.empty() && o.dtype != "fp32" && o.dtype != "bf16") {
    return bad("--dtype must be fp32 or bf16 (got '" + o.dtype + "')");
  }
  if (!o.scoring.empty() && o.scoring != "softmax" && o.scoring != "sigmoid") {
    return bad("--scoring must be softmax or sigmoid (got '" + o.scoring + "')");
  }
  if (o.chat && o.raw) return bad("--chat and --raw exclude each other");
  std::optional<Device> device = parse_device(o.device);
  if (!device) return bad("--device must be cpu or cuda (got '" + o.device + "')");
  if (*device == Device::kCuda && o.atomics) {
    return bad("--atomics needs --device cpu (cuBLASLt has no arrival-order reductions)");
  }
  RETURN_IF_ERROR(check_device(*device));
  if (need_prompt && o.prompt.empty() == o.prompt_ids.empty()) {
    return bad("give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
  }

  EngineConfig& c = s.config;
  int32_t threads = o.threads;
  if (threads == 0) {
    threads = static_cast<int32_t>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  }
  c.threads = threads;
  c.scheduler.max_batch_tokens = o.max_batch_tokens;
  c.scheduler.max_seqs = o.max_seqs;
  c.scheduler.prefill_chunk = o.prefill_chunk;
  c.kv_block = o.kv_block;
  c.device = *device;
  c.capacity.factor = o.capacity_factor;
  c.capacity.overflow = overflow;
  if (o.dtype == "fp32") {
    c.weight_type = kernels::WeightType::kF32;
    c.bf16_activations = false;
  } else if (o.dtype == "bf16") {
    c.weight_type = kernels::WeightType::kBF16;
    c.bf16_activations = true;
  }
  if (o.scoring == "softmax") c.scoring = RouterScoring::kSoftmax;
  if (o.scoring == "sigmoid") c.scoring = RouterScoring::kSigmoid;
  std::string why = check_engine_config(c);
  if (!why.empty()) {
    // The config's words map onto the option names.
    return bad("bad engine option: " + why);
  }

  // Quantized GGUF weights stay quantized (same bits, a fraction of the memory).
  ASSIGN_OR_RETURN(s.model, load_model(o.model, ModelLoadOptions{.keep_quantized = true}));
  const ModelConfig& mc = s.model.config;

  s.device.sms = o.sms;
  s.device.blocks_per_sm = o.blocks_per_sm;
  s.policy_kind = policy;
  s.policy = make_policy(
      policy,
      {.device = s.device,
       .atomics = o.atomics,
       .attn_split_size = o.attn_split > 0 ? o.attn_split : default_invariant_split_size(mc.hidden),
       .gemm_split_size = o.gemm_split});
  s.policy_name = s.policy->name();

  if (need_prompt) {
    RequestSpec t;
    t.id = 0;
    t.label = "target";
    t.max_tokens = o.max_tokens;
    t.arrival_step = o.arrival;
    t.sampling.temperature = static_cast<float>(o.temperature);
    t.sampling.top_k = o.top_k;
    t.sampling.top_p = static_cast<float>(o.top_p);
    t.sampling.seed = o.seed;
    if (!o.prompt_ids.empty()) {
      ASSIGN_OR_RETURN(t.prompt, parse_id_list(o.prompt_ids));
      for (int32_t id : t.prompt) {
        if (id < 0 || id >= mc.vocab) {
          return bad("--prompt-ids: token " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(mc.vocab) + ")");
        }
      }
    } else {
      if (!s.model.tokenizer) {
        return make_error(ErrorCode::kUnsupported,
                          s.model.source + " has no usable tokenizer (" + s.model.tokenizer_note +
                              "); pass --prompt-ids");
      }
      const Tokenizer& tok = *s.model.tokenizer;
      if (o.chat && !tok.has_chat_template()) {
        return bad("--chat: " + s.model.source + " has no chat template");
      }
      // Plain text unless asked: a prompt is continued as written, as llama.cpp's completion
      // (and transformers' generate) continue it; wrapping it silently made a raw prompt
      // like "The capital of France is" an instruction to answer.
      s.chat = o.chat;
      t.prompt = tok.encode(s.chat ? tok.chat_prompt(o.prompt) : o.prompt);
      if (t.prompt.empty()) return bad("--prompt encodes to no tokens");
    }
    const int64_t need = static_cast<int64_t>(t.prompt.size()) + t.max_tokens - 1;
    if (need > mc.max_positions) {
      return bad("the prompt (" + std::to_string(t.prompt.size()) + " tokens) plus --max-tokens " +
                 std::to_string(t.max_tokens) + " exceeds the model's " +
                 std::to_string(mc.max_positions) + " positions");
    }
    s.requests.push_back(std::move(t));
    s.target = 0;
  }
  std::vector<RequestSpec> load = make_load_for(s.model, o.load, o.seed, 1);
  s.requests.insert(s.requests.end(), load.begin(), load.end());
  return s;
}

void TextStream::on_token(const TokenEvent& t) {
  if (t.request != target_ || t.token == eos_) return;
  ids_.push_back(t.token);
  if (!tok_) {
    std::printf("%s%d", ids_.size() > 1 ? " " : "", t.token);
  } else {
    std::string text = tok_->decode(ids_);
    if (text.size() > printed_) {
      std::fwrite(text.data() + printed_, 1, text.size() - printed_, stdout);
      printed_ = text.size();
    }
  }
  std::fflush(stdout);
}

}  // namespace llmrr::cli
