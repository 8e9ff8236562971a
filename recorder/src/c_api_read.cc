// The reader C ABI (llmrr/reader.h): a trace's step records flattened into column tables,
// so a language binding gets arrays (numpy) with one copy and no FlatBuffers of its own.
// Decoding stays in TraceReader: one implementation of checksums, plan dedup and recovery.
#include "llmrr/reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/runtime/site.h"
#include "llmrr/safeio/json.h"

using llmrr::ErrorCode;
using llmrr::Status;
using llmrr::Result;
namespace trace = llmrr::trace;

namespace {

thread_local std::string g_reader_error;

int fail(ErrorCode code, const std::string& message) {
  g_reader_error = Status(code, message).to_string();
  return static_cast<int>(code);
}

int fail(const Status& st) {
  g_reader_error = st.to_string();
  return static_cast<int>(st.code());
}

// One column: raw little-endian elements (or NUL-separated strings for "str").
struct Column {
  std::string name;
  std::string type;  // i32 i64 u64 f32 f64 u8 str
  std::vector<uint8_t> bytes;
  int64_t count = 0;

  template <typename T>
  void push(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
    ++count;
  }
  void push_str(const std::string& s) {
    bytes.insert(bytes.end(), s.begin(), s.end());
    bytes.push_back(0);
    ++count;
  }
};

struct Table {
  std::vector<Column> columns;
  std::string listing;  // "name:type ..."
  int64_t rows = 0;

  Table(std::initializer_list<std::pair<const char*, const char*>> spec) {
    for (const auto& [name, type] : spec) {
      columns.push_back(Column{name, type, {}, 0});
      if (!listing.empty()) listing += ' ';
      listing += std::string(name) + ":" + type;
    }
  }
  Column& operator[](size_t i) { return columns[i]; }
  const Column* find(const char* name) const {
    for (const Column& c : columns)
      if (c.name == name) return &c;
    return nullptr;
  }
};

constexpr uint64_t kNoRequest = ~uint64_t{0};

// Batch row -> (request, position) of one step, from its segments.
struct RowMap {
  std::vector<uint64_t> request;
  std::vector<int32_t> position;
  void build(const trace::StepRecord& s) {
    request.clear();
    position.clear();
    for (const trace::Segment& g : s.segments)
      for (int32_t i = 0; i < g.count; ++i) {
        request.push_back(g.request);
        position.push_back(g.start + i);
      }
  }
  uint64_t req(int64_t row) const {
    return row >= 0 && row < static_cast<int64_t>(request.size()) ? request[row] : kNoRequest;
  }
  int32_t pos(int64_t row) const {
    return row >= 0 && row < static_cast<int64_t>(position.size()) ? position[row] : -1;
  }
};

}  // namespace

struct llmrr_reader {
  std::unique_ptr<trace::TraceReader> reader;
  std::string header_json;
  std::string table_names;
  std::map<std::string, Table> tables;

  Table& add(const char* name, Table t) {
    if (!table_names.empty()) table_names += ' ';
    table_names += name;
    return tables.emplace(name, std::move(t)).first->second;
  }
};

