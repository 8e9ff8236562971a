// The reader's tables as Arrow C Data Interface structs (llmrr/reader_arrow.h). A table's
// data lives in one immutable TableData held by shared_ptr; every exported schema node,
// array node and stream holds a reference in its private_data, so buffers stay valid until
// the consumer's last release, whatever it keeps and whatever llmrr closes first.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/reader_arrow.h"
#include "llmrr/format/site.h"
#include "reader/tables.h"

using llmrr::ErrorCode;
using llmrr::Status;
using llmrr::cread::Column;
using llmrr::cread::Table;
using llmrr::cread::guarded;

namespace {

// What an empty buffer points at (a consumer may read one offset of an empty list).
alignas(64) const uint8_t kZeros[64] = {};

const void* data_of(const std::vector<uint8_t>& v) {
  return v.empty() ? static_cast<const void*>(kZeros) : v.data();
}

// One node of the exported tree: its schema (format, name, flags) and array (length,
// buffers, children, dictionary).
struct Node {
  Node() = default;
  // Constructed, not assigned: GCC 12 warns (-Wrestrict, a false positive) on assigning a
  // literal to a std::string member here.
  Node(std::string f, std::string n, int64_t len)
      : format(std::move(f)), name(std::move(n)), length(len) {}
  std::string format, name;
  int64_t length = 0;
  std::vector<const void*> buffers;
  std::vector<Node> children;
  std::shared_ptr<Node> dictionary;
};

struct TableData {
  std::string name;
  Table table;  // the table's own columns, as llmrr_reader_column gives them
  Table aux;    // prompt_tokens of requests, logits_topk of logits
  // Buffers built here (offsets, indices, top-K); a deque, so a reference stays valid.
  std::deque<std::vector<uint8_t>> owned;
  Node root;
  std::string fields;  // "name:format ..."

