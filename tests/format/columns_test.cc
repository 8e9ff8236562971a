// Column-coded step chunks (codec kColumnZstd, format 1.3; format/src/columns.h): records
// come back bit for bit, the coded payload restores the exact FlatBuffer, summaries round
// only when asked, and hostile payloads (lying trailers, column bytes that do not match the
// chunk, shared offsets that would make the walk quadratic) are refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../common/cpu_time.h"
#include "codec.h"
#include "columns.h"
#include "convert.h"
#include "llmrr/format/llmrr_generated.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "raw_trace.h"
#include "sample_records.h"
#include "test_util.h"

namespace llmrr::trace {
namespace {

using testing::TempFile;

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<StepRecord> sorted_plans(std::vector<StepRecord> steps) {
  for (StepRecord& s : steps)
    std::stable_sort(s.plans.begin(), s.plans.end(),
                     [](const SitePlan& a, const SitePlan& b) { return a.site < b.site; });
  return steps;
}

// Steps whose fingerprints look like a real run's: random hashes, summaries of similar
// magnitude with random low bits.
std::vector<StepRecord> fingerprint_heavy(int steps_n = 12) {
  std::vector<StepRecord> steps = testing::SampleRun(3, 6, steps_n, 4).all();
  std::mt19937_64 rng(5);
  for (StepRecord& s : steps)
    for (SiteRows& sr : s.rows)
      for (Fingerprint& f : sr.rows) {
        f.hash = rng();
        f.l2 = 50.0f + 10.0f * testing::uniform01(rng);
        f.max_abs = 3.0f + testing::uniform01(rng);
      }
  return steps;
}

std::string write(const std::string& path, const std::vector<StepRecord>& steps,
                  WriterOptions opt) {
  auto w = TraceWriter::open(path, opt);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE((*w)->append_run_header(testing::sample_header()).ok());
  for (const StepRecord& s : steps) {
    Status st = (*w)->append_step(s);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

std::vector<StepRecord> read_all(const std::string& path, std::vector<Codec>* codecs = nullptr) {
  auto r = TraceReader::open(path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  Status v = (*r)->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
  if (codecs)
    for (const FrameInfo& f : (*r)->frames())
      if (f.kind == FrameKind::kStepChunk) codecs->push_back(f.codec);
  std::vector<StepRecord> out;
  StepRecord s;
  for (int64_t i = (*r)->first_step(); i <= (*r)->last_step(); ++i)
    if ((*r)->read_step(i, &s).ok()) out.push_back(s);
  return out;
}

TEST(Columns, RecordsComeBackBitForBitAndSmaller) {
  const std::vector<StepRecord> steps = fingerprint_heavy();
  size_t sizes[2] = {0, 0};
  for (bool columns : {false, true}) {
    for (int level : {0, 1, 3}) {
      SCOPED_TRACE(std::string(columns ? "columns" : "plain") + ", level " + std::to_string(level));
      TempFile f(columns ? "columns" : "plain");
      WriterOptions opt;
      opt.column_chunks = columns;
      opt.zstd_level = level;
      opt.chunk_target_bytes = 16 << 10;  // several chunks
      write(f.path, steps, opt);
      std::vector<Codec> codecs;
      EXPECT_EQ(read_all(f.path, &codecs), sorted_plans(steps));
      ASSERT_GT(codecs.size(), 2u);
      for (Codec c : codecs)
        EXPECT_EQ(c, level == 0 ? Codec::kNone : columns ? Codec::kColumnZstd : Codec::kZstd);
      if (level == 1) sizes[columns] = testing::read_file(f.path).size();
    }
  }
  // 64-bit hashes stay 8 bytes; the summaries' exponent bytes and the top-K's high bytes
  // compress once they are columns.
  EXPECT_LT(static_cast<double>(sizes[1]), 0.95 * static_cast<double>(sizes[0]));
}

TEST(Columns, SplitThenJoinRestoresTheFlatBuffer) {
  detail::ChunkBuilder b;
  detail::KindCounters kc;
  for (const StepRecord& s : fingerprint_heavy(4)) b.add_step(s, &kc);
  std::vector<uint8_t> fb;
  b.finish(&fb);
  detail::Buffer coded;
  std::vector<detail::NoisySpan> noisy;
  ASSERT_TRUE(detail::split_columns(fb.data(), fb.size(), &coded, &noisy));
  ASSERT_GT(coded.size(), fb.size());
  ASSERT_FALSE(noisy.empty());
  EXPECT_EQ(noisy[0].begin, fb.size());  // the hashes come first, stored
  for (size_t i = 1; i < noisy.size(); ++i) EXPECT_GT(noisy[i].begin, noisy[i - 1].end - 1);
  // The moved values left zeros: the coded FlatBuffer differs from the original.
  EXPECT_NE(std::memcmp(coded.data(), fb.data(), fb.size()), 0);
  size_t fb_size = 0;
  std::string why;
  ASSERT_TRUE(detail::column_fb_size(coded.data(), coded.size(), &fb_size, &why)) << why;
  EXPECT_EQ(fb_size, fb.size());
  EXPECT_EQ(detail::join_columns(&coded, fb_size), "");
  ASSERT_EQ(coded.size(), fb.size());
  EXPECT_EQ(std::memcmp(coded.data(), fb.data(), fb.size()), 0);
}

TEST(Columns, RoundMantissaIsToNearestEvenAndStaysFinite) {
  // 1 + 2^-23 (the smallest step) rounds to 1 at 14 bits; 1 + 2^-9 + 2^-10 (past the half
  // of the last kept bit) rounds up to 1 + 2^-8; an exact half rounds to even.
  EXPECT_EQ(float_of(detail::round_mantissa(bits_of(1.0f + 0x1p-23f), 14)), 1.0f);
  EXPECT_EQ(float_of(detail::round_mantissa(bits_of(1.0f + 0x1p-9f + 0x1p-10f), 8)),
            1.0f + 0x1p-8f);
  EXPECT_EQ(float_of(detail::round_mantissa(bits_of(1.0f + 0x1p-9f), 8)), 1.0f);
  EXPECT_EQ(float_of(detail::round_mantissa(bits_of(1.0f + 0x1p-8f + 0x1p-9f), 8)), 1.0f + 0x1p-7f);
  // A carry into the exponent is the nearest value: 2 - 2^-23 → 2.
  EXPECT_EQ(float_of(detail::round_mantissa(bits_of(2.0f - 0x1p-23f), 14)), 2.0f);
  // Never to inf; inf and NaN kept; sign kept; 23 bits is exact.
  const float big = std::numeric_limits<float>::max();
  EXPECT_TRUE(std::isfinite(float_of(detail::round_mantissa(bits_of(big), 10))));
  EXPECT_EQ(detail::round_mantissa(bits_of(INFINITY), 4), bits_of(INFINITY));
  EXPECT_TRUE(std::isnan(float_of(detail::round_mantissa(bits_of(NAN), 4))));
  EXPECT_EQ(float_of(detail::round_mantissa(bits_of(-3.0f - 0x1p-20f), 10)), -3.0f);
  EXPECT_EQ(detail::round_mantissa(0x3f8abcdeu, 23), 0x3f8abcdeu);
}

TEST(Columns, SummaryBitsRoundSiteRowsOnly) {
  const std::vector<StepRecord> steps = fingerprint_heavy();
  TempFile f("summary");
  WriterOptions opt;
  opt.summary_bits = 10;
  write(f.path, steps, opt);
  std::vector<StepRecord> want = sorted_plans(steps);
  for (StepRecord& s : want)
    for (SiteRows& sr : s.rows)
      for (Fingerprint& fp : sr.rows) {
        fp.l2 = float_of(detail::round_mantissa(bits_of(fp.l2), 10));
        fp.max_abs = float_of(detail::round_mantissa(bits_of(fp.max_abs), 10));
      }
  const std::vector<StepRecord> got = read_all(f.path);
  ASSERT_EQ(got.size(), want.size());
  bool rounded = false;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]);  // hashes, logits (their fingerprint too) exact
    for (size_t k = 0; k < steps[i].rows.size() && !rounded; ++k)
      rounded = !steps[i].rows[k].rows.empty() &&
                steps[i].rows[k].rows[0].l2 != got[i].rows[k].rows[0].l2;
  }
  EXPECT_TRUE(rounded);  // the test data has low bits to lose
  WriterOptions bad;
  bad.summary_bits = 24;
  auto w = TraceWriter::open(f.path, bad);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("summary_bits: expected 0..23, found 24"), std::string::npos);
}

// A coded payload of a small chunk, for the hostile cases below.
detail::Buffer coded_chunk(std::vector<uint8_t>* fb_out = nullptr) {
  detail::ChunkBuilder b;
  detail::KindCounters kc;
  for (const StepRecord& s : fingerprint_heavy(2)) b.add_step(s, &kc);
  std::vector<uint8_t> fb;
  b.finish(&fb);
  detail::Buffer coded;
  std::vector<detail::NoisySpan> noisy;
  EXPECT_TRUE(detail::split_columns(fb.data(), fb.size(), &coded, &noisy));
  if (fb_out) *fb_out = fb;
  return coded;
}

TEST(Columns, LyingTrailersAreRefused) {
  size_t fb_size = 0;
  std::string why;
  detail::Buffer c = coded_chunk();
  EXPECT_FALSE(detail::column_fb_size(c.data(), 7, &fb_size, &why));
  EXPECT_NE(why.find("expected an 8-byte trailer, found 7 bytes"), std::string::npos) << why;
  detail::Buffer v = c;
  detail::store_u32(v.data() + v.size() - 4, 2);
  EXPECT_FALSE(detail::column_fb_size(v.data(), v.size(), &fb_size, &why));
  EXPECT_NE(why.find("expected column layout version 1, found 2"), std::string::npos) << why;
  detail::Buffer s = c;
  detail::store_u32(s.data() + s.size() - 8, static_cast<uint32_t>(s.size()));
  EXPECT_FALSE(detail::column_fb_size(s.data(), s.size(), &fb_size, &why));
  EXPECT_NE(why.find("found a trailer that says"), std::string::npos) << why;
}

TEST(Columns, ColumnBytesMustMatchTheChunk) {
  std::vector<uint8_t> fb;
  detail::Buffer c = coded_chunk(&fb);
  // Four column bytes fewer (the trailer moved down): the walk wants more than there is.
  detail::Buffer shorter(c.begin(), c.end() - 12);
  detail::store_u32(shorter.data() + shorter.size() - 8, static_cast<uint32_t>(fb.size()));
  detail::store_u32(shorter.data() + shorter.size() - 4, detail::kColumnLayoutVersion);
  std::string why = detail::join_columns(&shorter, fb.size());
  EXPECT_NE(why.find("column bytes to hold the chunk's fingerprints"), std::string::npos) << why;
  // Four more: the walk leaves bytes over.
  detail::Buffer longer(c.begin(), c.end() - 8);
  longer.insert(longer.end(), 4, 0);
  longer.resize(longer.size() + 8);
  detail::store_u32(longer.data() + longer.size() - 8, static_cast<uint32_t>(fb.size()));
  detail::store_u32(longer.data() + longer.size() - 4, detail::kColumnLayoutVersion);
  why = detail::join_columns(&longer, fb.size());
  EXPECT_NE(why.find("column bytes to hold the chunk's fingerprints"), std::string::npos) << why;
}

TEST(Columns, SharedOffsetsCannotMakeTheWalkQuadratic) {
  // One Step whose 2000 SiteRows share one rows vector, listed 20000 times: a Verifier-valid
  // chunk of ~100 KB that names 40 million SiteRows (and 4e10 fingerprints).
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<fb::Fingerprint> fps(1000);
  auto rows = fbb.CreateVectorOfStructs(fps);
  std::vector<flatbuffers::Offset<fb::SiteRows>> srs;
  for (int i = 0; i < 2000; ++i) srs.push_back(fb::CreateSiteRows(fbb, 1, 8, 0, rows));
  auto srv = fbb.CreateVector(srs);
  fb::StepBuilder sb(fbb);
  sb.add_step(0);
  sb.add_rows(srv);
  auto step = sb.Finish();
  std::vector<flatbuffers::Offset<fb::Step>> steps(20000, step);
  auto sv = fbb.CreateVector(steps);
  fb::StepChunkBuilder cb(fbb);
  cb.add_steps(sv);
  fbb.Finish(cb.Finish());
  detail::Buffer raw(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  const size_t fb_size = raw.size();
  raw.resize(fb_size + 16 * 1000 + 8);  // columns for one SiteRows' worth
  detail::store_u32(raw.data() + raw.size() - 8, static_cast<uint32_t>(fb_size));
  detail::store_u32(raw.data() + raw.size() - 4, detail::kColumnLayoutVersion);
  const double cpu0 = test::process_cpu_seconds();
  const std::string why = detail::join_columns(&raw, fb_size);
  const double cpu = test::process_cpu_seconds() - cpu0;  // CPU, not wall: the code, not the host
  EXPECT_FALSE(why.empty());
  EXPECT_LT(cpu, 1.0);
  // Without the column bytes' limit the visit cap refuses it.
  detail::Buffer big(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  big.resize(fb_size + (size_t{8} << 20) + 8);
  detail::store_u32(big.data() + big.size() - 8, static_cast<uint32_t>(fb_size));
  detail::store_u32(big.data() + big.size() - 4, detail::kColumnLayoutVersion);
  EXPECT_FALSE(detail::join_columns(&big, fb_size).empty());
}

// A column-coded chunk `damage` may alter, in a trace of its own (RawTrace: no writer
// checks); returns what reading its step says.
Status read_damaged(const std::string& name, void (*damage)(detail::Buffer*)) {
  const std::vector<StepRecord> steps = fingerprint_heavy(2);
  detail::ChunkBuilder b;
  detail::KindCounters kc;
  for (const StepRecord& s : steps) b.add_step(s, &kc);
  const int64_t first = b.first_step(), last = b.last_step();
  std::vector<uint8_t> fb;
  b.finish(&fb);
  detail::Buffer coded;
  std::vector<detail::NoisySpan> noisy;
  EXPECT_TRUE(detail::split_columns(fb.data(), fb.size(), &coded, &noisy));
  damage(&coded);
  testing::RawTrace t;
  t.add_run_header(testing::sample_header());
  t.add_chunk_bytes(std::vector<uint8_t>(coded.begin(), coded.end()), first, last, {},
                    static_cast<int64_t>(steps.size()), nullptr, Codec::kColumnZstd);
  // No footer: the reader scans the frames (its counts would need the chunk's records).
  TempFile f(name);
  EXPECT_TRUE(testing::write_file(f.path, t.bytes));
  auto r = TraceReader::open(f.path);
  if (!r.ok()) return r.status();
  StepRecord s;
  RETURN_IF_ERROR((*r)->read_step(first, &s));
  EXPECT_EQ(s, sorted_plans(steps)[0]);
  return (*r)->verify();
}

TEST(Columns, TheReaderRefusesADamagedColumnPayload) {
  Status intact = read_damaged("intact", [](detail::Buffer*) {});
  EXPECT_TRUE(intact.ok()) << intact.to_string();
  Status v = read_damaged(
      "version", [](detail::Buffer* c) { detail::store_u32(c->data() + c->size() - 4, 9); });
  EXPECT_EQ(v.code(), ErrorCode::kCorruptPayload);
  EXPECT_NE(v.message().find("expected column layout version 1, found 9"), std::string::npos)
      << v.message();
  Status z = read_damaged("fbsize", [](detail::Buffer* c) {
    detail::store_u32(c->data() + c->size() - 8, 40);  // a FlatBuffer of 40 bytes
  });
  EXPECT_EQ(z.code(), ErrorCode::kBadFlatbuffer);
  EXPECT_NE(z.message().find("40 bytes before the columns"), std::string::npos) << z.message();
}

}  // namespace
}  // namespace llmrr::trace
