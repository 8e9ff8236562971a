// The reader C ABI's tables (llmrr/reader.h): a trace's step records flattened into columns.
// One builder for both paths: llmrr_reader_open's eager tables and llmrr_reader_table's
// single table over a step range (llmrr/reader_arrow.h), which reads only the step chunks
// whose index entry overlaps the range.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"

namespace llmrr::cread {

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

  Table() = default;
  Table(std::initializer_list<std::pair<const char*, const char*>> spec);
  Column& operator[](size_t i) { return columns[i]; }
  const Column* find(const char* name) const;
};

// Every table name, in the order llmrr_reader_tables lists them.
extern const char* const kTableNames;

struct TableSet {
  std::string names;  // the tables built, space-separated, in kTableNames order
  std::map<std::string, Table> tables;
};

// Builds the tables named in `only` (every table when empty) from the steps numbered in
// [first, last]; a table some wanted table depends on (prompt_tokens for requests,
// logits_topk for logits) is built with it. Requests are those that arrive in the range;
// kernel records those whose step is in it.
Result<TableSet> read_tables(const trace::TraceReader& r, int64_t first, int64_t last,
                             const std::vector<std::string>& only);

// Sets llmrr_reader_last_error to `st` and returns its code (c_api_read.cc).
int fail_call(const Status& st);

// Runs an ABI call's body; exceptions (bad_alloc, a json failure) never cross the ABI: they
// become the call's error code and last error, prefixed with the function's name.
template <typename F>
int guarded(const char* fn, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail_call(Status(ErrorCode::kResourceLimit, std::string(fn) + ": out of memory"));
  } catch (const std::exception& e) {
    return fail_call(Status(ErrorCode::kInternal, std::string(fn) + ": " + e.what()));
  } catch (...) {
    return fail_call(Status(ErrorCode::kInternal, std::string(fn) + ": unknown exception"));
  }
}

}  // namespace llmrr::cread

// The reader ABI's handle (llmrr/reader.h).
struct llmrr_reader {
  std::unique_ptr<llmrr::trace::TraceReader> reader;
  std::string header_json;
  // Eager handles (llmrr_reader_open) build these at open; lazy ones
  // (llmrr_reader_open_lazy) at the first call that needs them.
  bool loaded = false;
  llmrr::Status load_status;
  llmrr::cread::TableSet set;
};