namespace {

Result<nlohmann::json> header_json(const trace::TraceReader& r) {
  const trace::RunHeader& h = r.run_header();
  nlohmann::json j;
  j["format_major"] = r.format_major();
  j["format_minor"] = r.format_minor();
  j["tool_version"] = h.tool_version;
  j["created_unix_ns"] = h.created_unix_ns;
  j["run_id"] = h.run_id;
  j["host"] = {{"hostname", h.host.hostname},
               {"os", h.host.os},
               {"cpu", h.host.cpu},
               {"cores", h.host.cores},
               {"isa", h.host.isa}};
  j["device"] = {{"kind", h.device.kind},
                 {"name", h.device.name},
                 {"compute_capability", h.device.compute_capability},
                 {"driver", h.device.driver},
                 {"memory_bytes", h.device.memory_bytes},
                 {"sm_count", h.device.sm_count}};
  const trace::ModelInfo& m = h.model;
  j["model"] = {{"name", m.name},
                {"path", m.path},
                {"architecture", m.architecture},
                {"weight_hash", m.weight_hash},
                {"weight_dtype", m.weight_dtype},
                {"compute_dtype", m.compute_dtype},
                {"layers", m.layers},
                {"hidden", m.hidden},
                {"vocab", m.vocab},
                {"heads", m.heads},
                {"kv_heads", m.kv_heads},
                {"experts", m.experts},
                {"experts_per_token", m.experts_per_token}};
  const trace::EngineConfig& e = h.engine;
  j["engine"] = {{"policy", e.policy},
                 {"virtual_sms", e.virtual_sms},
                 {"blocks_per_sm", e.blocks_per_sm},
                 {"threads", e.threads},
                 {"max_batch_tokens", e.max_batch_tokens},
                 {"max_seqs", e.max_seqs},
                 {"prefill_chunk", e.prefill_chunk},
                 {"kv_block_size", e.kv_block_size},
                 {"capacity_factor", e.capacity_factor},
                 {"overflow", trace::overflow_policy_name(e.overflow)},
                 {"atomics", e.atomics},
                 {"seed", e.seed},
                 {"load", e.load},
                 {"capture", trace::capture_level_name(e.capture)},
                 {"logits_mode", trace::logits_mode_name(e.logits_mode)},
                 {"top_k", e.top_k},
                 {"fingerprint", trace::fingerprint_kind(e)}};
  // extra_config_json is the producer's own JSON object; pass it through when it parses
  // (else as the string it is), but never past safeio's caps: a document nested 100,000 deep
  // would be dumped back recursively, and Python's json.loads would recurse into it too.
  j["extra_config"] = h.extra_config_json;
  if (!h.extra_config_json.empty()) {
    const std::string where = r.path() + ": run header extra_config_json";
    if (h.extra_config_json.size() > llmrr::safeio::kMaxEmbeddedJsonBytes) {
      return make_error(ErrorCode::kSemantic,
                        where + ": " + std::to_string(h.extra_config_json.size()) +
                            " bytes, expected at most " +
                            std::to_string(llmrr::safeio::kMaxEmbeddedJsonBytes));
    }
    RETURN_IF_ERROR(
        llmrr::safeio::check_json_depth(h.extra_config_json, where, ErrorCode::kSemantic));
    Result<nlohmann::json> extra =
        llmrr::safeio::parse_json_object(h.extra_config_json, where, ErrorCode::kSemantic);
    if (extra.ok()) j["extra_config"] = std::move(extra).value();
  }
  j["command_line"] = h.command_line;
  j["complete"] = r.complete();
  j["lossy"] = r.lossy();
  j["lossy_reason"] = r.lossy_reason();
  j["warnings"] = r.warnings();
  j["file_size"] = r.file_size();
  j["step_count"] = r.step_count();
  j["token_count"] = r.token_count();
  j["blob_count"] = r.blob_count();
  j["raw_bytes"] = r.raw_bytes();
  nlohmann::json kinds = nlohmann::json::object();
  for (const trace::KindBytes& k : r.kind_bytes()) kinds[k.kind] = k.raw_bytes;
  j["kind_bytes"] = kinds;
  return j;
}

Status load(llmrr_reader* h) {
  trace::TraceReader& r = *h->reader;
  ASSIGN_OR_RETURN(nlohmann::json header, header_json(r));
  Table& req = h->add("requests", Table{{"id", "u64"},
                                        {"arrival_step", "i64"},
                                        {"finish_step", "i64"},
                                        {"prompt_len", "i32"},
                                        {"prompt_offset", "i64"},
                                        {"prompt_hash", "u64"},
                                        {"generated", "i32"},
                                        {"finish_reason", "u8"},
                                        {"temperature", "f32"},
                                        {"top_k", "i32"},
                                        {"top_p", "f32"},
                                        {"seed", "u64"},
                                        {"max_tokens", "i32"},
                                        {"stop_at_eos", "u8"},
                                        {"label", "str"}});
  Table& prompt = h->add("prompt_tokens", Table{{"request", "u64"}, {"token", "i32"}});
  Table& steps = h->add("steps", Table{{"step", "i64"},
                                       {"rows", "i64"},
                                       {"segments", "i32"},
                                       {"arrivals", "i32"},
                                       {"logits", "i32"},
                                       {"tokens", "i32"},
                                       {"finishes", "i32"}});
  Table& seg = h->add("segments", Table{{"step", "i64"},
                                        {"request", "u64"},
                                        {"start", "i32"},
                                        {"count", "i32"},
                                        {"cached", "i32"},
                                        {"kind", "u8"},
                                        {"sample", "u8"},
                                        {"batch_row", "i32"}});
  Table& plans = h->add("plans", Table{{"step", "i64"},
                                       {"site", "u64"},
                                       {"op", "u8"},
                                       {"mode", "u8"},
                                       {"order", "u8"},
                                       {"separate_new_kv", "u8"},
                                       {"splits", "i32"},
                                       {"split_size", "i32"},
                                       {"k_tile", "i32"}});
  Table& fp = h->add("fingerprints", Table{{"step", "i64"},
                                           {"site", "u64"},
                                           {"batch_row", "i32"},
                                           {"request", "u64"},
                                           {"position", "i32"},
                                           {"cols", "i32"},
                                           {"hash", "u64"},
                                           {"l2", "f32"},
                                           {"max_abs", "f32"}});
  Table& rt = h->add("routing", Table{{"step", "i64"},
                                      {"layer", "i32"},
                                      {"batch_row", "i32"},
                                      {"request", "u64"},
                                      {"position", "i32"},
                                      {"rank", "i32"},
                                      {"chosen", "i32"},
                                      {"expert", "i32"},
                                      {"gate", "f32"},
                                      {"outcome", "u8"},
                                      {"experts_total", "i32"},
                                      {"capacity", "i32"}});
  Table& lg = h->add("logits", Table{{"step", "i64"},
                                     {"request", "u64"},
                                     {"position", "i32"},
                                     {"batch_row", "i32"},
                                     {"vocab", "i32"},
                                     {"margin", "f32"},
                                     {"hash", "u64"},
                                     {"l2", "f32"},
                                     {"max_abs", "f32"},
                                     {"blob", "i64"},
                                     {"top_count", "i32"}});
  Table& topk = h->add("logits_topk",
                       Table{{"logit", "i64"}, {"rank", "i32"}, {"id", "i32"}, {"value", "f32"}});
  Table& tok = h->add("tokens", Table{{"step", "i64"},
                                      {"request", "u64"},
                                      {"position", "i32"},
                                      {"token", "i32"},
                                      {"uniform", "f64"}});
  Table& fin =
      h->add("finishes",
             Table{{"step", "i64"}, {"request", "u64"}, {"reason", "u8"}, {"generated", "i32"}});
  Table& ker = h->add("kernels", Table{{"step", "i64"},
                                       {"stream", "u64"},
                                       {"correlation", "u64"},
                                       {"start_ns", "i64"},
                                       {"end_ns", "i64"},
                                       {"grid_x", "i32"},
                                       {"grid_y", "i32"},
                                       {"grid_z", "i32"},
                                       {"block_x", "i32"},
                                       {"block_y", "i32"},
                                       {"block_z", "i32"},
                                       {"name", "str"}});

  // Request summaries (finish step, generated) keyed by id; the arrival records carry the rest.
  std::unordered_map<uint64_t, const trace::RequestSummary*> summary;
  for (const trace::RequestSummary& s : r.requests()) summary[s.id] = &s;

  trace::StepCursor cur = r.steps();
  trace::StepRecord s;
  RowMap map;
  int64_t logit_index = 0;
  while (true) {
    llmrr::Result<bool> got = cur.next(&s);
    if (!got.ok()) return got.status();
    if (!*got) break;
    map.build(s);
    for (const trace::RequestRecord& a : s.arrivals) {
      auto it = summary.find(a.id);
      const trace::RequestSummary* sum = it == summary.end() ? nullptr : it->second;
      req[0].push(a.id);
      req[1].push(s.step);
      req[2].push(sum ? sum->finish_step : int64_t{-1});
      req[3].push(static_cast<int32_t>(a.prompt.size()));
      req[4].push(prompt[0].count);
      req[5].push(trace::prompt_hash(a.prompt));
      req[6].push(sum ? sum->generated : int32_t{0});
      // 255: not finished when the trace ended.
      req[7].push(sum && sum->finish_step >= 0 ? static_cast<uint8_t>(sum->reason) : uint8_t{255});
      req[8].push(a.temperature);
      req[9].push(a.top_k);
      req[10].push(a.top_p);
      req[11].push(a.seed);
      req[12].push(a.max_tokens);
      req[13].push(static_cast<uint8_t>(a.stop_at_eos));
      req[14].push_str(a.label);
      ++req.rows;
      for (int32_t t : a.prompt) {
        prompt[0].push(a.id);
        prompt[1].push(t);
        ++prompt.rows;
      }
    }
    steps[0].push(s.step);
    steps[1].push(s.row_count());
    steps[2].push(static_cast<int32_t>(s.segments.size()));
    steps[3].push(static_cast<int32_t>(s.arrivals.size()));
    steps[4].push(static_cast<int32_t>(s.logits.size()));
    steps[5].push(static_cast<int32_t>(s.tokens.size()));
    steps[6].push(static_cast<int32_t>(s.finishes.size()));
    ++steps.rows;
    int32_t first_row = 0;
    for (const trace::Segment& g : s.segments) {
      seg[0].push(s.step);
      seg[1].push(g.request);
      seg[2].push(g.start);
      seg[3].push(g.count);
      seg[4].push(g.cached);
      seg[5].push(static_cast<uint8_t>(g.kind));
      seg[6].push(static_cast<uint8_t>(g.sample));
      seg[7].push(first_row);
      first_row += g.count;
      ++seg.rows;
    }
    for (const trace::SitePlan& p : s.plans) {
      plans[0].push(s.step);
      plans[1].push(p.site);
      plans[2].push(static_cast<uint8_t>(p.plan.op));
      plans[3].push(static_cast<uint8_t>(p.plan.mode));
      plans[4].push(static_cast<uint8_t>(p.plan.order));
      plans[5].push(static_cast<uint8_t>(p.plan.separate_new_kv));
      plans[6].push(static_cast<int32_t>(p.plan.splits));
      plans[7].push(static_cast<int32_t>(p.plan.split_size));
      plans[8].push(static_cast<int32_t>(p.plan.k_tile));
      ++plans.rows;
    }
    for (const trace::SiteRows& sr : s.rows)
      for (size_t i = 0; i < sr.rows.size(); ++i) {
        const int32_t row = sr.batch_rows.empty() ? static_cast<int32_t>(i) : sr.batch_rows[i];
        fp[0].push(s.step);
        fp[1].push(sr.site);
        fp[2].push(row);
        fp[3].push(map.req(row));
        fp[4].push(map.pos(row));
        fp[5].push(sr.cols);
        fp[6].push(sr.rows[i].hash);
        fp[7].push(sr.rows[i].l2);
        fp[8].push(sr.rows[i].max_abs);
        ++fp.rows;
      }
    for (const trace::Routing& ro : s.routing)
      for (int32_t row = 0; row < ro.rows; ++row)
        for (int32_t k = 0; k < ro.k; ++k) {
          const size_t i = static_cast<size_t>(row) * ro.k + k;
          rt[0].push(s.step);
          rt[1].push(ro.layer);
          rt[2].push(row);
          rt[3].push(map.req(row));
          rt[4].push(map.pos(row));
          rt[5].push(k);
          rt[6].push(ro.chosen[i]);
          rt[7].push(ro.experts[i]);
          rt[8].push(ro.gates[i]);
          rt[9].push(static_cast<uint8_t>(ro.outcome[i]));
          rt[10].push(ro.experts_total);
          rt[11].push(ro.capacity);
          ++rt.rows;
        }
    for (const trace::LogitsRecord& l : s.logits) {
      lg[0].push(s.step);
      lg[1].push(l.request);
      lg[2].push(l.position);
      lg[3].push(l.batch_row);
      lg[4].push(l.vocab);
      lg[5].push(l.margin);
      lg[6].push(l.full.hash);
      lg[7].push(l.full.l2);
      lg[8].push(l.full.max_abs);
      lg[9].push(l.blob);
      lg[10].push(static_cast<int32_t>(l.top_ids.size()));
      ++lg.rows;
      for (size_t k = 0; k < l.top_ids.size(); ++k) {
        topk[0].push(logit_index);
        topk[1].push(static_cast<int32_t>(k));
        topk[2].push(l.top_ids[k]);
        topk[3].push(l.top_values[k]);
        ++topk.rows;
      }
      ++logit_index;
    }
    for (const trace::TokenRecord& t : s.tokens) {
      tok[0].push(s.step);
      tok[1].push(t.request);
      tok[2].push(t.position);
      tok[3].push(t.token);
      tok[4].push(t.uniform);
      ++tok.rows;
    }
    for (const trace::FinishRecord& f : s.finishes) {
      fin[0].push(s.step);
      fin[1].push(f.request);
      fin[2].push(static_cast<uint8_t>(f.reason));
      fin[3].push(f.generated);
      ++fin.rows;
    }
  }

  std::vector<trace::KernelRecord> kernels;
  const std::vector<trace::FrameInfo>& frames = r.frames();
  for (size_t f = 0; f < frames.size(); ++f) {
    if (frames[f].kind != trace::FrameKind::kKernelRecords) continue;
    kernels.clear();
    if (Status st = r.read_kernels(static_cast<int64_t>(f), &kernels); !st.ok()) return st;
    for (const trace::KernelRecord& k : kernels) {
      auto dim = [](const std::vector<int32_t>& v, size_t i) { return i < v.size() ? v[i] : 1; };
      ker[0].push(k.step);
      ker[1].push(k.stream);
      ker[2].push(k.correlation);
      ker[3].push(k.start_ns);
      ker[4].push(k.end_ns);
      for (size_t i = 0; i < 3; ++i) ker[5 + i].push(dim(k.grid, i));
      for (size_t i = 0; i < 3; ++i) ker[8 + i].push(dim(k.block, i));
      ker[11].push_str(k.name);
      ++ker.rows;
    }
  }
  h->header_json = llmrr::safeio::dump(header);
  return Status::Ok();
}

const Table* find_table(const llmrr_reader* r, const char* table) {
  if (r == nullptr || table == nullptr) return nullptr;
  auto it = r->tables.find(table);
  return it == r->tables.end() ? nullptr : &it->second;
}

int find_column(const llmrr_reader* r, const char* fn, const char* table, const char* column,
                const Column** out) {
  if (r == nullptr) return fail(ErrorCode::kInvalidArgument, std::string(fn) + ": null reader");
  const Table* t = find_table(r, table);
  if (t == nullptr)
    return fail(ErrorCode::kInvalidArgument, std::string(fn) + ": unknown table '" +
                                                 (table ? table : "(null)") +
                                                 "' (tables: " + r->table_names + ")");
  const Column* c = column ? t->find(column) : nullptr;
  if (c == nullptr)
    return fail(ErrorCode::kInvalidArgument,
                std::string(fn) + ": table '" + table + "' has no column '" +
                    (column ? column : "(null)") + "' (columns: " + t->listing + ")");
  *out = c;
  return LLMRR_OK;
}

// Exceptions (bad_alloc, a json failure) never cross the ABI.
template <typename F>
int guarded(const char* fn, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(ErrorCode::kResourceLimit, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(ErrorCode::kInternal, std::string(fn) + ": " + e.what());
  } catch (...) {
    return fail(ErrorCode::kInternal, std::string(fn) + ": unknown exception");
  }
}

}  // namespace

