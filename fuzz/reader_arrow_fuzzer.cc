// Fuzz target: arbitrary bytes as a .trace file through the reader C ABI's Arrow export
// (llmrr/reader_arrow.h): lazy open, every table over all steps and over a sub-range,
// exported as struct arrays and as a stream, every buffer read within the lengths the
// export declares (offsets checked monotonic and inside their data), then released. Nothing
// may crash, read out of bounds, leak or hang; errors are fine.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "fuzz_util.h"
#include "llmrr/reader_arrow.h"

namespace {

volatile uint64_t g_sink = 0;

template <typename T>
void touch(const void* p, int64_t n) {
  const T* v = static_cast<const T*>(p);
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v[i], sizeof(T));
    s += bits;
  }
  g_sink = g_sink + s;
}

void walk(const ArrowSchema& s, const ArrowArray& a) {
  if (a.length < 0 || a.offset != 0 || a.null_count != 0) std::abort();
  const std::string f = s.format;
  const int64_t n = a.length;
  if (f == "i" || f == "f") {
    touch<uint32_t>(a.buffers[1], n);
  } else if (f == "l" || f == "L" || f == "g") {
    touch<uint64_t>(a.buffers[1], n);
  } else if (f == "C") {
    touch<uint8_t>(a.buffers[1], n);
  } else if (f == "U") {
    const int64_t* off = static_cast<const int64_t*>(a.buffers[1]);
    for (int64_t i = 0; i < n; ++i)
      if (off[i] > off[i + 1] || off[i] < 0) std::abort();
    touch<uint8_t>(a.buffers[2], off[n]);
  } else if (f == "+L") {
    const int64_t* off = static_cast<const int64_t*>(a.buffers[1]);
    for (int64_t i = 0; i < n; ++i)
      if (off[i] > off[i + 1] || off[i] < 0) std::abort();
    if (a.n_children != 1 || off[n] > a.children[0]->length) std::abort();
  } else if (f.rfind("+w:", 0) == 0) {
    const int64_t k = std::strtoll(f.c_str() + 3, nullptr, 10);
    if (a.n_children != 1 || a.children[0]->length != n * k) std::abort();
  } else if (f != "+s") {
    std::abort();  // a format the export does not make
  }
  if (s.n_children != a.n_children) std::abort();
  for (int64_t i = 0; i < a.n_children; ++i) {
    if (f == "+s" && a.children[i]->length != n) std::abort();
    walk(*s.children[i], *a.children[i]);
  }
  if ((s.dictionary == nullptr) != (a.dictionary == nullptr)) std::abort();
  if (a.dictionary != nullptr) {
    const int32_t* idx = static_cast<const int32_t*>(a.buffers[1]);
    for (int64_t i = 0; i < n; ++i)
      if (idx[i] < 0 || idx[i] >= a.dictionary->length) std::abort();
    walk(*s.dictionary, *a.dictionary);
  }
}

void export_table(llmrr_reader* r, const char* name, int64_t first, int64_t last) {
  llmrr_reader_table* t = nullptr;
  if (llmrr_reader_read_table(r, name, first, last, &t) != LLMRR_OK) return;
  ArrowSchema s;
  ArrowArray a;
  if (llmrr_reader_table_export(t, &s, &a) == LLMRR_OK) {
    if (a.length != llmrr_reader_table_rows(t)) std::abort();
    walk(s, a);
    a.release(&a);
    s.release(&s);
  }
  ArrowArrayStream* st = llmrr_reader_stream_alloc();
  if (st != nullptr && llmrr_reader_table_stream(t, st) == LLMRR_OK) {
    llmrr_reader_table_free(t);  // the stream keeps the data
    t = nullptr;
    if (st->get_schema(st, &s) == 0) {
      if (st->get_next(st, &a) == 0 && a.release != nullptr) {
        walk(s, a);
        a.release(&a);
      }
      s.release(&s);
    }
  }
  llmrr_reader_stream_free(st);
  llmrr_reader_table_free(t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static llmrr::fuzz::MemFile file;
  if (!file.ok() || !file.assign(data, size)) return 0;
  llmrr_reader* r = nullptr;
  if (llmrr_reader_open_lazy(file.path().c_str(), &r) != LLMRR_OK) return 0;
  const std::string names = llmrr_reader_tables(r);
  size_t at = 0;
  while (at < names.size()) {
    size_t end = names.find(' ', at);
    if (end == std::string::npos) end = names.size();
    const std::string name = names.substr(at, end - at);
    export_table(r, name.c_str(), std::numeric_limits<int64_t>::min(),
                 std::numeric_limits<int64_t>::max());
    export_table(r, name.c_str(), 1, 3);
    at = end + 1;
  }
  llmrr_reader_close(r);
  return 0;
}
