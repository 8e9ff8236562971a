// Fingerprints, version evolution, and the bounds that keep hostile input cheap: shared
// FlatBuffers offsets, plan-resolution cost, non-regular files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "raw_trace.h"
#include "test_util.h"

namespace llmrr::trace {
namespace {

using namespace testing;

TEST(Fingerprint, HashIsXxh3OfRawBytesAndSummaryIsExact) {
  std::vector<float> row = {3.0f, -4.0f, 0.0f, 12.0f};
  Fingerprint f = fingerprint_row(row.data(), 4);
  EXPECT_EQ(f.hash, hash_bytes(row.data(), 16));
  EXPECT_EQ(f.l2, 13.0f);
  EXPECT_EQ(f.max_abs, 12.0f);
  // One bit anywhere changes the hash; -0.0 and +0.0 differ bitwise.
  std::vector<float> neg = row;
  neg[2] = -0.0f;
  EXPECT_NE(fingerprint_row(neg.data(), 4).hash, f.hash);
  EXPECT_EQ(fingerprint_row(neg.data(), 4).l2, f.l2);
  EXPECT_EQ(fingerprint_bytes(row.data(), 16).hash, f.hash);
  EXPECT_EQ(fingerprint_row(row.data(), 0).l2, 0.0f);
}

TEST(Fingerprint, LaneOrderIsTheDocumentedOne) {
  // The sum of squares follows the 8-lane order of fingerprint.h, in double.
  std::vector<float> row(1003);
  std::mt19937_64 rng(3);
  for (float& x : row) x = gaussian(rng) * 1000.0f;
  double lane[8] = {};
  for (size_t i = 0; i < row.size(); ++i) lane[i % 8] += static_cast<double>(row[i]) * row[i];
  const double sum =
      ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  Fingerprint f = fingerprint_row(row.data(), static_cast<int64_t>(row.size()));
  EXPECT_EQ(f.l2, static_cast<float>(std::sqrt(sum)));
  float mx = 0;
  for (float x : row) mx = std::max(mx, std::fabs(x));
  EXPECT_EQ(f.max_abs, mx);
}

// The documented computation, one element at a time: 8 double lanes (lane j takes
// i ≡ j mod 8), per-lane max by `a > m ? a : m`, NaN anywhere → NaN summary.
Fingerprint scalar_fingerprint(const std::vector<float>& row) {
  Fingerprint f;
  f.hash = hash_bytes(row.data(), row.size() * sizeof(float));
  double lane[8] = {};
  float mx[8] = {};
  bool nan = false;
  for (size_t i = 0; i < row.size(); ++i) {
    const double d = row[i];
    lane[i % 8] = lane[i % 8] + d * d;
    const float a = std::fabs(row[i]);
    mx[i % 8] = a > mx[i % 8] ? a : mx[i % 8];
    nan |= std::isnan(row[i]);
  }
  const double sum =
      ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  float m = mx[0];
  for (int j = 1; j < 8; ++j) m = mx[j] > m ? mx[j] : m;
  f.l2 = nan ? std::nanf("") : static_cast<float>(std::sqrt(sum));
  f.max_abs = nan ? std::nanf("") : m;
  return f;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

TEST(Fingerprint, VectorPathIsBitIdenticalToTheScalarDefinition) {
  // Every row length around the 8-wide steps, with awkward values (±0, ±inf, subnormals,
  // huge squares, ties) and NaN at the start, middle or tail.
  std::mt19937_64 rng(7);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            3e38f,
                            1.25f};
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 258, 576, 1000, 49152, 49157}) {
    for (int fill = 0; fill < 3; ++fill) {
      for (int nan_at : {-1, 0, 5}) {
        std::vector<float> row(static_cast<size_t>(n));
        for (float& x : row) {
          x = fill == 0   ? gaussian(rng) * 3.0f
              : fill == 1 ? static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.5f
                          : (rng() % 4 == 0 ? specials[rng() % 8] : gaussian(rng));
        }
        if (nan_at >= 0 && nan_at < n) row[static_cast<size_t>(n - 1 - nan_at)] = std::nanf("");
        SCOPED_TRACE("n " + std::to_string(n) + " fill " + std::to_string(fill) + " nan " +
                     std::to_string(nan_at));
        const Fingerprint want = scalar_fingerprint(row);
        const Fingerprint got = fingerprint_row(row.data(), n);
        EXPECT_EQ(got.hash, want.hash);
        EXPECT_TRUE(same_bits(got.l2, want.l2)) << got.l2 << " vs " << want.l2;
        EXPECT_TRUE(same_bits(got.max_abs, want.max_abs)) << got.max_abs << " vs " << want.max_abs;
      }
    }
  }
}