  std::vector<uint8_t>& own(size_t bytes) {
    owned.emplace_back(bytes);
    return owned.back();
  }
};

const char* format_of(const std::string& type) {
  if (type == "i32") return "i";
  if (type == "i64") return "l";
  if (type == "u64") return "L";
  if (type == "f32") return "f";
  if (type == "f64") return "g";
  if (type == "u8") return "C";
  return nullptr;
}

template <typename T>
const T* as(const Column& c) {
  return reinterpret_cast<const T*>(c.bytes.data());
}

Node primitive(const std::string& name, const char* format, int64_t length, const void* data) {
  Node n(format, name, length);
  n.buffers = {nullptr, data};
  return n;
}

// utf8 from NUL-terminated strings back to back.
Node utf8_from_nul(TableData& d, const std::string& name, const Column& c) {
  std::vector<uint8_t>& offsets = d.own(sizeof(int64_t) * (static_cast<size_t>(c.count) + 1));
  std::vector<uint8_t>& chars = d.own(c.bytes.size());
  int64_t* off = reinterpret_cast<int64_t*>(offsets.data());
  size_t at = 0, out = 0;
  for (int64_t i = 0; i < c.count; ++i) {
    off[i] = static_cast<int64_t>(out);
    const size_t len = std::strlen(reinterpret_cast<const char*>(c.bytes.data()) + at);
    std::memcpy(chars.data() + out, c.bytes.data() + at, len);
    out += len;
    at += len + 1;
  }
  off[c.count] = static_cast<int64_t>(out);
  Node n("U", name, c.count);  // large utf8: int64 offsets
  n.buffers = {nullptr, offsets.data(), data_of(chars)};
  return n;
}

// (name, forward key) of a packed site; ("", max) for one llmrr does not know.
std::pair<std::string, uint64_t> site_of(uint64_t packed) {
  try {
    const llmrr::SiteId site = llmrr::SiteId::unpack(packed);
    if (site.packed() == packed) return {llmrr::site_name(site), site.forward_key()};
  } catch (...) {
  }
  return {std::string(), std::numeric_limits<uint64_t>::max()};
}

// site_name: dictionary<int32, large_utf8> of the column's distinct sites in forward order
// (embed, L0.*, L1.*, ..., final_norm, logits), so a categorical sorts as the forward pass
// runs; site_order: the site's forward key (u64, comparable across traces), for SQL's
// ORDER BY. One pass over the rows for both.
void site_columns(TableData& d, const Column& site) {
  const uint64_t* v = as<uint64_t>(site);
  std::map<uint64_t, std::pair<int32_t, uint64_t>> index;  // packed -> (index, forward key)
  for (int64_t i = 0; i < site.count; ++i) index.emplace(v[i], std::pair<int32_t, uint64_t>{});
  std::vector<std::pair<uint64_t, uint64_t>> by_key;  // (forward key, packed)
  for (auto& [packed, at] : index) {
    auto [name, key] = site_of(packed);
    at.second = key;
    by_key.emplace_back(key, packed);
  }
  std::sort(by_key.begin(), by_key.end());
  Column dict{"site_name", "str", {}, 0};
  for (size_t k = 0; k < by_key.size(); ++k) {
    index[by_key[k].second].first = static_cast<int32_t>(k);
    dict.push_str(site_of(by_key[k].second).first);
  }
  std::vector<uint8_t>& idx = d.own(sizeof(int32_t) * static_cast<size_t>(site.count));
  std::vector<uint8_t>& order = d.own(sizeof(uint64_t) * static_cast<size_t>(site.count));
  int32_t* out = reinterpret_cast<int32_t*>(idx.data());
  uint64_t* out_key = reinterpret_cast<uint64_t*>(order.data());
  // Runs of one site are the common case (a step's rows of one site are contiguous).
  uint64_t last = 0;
  const std::pair<int32_t, uint64_t>* last_at = nullptr;
  for (int64_t i = 0; i < site.count; ++i) {
    if (last_at == nullptr || v[i] != last) {
      last = v[i];
      last_at = &index.find(v[i])->second;
    }
    out[i] = last_at->first;
    out_key[i] = last_at->second;
  }
  Node n = primitive("site_name", "i", site.count, data_of(idx));
  n.dictionary = std::make_shared<Node>(utf8_from_nul(d, "", dict));
  d.root.children.push_back(std::move(n));
  d.root.children.push_back(primitive("site_order", "L", site.count, data_of(order)));
}

// prompt: large_list<int32> over prompt_tokens.token, offsets from prompt_len.
Node prompt_list(TableData& d, const Column& prompt_len, const Column& tokens) {
  std::vector<uint8_t>& offsets =
      d.own(sizeof(int64_t) * (static_cast<size_t>(prompt_len.count) + 1));
  int64_t* off = reinterpret_cast<int64_t*>(offsets.data());
  const int32_t* len = as<int32_t>(prompt_len);
  int64_t at = 0;
  for (int64_t i = 0; i < prompt_len.count; ++i) {
    off[i] = at;
    at += len[i];
  }
  off[prompt_len.count] = at;
  Node n("+L", "prompt", prompt_len.count);
  n.buffers = {nullptr, offsets.data()};
  n.children.push_back(primitive("item", "i", tokens.count, data_of(tokens.bytes)));
  return n;
}

// top_ids / top_values: fixed_size_list[K] of logits_topk (logit, rank, id, value).
// A trace whose rows carry top-K lists of very different lengths would pad to the longest:
// refused past this many cells beyond the entries themselves (a hostile trace must not make
// a 1-entry row × 100,000 rows × a 1M-entry row into 10^11 cells).
constexpr int64_t kMaxTopKPadding = int64_t{1} << 24;

Status top_k_lists(TableData& d, int64_t rows, const Table& topk) {
  const int64_t n = topk.rows;
  const int64_t* logit = as<int64_t>(topk.columns[0]);
  const int32_t* rank = as<int32_t>(topk.columns[1]);
  const int32_t* id = as<int32_t>(topk.columns[2]);
  const float* value = as<float>(topk.columns[3]);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) k = std::max<int64_t>(k, int64_t{rank[i]} + 1);
  if (k > 0 && rows > (topk.rows + kMaxTopKPadding) / k) {
    return Status(ErrorCode::kResourceLimit,
                  "logits: top-K lists of up to " + std::to_string(k) + " entries over " +
                      std::to_string(rows) + " rows would pad " + std::to_string(topk.rows) +
                      " entries past " + std::to_string(kMaxTopKPadding) +
                      " cells; expected rows of similar K (read the logits_topk table instead)");
  }
  const size_t cells = static_cast<size_t>(rows * k);
  std::vector<uint8_t>& ids = d.own(cells * sizeof(int32_t));
  std::vector<uint8_t>& vals = d.own(cells * sizeof(float));
  int32_t* ip = reinterpret_cast<int32_t*>(ids.data());
  float* vp = reinterpret_cast<float*>(vals.data());
  std::fill(ip, ip + cells, -1);
  std::fill(vp, vp + cells, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < n; ++i) {
    // The builder numbers logits 0..rows-1 and ranks 0..top_count-1; checked all the same.
    if (logit[i] < 0 || logit[i] >= rows || rank[i] < 0) continue;
    const size_t at = static_cast<size_t>(logit[i] * k + rank[i]);
    ip[at] = id[i];
    vp[at] = value[i];
  }
  const std::string fmt = "+w:" + std::to_string(k);
  for (int which = 0; which < 2; ++which) {
    Node n2(fmt, which == 0 ? "top_ids" : "top_values", rows);
    n2.buffers = {nullptr};
    n2.children.push_back(primitive("item", which == 0 ? "i" : "f", rows * k,
                                    which == 0 ? data_of(ids) : data_of(vals)));
    d.root.children.push_back(std::move(n2));
  }
  return Status::Ok();
}

