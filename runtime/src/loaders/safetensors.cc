// Hugging Face safetensors + config.json.
//
// File layout (https://github.com/huggingface/safetensors): u64 little-endian header size N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data; offsets are relative to the end of the header. Every number in the header
// is checked against the file size before anything is allocated from it.
#include "llmrr/runtime/safetensors.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "llmrr/runtime/tokenizers.h"
#include "llmrr/safeio/json.h"
#include "loaders/loader_util.h"

namespace llmrr {
namespace {

using nlohmann::json;
using loaders::MappedFile;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;   // safetensors' own limit is 100 MB
constexpr uint64_t kMaxConfigBytes = 4u << 20;

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  std::string file;
};

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2")
    return 1;
  return 0;
}

Result<json> parse_json(const std::string& text, const std::string& where) {
  return safeio::parse_json(text, where, ErrorCode::kBadModel);
}

// Parses one .safetensors file's header; entries point into `file`'s mapping.
Status parse_file(const MappedFile& file, std::vector<Entry>* out) {
  const std::string& path = file.path();
  if (file.size() < 8)
    return make_error(ErrorCode::kTruncated, path + ": " + std::to_string(file.size()) +
                                                 " bytes, too short for a safetensors header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file.data()[i];
  if (n > kMaxHeaderBytes)
    return make_error(ErrorCode::kBadModel, path + ": header size " + std::to_string(n) +
                                                " over the limit of " +
                                                std::to_string(kMaxHeaderBytes));
  if (n > file.size() - 8)
    return make_error(ErrorCode::kTruncated, path + ": header of " + std::to_string(n) +
                                                 " bytes runs past the end of the file (" +
                                                 std::to_string(file.size()) + " bytes)");
  const uint64_t data_start = 8 + n, data_size = file.size() - data_start;
  ASSIGN_OR_RETURN(json header,
                   parse_json(std::string(reinterpret_cast<const char*>(file.data() + 8), n),
                              path + " header"));
  if (!header.is_object()) {
    return make_error(ErrorCode::kBadModel, path + ": the header is " + safeio::type_name(header) +
                                                ", expected a JSON object");
  }
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path + ": tensor " + it.key();
    const json& v = it.value();
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
        !v.contains("shape") || !v["shape"].is_array() || !v.contains("data_offsets") ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      return make_error(ErrorCode::kBadModel,
                        where + ": entry needs dtype (string), shape (array) and data_offsets "
                                "([begin, end])");
    Entry e;
    e.name = it.key();
    e.file = path;
    e.dtype = v["dtype"].get<std::string>();
    const size_t item = dtype_size(e.dtype);
    if (item == 0)
      return make_error(ErrorCode::kBadModel,
                        where + ": unknown dtype " + e.dtype +
                            ", expected F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, "
                            "I8, U64, U32, U16, U8 or BOOL");
    uint64_t numel = 1;
    if (v["shape"].size() > 8)
      return make_error(ErrorCode::kBadModel, where + ": " + std::to_string(v["shape"].size()) +
                                                  " dimensions (at most 8)");
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned())
        return make_error(ErrorCode::kBadModel, where + ": shape entries must be non-negative "
                                                        "integers, found " + safeio::dump_short(d));
      uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 40) || loaders::mul_overflows(numel, dim, &numel))
        return make_error(ErrorCode::kBadModel, where + ": shape " + safeio::dump_short(v["shape"]) +
                                                    " overflows");
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return make_error(ErrorCode::kBadModel, where + ": data_offsets must be non-negative "
                                                      "integers, found " + safeio::dump_short(off));
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    uint64_t bytes = 0;
    if (loaders::mul_overflows(numel, item, &bytes) || begin > end || end - begin != bytes)
      return make_error(ErrorCode::kBadModel,
                        where + ": data_offsets " + safeio::dump_short(off) + " span " +
                            std::to_string(end >= begin ? end - begin : 0) + " bytes, but " +
                            e.dtype + " " + safeio::dump_short(v["shape"]) + " needs " +
                            std::to_string(numel * item));
    if (end > data_size)
      return make_error(ErrorCode::kTruncated,
                        where + ": data_offsets " + safeio::dump_short(off) + " run past the end of the data (" +
                            std::to_string(data_size) + " bytes after the header)");
    e.data = file.data() + data_start + begin;
    e.bytes = bytes;
    out->push_back(std::move(e));
  }
  return Status::Ok();
}