TEST(Fingerprint, NanAndInfinity) {
  std::vector<float> row = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  Fingerprint f = fingerprint_row(row.data(), 3);
  EXPECT_TRUE(std::isnan(f.l2));
  EXPECT_TRUE(std::isnan(f.max_abs));
  row[1] = -std::numeric_limits<float>::infinity();
  f = fingerprint_row(row.data(), 3);
  EXPECT_EQ(f.l2, std::numeric_limits<float>::infinity());
  EXPECT_EQ(f.max_abs, std::numeric_limits<float>::infinity());
}

TEST(Versions, NewerMinorReadsWithAWarningAndSkipsUnknownFrames) {
  TempFile f("newer_minor");
  RawTrace t(kFormatMajor, kFormatMinor + 1);
  t.add_run_header(sample_header());
  std::vector<StepRecord> steps = sorted_plans(SampleRun(4, 2, 2).all());
  t.add_steps(steps);
  t.add_frame(static_cast<FrameKind>(42), std::vector<uint8_t>(100, 9));  // a future frame kind
  t.finish();
  ASSERT_TRUE(write_file(f.path, t.bytes));
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->format_minor(), kFormatMinor + 1);
  ASSERT_FALSE((*r)->warnings().empty());
  EXPECT_NE((*r)->warnings()[0].find("fields added since are ignored"), std::string::npos);
  std::vector<StepRecord> got;
  ASSERT_TRUE(read_all(**r, &got).ok());
  EXPECT_EQ(got, steps);
  EXPECT_TRUE((*r)->verify().ok());
  // The same unknown kind in a file of this minor version is an error.
  RawTrace u;
  u.add_run_header(sample_header());
  u.add_frame(static_cast<FrameKind>(42), std::vector<uint8_t>(100, 9));
  u.finish();
  ASSERT_TRUE(write_file(f.path, u.bytes));
  auto r2 = TraceReader::open(f.path);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), ErrorCode::kUnknownKind);
}