std::string field_format(const Node& n) {
  if (n.dictionary) return "dict<" + n.dictionary->format + ">";
  if (!n.children.empty()) return n.format + "<" + field_format(n.children[0]) + ">";
  return n.format;
}

Status build_tree(TableData& d) {
  d.root = Node("+s", "", d.table.rows);
  d.root.buffers = {nullptr};
  for (const Column& c : d.table.columns) {
    if (c.type == "str") {
      d.root.children.push_back(utf8_from_nul(d, c.name, c));
    } else {
      d.root.children.push_back(primitive(c.name, format_of(c.type), c.count, data_of(c.bytes)));
    }
    if (c.name == "site" && (d.name == "plans" || d.name == "fingerprints")) site_columns(d, c);
  }
  if (d.name == "requests") {
    d.root.children.push_back(prompt_list(d, *d.table.find("prompt_len"), d.aux.columns[1]));
  } else if (d.name == "logits") {
    if (Status st = top_k_lists(d, d.table.rows, d.aux); !st.ok()) return st;
  }
  for (const Node& c : d.root.children) {
    if (!d.fields.empty()) d.fields += ' ';
    d.fields += c.name + ":" + field_format(c);
  }
  return Status::Ok();
}

// ---- export ----------------------------------------------------------------------------

// What an exported ArrowSchema or ArrowArray owns: the table (its buffers and strings), its
// children and its dictionary. One template serves both structs: they nest the same way.
template <class T>
struct Exported {
  std::shared_ptr<const TableData> keep;
  std::vector<T> kids;
  std::vector<T*> kid_ptrs;
  std::unique_ptr<T> dict;
};

template <class T>
void release_exported(T* x) {
  if (x == nullptr || x->release == nullptr) return;
  auto* p = static_cast<Exported<T>*>(x->private_data);
  for (int64_t i = 0; i < x->n_children; ++i)
    if (x->children[i]->release != nullptr) x->children[i]->release(x->children[i]);
  if (x->dictionary != nullptr && x->dictionary->release != nullptr)
    x->dictionary->release(x->dictionary);
  delete p;
  x->release = nullptr;
}

void fill_exported(const std::shared_ptr<const TableData>& keep, const Node& n, ArrowSchema* out);
void fill_exported(const std::shared_ptr<const TableData>& keep, const Node& n, ArrowArray* out);

