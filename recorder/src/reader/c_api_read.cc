// The reader C ABI (llmrr/reader.h): a trace's step records flattened into column tables
// (reader/tables.cc builds them; reader/arrow.cc exports one over a step range as Arrow C
// Data Interface structs, llmrr/reader_arrow.h), so a language binding gets arrays with no
// FlatBuffers of its own. Decoding stays in TraceReader: one implementation of checksums,
// plan dedup and recovery.
#include "llmrr/reader.h"
#include "llmrr/reader_arrow.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "llmrr/format/run_header_json.h"
#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/site.h"
#include "llmrr/safeio/json.h"
#include "reader/tables.h"

using llmrr::ErrorCode;
using llmrr::Result;
using llmrr::Status;
using llmrr::cread::Column;
using llmrr::cread::Table;
using llmrr::cread::guarded;
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

}  // namespace

int llmrr::cread::fail_call(const Status& st) {
  return fail(st);
}

namespace {

Result<nlohmann::json> header_json(const trace::TraceReader& r) {
  const trace::RunHeader& h = r.run_header();
  nlohmann::json j = trace::run_header_json(h);
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

// The header JSON at open; the tables now (eager) or at first use (lazy).
Status open_header(llmrr_reader* h) {
  ASSIGN_OR_RETURN(nlohmann::json header, header_json(*h->reader));
  h->header_json = llmrr::safeio::dump(header);
  return Status::Ok();
}

Status load(const llmrr_reader* r) {
  auto* h = const_cast<llmrr_reader*>(r);  // the tables are a cache of the trace
  if (h->loaded) return h->load_status;
  h->loaded = true;
  try {
    Result<llmrr::cread::TableSet> set = llmrr::cread::read_tables(
        *h->reader, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), {});
    if (set.ok()) {
      h->set = std::move(set).value();
    } else {
      h->load_status = set.status();
    }
  } catch (const std::bad_alloc&) {
    h->load_status = Status(ErrorCode::kResourceLimit, "reading the tables: out of memory");
  }
  return h->load_status;
}

const Table* find_table(const llmrr_reader* r, const char* table) {
  if (r == nullptr || table == nullptr || !load(r).ok()) return nullptr;
  auto it = r->set.tables.find(table);
  return it == r->set.tables.end() ? nullptr : &it->second;
}

int find_column(const llmrr_reader* r, const char* fn, const char* table, const char* column,
                const Column** out) {
  if (r == nullptr) return fail(ErrorCode::kInvalidArgument, std::string(fn) + ": null reader");
  if (Status st = load(r); !st.ok()) return fail(st);
  const Table* t = find_table(r, table);
  if (t == nullptr)
    return fail(ErrorCode::kInvalidArgument, std::string(fn) + ": unknown table '" +
                                                 (table ? table : "(null)") +
                                                 "' (tables: " + r->set.names + ")");
  const Column* c = column ? t->find(column) : nullptr;
  if (c == nullptr)
    return fail(ErrorCode::kInvalidArgument,
                std::string(fn) + ": table '" + table + "' has no column '" +
                    (column ? column : "(null)") + "' (columns: " + t->listing + ")");
  *out = c;
  return LLMRR_OK;
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
    if (Status st = open_header(h.get()); !st.ok()) return fail(st);
    if (Status st = load(h.get()); !st.ok()) return fail(st);
    *out = h.release();
    return LLMRR_OK;
  });
}

int llmrr_reader_open_lazy(const char* path, llmrr_reader** out) {
  if (out == nullptr) return fail(ErrorCode::kInvalidArgument, "llmrr_reader_open_lazy: null out");
  *out = nullptr;
  if (path == nullptr)
    return fail(ErrorCode::kInvalidArgument, "llmrr_reader_open_lazy: null path");
  return guarded("llmrr_reader_open_lazy", [&] {
    auto opened = trace::TraceReader::open(path);
    if (!opened.ok()) return fail(opened.status());
    auto h = std::make_unique<llmrr_reader>();
    h->reader = std::move(opened).value();
    if (Status st = open_header(h.get()); !st.ok()) return fail(st);
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
  return reader ? llmrr::cread::kTableNames : "";
}

const char* llmrr_reader_columns(const llmrr_reader* reader, const char* table) {
  if (reader != nullptr) {
    if (Status st = load(reader); !st.ok()) {
      fail(st);
      return nullptr;
    }
  }
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
