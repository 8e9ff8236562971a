// Op records of a llama.cpp decode (ops.h).
#include "ops.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "dl.h"
#include "ggml-backend.h"

namespace llmrr::llamacpp {
namespace {

// The reductions whose order the graph's shapes and types decide: what an op record keeps.
const char* reduction_op(ggml_op op) {
  switch (op) {
    case GGML_OP_MUL_MAT: return "MUL_MAT";
    case GGML_OP_MUL_MAT_ID: return "MUL_MAT_ID";
    case GGML_OP_FLASH_ATTN_EXT: return "FLASH_ATTN_EXT";
    case GGML_OP_SOFT_MAX: return "SOFT_MAX";
    case GGML_OP_RMS_NORM: return "RMS_NORM";
    case GGML_OP_NORM: return "NORM";
    case GGML_OP_SUM_ROWS: return "SUM_ROWS";
    default: return nullptr;
  }
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

// "f16:64x256x9": a tensor's type and shape (trailing 1s dropped).
void shape_of(std::string* out, const ggml_tensor* t) {
  static auto type_name = any_fn(&ggml_type_name, "ggml_type_name");
  const char* tn = type_name != nullptr ? type_name(t->type) : nullptr;
  *out += tn != nullptr ? tn : std::to_string(static_cast<int>(t->type));
  int dims = 4;
  while (dims > 1 && t->ne[dims - 1] == 1) --dims;
  for (int d = 0; d < dims; ++d) {
    *out += d == 0 ? ':' : 'x';
    *out += std::to_string(t->ne[d]);
  }
}

}  // namespace

// Records what a reduction node of the decode's graph runs with (asked before it runs; no
// tensor data is read): its sources' types, shapes and layout, the weights' buffer (a repacked
// buffer is another kernel), flash attention's precision. Consecutive layers that run a node
// of the same name the same way share one record.
void OpRecorder::take(const ggml_tensor* t) {
  if (first_node_ == nullptr) {
    first_node_ = t;
    first_name_ = t->name;
  }
  // A graph starts at the node named as the decode's first (a ubatch's graph may be built anew).
  if (t == first_node_ || (!first_name_.empty() && t->name == first_name_)) {
    ++graph_;
    last_.clear();
    nodes_.push_back(0);
    cur_layer_ = -1;
    occ_layer_ = -1;
    occ_.clear();
  }
  if (graph_ < 0) return;
  ++nodes_.back();
  const char* op = reduction_op(t->op);
  if (op == nullptr) return;
  // name-L → (name, L); other names stay whole, outside the layers.
  const char* name = t->name;
  const char* dash = std::strrchr(name, '-');
  int32_t layer = -1;
  std::string stem;
  if (dash != nullptr && dash[1] != '\0') {
    char* end = nullptr;
    const long l = std::strtol(dash + 1, &end, 10);
    if (*end == '\0' && l >= 0 && l < 100000) {
      layer = static_cast<int32_t>(l);
      stem.assign(name, static_cast<size_t>(dash - name));
    }
  }
  if (layer >= 0) {
    cur_layer_ = layer;
  } else if (name[0] == '\0' || std::strncmp(name, "node_", 5) == 0) {
    // A node the model left unnamed (ggml calls it node_<index>, e.g. flash attention): the
    // op's kind names it, in the layer of the named nodes around it.
    stem = op;
    for (char& ch : stem) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    layer = cur_layer_;
  }
  if (stem.empty()) stem = name;
  for (char& ch : stem)
    if (ch < 0x21 || ch > 0x7e) ch = '_';
  // The k-th node of one name in a layer (llama.cpp names both RMS norms of a layer "norm")
  // is "name#k" from the second on, so that each merges with its own across layers.
  if (layer >= 0) {
    if (layer != occ_layer_) {
      occ_.clear();
      occ_layer_ = layer;
    }
    int k = 0;
    for (auto& [n, c] : occ_)
      if (n == stem) k = ++c;
    if (k == 0) occ_.push_back({stem, 0});
    if (k > 0) stem += "#" + std::to_string(k + 1);
  }
  static auto is_contiguous = any_fn(&ggml_is_contiguous, "ggml_is_contiguous");
  static auto buffer_name = any_fn(&ggml_backend_buffer_name, "ggml_backend_buffer_name");
  const bool weights = t->op == GGML_OP_MUL_MAT || t->op == GGML_OP_MUL_MAT_ID;
  uint64_t key = mix(0, static_cast<uint64_t>(t->op));
  key = mix(key, static_cast<uint64_t>(t->type));
  for (int d = 0; d < 4; ++d) key = mix(key, static_cast<uint64_t>(t->ne[d]));
  for (int i = 0; i < GGML_MAX_SRC; ++i) {
    const ggml_tensor* x = t->src[i];
    if (x == nullptr) continue;
    key = mix(key, static_cast<uint64_t>(i) << 32 | static_cast<uint64_t>(x->type));
    for (int d = 0; d < 4; ++d) key = mix(key, static_cast<uint64_t>(x->ne[d]));
    for (int d = 0; d < 4; ++d) key = mix(key, static_cast<uint64_t>(x->nb[d]));
  }
  if (weights && t->src[0] != nullptr)
    key = mix(key, reinterpret_cast<uintptr_t>(t->src[0]->buffer != nullptr && buffer_name != nullptr
                                                   ? buffer_name(t->src[0]->buffer)
                                                   : nullptr));
  if (t->op == GGML_OP_FLASH_ATTN_EXT) key = mix(key, static_cast<uint64_t>(t->op_params[3]));
  LastOp* last = nullptr;
  for (LastOp& l : last_)
    if (l.stem == stem) last = &l;
  if (last != nullptr && last->key == key && layer >= 0) {
    OpInfo& prev = ops_[last->index];
    if (prev.layer >= 0 && layer == prev.layer + prev.layers) {
      ++prev.layers;
      return;
    }
  }
  OpInfo r;
  r.layer = layer;
  r.graph = graph_;
  r.name = stem;
  r.op = op;
  std::string& a = r.attrs;
  a.reserve(160);
  for (int i = 0; i < GGML_MAX_SRC; ++i) {
    const ggml_tensor* x = t->src[i];
    if (x == nullptr) continue;
    if (!a.empty()) a += ' ';
    a += "src" + std::to_string(i) + '=';
    shape_of(&a, x);
    if (is_contiguous != nullptr && !is_contiguous(x)) a += " src" + std::to_string(i) + ".view=1";
  }
  if (weights && t->src[0] != nullptr && t->src[0]->buffer != nullptr && buffer_name != nullptr) {
    std::string b = buffer_name(t->src[0]->buffer);
    for (char& ch : b)
      if (ch < 0x21 || ch > 0x7e) ch = '_';
    if (!b.empty()) a += " src0.buffer=" + b;
  }
  if (t->op == GGML_OP_FLASH_ATTN_EXT) a += " prec=" + std::to_string(t->op_params[3]);
  if (!a.empty()) a += ' ';
  a += "dst=";
  shape_of(&a, t);
  if (last != nullptr)
    *last = {std::move(stem), key, ops_.size()};
  else
    last_.push_back({std::move(stem), key, ops_.size()});
  ops_.push_back(std::move(r));
}


void OpRecorder::reset() {
  ops_.clear();
  last_.clear();
  first_node_ = nullptr;
  first_name_.clear();
  graph_ = -1;
  nodes_.clear();
  cur_layer_ = -1;
  occ_layer_ = -1;
  occ_.clear();
}

std::vector<OpInfo> OpRecorder::finish(const std::vector<std::pair<int64_t, int64_t>>& ub_rows,
                                       int64_t batch_rows, int32_t n_threads,
                                       int32_t n_threads_batch) {
  std::vector<OpInfo> ops = std::move(ops_);
  auto rows_of = [&](int32_t g, OpInfo* r) {
    if (static_cast<size_t>(g) < ub_rows.size() && ub_rows[g].first >= 0) {
      r->first_row = static_cast<int32_t>(ub_rows[g].first);
      r->rows = static_cast<int32_t>(ub_rows[g].second);
    } else if (graph_ == 0) {
      r->rows = static_cast<int32_t>(batch_rows);  // one graph: the whole batch
    }
  };
  for (OpInfo& r : ops) rows_of(r.graph, &r);
  for (int32_t g = 0; g <= graph_; ++g) {
    OpInfo r;
    r.graph = g;
    r.name = "graph";
    r.op = "GRAPH";
    rows_of(g, &r);
    r.attrs = "nodes=" + std::to_string(nodes_[g]);
    if (r.rows > 0) {
      r.attrs += " tokens=" + std::to_string(r.rows);
      if (n_threads > 0)
        r.attrs += " threads=" + std::to_string(r.rows > 1 ? n_threads_batch : n_threads);
    }
    ops.push_back(std::move(r));
  }
  reset();
  return ops;
}

}  // namespace llmrr::llamacpp