// Fills *out (all or nothing: on an exception *out is left released): the children and the
// dictionary, then set(out) for what differs between a schema and an array.
template <class T, class Set>
void fill_node(const std::shared_ptr<const TableData>& keep, const Node& n, T* out, Set set) {
  auto p = std::make_unique<Exported<T>>();
  p->keep = keep;
  p->kids.resize(n.children.size());
  p->kid_ptrs.resize(n.children.size());
  size_t filled = 0;
  try {
    for (; filled < n.children.size(); ++filled) {
      fill_exported(keep, n.children[filled], &p->kids[filled]);
      p->kid_ptrs[filled] = &p->kids[filled];
    }
    if (n.dictionary) {
      p->dict = std::make_unique<T>();
      fill_exported(keep, *n.dictionary, p->dict.get());
    }
  } catch (...) {
    for (size_t i = 0; i < filled; ++i) release_exported(&p->kids[i]);
    throw;
  }
  set(out);
  out->n_children = static_cast<int64_t>(n.children.size());
  out->children = p->kid_ptrs.empty() ? nullptr : p->kid_ptrs.data();
  out->dictionary = p->dict.get();
  out->release = release_exported<T>;
  out->private_data = p.release();
}

void fill_exported(const std::shared_ptr<const TableData>& keep, const Node& n, ArrowSchema* out) {
  fill_node(keep, n, out, [&n](ArrowSchema* o) {
    o->format = n.format.c_str();  // the strings live in TableData, kept by `keep`
    o->name = n.name.c_str();
    o->metadata = nullptr;
    o->flags = 0;  // no nulls anywhere
  });
}

void fill_exported(const std::shared_ptr<const TableData>& keep, const Node& n, ArrowArray* out) {
  fill_node(keep, n, out, [&n](ArrowArray* o) {
    o->length = n.length;
    o->null_count = 0;
    o->offset = 0;
    o->n_buffers = static_cast<int64_t>(n.buffers.size());
    // The buffer pointers live in the Node (const, in TableData): the spec's `const void**`.
    o->buffers = const_cast<const void**>(n.buffers.data());
  });
}

struct StreamPrivate {
  std::shared_ptr<const TableData> data;
  bool done = false;
  std::string error;
};

int stream_get_schema(ArrowArrayStream* s, ArrowSchema* out) {
  auto* p = static_cast<StreamPrivate*>(s->private_data);
  try {
    fill_exported(p->data, p->data->root, out);
    return 0;
  } catch (...) {
    p->error = "llmrr: out of memory exporting the schema of table " + p->data->name;
    return ENOMEM;
  }
}

int stream_get_next(ArrowArrayStream* s, ArrowArray* out) {
  auto* p = static_cast<StreamPrivate*>(s->private_data);
  if (p->done) {
    out->release = nullptr;  // end of stream
    return 0;
  }
  try {
    fill_exported(p->data, p->data->root, out);
    p->done = true;
    return 0;
  } catch (...) {
    p->error = "llmrr: out of memory exporting table " + p->data->name;
    return ENOMEM;
  }
}

const char* stream_last_error(ArrowArrayStream* s) {
  auto* p = static_cast<StreamPrivate*>(s->private_data);
  return p->error.empty() ? nullptr : p->error.c_str();
}

void stream_release(ArrowArrayStream* s) {
  if (s == nullptr || s->release == nullptr) return;
  delete static_cast<StreamPrivate*>(s->private_data);
  s->release = nullptr;
}

int fail(ErrorCode code, const std::string& message) {
  return llmrr::cread::fail_call(Status(code, message));
}

bool known_table(const char* name) {
  const std::string all = std::string(" ") + llmrr::cread::kTableNames + " ";
  return name != nullptr && *name != '\0' && std::strchr(name, ' ') == nullptr &&
         all.find(std::string(" ") + name + " ") != std::string::npos;
}

}  // namespace

struct llmrr_reader_table {
  std::shared_ptr<const TableData> data;
};