TEST(Versions, GarbageAfterTheMagicIsNotANewerVersion) {
  // Random bytes after the magic read as version 47291.35145: the header is damaged, and
  // the message must not send the user to upgrade.
  TempFile f("garbage_version");
  RawTrace t(47291, 35145);
  t.add_run_header(sample_header());
  t.finish();
  ASSERT_TRUE(write_file(f.path, t.bytes));
  auto r = TraceReader::open(f.path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCorruptPayload);
  EXPECT_NE(r.status().message().find("which no llmrr wrote: the file header is damaged"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("upgrade"), std::string::npos) << r.status().message();
}

TEST(Versions, NewerMajorIsRefusedClearly) {
  TempFile f("newer_major");
  RawTrace t(kFormatMajor + 1, 0);
  t.add_run_header(sample_header());
  t.finish();
  ASSERT_TRUE(write_file(f.path, t.bytes));
  auto r = TraceReader::open(f.path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kVersionTooNew);
  EXPECT_NE(r.status().message().find("upgrade llmrr"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(f.path), std::string::npos);
}

// A step whose `rows` vector refers `refs` times to one SiteRows table of `fps` fingerprints.
std::vector<uint8_t> aliased_chunk(int refs, int fps) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<fb::Fingerprint> v(static_cast<size_t>(fps), fb::Fingerprint(1, 2, 3));
  auto rows = fbb.CreateVectorOfStructs(v);
  fb::SiteRowsBuilder sb(fbb);
  sb.add_site(1);
  sb.add_rows(rows);
  auto one = sb.Finish();
  std::vector<flatbuffers::Offset<fb::SiteRows>> all(static_cast<size_t>(refs), one);
  auto rv = fbb.CreateVector(all);
  fb::StepBuilder stb(fbb);
  stb.add_step(0);
  stb.add_plans_reset(true);
  stb.add_rows(rv);
  auto step = stb.Finish();
  std::vector<flatbuffers::Offset<fb::Step>> steps = {step};
  auto sv = fbb.CreateVector(steps);
  fb::StepChunkBuilder cb(fbb);
  cb.add_steps(sv);
  fbb.Finish(cb.Finish());
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

Status read_aliased(const std::string& path, int refs, int fps) {
  RawTrace t;
  t.add_run_header(sample_header());
  t.add_chunk_bytes(aliased_chunk(refs, fps), 0, 0);
  t.finish();
  if (!write_file(path, t.bytes)) return make_error(ErrorCode::kIo, "write");
  auto r = TraceReader::open(path);
  if (!r.ok()) return r.status();
  StepRecord s;
  Status st = (*r)->read_step(0, &s);
  EXPECT_FALSE((*r)->verify().ok());
  return st;
}

TEST(HostileInput, SharedOffsetsCannotInflateDecoding) {
  TempFile f("aliased");
  // 50k references to one table of 50k fingerprints: 40 GB if decoded naively, from a
  // payload of about 1 MB. The Verifier accepts it (few tables for the buffer size); the
  // decoder stops once records exceed the payload size.
  Status st = read_aliased(f.path, 50000, 50000);
  EXPECT_EQ(st.code(), ErrorCode::kSemantic) << st.to_string();
  EXPECT_NE(st.message().find("shares offsets"), std::string::npos) << st.message();
  // 200k references to a small table: more tables than the buffer could hold, so the
  // Verifier's table budget refuses it first.
  st = read_aliased(f.path, 200000, 100);
  EXPECT_EQ(st.code(), ErrorCode::kBadFlatbuffer) << st.to_string();
}

TEST(HostileInput, PlanResolutionCostIsBounded) {
  // A keyframe of 60k sites followed by 200 steps that keep them: 12M resolved plans,
  // over the 8M limit, in a payload of about 1 MB.
  std::vector<StepRecord> steps(201);
  for (int i = 0; i < 60000; ++i)
    steps[0].plans.push_back({static_cast<uint64_t>(i), gemm_plan(1)});
  for (int i = 0; i <= 200; ++i) steps[static_cast<size_t>(i)].step = i;
  TempFile f("plan_cost");
  RawTrace t;
  t.add_run_header(sample_header());
  t.add_steps(steps);
  t.finish();
  ASSERT_TRUE(write_file(f.path, t.bytes));
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok());
  StepRecord s;
  Status st = (*r)->read_step(3, &s);
  EXPECT_EQ(st.code(), ErrorCode::kSemantic) << st.to_string();
  EXPECT_NE(st.message().find("plan cost"), std::string::npos) << st.message();
}

TEST(HostileInput, WriterSplitsChunksBeforeThePlanCostLimit) {
  // The same shape through TraceWriter: it closes chunks early, so every step reads back.
  TempFile f("plan_cost_writer");
  auto w = TraceWriter::open(f.path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  StepRecord s;
  for (int i = 0; i < 20000; ++i)
    s.plans.push_back({static_cast<uint64_t>(i), gemm_plan(1 + i % 3)});
  for (int i = 0; i < 400; ++i) {
    s.step = i;
    ASSERT_TRUE((*w)->append_step(s).ok());
  }
  ASSERT_TRUE((*w)->close().ok());
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok());
  int chunks = 0;
  for (const FrameInfo& fi : (*r)->frames()) chunks += fi.kind == FrameKind::kStepChunk;
  EXPECT_GE(chunks, 2);  // 400 x 20k = 8M would exceed the limit in one chunk
  StepRecord got;
  ASSERT_TRUE((*r)->read_step(399, &got).ok());
  EXPECT_EQ(got.plans.size(), 20000u);
  EXPECT_TRUE((*r)->verify().ok());
}

TEST(HostileInput, NonRegularFilesAreRefused) {
  auto r = TraceReader::open("/dev/null");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  const std::string fifo = temp_path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO for reading would block until a writer appears; the reader must not hang.
  // (O_RDONLY on a FIFO blocks in open(2) itself, so the reader opens non-blocking.)
  auto f = TraceReader::open(fifo);
  std::remove(fifo.c_str());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace llmrr::trace