// Widens a stored tensor to fp32 (F32, F16, BF16 exactly). Other dtypes are unsupported.
Result<HostTensor> to_host(const Entry& e) {
  HostTensor t;
  t.shape = e.shape;
  const size_t n = e.bytes / std::max<size_t>(dtype_size(e.dtype), 1);
  if (e.dtype == "F32") {
    t.data.resize(n);
    std::memcpy(t.data.data(), e.data, n * 4);
  } else if (e.dtype == "F16" || e.dtype == "BF16") {
    t.data.resize(n);
    const bool bf = e.dtype == "BF16";
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = static_cast<uint16_t>(e.data[2 * i] | (e.data[2 * i + 1] << 8));
      t.data[i] = bf ? loaders::bf16_to_float(h) : loaders::half_to_float(h);
    }
  } else {
    return make_error(ErrorCode::kUnsupported, e.file + ": tensor " + e.name + " has dtype " +
                                                   e.dtype + " (supported: F32, F16, BF16)");
  }
  return t;
}

// --- config.json -------------------------------------------------------------------------

class ConfigReader {
 public:
  ConfigReader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  Status int_field(const char* key, int32_t* out, bool required) {
    if (!j_.contains(key) || j_[key].is_null()) {
      if (required) return missing(key);
      return Status::Ok();
    }
    const json& v = j_[key];
    if (!v.is_number_integer())
      return make_error(ErrorCode::kBadModel, where_ + ": " + key + " must be an integer, found " +
                                                  safeio::dump_short(v));
    if (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                               : v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      return make_error(ErrorCode::kBadModel, where_ + ": " + key + " is " +
                                                  safeio::dump_short(v) +
                                                  ", expected an integer below 2^31");
    *out = static_cast<int32_t>(v.get<int64_t>());
    return Status::Ok();
  }
  Status num_field(const char* key, double* out, bool required) {
    if (!j_.contains(key) || j_[key].is_null()) return required ? missing(key) : Status::Ok();
    if (!j_[key].is_number())
      return make_error(ErrorCode::kBadModel,
                        where_ + ": " + key + " must be a number, found " + safeio::dump_short(j_[key]));
    *out = j_[key].get<double>();
    return Status::Ok();
  }
  Status bool_field(const char* key, bool* out) {
    if (!j_.contains(key) || j_[key].is_null()) return Status::Ok();
    if (!j_[key].is_boolean())
      return make_error(ErrorCode::kBadModel,
                        where_ + ": " + key + " must be true or false, found " + safeio::dump_short(j_[key]));
    *out = j_[key].get<bool>();
    return Status::Ok();
  }
  // bos/eos: an integer, or a list whose first entry is used.
  Status token_id(const char* key, int32_t* out) {
    if (!j_.contains(key) || j_[key].is_null()) return Status::Ok();
    const json& v = j_[key];
    const json& x = v.is_array() && !v.empty() ? v[0] : v;
    if (!x.is_number_integer())
      return make_error(ErrorCode::kBadModel,
                        where_ + ": " + key + " must be an integer id, found " + safeio::dump_short(v));
    *out = static_cast<int32_t>(x.get<int64_t>());
    return Status::Ok();
  }
  bool truthy(const char* key) const {
    return j_.contains(key) && !j_[key].is_null() && !(j_[key].is_boolean() && !j_[key].get<bool>());
  }

 private:
  Status missing(const char* key) {
    return make_error(ErrorCode::kBadModel, where_ + ": required field " + key + " is missing");
  }
  const json& j_;
  std::string where_;
};

// DeepSeek-V3: MLA and the noaux_tc router. Keys the engine does not implement are refused
// by name (exit 2) rather than ignored.
Status parse_deepseek_fields(const json& j, const std::string& where, ModelConfig* out) {
  ModelConfig& c = *out;
  ConfigReader r(j, where);
  auto unsupported = [&](const std::string& what) {
    return make_error(ErrorCode::kUnsupported, where + ": " + what);
  };
  c.mla = true;
  c.q_lora_rank = 0;  // null: q_proj
  RETURN_IF_ERROR(r.int_field("q_lora_rank", &c.q_lora_rank, false));
  RETURN_IF_ERROR(r.int_field("kv_lora_rank", &c.kv_lora_rank, true));
  RETURN_IF_ERROR(r.int_field("qk_nope_head_dim", &c.qk_nope_dim, true));
  RETURN_IF_ERROR(r.int_field("qk_rope_head_dim", &c.qk_rope_dim, true));
  RETURN_IF_ERROR(r.int_field("v_head_dim", &c.v_head_dim, true));
  c.head_dim = c.qk_rope_dim;  // the RoPE width (DeepseekV3Config sets head_dim so)
  c.rope_interleave = true;     // DeepseekV3Config's default
  RETURN_IF_ERROR(r.bool_field("rope_interleave", &c.rope_interleave));
  if (c.q_lora_rank < 0 || c.kv_lora_rank <= 0 || c.qk_nope_dim <= 0 || c.qk_rope_dim <= 0 ||
      c.qk_rope_dim % 2 != 0 || c.v_head_dim <= 0 || c.q_lora_rank > (1 << 20) ||
      c.kv_lora_rank > (1 << 20) || c.qk_nope_dim > 4096 || c.qk_rope_dim > 4096 ||
      c.v_head_dim > 4096)
    return make_error(ErrorCode::kBadModel,
                      where + ": MLA sizes out of range (q_lora_rank " +
                          std::to_string(c.q_lora_rank) + ", kv_lora_rank " +
                          std::to_string(c.kv_lora_rank) + ", qk_nope_head_dim " +
                          std::to_string(c.qk_nope_dim) + ", qk_rope_head_dim " +
                          std::to_string(c.qk_rope_dim) + " (even), v_head_dim " +
                          std::to_string(c.v_head_dim) + ")");
  if (j.contains("scoring_func") && j["scoring_func"] != "sigmoid")
    return unsupported("scoring_func " + safeio::dump_short(j["scoring_func"]) +
                       " is not supported (only \"sigmoid\")");
  if (j.contains("topk_method") && j["topk_method"] != "noaux_tc")
    return unsupported("topk_method " + safeio::dump_short(j["topk_method"]) +
                       " is not supported (only \"noaux_tc\")");
  int32_t freq = 1;
  RETURN_IF_ERROR(r.int_field("moe_layer_freq", &freq, false));
  if (freq != 1)
    return unsupported("moe_layer_freq " + std::to_string(freq) + " is not supported (only 1)");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    return unsupported("hidden_act " + safeio::dump_short(j["hidden_act"]) + " (only silu)");
  RETURN_IF_ERROR(r.int_field("n_routed_experts", &c.experts, true));
  RETURN_IF_ERROR(r.int_field("num_experts_per_tok", &c.top_k, true));
  RETURN_IF_ERROR(r.int_field("moe_intermediate_size", &c.moe_ffn, true));
  int32_t shared = 0, first_dense = 0;
  RETURN_IF_ERROR(r.int_field("n_shared_experts", &shared, false));
  if (shared < 0 || shared > 4096)
    return make_error(ErrorCode::kBadModel,
                      where + ": n_shared_experts " + std::to_string(shared) + " out of range");
  c.shared_ffn = shared * c.moe_ffn;
  c.shared_expert_gate = false;
  RETURN_IF_ERROR(r.int_field("first_k_dense_replace", &first_dense, false));
  if (first_dense < 0 || first_dense > c.layers)
    return make_error(ErrorCode::kBadModel, where + ": first_k_dense_replace " +
                                                std::to_string(first_dense) + " not in 0.." +
                                                std::to_string(c.layers));
  for (int32_t l = 0; l < first_dense; ++l) c.mlp_only_layers.push_back(l);
  c.norm_topk_prob = true;
  RETURN_IF_ERROR(r.bool_field("norm_topk_prob", &c.norm_topk_prob));
  c.scoring = RouterScoring::kSigmoid;
  c.router_bias = true;
  c.n_group = 1;
  c.topk_group = 1;
  RETURN_IF_ERROR(r.int_field("n_group", &c.n_group, false));
  RETURN_IF_ERROR(r.int_field("topk_group", &c.topk_group, false));
  if (c.n_group < 1 || c.topk_group < 1 || c.topk_group > c.n_group || c.experts <= 0 ||
      c.experts % c.n_group != 0 || (c.n_group > 1 && c.experts / c.n_group < 2) ||
      int64_t{c.topk_group} * (c.experts / c.n_group) < c.top_k)
    return make_error(ErrorCode::kBadModel,
                      where + ": n_group " + std::to_string(c.n_group) + " / topk_group " +
                          std::to_string(c.topk_group) + " do not fit n_routed_experts " +
                          std::to_string(c.experts) + " and num_experts_per_tok " +
                          std::to_string(c.top_k) +
                          " (groups must divide the experts, hold at least 2, and the chosen "
                          "groups at least num_experts_per_tok experts)");
  double scale = 1.0;
  RETURN_IF_ERROR(r.num_field("routed_scaling_factor", &scale, false));
  if (!(scale > 0) || scale > 1e6)
    return make_error(ErrorCode::kBadModel, where + ": routed_scaling_factor " +
                                                std::to_string(scale) + " must be positive");
  c.routed_scaling = static_cast<float>(scale);
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> parse_hf_config(const std::string& text, const std::string& where) {
  ASSIGN_OR_RETURN(json j, parse_json(text, where));
  if (!j.is_object()) {
    return make_error(ErrorCode::kBadModel,
                      where + ": the top level is " + safeio::type_name(j) +
                          ", expected a JSON object");
  }
  std::string arch_name;
  if (j.contains("architectures") && !j["architectures"].is_null() &&
      !(j["architectures"].is_array() &&
        std::all_of(j["architectures"].begin(), j["architectures"].end(),
                    [](const json& a) { return a.is_string(); })))
    return make_error(ErrorCode::kBadModel, where + ": architectures is " +
                                                safeio::dump_short(j["architectures"]) +
                                                ", expected a list of names");
  if (j.contains("architectures") && j["architectures"].is_array() &&
      !j["architectures"].empty() && j["architectures"][0].is_string())
    arch_name = j["architectures"][0].get<std::string>();
  std::string model_type =
      j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>()
                                                              : "";
  ModelConfig c;
  if (arch_name == "LlamaForCausalLM" || (arch_name.empty() && model_type == "llama")) {
    c.arch = Arch::kLlama;
  } else if (arch_name == "MixtralForCausalLM" || (arch_name.empty() && model_type == "mixtral")) {
    c.arch = Arch::kMixtral;
  } else if (arch_name == "Qwen2MoeForCausalLM" ||
             (arch_name.empty() && model_type == "qwen2_moe")) {
    c.arch = Arch::kQwen2Moe;
  } else if (arch_name == "Qwen3ForCausalLM" || (arch_name.empty() && model_type == "qwen3")) {
    c.arch = Arch::kQwen3;
  } else if (arch_name == "Qwen3MoeForCausalLM" ||
             (arch_name.empty() && model_type == "qwen3_moe")) {
    c.arch = Arch::kQwen3Moe;
  } else if (arch_name == "DeepseekV3ForCausalLM" ||
             (arch_name.empty() && model_type == "deepseek_v3")) {
    c.arch = Arch::kDeepseekV3;
  } else {
    return make_error(ErrorCode::kUnsupported,
                      where + ": architecture " +
                          (arch_name.empty() ? "(model_type " + model_type + ")" : arch_name) +
                          " is not supported (LlamaForCausalLM, MixtralForCausalLM, "
                          "Qwen2MoeForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                          "DeepseekV3ForCausalLM)");
  }
  const bool qwen3 = c.arch == Arch::kQwen3 || c.arch == Arch::kQwen3Moe;
  c.qk_norm = qwen3;
  ConfigReader r(j, where);
  RETURN_IF_ERROR(r.int_field("vocab_size", &c.vocab, true));
  RETURN_IF_ERROR(r.int_field("hidden_size", &c.hidden, true));
  RETURN_IF_ERROR(r.int_field("num_hidden_layers", &c.layers, true));
  RETURN_IF_ERROR(r.int_field("num_attention_heads", &c.heads, true));
  c.kv_heads = c.heads;
  RETURN_IF_ERROR(r.int_field("num_key_value_heads", &c.kv_heads, false));
  c.head_dim = c.heads > 0 ? c.hidden / c.heads : 0;
  RETURN_IF_ERROR(r.int_field("head_dim", &c.head_dim, false));
  RETURN_IF_ERROR(r.int_field("intermediate_size", &c.ffn,
                              c.arch != Arch::kMixtral && c.arch != Arch::kQwen3Moe));
  // transformers ≥ 5 nests rope_theta in rope_parameters; older configs have it on top.
  c.rope_theta = 10000.0;
  RETURN_IF_ERROR(r.num_field("rope_theta", &c.rope_theta, false));
  // Each value checked as it is read, so the message names the key that holds it.
  auto check_theta = [&](const std::string& key) {
    return loaders::check_setting(where, key, c.rope_theta, loaders::kMinRopeTheta,
                                  loaders::kMaxRopeTheta);
  };
  RETURN_IF_ERROR(check_theta("rope_theta"));
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const json& rp = j[key];
    if (!rp.is_object())
      return make_error(ErrorCode::kBadModel, where + ": " + key + " must be an object");
    std::string type = "default", type_key = "rope_type";
    for (const char* tk : {"rope_type", "type"})
      if (rp.contains(tk) && rp[tk].is_string()) type = rp[tk].get<std::string>(), type_key = tk;
    if (type != "default")
      return make_error(ErrorCode::kUnsupported,
                        where + ": " + key + "." + type_key + " " + type +
                            " is not supported (only \"default\")");
    if (rp.contains("rope_theta")) {
      ConfigReader rr(rp, where + " " + key);
      RETURN_IF_ERROR(rr.num_field("rope_theta", &c.rope_theta, false));
      RETURN_IF_ERROR(check_theta(std::string(key) + ".rope_theta"));
    }
  }
  double eps = 1e-6;
  RETURN_IF_ERROR(r.num_field("rms_norm_eps", &eps, false));
  RETURN_IF_ERROR(loaders::check_setting(where, "rms_norm_eps", eps, loaders::kMinNormEps,
                                         loaders::kMaxNormEps));
  c.norm_eps = static_cast<float>(eps);
  c.tied_embeddings = false;
  RETURN_IF_ERROR(r.bool_field("tie_word_embeddings", &c.tied_embeddings));
  RETURN_IF_ERROR(r.int_field("max_position_embeddings", &c.max_positions, false));
  RETURN_IF_ERROR(r.token_id("bos_token_id", &c.bos));
  RETURN_IF_ERROR(r.token_id("eos_token_id", &c.eos));

  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    return make_error(ErrorCode::kUnsupported,
                      where + ": hidden_act " + safeio::dump_short(j["hidden_act"]) + " (only silu)");
  if (r.truthy("mlp_bias"))
    return make_error(ErrorCode::kUnsupported, where + ": mlp_bias is not supported");
  if ((c.arch == Arch::kLlama || qwen3 || c.arch == Arch::kDeepseekV3) &&
      r.truthy("attention_bias"))
    return make_error(ErrorCode::kUnsupported,
                      where + ": attention_bias is not supported for " + llmrr::arch_name(c.arch));
  // Qwen3 configs may mark layers as sliding-window attention (layer_types or
  // use_sliding_window); only full attention is implemented.
  if (qwen3 && r.truthy("use_sliding_window"))
    return make_error(ErrorCode::kUnsupported,
                      where + ": use_sliding_window is not supported for " + llmrr::arch_name(c.arch) +
                          " (only full attention)");
  if (j.contains("layer_types") && j["layer_types"].is_array())
    for (const json& t : j["layer_types"])
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        return make_error(ErrorCode::kUnsupported,
                          where + ": layer_types entry " + t.dump() +
                              " is not supported (only \"full_attention\")");
  // A sliding window changes nothing while sequences fit inside it: cap the positions there
  // rather than compute something else past it.
  if (c.arch == Arch::kMixtral ||
      (c.arch == Arch::kQwen2Moe && j.contains("use_sliding_window") &&
       j["use_sliding_window"] == true)) {
    int32_t window = 0;
    RETURN_IF_ERROR(r.int_field("sliding_window", &window, false));
    if (window > 0 && window < c.max_positions) c.max_positions = window;
  }

  if (c.arch == Arch::kMixtral) {
    RETURN_IF_ERROR(r.int_field("num_local_experts", &c.experts, true));
    RETURN_IF_ERROR(r.int_field("num_experts_per_tok", &c.top_k, true));
    c.moe_ffn = c.ffn;
    c.ffn = 0;
    c.norm_topk_prob = true;
  } else if (c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe) {
    const bool q3 = c.arch == Arch::kQwen3Moe;
    // Hub configs say num_experts; transformers 5 saves Qwen3-MoE's as num_local_experts.
    const bool local = q3 && !j.contains("num_experts") && j.contains("num_local_experts");
    RETURN_IF_ERROR(r.int_field(local ? "num_local_experts" : "num_experts", &c.experts, true));
    RETURN_IF_ERROR(r.int_field("num_experts_per_tok", &c.top_k, true));
    RETURN_IF_ERROR(r.int_field("moe_intermediate_size", &c.moe_ffn, true));
    if (!q3) {
      RETURN_IF_ERROR(r.int_field("shared_expert_intermediate_size", &c.shared_ffn, false));
    } else if (r.truthy("shared_expert_intermediate_size")) {
      return make_error(ErrorCode::kUnsupported,
                        where + ": shared_expert_intermediate_size is not part of Qwen3-MoE");
    }
    c.shared_expert_gate = c.shared_ffn > 0;
    c.norm_topk_prob = false;  // Qwen2MoeConfig's and Qwen3MoeConfig's default
    RETURN_IF_ERROR(r.bool_field("norm_topk_prob", &c.norm_topk_prob));
    RETURN_IF_ERROR(r.int_field("decoder_sparse_step", &c.decoder_sparse_step, false));
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      if (!j["mlp_only_layers"].is_array())
        return make_error(ErrorCode::kBadModel, where + ": mlp_only_layers must be a list");
      for (const json& x : j["mlp_only_layers"]) {
        if (!x.is_number_integer())
          return make_error(ErrorCode::kBadModel, where + ": mlp_only_layers entries must be "
                                                          "integers");
        c.mlp_only_layers.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
    }
    if (!q3) {
      c.attention_bias = true;  // Qwen2MoeConfig.qkv_bias defaults to true
      RETURN_IF_ERROR(r.bool_field("qkv_bias", &c.attention_bias));
    }
    if (c.experts == 0) c.decoder_sparse_step = 1;
  }
  if (c.arch == Arch::kDeepseekV3) RETURN_IF_ERROR(parse_deepseek_fields(j, where, &c));
  if (c.experts == 0) c.top_k = 0;
  RETURN_IF_ERROR(loaders::check_config(c, where));
  return c;
}

namespace {

// "model.layers.N.<...>" with N >= layers.
bool is_extra_layer(const std::string& name, int32_t layers) {
  static const std::string kPrefix = "model.layers.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size() || dot - kPrefix.size() > 6) return false;
  int64_t n = 0;
  for (size_t i = kPrefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    n = n * 10 + (name[i] - '0');
  }
  return n >= layers;
}

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// transformers ≥ 5 keeps experts fused in memory (mlp.experts.gate_up_proj [E, 2I, H],
// mlp.experts.down_proj [E, H, I]); checkpoints on the Hub use one tensor per expert. A
// fused tensor, if a checkpoint has one, is split back into the per-expert names.
Status unfuse_experts(const ModelConfig& c, std::map<std::string, HostTensor>* tensors,
                      const std::string& where) {
  if (!c.is_moe()) return Status::Ok();
  for (int32_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto gu = tensors->find(p + "mlp.experts.gate_up_proj");
    auto dn = tensors->find(p + "mlp.experts.down_proj");
    if (gu == tensors->end() && dn == tensors->end()) continue;
    if (gu == tensors->end() || dn == tensors->end())
      return make_error(ErrorCode::kMissingTensor,
                        where + ": layer " + std::to_string(l) +
                            " has only one of mlp.experts.gate_up_proj / down_proj");
    const int64_t e = c.experts, i = c.moe_ffn, h = c.hidden;
    if (gu->second.shape != std::vector<int64_t>{e, 2 * i, h} ||
        dn->second.shape != std::vector<int64_t>{e, h, i})
      return make_error(ErrorCode::kShapeMismatch,
                        where + ": fused experts of layer " + std::to_string(l) + " have shapes " +
                            loaders::shape_string(gu->second.shape) + " / " +
                            loaders::shape_string(dn->second.shape) + ", expected [" +
                            std::to_string(e) + ", " + std::to_string(2 * i) + ", " +
                            std::to_string(h) + "] / [" + std::to_string(e) + ", " +
                            std::to_string(h) + ", " + std::to_string(i) + "]");
    const bool mixtral = c.arch == Arch::kMixtral;
    const std::string base = p + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.");
    for (int64_t x = 0; x < e; ++x) {
      const std::string ep = base + std::to_string(x) + ".";
      HostTensor g{{i, h}, {}, nullptr}, u{{i, h}, {}, nullptr}, d{{h, i}, {}, nullptr};
      const float* src = gu->second.data.data() + x * 2 * i * h;
      g.data.assign(src, src + i * h);
      u.data.assign(src + i * h, src + 2 * i * h);
      const float* ds = dn->second.data.data() + x * h * i;
      d.data.assign(ds, ds + h * i);
      (*tensors)[ep + (mixtral ? "w1.weight" : "gate_proj.weight")] = std::move(g);
      (*tensors)[ep + (mixtral ? "w3.weight" : "up_proj.weight")] = std::move(u);
      (*tensors)[ep + (mixtral ? "w2.weight" : "down_proj.weight")] = std::move(d);
    }
    tensors->erase(p + "mlp.experts.gate_up_proj");
    tensors->erase(p + "mlp.experts.down_proj");
    if (mixtral) {
      auto router = tensors->find(p + "mlp.gate.weight");
      if (router != tensors->end()) {
        (*tensors)[p + "block_sparse_moe.gate.weight"] = std::move(router->second);
        tensors->erase(p + "mlp.gate.weight");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<LoadedModel> load_safetensors_dir(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string config_path = dir + "/config.json";
  if (!is_file(config_path))
    return make_error(ErrorCode::kNotFound,
                      dir + ": no config.json (a safetensors model is a directory with "
                            "config.json and model.safetensors)");
  ASSIGN_OR_RETURN(std::string config_text, loaders::read_text_file(config_path, kMaxConfigBytes));
  ASSIGN_OR_RETURN(ModelConfig config, parse_hf_config(config_text, config_path));

  // Which files hold the weights.
  std::vector<std::string> files;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (is_file(index_path)) {
    ASSIGN_OR_RETURN(std::string index_text, loaders::read_text_file(index_path, kMaxConfigBytes));
    ASSIGN_OR_RETURN(json index, parse_json(index_text, index_path));
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return make_error(ErrorCode::kBadModel, index_path + ": weight_map object is missing");
    std::set<std::string> names;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return make_error(ErrorCode::kBadModel,
                          index_path + ": weight_map[" + it.key() + "] is not a file name");
      std::string f = it.value().get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        return make_error(ErrorCode::kBadModel, index_path + ": shard name " + f +
                                                    " must be a plain file name in " + dir);
      names.insert(f);
    }
    for (const std::string& f : names) files.push_back(dir + "/" + f);
  } else if (is_file(dir + "/model.safetensors")) {
    files.push_back(dir + "/model.safetensors");
  } else {
    return make_error(ErrorCode::kNotFound,
                      dir + ": neither model.safetensors nor model.safetensors.index.json");
  }

  std::vector<MappedFile> maps;
  std::vector<Entry> entries;
  for (const std::string& f : files) {
    ASSIGN_OR_RETURN(MappedFile m, MappedFile::open(f));
    maps.push_back(std::move(m));
    RETURN_IF_ERROR(parse_file(maps.back(), &entries));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].name == entries[i - 1].name)
      return make_error(ErrorCode::kBadModel, dir + ": tensor " + entries[i].name +
                                                  " appears twice (" + entries[i - 1].file +
                                                  ", " + entries[i].file + ")");

  LoadedModel model;
  loaders::WeightHasher hasher;
  size_t bf16_linear = 0, other_linear = 0;
  for (const Entry& e : entries) {
    hasher.add(e.name, e.dtype, e.shape, e.data, e.bytes);
    // Buffers HF registers but never reads as weights.
    if (e.name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    // DeepSeek-V3's multi-token-prediction layers (model.layers.<num_hidden_layers>... on
    // the Hub) are not part of the causal LM forward; transformers skips them too.
    if (config.arch == Arch::kDeepseekV3 && is_extra_layer(e.name, config.layers)) continue;
    ASSIGN_OR_RETURN(HostTensor t, to_host(e));
    if (e.shape.size() >= 2) (e.dtype == "BF16" ? bf16_linear : other_linear)++;
    model.tensors.emplace(e.name, std::move(t));
  }
  if (config.tied_embeddings) model.tensors.erase("lm_head.weight");
  RETURN_IF_ERROR(unfuse_experts(config, &model.tensors, dir));
  RETURN_IF_ERROR(loaders::check_tensors(config, model.tensors, dir));
  if (bf16_linear > 0 && other_linear == 0) {
    config.weight_type = kernels::WeightType::kBF16;
    config.bf16_activations = true;
  }
  model.config = std::move(config);
  model.weight_hash = hasher.digest();
  std::string base = dir.substr(dir.find_last_of('/') + 1);
  model.identity = "safetensors:" + base;
  model.source = dir_in;

  const std::string tok_path = dir + "/tokenizer.json";
  if (is_file(tok_path)) {
    auto tok = load_tokenizer_json(tok_path);
    if (tok.ok()) {
      model.tokenizer = std::move(tok).value();
    } else {
      model.tokenizer_note = tok.status().to_string();
    }
  } else {
    model.tokenizer_note = dir + ": no tokenizer.json; give prompts as token ids";
  }
  return model;
}

// --- writer ------------------------------------------------------------------------------

namespace {

json config_json(const ModelConfig& c) {
  json j;
  const char* arch = c.arch == Arch::kLlama      ? "LlamaForCausalLM"
                     : c.arch == Arch::kMixtral  ? "MixtralForCausalLM"
                     : c.arch == Arch::kQwen2Moe ? "Qwen2MoeForCausalLM"
                     : c.arch == Arch::kQwen3    ? "Qwen3ForCausalLM"
                     : c.arch == Arch::kQwen3Moe ? "Qwen3MoeForCausalLM"
                                                 : "DeepseekV3ForCausalLM";
  j["architectures"] = {arch};
  j["model_type"] = arch_name(c.arch);
  j["vocab_size"] = c.vocab;
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim;
  j["rope_theta"] = c.rope_theta;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  j["rms_norm_eps"] = c.norm_eps;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["max_position_embeddings"] = c.max_positions;
  if (c.bos >= 0) j["bos_token_id"] = c.bos;
  if (c.eos >= 0) j["eos_token_id"] = c.eos;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "float32";
  if (c.arch == Arch::kLlama || c.arch == Arch::kQwen3) {
    j["intermediate_size"] = c.ffn;
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  } else if (c.arch == Arch::kDeepseekV3) {
    j["intermediate_size"] = c.ffn;
    j["q_lora_rank"] = c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr);
    j["kv_lora_rank"] = c.kv_lora_rank;
    j["qk_nope_head_dim"] = c.qk_nope_dim;
    j["qk_rope_head_dim"] = c.qk_rope_dim;
    j["v_head_dim"] = c.v_head_dim;
    j["rope_interleave"] = c.rope_interleave;
    j["n_routed_experts"] = c.experts;
    j["num_experts_per_tok"] = c.top_k;
    j["moe_intermediate_size"] = c.moe_ffn;
    j["n_shared_experts"] = c.moe_ffn > 0 ? c.shared_ffn / c.moe_ffn : 0;
    j["first_k_dense_replace"] = static_cast<int32_t>(c.mlp_only_layers.size());
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["routed_scaling_factor"] = c.routed_scaling;
    j["attention_bias"] = false;
  } else if (c.arch == Arch::kMixtral) {
    j["intermediate_size"] = c.moe_ffn;
    j["num_local_experts"] = c.experts;
    j["num_experts_per_tok"] = c.top_k;
    j["sliding_window"] = nullptr;
  } else {
    j["intermediate_size"] = c.ffn;
    j["num_experts"] = c.experts;
    j["num_experts_per_tok"] = c.top_k;
    j["moe_intermediate_size"] = c.moe_ffn;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    if (c.arch == Arch::kQwen2Moe) {
      j["shared_expert_intermediate_size"] = c.shared_ffn;
      j["qkv_bias"] = c.attention_bias;
    } else {
      j["attention_bias"] = false;
    }
    j["use_sliding_window"] = false;
  }
  return j;
}

Status write_file(const std::string& path, const std::string& head,
                  const std::vector<std::pair<const float*, size_t>>& blobs) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error(ErrorCode::kIo, path + ": cannot create: " + std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  for (const auto& [p, n] : blobs) ok = ok && std::fwrite(p, sizeof(float), n, f) == n;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return make_error(ErrorCode::kIo, path + ": write failed: " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

Status save_safetensors_dir(const LoadedModel& model, const std::string& dir) {
  json header = json::object();
  uint64_t offset = 0;
  std::vector<std::pair<const float*, size_t>> blobs;
  for (const auto& [name, t] : model.tensors) {
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    blobs.emplace_back(t.data.data(), t.data.size());
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  head += text;
  RETURN_IF_ERROR(write_file(dir + "/model.safetensors", head, blobs));
  std::string cfg = config_json(model.config).dump(2) + "\n";
  std::FILE* f = std::fopen((dir + "/config.json").c_str(), "wb");
  if (!f) return make_error(ErrorCode::kIo, dir + "/config.json: cannot create: " + std::strerror(errno));
  bool ok = std::fwrite(cfg.data(), 1, cfg.size(), f) == cfg.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) return make_error(ErrorCode::kIo, dir + "/config.json: write failed");
  return Status::Ok();
}

}  // namespace llmrr
