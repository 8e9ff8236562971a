// GGUF → LoadedModel: config from {arch}.* metadata, llama.cpp tensor names mapped to Hugging
// Face names, dequantized to fp32, with the layout transformers produces when it loads the
// same file (transformers/modeling_gguf_pytorch_utils.py):
//   - GGUF dims are reversed (ne[0] is contiguous), so HF shape = reversed ne;
//   - llama: blk.N.attn_q / attn_k rows were permuted by llama.cpp's converter for its RoPE
//     layout; LlamaTensorProcessor._reverse_permute_weights undoes it:
//       w.reshape(n_head, rows / n_head / 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
//     with n_head = heads for Q and kv_heads for K;
//   - stacked experts (ffn_{gate,up,down}_exps, ne = [in, out, E]) split into one tensor per
//     expert; qwen2moe's ffn_gate_inp_shexp ([H]) becomes shared_expert_gate.weight [1, H];
//   - qwen3 / qwen3moe: attn_{q,k}_norm are self_attn.{q,k}_norm; Q/K are not permuted
//     (llama.cpp runs them with NEOX RoPE, HF's rotate_half layout).
//   - deepseek2 (DeepSeek-V2/V3): MLA tensors attn_q_a / attn_q_a_norm / attn_q_b (or attn_q),
//     attn_kv_a_mqa / attn_kv_a_norm, and attn_kv_b or, as newer converters write it for
//     the absorbed form, attn_k_b ([heads, kv_lora, nope] in HF order: W_UK transposed per
//     head) and attn_v_b ([heads, v, kv_lora]), joined back into kv_b_proj; exp_probs_b.bias
//     is e_score_correction_bias; *_shexp are shared_experts.*. Rope rows are not permuted:
//     llama.cpp rotates adjacent pairs for deepseek2, HF's rope_interleave layout.
#include <algorithm>
#include <array>
#include <functional>
#include <regex>

#include "llmrr/kernels/quant.h"
#include "llmrr/runtime/gguf.h"
#include "llmrr/runtime/tokenizers.h"
#include "loaders/loader_util.h"