extern "C" {

int llmrr_reader_read_table(llmrr_reader* reader, const char* table, int64_t first_step,
                            int64_t last_step, llmrr_reader_table** out) {
  if (out == nullptr) return fail(ErrorCode::kInvalidArgument, "llmrr_reader_read_table: null out");
  *out = nullptr;
  if (reader == nullptr)
    return fail(ErrorCode::kInvalidArgument, "llmrr_reader_read_table: null reader");
  if (!known_table(table))
    return fail(ErrorCode::kInvalidArgument,
                std::string("llmrr_reader_read_table: unknown table '") +
                    (table ? table : "(null)") + "' (tables: " + llmrr::cread::kTableNames + ")");
  if (first_step > last_step)
    return fail(ErrorCode::kInvalidArgument,
                "llmrr_reader_read_table: step range [" + std::to_string(first_step) + ", " +
                    std::to_string(last_step) + "] is empty: expected first <= last");
  return guarded("llmrr_reader_read_table", [&] {
    auto d = std::make_shared<TableData>();
    d->name = table;
    if (reader->loaded && reader->load_status.ok() &&
        first_step == std::numeric_limits<int64_t>::min() &&
        last_step == std::numeric_limits<int64_t>::max()) {
      // An eager handle already holds every table: copy rather than read the trace again.
      d->table = reader->set.tables.at(table);
      if (d->name == "requests") d->aux = reader->set.tables.at("prompt_tokens");
      if (d->name == "logits") d->aux = reader->set.tables.at("logits_topk");
    } else {
      llmrr::Result<llmrr::cread::TableSet> set =
          llmrr::cread::read_tables(*reader->reader, first_step, last_step, {table});
      if (!set.ok()) return llmrr::cread::fail_call(set.status());
      d->table = std::move(set->tables.at(table));
      if (d->name == "requests") d->aux = std::move(set->tables.at("prompt_tokens"));
      if (d->name == "logits") d->aux = std::move(set->tables.at("logits_topk"));
    }
    if (Status st = build_tree(*d); !st.ok()) return llmrr::cread::fail_call(st);
    *out = new llmrr_reader_table{std::move(d)};
    return LLMRR_OK;
  });
}

void llmrr_reader_table_free(llmrr_reader_table* table) {
  delete table;
}

int64_t llmrr_reader_table_rows(const llmrr_reader_table* table) {
  return table ? table->data->table.rows : -1;
}

const char* llmrr_reader_table_fields(const llmrr_reader_table* table) {
  return table ? table->data->fields.c_str() : "";
}

int llmrr_reader_table_column(const llmrr_reader_table* table, const char* column,
                              const void** data, int64_t* count) {
  if (table == nullptr || data == nullptr || count == nullptr)
    return fail(ErrorCode::kInvalidArgument,
                "llmrr_reader_table_column: null table or output pointer");
  const Table& t = table->data->table;
  const Column* c = column ? t.find(column) : nullptr;
  if (c == nullptr || c->type == "str")
    return fail(ErrorCode::kInvalidArgument,
                "llmrr_reader_table_column: table '" + table->data->name +
                    "' has no fixed-size column '" + (column ? column : "(null)") +
                    "' (columns: " + t.listing + ")");
  *data = data_of(c->bytes);
  *count = c->count;
  return LLMRR_OK;
}

int llmrr_reader_table_export(const llmrr_reader_table* table, ArrowSchema* schema,
                              ArrowArray* array) {
  if (table == nullptr || schema == nullptr || array == nullptr)
    return fail(ErrorCode::kInvalidArgument, "llmrr_reader_table_export: null argument");
  schema->release = nullptr;
  array->release = nullptr;
  return guarded("llmrr_reader_table_export", [&] {
    fill_exported(table->data, table->data->root, schema);
    try {
      fill_exported(table->data, table->data->root, array);
    } catch (...) {
      release_exported(schema);
      throw;
    }
    return LLMRR_OK;
  });
}

int llmrr_reader_table_stream(const llmrr_reader_table* table, ArrowArrayStream* out) {
  if (table == nullptr || out == nullptr)
    return fail(ErrorCode::kInvalidArgument, "llmrr_reader_table_stream: null argument");
  out->release = nullptr;
  return guarded("llmrr_reader_table_stream", [&] {
    auto p = std::make_unique<StreamPrivate>();
    p->data = table->data;
    out->get_schema = stream_get_schema;
    out->get_next = stream_get_next;
    out->get_last_error = stream_last_error;
    out->release = stream_release;
    out->private_data = p.release();
    return LLMRR_OK;
  });
}

ArrowArrayStream* llmrr_reader_stream_alloc(void) {
  return static_cast<ArrowArrayStream*>(std::calloc(1, sizeof(ArrowArrayStream)));
}

void llmrr_reader_stream_free(ArrowArrayStream* stream) {
  if (stream == nullptr) return;
  if (stream->release != nullptr) stream->release(stream);
  std::free(stream);
}

}  // extern "C"