extern "C" {

int llmrr_reader_open(const char* path, llmrr_reader** out) {
  if (out == nullptr) return fail(ErrorCode::kInvalidArgument, "llmrr_reader_open: null out");
  *out = nullptr;
  if (path == nullptr) return fail(ErrorCode::kInvalidArgument, "llmrr_reader_open: null path");
  return guarded("llmrr_reader_open", [&] {
    auto opened = trace::TraceReader::open(path);
    if (!opened.ok()) return fail(opened.status());
    auto h = std::make_unique<llmrr_reader>();
    h->reader = std::move(opened).value();
    if (Status st = load(h.get()); !st.ok()) return fail(st);
    *out = h.release();
    return LLMRR_OK;
  });
}

void llmrr_reader_close(llmrr_reader* reader) {
  delete reader;
}

const char* llmrr_reader_header_json(const llmrr_reader* reader) {
  return reader ? reader->header_json.c_str() : "";
}

const char* llmrr_reader_tables(const llmrr_reader* reader) {
  return reader ? reader->table_names.c_str() : "";
}

const char* llmrr_reader_columns(const llmrr_reader* reader, const char* table) {
  const Table* t = find_table(reader, table);
  if (t == nullptr) {
    fail(ErrorCode::kInvalidArgument,
         std::string("llmrr_reader_columns: unknown table '") + (table ? table : "(null)") + "'");
    return nullptr;
  }
  return t->listing.c_str();
}

int64_t llmrr_reader_rows(const llmrr_reader* reader, const char* table) {
  const Table* t = find_table(reader, table);
  return t ? t->rows : -1;
}

int llmrr_reader_column(const llmrr_reader* reader, const char* table, const char* column,
                        const void** data, int64_t* count) {
  if (data == nullptr || count == nullptr)
    return fail(ErrorCode::kInvalidArgument, "llmrr_reader_column: null output pointer");
  const Column* c = nullptr;
  if (int rc = find_column(reader, "llmrr_reader_column", table, column, &c); rc != LLMRR_OK)
    return rc;
  if (c->type == "str")
    return fail(ErrorCode::kInvalidArgument, std::string("llmrr_reader_column: ") + table + "." +
                                                 column +
                                                 " is a str column (use llmrr_reader_strings)");
  *data = c->bytes.empty() ? nullptr : c->bytes.data();
  *count = c->count;
  return LLMRR_OK;
}

int llmrr_reader_strings(const llmrr_reader* reader, const char* table, const char* column,
                         const char** data, int64_t* bytes) {
  if (data == nullptr || bytes == nullptr)
    return fail(ErrorCode::kInvalidArgument, "llmrr_reader_strings: null output pointer");
  const Column* c = nullptr;
  if (int rc = find_column(reader, "llmrr_reader_strings", table, column, &c); rc != LLMRR_OK)
    return rc;
  if (c->type != "str")
    return fail(ErrorCode::kInvalidArgument, std::string("llmrr_reader_strings: ") + table + "." +
                                                 column + " is a " + c->type + " column");
  *data = reinterpret_cast<const char*>(c->bytes.data());
  *bytes = static_cast<int64_t>(c->bytes.size());
  return LLMRR_OK;
}

int llmrr_reader_blob(llmrr_reader* reader, int64_t id, void* out, size_t capacity, size_t* bytes) {
  if (reader == nullptr || bytes == nullptr)
    return fail(ErrorCode::kInvalidArgument, "llmrr_reader_blob: null reader or size pointer");
  return guarded("llmrr_reader_blob", [&] {
    std::vector<uint8_t> data;
    if (Status st = reader->reader->read_blob(id, &data); !st.ok()) return fail(st);
    *bytes = data.size();
    if (out != nullptr) std::memcpy(out, data.data(), std::min(capacity, data.size()));
    return LLMRR_OK;
  });
}

int llmrr_reader_verify(const llmrr_reader* reader) {
  if (reader == nullptr)
    return fail(ErrorCode::kInvalidArgument, "llmrr_reader_verify: null reader");
  return guarded("llmrr_reader_verify", [&] {
    Status st = reader->reader->verify();
    return st.ok() ? LLMRR_OK : fail(st);
  });
}

const char* llmrr_site_name(uint64_t packed) {
  thread_local std::string name;
  try {
    const llmrr::SiteId site = llmrr::SiteId::unpack(packed);
    name = site.packed() == packed ? llmrr::site_name(site) : std::string();
  } catch (...) {
    name.clear();
  }
  return name.c_str();
}

uint64_t llmrr_site_pack(const char* name, int* ok) {
  std::optional<llmrr::SiteId> site;
  if (name != nullptr) {
    try {
      site = llmrr::parse_site(name);
    } catch (...) {
      site.reset();
    }
  }
  if (ok != nullptr) *ok = site ? 1 : 0;
  return site ? site->packed() : 0;
}

const char* llmrr_reader_last_error(void) {
  return g_reader_error.c_str();
}

}  // extern "C"
