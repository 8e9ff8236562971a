#include "test_util.h"

#include <mutex>

namespace llmrr::testing {

RequestSpec request(RequestId id, const std::vector<int32_t>& prompt, int32_t max_tokens,
                    int64_t arrival) {
  RequestSpec r;
  r.id = id;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.arrival_step = arrival;
  return r;
}

EngineRun run_requests(const LoadedModel& model, const EngineConfig& config,
                       std::shared_ptr<Policy> policy, const std::vector<RequestSpec>& requests,
                       MemoryTrace::Options options) {
  EngineRun run;
  auto e = Engine::create(model, config, std::move(policy));
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return run;
  run.engine = std::move(e).value();
  run.trace = std::make_unique<MemoryTrace>(options);
  run.engine->add_observer(run.trace.get());
  for (const RequestSpec& r : requests) {
    Status st = run.engine->add_request(r);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  Status st = run.engine->run();
  EXPECT_TRUE(st.ok()) << st.to_string();
  return run;
}

EngineRun replay(const LoadedModel& model, const EngineConfig& config, MemoryTrace& recorded,
                 RoutingMode routing, std::optional<RequestId> isolated,
                 MemoryTrace::Options options) {
  EngineRun run;
  auto e = Engine::create(model, config, make_forced_policy(&recorded));
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return run;
  run.engine = std::move(e).value();
  run.trace = std::make_unique<MemoryTrace>(options);
  for (const RequestSpec& r : recorded.arrivals()) {
    if (isolated && r.id != *isolated) continue;
    Status st = run.engine->add_request(r);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  recorded.rewind();
  run.engine->set_schedule_source(&recorded);
  run.engine->set_routing_source(&recorded, routing);
  run.engine->set_isolated_request(isolated);
  run.engine->add_observer(run.trace.get());
  Status st = run.engine->run();
  EXPECT_TRUE(st.ok()) << st.to_string();
  return run;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int32_t first_logit_difference(const MemoryTrace& a, const MemoryTrace& b, RequestId request) {
  for (const auto& [key, la] : a.logits()) {
    if (key.first != request) continue;
    const std::vector<float>* lb = b.logits_at(request, key.second);
    if (!lb || !same_bits(la, *lb)) return key.second;
  }
  return -1;
}

std::shared_ptr<Policy> production(bool atomics) {
  ProductionOptions o;
  o.atomics = atomics;
  return make_production_policy(o);
}

std::shared_ptr<Policy> invariant() {
  return make_invariant_policy(64);
}

namespace {

// splitmix64 → uniform in [-scale, scale).
struct Gen {
  uint64_t s;
  float next(float scale) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>((static_cast<double>(z >> 11) / 9007199254740992.0) * 2 - 1) * scale;
  }
};

}  // namespace

namespace {

// Qwen2-MoE-shaped, or (qwen3) Qwen3-MoE-shaped: q/k norms, head_dim 64 (wider than hidden
// / heads), 8 experts top-3 renormalized, no shared expert, no biases, layer 1 dense.
LoadedModel* make_synthetic_moe(bool qwen3) {
    auto* m = new LoadedModel;
    ModelConfig& c = m->config;
    c.arch = Arch::kQwen2Moe;
    c.vocab = 258;
    c.hidden = 64;
    c.layers = 4;
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = 16;
    c.ffn = 96;
    c.max_positions = 512;
    c.eos = 257;
    c.experts = 6;
    c.top_k = 3;
    c.moe_ffn = 32;
    c.shared_ffn = 48;
    c.shared_expert_gate = true;
    c.norm_topk_prob = false;
    c.decoder_sparse_step = 2;  // layers 1 and 3 are MoE, 0 and 2 dense
    c.mlp_only_layers = {};
    c.attention_bias = true;
    m->identity = "test:qwen2-moe";
    m->source = "test:qwen2-moe";
    if (qwen3) {
      c.arch = Arch::kQwen3Moe;
      c.layers = 3;
      c.head_dim = 64;
      c.experts = 8;
      c.top_k = 3;
      c.moe_ffn = 16;
      c.shared_ffn = 0;
      c.shared_expert_gate = false;
      c.norm_topk_prob = true;
      c.decoder_sparse_step = 1;
      c.mlp_only_layers = {1};
      c.attention_bias = false;
      c.qk_norm = true;
      m->identity = "test:qwen3-moe";
      m->source = "test:qwen3-moe";
    }
    Gen g{1234};
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale) {
      HostTensor t;
      t.shape = shape;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      t.data.resize(n);
      for (float& v : t.data) v = g.next(scale);
      m->tensors[name] = std::move(t);
    };
    auto ones = [&](const std::string& name, int64_t n) {
      HostTensor t;
      t.shape = {n};
      t.data.assign(n, 1.0f);
      for (float& v : t.data) v += g.next(0.1f);
      m->tensors[name] = std::move(t);
    };
    const int64_t H = c.hidden, D = c.head_dim;
    add("model.embed_tokens.weight", {c.vocab, H}, 1.0f);
    add("lm_head.weight", {c.vocab, H}, 0.2f);
    ones("model.norm.weight", H);
    for (int l = 0; l < c.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const float s = 1.0f / 8.0f;
      ones(p + "input_layernorm.weight", H);
      ones(p + "post_attention_layernorm.weight", H);
      add(p + "self_attn.q_proj.weight", {c.heads * D, H}, s);
      add(p + "self_attn.k_proj.weight", {c.kv_heads * D, H}, s);
      add(p + "self_attn.v_proj.weight", {c.kv_heads * D, H}, s);
      add(p + "self_attn.o_proj.weight", {H, c.heads * D}, s);
      if (c.attention_bias) {
        add(p + "self_attn.q_proj.bias", {c.heads * D}, 0.1f);
        add(p + "self_attn.k_proj.bias", {c.kv_heads * D}, 0.1f);
        add(p + "self_attn.v_proj.bias", {c.kv_heads * D}, 0.1f);
      }
      if (c.qk_norm) {
        ones(p + "self_attn.q_norm.weight", D);
        ones(p + "self_attn.k_norm.weight", D);
      }
      if (!c.is_moe_layer(l)) {
        add(p + "mlp.gate_proj.weight", {c.ffn, H}, s);
        add(p + "mlp.up_proj.weight", {c.ffn, H}, s);
        add(p + "mlp.down_proj.weight", {H, c.ffn}, s);
        continue;
      }
      add(p + "mlp.gate.weight", {c.experts, H}, 0.5f);
      for (int e = 0; e < c.experts; ++e) {
        const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        add(q + "gate_proj.weight", {c.moe_ffn, H}, s);
        add(q + "up_proj.weight", {c.moe_ffn, H}, s);
        add(q + "down_proj.weight", {H, c.moe_ffn}, s);
      }
      if (c.shared_ffn == 0) continue;
      add(p + "mlp.shared_expert.gate_proj.weight", {c.shared_ffn, H}, s);
      add(p + "mlp.shared_expert.up_proj.weight", {c.shared_ffn, H}, s);
      add(p + "mlp.shared_expert.down_proj.weight", {H, c.shared_ffn}, s);
      add(p + "mlp.shared_expert_gate.weight", {1, H}, s);
    }
    return m;
}

}  // namespace

const LoadedModel& synthetic_qwen2_moe() {
  static const LoadedModel* model = make_synthetic_moe(false);
  return *model;
}

const LoadedModel& synthetic_qwen3_moe() {
  static const LoadedModel* model = make_synthetic_moe(true);
  return *model;
}

}  // namespace llmrr::testing
