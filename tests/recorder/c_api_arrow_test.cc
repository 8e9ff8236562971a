// The reader ABI's Arrow export (llmrr/reader_arrow.h), through the shared library: schema
// formats, lengths and values against the eager column API, zero copy (the Arrow data
// buffer is the table's column), step ranges, and the release contract (exports outlive
// the table and the reader; a consumer may move children out; a stream ends with a released
// array).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "llmrr/reader.h"
#include "llmrr/reader_arrow.h"
#include "recorder_test_util.h"

namespace llmrr::rectest {
namespace {

constexpr int64_t kAll0 = std::numeric_limits<int64_t>::min();
constexpr int64_t kAll1 = std::numeric_limits<int64_t>::max();

// A tiny-moe run with every site captured, chunked prefill, a late request and load, in
// small step chunks (several chunks, so ranges cross chunk boundaries).
const std::string& moe_trace() {
  static const std::string path = [] {
    RunSpec spec;
    spec.model = "tiny-moe";
    spec.config.scheduler.prefill_chunk = 16;
    spec.config.capacity.factor = 1.0;
    spec.recorder.capture = trace::CaptureLevel::kAll;
    spec.recorder.top_k = 6;
    spec.recorder.writer.chunk_target_bytes = 8 << 10;
    spec.requests.push_back(request(0, "The quick brown fox jumps over the lazy dog", 10));
    spec.requests.push_back(request(1, "Hello", 6, /*arrival=*/3));
    for (const RequestSpec& r : load_requests(builtin("tiny-moe"), 3, 11, 2))
      spec.requests.push_back(r);
    return record_run(spec).path;
  }();
  return path;
}

struct Reader {
  llmrr_reader* r = nullptr;
  explicit Reader(bool lazy) {
    const int rc = lazy ? llmrr_reader_open_lazy(moe_trace().c_str(), &r)
                        : llmrr_reader_open(moe_trace().c_str(), &r);
    EXPECT_EQ(rc, LLMRR_OK) << llmrr_reader_last_error();
  }
  ~Reader() { llmrr_reader_close(r); }
  template <typename T>
  std::vector<T> column(const char* table, const char* col) const {
    const void* data = nullptr;
    int64_t n = 0;
    EXPECT_EQ(llmrr_reader_column(r, table, col, &data, &n), LLMRR_OK) << llmrr_reader_last_error();
    const T* p = static_cast<const T*>(data);
    return std::vector<T>(p, p + n);
  }
};

llmrr_reader_table* read(llmrr_reader* r, const char* table, int64_t first = kAll0,
                         int64_t last = kAll1) {
  llmrr_reader_table* t = nullptr;
  EXPECT_EQ(llmrr_reader_read_table(r, table, first, last, &t), LLMRR_OK)
      << llmrr_reader_last_error();
  return t;
}

int child_index(const ArrowSchema& s, const std::string& name) {
  for (int64_t i = 0; i < s.n_children; ++i)
    if (name == s.children[i]->name) return static_cast<int>(i);
  ADD_FAILURE() << "no field " << name;
  return 0;
}

template <typename T>
std::vector<T> values(const ArrowArray& a) {
  const T* p = static_cast<const T*>(a.buffers[1]);
  return std::vector<T>(p, p + a.length);
}

TEST(CApiArrow, SchemaAndValuesEqualTheColumns) {
  Reader eager(false), lazy(true);
  llmrr_reader_table* t = read(lazy.r, "fingerprints");
  ASSERT_NE(t, nullptr);
  const int64_t rows = llmrr_reader_rows(eager.r, "fingerprints");
  ASSERT_GT(rows, 100);
  EXPECT_EQ(llmrr_reader_table_rows(t), rows);
  EXPECT_STREQ(llmrr_reader_table_fields(t),
               "step:l site:L site_name:dict<U> site_order:L batch_row:i request:L position:i "
               "cols:i hash:L l2:f max_abs:f");
  ArrowSchema s;
  ArrowArray a;
  ASSERT_EQ(llmrr_reader_table_export(t, &s, &a), LLMRR_OK);
  EXPECT_STREQ(s.format, "+s");
  EXPECT_EQ(a.length, rows);
  EXPECT_EQ(a.n_buffers, 1);
  EXPECT_EQ(a.n_children, s.n_children);
  EXPECT_EQ(s.n_children, 11);
  for (int64_t i = 0; i < a.n_children; ++i) {
    EXPECT_EQ(a.children[i]->length, rows) << s.children[i]->name;
    EXPECT_EQ(a.children[i]->null_count, 0);
    EXPECT_EQ(s.children[i]->flags & ARROW_FLAG_NULLABLE, 0);
  }
  // Primitive columns: same values, and the same memory (no copy).
  for (const char* col : {"hash", "request"}) {
    const ArrowArray& c = *a.children[child_index(s, col)];
    EXPECT_STREQ(s.children[child_index(s, col)]->format, "L");
    EXPECT_EQ(values<uint64_t>(c), eager.column<uint64_t>("fingerprints", col)) << col;
    const void* data = nullptr;
    int64_t n = 0;
    ASSERT_EQ(llmrr_reader_table_column(t, col, &data, &n), LLMRR_OK);
    EXPECT_EQ(c.buffers[1], data) << col;
    EXPECT_EQ(n, rows);
  }
  const ArrowArray& l2 = *a.children[child_index(s, "l2")];
  EXPECT_EQ(values<float>(l2), eager.column<float>("fingerprints", "l2"));
  // site_name: int32 indices into the distinct names, in forward order.
  const int si = child_index(s, "site_name");
  const ArrowSchema& ss = *s.children[si];
  const ArrowArray& sa = *a.children[si];
  EXPECT_STREQ(ss.format, "i");
  ASSERT_NE(ss.dictionary, nullptr);
  ASSERT_NE(sa.dictionary, nullptr);
  EXPECT_STREQ(ss.dictionary->format, "U");
  const ArrowArray& dict = *sa.dictionary;
  const int64_t* off = static_cast<const int64_t*>(dict.buffers[1]);
  const char* chars = static_cast<const char*>(dict.buffers[2]);
  std::vector<std::string> names;
  for (int64_t k = 0; k < dict.length; ++k) names.emplace_back(chars + off[k], off[k + 1] - off[k]);
  EXPECT_EQ(names.front(), "embed");
  EXPECT_EQ(names.back(), "logits");
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  const std::vector<uint64_t> site = eager.column<uint64_t>("fingerprints", "site");
  const std::vector<int32_t> idx = values<int32_t>(sa);
  const std::vector<uint64_t> order = values<uint64_t>(*a.children[child_index(s, "site_order")]);
  for (int64_t i = 0; i < rows; ++i) {
    ASSERT_GE(idx[i], 0);
    ASSERT_LT(idx[i], dict.length);
    ASSERT_EQ(names[idx[i]], llmrr_site_name(site[i])) << i;
    if (i > 0 && idx[i] != idx[i - 1]) {
      ASSERT_EQ(idx[i] < idx[i - 1], order[i] < order[i - 1]) << i;
    }
  }
  a.release(&a);
  s.release(&s);
  EXPECT_EQ(a.release, nullptr);
  EXPECT_EQ(s.release, nullptr);
  llmrr_reader_table_free(t);
}

TEST(CApiArrow, TopKAndPromptLists) {
  Reader eager(false), lazy(true);
  llmrr_reader_table* lg = read(lazy.r, "logits");
  ArrowSchema s;
  ArrowArray a;
  ASSERT_EQ(llmrr_reader_table_export(lg, &s, &a), LLMRR_OK);
  const int ti = child_index(s, "top_ids");
  EXPECT_STREQ(s.children[ti]->format, "+w:6");
  EXPECT_STREQ(s.children[ti]->children[0]->format, "i");
  EXPECT_STREQ(s.children[child_index(s, "top_values")]->format, "+w:6");
  const ArrowArray& ids = *a.children[ti]->children[0];
  const ArrowArray& vals = *a.children[child_index(s, "top_values")]->children[0];
  EXPECT_EQ(ids.length, a.length * 6);
  const auto logit = eager.column<int64_t>("logits_topk", "logit");
  const auto rank = eager.column<int32_t>("logits_topk", "rank");
  const auto id = eager.column<int32_t>("logits_topk", "id");
  const auto value = eager.column<float>("logits_topk", "value");
  ASSERT_EQ(static_cast<int64_t>(logit.size()), a.length * 6);  // every row has 6
  const int32_t* ip = static_cast<const int32_t*>(ids.buffers[1]);
  const float* vp = static_cast<const float*>(vals.buffers[1]);
  for (size_t i = 0; i < logit.size(); ++i) {
    EXPECT_EQ(ip[logit[i] * 6 + rank[i]], id[i]);
    EXPECT_EQ(vp[logit[i] * 6 + rank[i]], value[i]);
  }
  a.release(&a);
  s.release(&s);
  llmrr_reader_table_free(lg);

  llmrr_reader_table* rq = read(lazy.r, "requests");
  ASSERT_EQ(llmrr_reader_table_export(rq, &s, &a), LLMRR_OK);
  const int pi = child_index(s, "prompt");
  EXPECT_STREQ(s.children[pi]->format, "+L");
  const ArrowArray& pl = *a.children[pi];
  const int64_t* off = static_cast<const int64_t*>(pl.buffers[1]);
  const auto len = eager.column<int32_t>("requests", "prompt_len");
  const auto tokens = eager.column<int32_t>("prompt_tokens", "token");
  ASSERT_EQ(pl.length, static_cast<int64_t>(len.size()));
  EXPECT_EQ(pl.length, 5);
  for (int64_t r = 0; r < pl.length; ++r) EXPECT_EQ(off[r + 1] - off[r], len[r]);
  EXPECT_EQ(values<int32_t>(*pl.children[0]), tokens);
  const int li = child_index(s, "label");
  EXPECT_STREQ(s.children[li]->format, "U");
  a.release(&a);
  s.release(&s);
  llmrr_reader_table_free(rq);
}

TEST(CApiArrow, StepRangeHoldsExactlyThoseSteps) {
  Reader eager(false), lazy(true);
  const auto step = eager.column<int64_t>("fingerprints", "step");
  const auto hash = eager.column<uint64_t>("fingerprints", "hash");
  const int64_t first = step[step.size() / 3], last = step[2 * step.size() / 3];
  std::vector<uint64_t> want;
  for (size_t i = 0; i < step.size(); ++i)
    if (step[i] >= first && step[i] <= last) want.push_back(hash[i]);
  llmrr_reader_table* t = read(lazy.r, "fingerprints", first, last);
  const void* data = nullptr;
  int64_t n = 0;
  ASSERT_EQ(llmrr_reader_table_column(t, "hash", &data, &n), LLMRR_OK);
  const uint64_t* h = static_cast<const uint64_t*>(data);
  EXPECT_EQ(std::vector<uint64_t>(h, h + n), want);
  ASSERT_EQ(llmrr_reader_table_column(t, "step", &data, &n), LLMRR_OK);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_GE(static_cast<const int64_t*>(data)[i], first);
    EXPECT_LE(static_cast<const int64_t*>(data)[i], last);
  }
  llmrr_reader_table_free(t);
  // requests over a range: those arriving in it (request 1 arrives at step 3).
  const auto arrival = eager.column<int64_t>("requests", "arrival_step");
  const auto ids = eager.column<uint64_t>("requests", "id");
  std::vector<uint64_t> arriving;
  for (size_t i = 0; i < arrival.size(); ++i)
    if (arrival[i] == 3) arriving.push_back(ids[i]);
  ASSERT_FALSE(arriving.empty());
  EXPECT_EQ(arriving[0], 1u);
  t = read(lazy.r, "requests", 3, 3);
  ASSERT_EQ(llmrr_reader_table_column(t, "id", &data, &n), LLMRR_OK);
  const uint64_t* got = static_cast<const uint64_t*>(data);
  EXPECT_EQ(std::vector<uint64_t>(got, got + n), arriving);
  llmrr_reader_table_free(t);
}

// A step range reads only the chunks whose index range overlaps it: with the last step chunk
// damaged, a range before it reads, the whole table names the damaged frame.
TEST(CApiArrow, StepRangeTouchesOnlyItsChunks) {
  const std::string path = temp_path("damaged_tail.trace");
  std::vector<uint8_t> bytes;
  {
    std::FILE* f = std::fopen(moe_trace().c_str(), "rb");
    ASSERT_NE(f, nullptr);
    int c;
    while ((c = std::fgetc(f)) != EOF) bytes.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
  }
  std::unique_ptr<trace::TraceReader> tr = open_reader(moe_trace());
  std::vector<trace::FrameInfo> chunks;
  for (const trace::FrameInfo& fi : tr->frames())
    if (fi.kind == trace::FrameKind::kStepChunk) chunks.push_back(fi);
  ASSERT_GE(chunks.size(), 3u);
  const trace::FrameInfo last = chunks.back();
  bytes[last.offset + trace::kFrameHeaderBytes + last.stored_size / 2] ^= 0x5a;
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  llmrr_reader* r = nullptr;
  ASSERT_EQ(llmrr_reader_open_lazy(path.c_str(), &r), LLMRR_OK) << llmrr_reader_last_error();
  llmrr_reader_table* t = nullptr;
  ASSERT_EQ(llmrr_reader_read_table(r, "fingerprints", chunks[0].first, chunks[1].last, &t),
            LLMRR_OK)
      << llmrr_reader_last_error();
  EXPECT_GT(llmrr_reader_table_rows(t), 0);
  llmrr_reader_table_free(t);
  t = nullptr;
  EXPECT_NE(llmrr_reader_read_table(r, "fingerprints", kAll0, kAll1, &t), LLMRR_OK);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(std::string(llmrr_reader_last_error()).find("at offset " + std::to_string(last.offset)),
            std::string::npos)
      << llmrr_reader_last_error();
  llmrr_reader_close(r);
}

TEST(CApiArrow, ExportsOutliveTableAndReaderAndStreamEnds) {
  auto* r = new Reader(true);
  llmrr_reader_table* t = read(r->r, "fingerprints");
  std::vector<uint64_t> hashes;
  {
    const void* data = nullptr;
    int64_t n = 0;
    ASSERT_EQ(llmrr_reader_table_column(t, "hash", &data, &n), LLMRR_OK);
    hashes.assign(static_cast<const uint64_t*>(data), static_cast<const uint64_t*>(data) + n);
  }
  ArrowArrayStream* stream = llmrr_reader_stream_alloc();
  ASSERT_NE(stream, nullptr);
  ASSERT_EQ(llmrr_reader_table_stream(t, stream), LLMRR_OK);
  llmrr_reader_table_free(t);  // the stream keeps the columns
  delete r;                    // and closing the reader does not touch them
  ArrowSchema s;
  ASSERT_EQ(stream->get_schema(stream, &s), 0);
  EXPECT_STREQ(s.format, "+s");
  ArrowArray a;
  ASSERT_EQ(stream->get_next(stream, &a), 0);
  ASSERT_NE(a.release, nullptr);
  // A consumer moves a child out (the spec's "moving child arrays"), then releases the
  // parent: the moved child stays valid until its own release.
  const int hi = child_index(s, "hash");
  ArrowArray moved = *a.children[hi];
  a.children[hi]->release = nullptr;
  ArrowArray end;
  ASSERT_EQ(stream->get_next(stream, &end), 0);
  EXPECT_EQ(end.release, nullptr);  // one batch, then the end
  EXPECT_EQ(stream->get_last_error(stream), nullptr);
  llmrr_reader_stream_free(stream);  // releases the stream; the array is the consumer's
  a.release(&a);
  s.release(&s);
  EXPECT_EQ(values<uint64_t>(moved), hashes);
  moved.release(&moved);
  EXPECT_EQ(moved.release, nullptr);
  llmrr_reader_stream_free(nullptr);
}

TEST(CApiArrow, BadCallsAreRefused) {
  Reader lazy(true);
  llmrr_reader_table* t = nullptr;
  EXPECT_NE(llmrr_reader_read_table(lazy.r, "nonsense", kAll0, kAll1, &t), LLMRR_OK);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(std::string(llmrr_reader_last_error()).find("unknown table 'nonsense'"),
            std::string::npos);
  EXPECT_NE(llmrr_reader_read_table(lazy.r, "requests steps", kAll0, kAll1, &t), LLMRR_OK);
  EXPECT_NE(llmrr_reader_read_table(lazy.r, "steps", 5, 4, &t), LLMRR_OK);
  EXPECT_NE(std::string(llmrr_reader_last_error()).find("expected first <= last"),
            std::string::npos);
  EXPECT_NE(llmrr_reader_read_table(nullptr, "steps", kAll0, kAll1, &t), LLMRR_OK);
  EXPECT_NE(llmrr_reader_read_table(lazy.r, "steps", kAll0, kAll1, nullptr), LLMRR_OK);
  t = read(lazy.r, "steps", 1000000, 2000000);  // past the end: empty, not an error
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(llmrr_reader_table_rows(t), 0);
  ArrowSchema s;
  ArrowArray a;
  ASSERT_EQ(llmrr_reader_table_export(t, &s, &a), LLMRR_OK);
  EXPECT_EQ(a.length, 0);
  EXPECT_NE(a.children[0]->buffers[1], nullptr);  // consumers may read an empty buffer
  a.release(&a);
  s.release(&s);
  const void* data = nullptr;
  int64_t n = 0;
  EXPECT_NE(llmrr_reader_table_column(t, "nonsense", &data, &n), LLMRR_OK);
  EXPECT_NE(llmrr_reader_table_export(t, nullptr, &a), LLMRR_OK);
  llmrr_reader_table_free(t);
  llmrr_reader_table_free(nullptr);
  EXPECT_EQ(llmrr_reader_table_rows(nullptr), -1);
}

}  // namespace
}  // namespace llmrr::rectest