namespace llmrr {
namespace {

// Reads an optional integer key into *out; absent keeps the default.
Status opt_int(const GgufFile& f, const std::string& key, int32_t* out, bool required) {
  if (!f.find(key)) {
    if (required)
      return make_error(ErrorCode::kBadModel, f.path() + ": metadata " + key + " is missing");
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(int64_t v, f.get_int(key));
  if (v < INT32_MIN || v > INT32_MAX)
    return make_error(ErrorCode::kBadModel,
                      f.path() + ": metadata " + key + " = " + std::to_string(v) + " out of range");
  *out = static_cast<int32_t>(v);
  return Status::Ok();
}

bool has_tensor(const GgufFile& f, const std::string& name) {
  for (const auto& t : f.tensors())
    if (t.name == name) return true;
  return false;
}

Status bad_gguf(const GgufFile& f, const std::string& what) {
  return make_error(ErrorCode::kBadModel, f.path() + ": " + what);
}

// deepseek2's attention and MoE metadata, as llama.cpp's converter writes it (MLA as MQA:
// key_length = kv_lora + rope, value_length = kv_lora, the per-head sizes in
// key_length_mla / value_length_mla; older files: key_length / value_length per head).
Status deepseek2_config(const GgufFile& f, ModelConfig* out) {
  ModelConfig& c = *out;
  const std::string a = "deepseek2.";
  c.arch = Arch::kDeepseekV3;
  c.mla = true;
  c.kv_heads = c.heads;
  RETURN_IF_ERROR(opt_int(f, a + "attention.q_lora_rank", &c.q_lora_rank, false));
  RETURN_IF_ERROR(opt_int(f, a + "attention.kv_lora_rank", &c.kv_lora_rank, true));
  RETURN_IF_ERROR(opt_int(f, a + "rope.dimension_count", &c.qk_rope_dim, true));
  int32_t k_len = 0, v_len = 0;
  const bool mla_keys = f.find(a + "attention.key_length_mla") != nullptr;
  RETURN_IF_ERROR(opt_int(f, a + (mla_keys ? "attention.key_length_mla" : "attention.key_length"),
                          &k_len, true));
  RETURN_IF_ERROR(opt_int(f,
                          a + (mla_keys ? "attention.value_length_mla" : "attention.value_length"),
                          &v_len, true));
  c.qk_nope_dim = k_len - c.qk_rope_dim;
  c.v_head_dim = v_len;
  c.head_dim = c.qk_rope_dim;
  c.rope_interleave = true;  // llama.cpp's deepseek2 rotates adjacent pairs
  if (c.q_lora_rank < 0 || c.kv_lora_rank <= 0 || c.qk_rope_dim <= 0 || c.qk_rope_dim % 2 ||
      c.qk_nope_dim <= 0 || c.v_head_dim <= 0 || c.kv_lora_rank > (1 << 20) ||
      c.q_lora_rank > (1 << 20) || k_len > 8192 || v_len > 4096)
    return bad_gguf(f, "MLA sizes out of range (q_lora_rank " + std::to_string(c.q_lora_rank) +
                           ", kv_lora_rank " + std::to_string(c.kv_lora_rank) + ", key length " +
                           std::to_string(k_len) + ", rope dims " +
                           std::to_string(c.qk_rope_dim) + " (even, below the key length), "
                           "value length " + std::to_string(v_len) + ")");
  int32_t dense = 0, shared = 0, gating = 2;
  RETURN_IF_ERROR(opt_int(f, a + "leading_dense_block_count", &dense, false));
  if (dense < 0 || dense > c.layers)
    return bad_gguf(f, "metadata " + a + "leading_dense_block_count " + std::to_string(dense) +
                           " not in 0.." + std::to_string(c.layers));
  RETURN_IF_ERROR(opt_int(f, a + "expert_count", &c.experts, true));
  RETURN_IF_ERROR(opt_int(f, a + "expert_used_count", &c.top_k, true));
  RETURN_IF_ERROR(opt_int(f, a + "expert_feed_forward_length", &c.moe_ffn, true));
  RETURN_IF_ERROR(opt_int(f, a + "expert_shared_count", &shared, false));
  if (shared < 0 || shared > 4096)
    return bad_gguf(f, "metadata " + a + "expert_shared_count " + std::to_string(shared) +
                           " out of range");
  c.shared_ffn = shared * c.moe_ffn;
  RETURN_IF_ERROR(opt_int(f, a + "expert_gating_func", &gating, false));
  if (gating != 2)
    return make_error(ErrorCode::kUnsupported,
                      f.path() + ": metadata " + a + "expert_gating_func " +
                          std::to_string(gating) + " is not supported (only 2, sigmoid)");
  c.scoring = RouterScoring::kSigmoid;
  c.norm_topk_prob = false;  // the converter writes expert_weights_norm only when true
  if (f.find(a + "expert_weights_norm")) {
    ASSIGN_OR_RETURN(c.norm_topk_prob, f.get_bool(a + "expert_weights_norm"));
  }
  c.routed_scaling = 1.0f;
  if (f.find(a + "expert_weights_scale")) {
    ASSIGN_OR_RETURN(double scale, f.get_float(a + "expert_weights_scale"));
    if (!(scale > 0) || scale > 1e6)
      return bad_gguf(f, "metadata " + a + "expert_weights_scale must be positive");
    c.routed_scaling = static_cast<float>(scale);
  }
  c.n_group = 1;
  c.topk_group = 1;
  RETURN_IF_ERROR(opt_int(f, a + "expert_group_count", &c.n_group, false));
  RETURN_IF_ERROR(opt_int(f, a + "expert_group_used_count", &c.topk_group, false));
  if (c.n_group < 1 || c.topk_group < 1 || c.topk_group > c.n_group || c.experts <= 0 ||
      c.experts % c.n_group != 0 || (c.n_group > 1 && c.experts / c.n_group < 2) ||
      int64_t{c.topk_group} * (c.experts / c.n_group) < c.top_k)
    return bad_gguf(f, "metadata " + a + "expert_group_count " + std::to_string(c.n_group) +
                           " / expert_group_used_count " + std::to_string(c.topk_group) +
                           " do not fit " + std::to_string(c.experts) + " experts, " +
                           std::to_string(c.top_k) + " used");
  c.router_bias = has_tensor(f, "blk." + std::to_string(dense) + ".exp_probs_b.bias");
  for (int32_t l = 0; l < dense; ++l) c.mlp_only_layers.push_back(l);
  return Status::Ok();
}

// Head sizes of the architectures with plain (GQA) attention.
Status dense_attention_config(const GgufFile& f, const std::string& a, ModelConfig* out) {
  ModelConfig& c = *out;
  c.head_dim = c.heads > 0 ? c.hidden / c.heads : 0;
  RETURN_IF_ERROR(opt_int(f, a + "attention.key_length", &c.head_dim, false));
  int32_t v_len = c.head_dim, rot = c.head_dim;
  RETURN_IF_ERROR(opt_int(f, a + "attention.value_length", &v_len, false));
  RETURN_IF_ERROR(opt_int(f, a + "rope.dimension_count", &rot, false));
  if (v_len != c.head_dim || rot != c.head_dim)
    return make_error(ErrorCode::kUnsupported,
                      f.path() + ": key length " + std::to_string(c.head_dim) + ", value length " +
                          std::to_string(v_len) + ", rotary dims " + std::to_string(rot) +
                          " differ (only full-width RoPE with equal K/V head sizes)");
  return Status::Ok();
}

Result<ModelConfig> gguf_config(const GgufFile& f, const std::string& arch_name) {
  ModelConfig c;
  const std::string a = arch_name + ".";
  c.arch = arch_name == "qwen2moe"   ? Arch::kQwen2Moe
           : arch_name == "qwen3"    ? Arch::kQwen3
           : arch_name == "qwen3moe" ? Arch::kQwen3Moe
           : arch_name == "deepseek2" ? Arch::kDeepseekV3
                                     : Arch::kLlama;
  c.qk_norm = c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe;
  RETURN_IF_ERROR(opt_int(f, a + "embedding_length", &c.hidden, true));
  RETURN_IF_ERROR(opt_int(f, a + "block_count", &c.layers, true));
  RETURN_IF_ERROR(opt_int(f, a + "attention.head_count", &c.heads, true));
  for (const auto& [key, v] : {std::pair<const char*, int32_t>{"embedding_length", c.hidden},
                               {"block_count", c.layers}, {"attention.head_count", c.heads}}) {
    if (v <= 0)
      return make_error(ErrorCode::kBadModel, f.path() + ": metadata " + a + key + " = " +
                                                  std::to_string(v) +
                                                  ", expected a positive integer");
  }
  c.kv_heads = c.heads;
  RETURN_IF_ERROR(opt_int(f, a + "attention.head_count_kv", &c.kv_heads, false));
  if (arch_name == "deepseek2") {
    RETURN_IF_ERROR(deepseek2_config(f, &c));
  } else {
    RETURN_IF_ERROR(dense_attention_config(f, a, &c));
  }
  RETURN_IF_ERROR(opt_int(f, a + "feed_forward_length", &c.ffn, false));

  c.max_positions = 2048;
  RETURN_IF_ERROR(opt_int(f, a + "context_length", &c.max_positions, false));
  if (f.find(a + "rope.freq_base")) {
    ASSIGN_OR_RETURN(c.rope_theta, f.get_float(a + "rope.freq_base"));
    RETURN_IF_ERROR(loaders::check_setting(f.path(), "metadata " + a + "rope.freq_base",
                                           c.rope_theta, loaders::kMinRopeTheta,
                                           loaders::kMaxRopeTheta));
  }
  if (f.find(a + "rope.scaling.type")) {
    ASSIGN_OR_RETURN(std::string type, f.get_string(a + "rope.scaling.type"));
    if (type != "none")
      return make_error(ErrorCode::kUnsupported,
                        f.path() + ": metadata " + a + "rope.scaling.type = " + type +
                            " is not supported (only none)");
  }
  if (f.find(a + "attention.layer_norm_rms_epsilon")) {
    ASSIGN_OR_RETURN(double eps, f.get_float(a + "attention.layer_norm_rms_epsilon"));
    RETURN_IF_ERROR(loaders::check_setting(f.path(),
                                           "metadata " + a + "attention.layer_norm_rms_epsilon",
                                           eps, loaders::kMinNormEps, loaders::kMaxNormEps));
    c.norm_eps = static_cast<float>(eps);
  }
  // vocab: stated, or the token list, or the embedding's row count.
  c.vocab = 0;
  RETURN_IF_ERROR(opt_int(f, a + "vocab_size", &c.vocab, false));
  if (c.vocab == 0) {
    if (const GgufValue* toks = f.find("tokenizer.ggml.tokens");
        toks && toks->kind == GgufValue::Kind::kArray && toks->count <= INT32_MAX)
      c.vocab = static_cast<int32_t>(toks->count);
    for (const auto& t : f.tensors())
      if (c.vocab == 0 && t.name == "token_embd.weight" && t.ne.size() == 2 && t.ne[1] <= INT32_MAX)
        c.vocab = static_cast<int32_t>(t.ne[1]);
  }
  c.tied_embeddings = !has_tensor(f, "output.weight");
  RETURN_IF_ERROR(opt_int(f, "tokenizer.ggml.bos_token_id", &c.bos, false));
  RETURN_IF_ERROR(opt_int(f, "tokenizer.ggml.eos_token_id", &c.eos, false));

  if (c.arch == Arch::kDeepseekV3) {
    if (has_tensor(f, "blk.0.attn_q_a.bias") || has_tensor(f, "blk.0.attn_kv_a_mqa.bias"))
      return make_error(ErrorCode::kUnsupported,
                        f.path() + ": deepseek2 with attention biases is not supported");
    RETURN_IF_ERROR(loaders::check_config(c, f.path()));
    return c;
  }
  int32_t experts = 0;
  RETURN_IF_ERROR(opt_int(f, a + "expert_count", &experts, false));
  if (experts > 0 && c.arch == Arch::kQwen3)
    return make_error(ErrorCode::kUnsupported,
                      f.path() + ": " + a + "expert_count on architecture " + arch_name +
                          " (experts only for llama, qwen2moe, qwen3moe)");
  if (experts > 0) {
    c.experts = experts;
    RETURN_IF_ERROR(opt_int(f, a + "expert_used_count", &c.top_k, true));
    if (c.arch == Arch::kLlama) {
      // llama.cpp stores Mixtral as "llama" with experts; its FFN width is the expert's.
      c.arch = Arch::kMixtral;
      c.moe_ffn = c.ffn;
      c.ffn = 0;
      c.norm_topk_prob = true;
    } else {  // qwen2moe, qwen3moe
      RETURN_IF_ERROR(opt_int(f, a + "expert_feed_forward_length", &c.moe_ffn, true));
      if (c.arch == Arch::kQwen2Moe)
        RETURN_IF_ERROR(
            opt_int(f, a + "expert_shared_feed_forward_length", &c.shared_ffn, false));
      c.shared_expert_gate = c.shared_ffn > 0;
      // GGUF does not say unless expert_weights_norm is present: Qwen2MoeConfig's default
      // (false); llama.cpp's qwen3moe graph always renormalizes (Qwen3-MoE checkpoints set
      // norm_topk_prob true).
      c.norm_topk_prob = c.arch == Arch::kQwen3Moe;
      if (f.find(a + "expert_weights_norm")) {
        ASSIGN_OR_RETURN(c.norm_topk_prob, f.get_bool(a + "expert_weights_norm"));
      }
      // GGUF has no mlp_only_layers / decoder_sparse_step: a layer without a router
      // (blk.N.ffn_gate_inp) is a dense one.
      for (int32_t l = 0; l < c.layers; ++l)
        if (!has_tensor(f, "blk." + std::to_string(l) + ".ffn_gate_inp.weight"))
          c.mlp_only_layers.push_back(l);
    }
  } else if (c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe) {
    return make_error(ErrorCode::kBadModel,
                      f.path() + ": " + arch_name + " without " + a + "expert_count");
  }
  c.attention_bias = has_tensor(f, "blk.0.attn_q.bias");
  if ((c.arch == Arch::kLlama || c.qk_norm) && c.attention_bias)
    return make_error(ErrorCode::kUnsupported,
                      f.path() + ": " + arch_name + " with attention biases is not supported");
  RETURN_IF_ERROR(loaders::check_config(c, f.path()));
  return c;
}

// HF shape of a GGUF tensor: its dims reversed.
std::vector<int64_t> hf_shape(const GgufTensorInfo& t) {
  return std::vector<int64_t>(t.ne.rbegin(), t.ne.rend());
}

// transformers' _reverse_permute_weights on a [rows, cols] row-major matrix.
void reverse_permute(HostTensor* t, int64_t n_head) {
  const int64_t rows = t->shape[0], cols = t->shape.size() > 1 ? t->shape[1] : 1;
  const int64_t dim = rows / n_head / 2;
  std::vector<float> out(t->data.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < dim; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t src = h * 2 * dim + i * 2 + j, dst = h * 2 * dim + j * dim + i;
        std::copy_n(t->data.data() + src * cols, cols, out.data() + dst * cols);
      }
  t->data = std::move(out);
}

struct Mapped {
  std::string hf;          // target name; empty for stacked experts
  int permute_heads = 0;   // > 0: reverse-permute rows with this many heads
  bool expand_row = false; // [H] → [1, H]
  std::string expert_fmt;  // stacked experts: HF name with "{}" for the expert index
  int kv_b_part = 0;       // deepseek2 attn_k_b (1) / attn_v_b (2): parts of kv_b_proj
};

// llama.cpp name → HF name, for the architecture of `c`. Unknown names return false.
bool map_name(const ModelConfig& c, const std::string& name, Mapped* m) {
  static const std::regex kBlk(R"(blk\.(\d+)\.(.+))");
  if (name == "token_embd.weight") return m->hf = "model.embed_tokens.weight", true;
  if (name == "output_norm.weight") return m->hf = "model.norm.weight", true;
  if (name == "output.weight") return m->hf = "lm_head.weight", true;
  std::smatch sm;
  if (!std::regex_match(name, sm, kBlk)) return false;
  const std::string p = "model.layers." + sm[1].str() + ".";
  const std::string rest = sm[2].str();
  const bool mixtral = c.arch == Arch::kMixtral;
  const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
  static const std::map<std::string, std::string> kSimple = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
  };
  if (c.arch == Arch::kDeepseekV3) {
    static const std::map<std::string, std::string> kMla = {
        {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
        {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
        {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
        {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
        {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
        {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
        {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
        {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
        {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
    };
    if (auto it = kMla.find(rest); it != kMla.end()) return m->hf = p + it->second, true;
    if (rest == "attn_k_b.weight" || rest == "attn_v_b.weight") {
      m->hf = p + "self_attn.kv_b_proj.weight";
      m->kv_b_part = rest == "attn_k_b.weight" ? 1 : 2;
      return true;
    }
  }
  if (auto it = kSimple.find(rest); it != kSimple.end()) return m->hf = p + it->second, true;
  if (rest == "attn_q.weight" || rest == "attn_k.weight") {
    m->hf = p + (rest == "attn_q.weight" ? "self_attn.q_proj.weight" : "self_attn.k_proj.weight");
    // Only llama.cpp's llama converter permutes Q/K (transformers: LlamaTensorProcessor).
    if (c.arch == Arch::kLlama || c.arch == Arch::kMixtral)
      m->permute_heads = rest == "attn_q.weight" ? c.heads : c.kv_heads;
    return true;
  }
  if (rest == "ffn_gate_inp.weight") return m->hf = moe + "gate.weight", true;
  if (rest == "ffn_gate_inp_shexp.weight") {
    m->hf = p + "mlp.shared_expert_gate.weight";
    m->expand_row = true;
    return true;
  }
  const char* w_gate = mixtral ? "w1.weight" : "gate_proj.weight";
  const char* w_up = mixtral ? "w3.weight" : "up_proj.weight";
  const char* w_down = mixtral ? "w2.weight" : "down_proj.weight";
  if (rest == "ffn_gate_exps.weight") return m->expert_fmt = moe + "experts.{}." + w_gate, true;
  if (rest == "ffn_up_exps.weight") return m->expert_fmt = moe + "experts.{}." + w_up, true;
  if (rest == "ffn_down_exps.weight") return m->expert_fmt = moe + "experts.{}." + w_down, true;
  // Older Mixtral files: one tensor per expert, blk.N.ffn_gate.E.weight.
  static const std::regex kPerExpert(R"(ffn_(gate|up|down)\.(\d+)\.weight)");
  if (std::regex_match(rest, sm, kPerExpert)) {
    const std::string w = sm[1].str() == "gate" ? w_gate : sm[1].str() == "up" ? w_up : w_down;
    return m->hf = moe + "experts." + sm[2].str() + "." + w, true;
  }
  return false;
}

std::string format_expert(const std::string& fmt, int64_t e) {
  std::string s = fmt;
  s.replace(s.find("{}"), 2, std::to_string(e));
  return s;
}

Result<std::shared_ptr<const Tokenizer>> gguf_tokenizer(const GgufFile& f) {
  ASSIGN_OR_RETURN(std::string model, f.get_string("tokenizer.ggml.model"));
  if (model != "gpt2")
    return make_error(ErrorCode::kUnsupported,
                      f.path() + ": tokenizer.ggml.model " + model +
                          " is not supported (byte-level BPE \"gpt2\" only); give token ids");
  BpeSpec spec;
  const GgufValue* toks = f.find("tokenizer.ggml.tokens");
  const GgufValue* merges = f.find("tokenizer.ggml.merges");
  if (!toks || toks->kind != GgufValue::Kind::kArray || toks->count != toks->strings.size())
    return make_error(ErrorCode::kBadModel, f.path() + ": tokenizer.ggml.tokens is missing or "
                                                       "not a string array");
  if (!merges || merges->kind != GgufValue::Kind::kArray || merges->count != merges->strings.size())
    return make_error(ErrorCode::kBadModel, f.path() + ": tokenizer.ggml.merges is missing or "
                                                       "not a string array");
  spec.tokens = toks->strings;
  spec.merges = merges->strings;
  if (const GgufValue* tt = f.find("tokenizer.ggml.token_type")) {
    if (tt->kind != GgufValue::Kind::kArray || tt->ints.size() != spec.tokens.size())
      return make_error(ErrorCode::kBadModel, f.path() + ": tokenizer.ggml.token_type has " +
                                                  std::to_string(tt->ints.size()) +
                                                  " entries for " +
                                                  std::to_string(spec.tokens.size()) + " tokens");
    for (int64_t t : tt->ints) spec.token_types.push_back(static_cast<int32_t>(t));
  }
  spec.pre = "gpt2";
  if (f.find("tokenizer.ggml.pre")) {
    ASSIGN_OR_RETURN(spec.pre, f.get_string("tokenizer.ggml.pre"));
  }
  RETURN_IF_ERROR(opt_int(f, "tokenizer.ggml.bos_token_id", &spec.bos, false));
  RETURN_IF_ERROR(opt_int(f, "tokenizer.ggml.eos_token_id", &spec.eos, false));
  if (f.find("tokenizer.ggml.add_bos_token")) {
    ASSIGN_OR_RETURN(spec.add_bos, f.get_bool("tokenizer.ggml.add_bos_token"));
  }
  if (f.find("tokenizer.chat_template")) {
    ASSIGN_OR_RETURN(spec.chat_template, f.get_string("tokenizer.chat_template"));
  }
  // Control (3) and user-defined (4) tokens are matched whole in text, as llama.cpp and
  // transformers' GGUF tokenizer do.
  for (size_t i = 0; i < spec.token_types.size(); ++i)
    if (spec.token_types[i] == 3 || spec.token_types[i] == 4)
      spec.special_tokens.push_back(spec.tokens[i]);
  return make_bpe_tokenizer(std::move(spec));
}

// The row order of transformers' _reverse_permute_weights: HF row dst comes from GGUF row
// src (see reverse_permute).
std::vector<int64_t> reverse_permute_rows(int64_t rows, int64_t n_head) {
  std::vector<int64_t> src_of(static_cast<size_t>(rows));
  const int64_t dim = rows / n_head / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < dim; ++i)
      for (int64_t j = 0; j < 2; ++j) src_of[h * 2 * dim + j * dim + i] = h * 2 * dim + i * 2 + j;
  return src_of;
}

// Types the engine computes with as stored (keep_quantized): the ggml block formats, and
// F16 / BF16, which its GEMM widens exactly (PackedWeight::pack_rows16).
bool kept_as_stored(uint32_t type, int64_t cols) {
  int64_t be = 0, bb = 0;
  if (type == static_cast<uint32_t>(GgmlType::kF16) ||
      type == static_cast<uint32_t>(GgmlType::kBF16))
    return true;
  return kernels::ggml_quant_block(type, &be, &bb) && cols % be == 0;
}

// A quantized or 16-bit 2-D (or stacked 3-D) weight kept as stored: row pointers into the
// mapping.
std::shared_ptr<const StoredTensor> stored_rows(const GgufTensorInfo& t, const uint8_t* data,
                                                int64_t first_row, int64_t rows, int64_t cols,
                                                const std::vector<int64_t>* order) {
  int64_t be = 1, bb = 0;
  ggml_type_layout(t.type, &be, &bb);
  const uint64_t row_bytes = static_cast<uint64_t>(cols / be * bb);
  auto st = std::make_shared<StoredTensor>();
  st->ggml_type = t.type;
  st->first = data + static_cast<uint64_t>(first_row) * row_bytes;
  st->bytes = static_cast<uint64_t>(rows) * row_bytes;
  st->rows.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    st->rows[r] = st->first + static_cast<uint64_t>(order ? (*order)[r] : r) * row_bytes;
  return st;
}

// kv_b_proj [heads × (nope + v), kv_lora] from attn_k_b ([heads, kv_lora, nope]: W_UK
// transposed per head) and attn_v_b ([heads, v, kv_lora]).
Result<HostTensor> join_kv_b(const ModelConfig& c, const std::string& name,
                             const std::array<HostTensor, 2>& parts, const std::string& path) {
  const int64_t nh = c.heads, kl = c.kv_lora_rank, nope = c.qk_nope_dim, vd = c.v_head_dim;
  const std::vector<int64_t> want_k{nh, kl, nope}, want_v{nh, vd, kl};
  if (parts[0].shape != want_k || parts[1].shape != want_v)
    return make_error(ErrorCode::kShapeMismatch,
                      path + ": " + name + " parts attn_k_b / attn_v_b have shapes " +
                          loaders::shape_string(parts[0].shape) + " / " +
                          loaders::shape_string(parts[1].shape) + ", expected " +
                          loaders::shape_string(want_k) + " / " + loaders::shape_string(want_v));
  HostTensor out;
  out.shape = {nh * (nope + vd), kl};
  out.data.resize(static_cast<size_t>(out.numel()));
  for (int64_t h = 0; h < nh; ++h) {
    float* base = out.data.data() + h * (nope + vd) * kl;
    const float* kb = parts[0].data.data() + h * kl * nope;
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t j = 0; j < kl; ++j) base[i * kl + j] = kb[j * nope + i];
    std::copy_n(parts[1].data.data() + h * vd * kl, vd * kl, base + nope * kl);
  }
  return out;
}

}  // namespace

Result<LoadedModel> load_gguf(const std::string& path, const ModelLoadOptions& options) {
  ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  ASSIGN_OR_RETURN(std::string arch_name, f.get_string("general.architecture"));
  if (arch_name != "llama" && arch_name != "qwen2moe" && arch_name != "qwen3" &&
      arch_name != "qwen3moe" && arch_name != "deepseek2")
    return make_error(ErrorCode::kUnsupported,
                      path + ": general.architecture " + arch_name +
                          " is not supported (llama, qwen2moe, qwen3, qwen3moe, deepseek2)");
  ASSIGN_OR_RETURN(ModelConfig config, gguf_config(f, arch_name));

  LoadedModel model;
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : f.tensors()) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->name < b->name; });
  loaders::WeightHasher hasher;
  for (const GgufTensorInfo* t : order) {
    hasher.add(t->name, ggml_type_name(t->type), t->ne, f.tensor_data(*t), t->bytes);
    // Kept tensors are read again only when the engine packs them: give the pages back.
    if (options.keep_quantized) loaders::release_pages(f.tensor_data(*t), t->bytes);
  }

  size_t bf16 = 0, other = 0;
  std::map<std::string, std::array<HostTensor, 2>> kv_b_parts;  // deepseek2 attn_k_b, attn_v_b
  for (const GgufTensorInfo* t : order) {
    const std::string where = path + ": tensor " + t->name;
    Mapped m;
    if (!map_name(config, t->name, &m))
      return make_error(ErrorCode::kUnsupported,
                        where + " " + loaders::shape_string(hf_shape(*t)) +
                            " has no Hugging Face counterpart here (a feature this engine does "
                            "not implement)");
    HostTensor ht;
    ht.shape = hf_shape(*t);
    if (options.keep_quantized && (t->ne.size() == 2 || t->ne.size() == 3) && !m.expand_row &&
        m.kv_b_part == 0 &&
        kept_as_stored(t->type, t->ne[0])) {
      (t->type == static_cast<uint32_t>(GgmlType::kBF16) ? bf16 : other)++;
      const int64_t cols = ht.shape.back();
      const uint8_t* data = f.tensor_data(*t);
      if (!m.expert_fmt.empty()) {
        if (ht.shape.size() != 3 || ht.shape[0] != config.experts)
          return make_error(ErrorCode::kShapeMismatch,
                            where + ": stacked experts have shape " +
                                loaders::shape_string(ht.shape) + ", expected [" +
                                std::to_string(config.experts) + ", out, in]");
        for (int64_t e = 0; e < ht.shape[0]; ++e) {
          HostTensor x{{ht.shape[1], ht.shape[2]}, {}, nullptr};
          x.stored = stored_rows(*t, data, e * ht.shape[1], ht.shape[1], cols, nullptr);
          model.tensors[format_expert(m.expert_fmt, e)] = std::move(x);
        }
        continue;
      }
      if (ht.shape.size() != 2)
        return make_error(ErrorCode::kShapeMismatch,
                          where + ": shape " + loaders::shape_string(ht.shape) + " is not 2-D");
      std::vector<int64_t> perm;
      if (m.permute_heads > 0) {
        if (ht.shape[0] % (2 * int64_t{m.permute_heads}) != 0)
          return make_error(ErrorCode::kShapeMismatch,
                            where + ": shape " + loaders::shape_string(ht.shape) +
                                " cannot be split into " + std::to_string(m.permute_heads) +
                                " heads of even size");
        perm = reverse_permute_rows(ht.shape[0], m.permute_heads);
      }
      ht.stored = stored_rows(*t, data, 0, ht.shape[0], cols, perm.empty() ? nullptr : &perm);
      if (!model.tensors.emplace(m.hf, std::move(ht)).second)
        return make_error(ErrorCode::kBadModel, where + ": maps to " + m.hf + " twice");
      continue;
    }
    const int64_t n = ht.numel();
    ht.data.resize(static_cast<size_t>(n));
    Status s = ggml_dequantize(t->type, f.tensor_data(*t), t->bytes, n, ht.data.data());
    if (!s.ok()) return s.with_context(where);
    if (t->ne.size() >= 2) (t->type == static_cast<uint32_t>(GgmlType::kBF16) ? bf16 : other)++;
    if (m.permute_heads > 0) {
      if (ht.shape.size() != 2 || ht.shape[0] % (2 * int64_t{m.permute_heads}) != 0)
        return make_error(ErrorCode::kShapeMismatch,
                          where + ": shape " + loaders::shape_string(ht.shape) +
                              " cannot be split into " + std::to_string(m.permute_heads) +
                              " heads of even size");
      reverse_permute(&ht, m.permute_heads);
    }
    if (m.expand_row) ht.shape.insert(ht.shape.begin(), 1);
    if (m.kv_b_part > 0) {
      HostTensor& slot = kv_b_parts[m.hf][m.kv_b_part - 1];
      if (!slot.shape.empty())
        return make_error(ErrorCode::kBadModel, where + ": appears twice");
      slot = std::move(ht);
      continue;
    }
    if (!m.expert_fmt.empty()) {
      if (ht.shape.size() != 3 || ht.shape[0] != config.experts)
        return make_error(ErrorCode::kShapeMismatch,
                          where + ": stacked experts have shape " +
                              loaders::shape_string(ht.shape) + ", expected [" +
                              std::to_string(config.experts) + ", out, in]");
      const int64_t per = ht.shape[1] * ht.shape[2];
      for (int64_t e = 0; e < ht.shape[0]; ++e) {
        HostTensor x{{ht.shape[1], ht.shape[2]}, {}, nullptr};
        x.data.assign(ht.data.begin() + e * per, ht.data.begin() + (e + 1) * per);
        model.tensors[format_expert(m.expert_fmt, e)] = std::move(x);
      }
      continue;
    }
    if (!model.tensors.emplace(m.hf, std::move(ht)).second)
      return make_error(ErrorCode::kBadModel, where + ": maps to " + m.hf + " twice");
  }
  for (auto& [name, parts] : kv_b_parts) {
    ASSIGN_OR_RETURN(HostTensor kv_b, join_kv_b(config, name, parts, path));
    if (!model.tensors.emplace(name, std::move(kv_b)).second)
      return make_error(ErrorCode::kBadModel,
                        path + ": " + name + " given both whole (attn_kv_b) and split");
  }
  RETURN_IF_ERROR(loaders::check_tensors(config, model.tensors, path));
  if (bf16 > 0 && other == 0) config.weight_type = kernels::WeightType::kBF16;

  model.config = config;
  model.weight_hash = hasher.digest();
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".gguf") == 0)
    base.resize(base.size() - 5);
  model.identity = "gguf:" + base;
  model.source = path;
  auto tok = gguf_tokenizer(f);
  if (tok.ok()) {
    model.tokenizer = std::move(tok).value();
  } else {
    model.tokenizer_note = tok.status().to_string();
  }
  if (options.keep_quantized) model.storage = std::make_shared<GgufFile>(std::move(f));
  return model;
}

}  // namespace llmrr
