// StepSplitter, BufferPool and ActivitySink (recorder/cupti): step assignment by correlation
// id, the bounded pool and its refusals, and the writer path with drop accounting, checked
// by reading the trace back.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "llmrr/cupti/activity.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "test_common.h"

namespace {

using namespace llmrr;
using llmrr::cupti::ActivitySink;
using llmrr::cupti::BufferPool;
using llmrr::cupti::ParseStats;
using llmrr::cupti::StepSplitter;
using trace::ActivityKind;
using trace::KernelRecord;

KernelRecord kernel(const std::string& name, uint64_t corr) {
  KernelRecord k;
  k.name = name;
  k.correlation = corr;
  k.grid = {4, 1, 1};
  k.block = {128, 1, 1};
  k.start_ns = static_cast<int64_t>(corr) * 10;
  k.end_ns = k.start_ns + 5;
  return k;
}

trace::RunHeader header() {
  trace::RunHeader h;
  h.tool_version = "test";
  h.device.kind = "cuda";
  h.extra_config_json =
      R"j({"source":"llmrr record-cuda (CUPTI activity)","steps":"synchronisations"})j";
  return h;
}

std::vector<KernelRecord> read_all(const std::string& path, trace::TraceReader** keep = nullptr) {
  auto r = trace::TraceReader::open(path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  std::vector<KernelRecord> all, part;
  if (!r.ok()) return all;
  for (size_t f = 0; f < (*r)->frames().size(); ++f) {
    if ((*r)->frames()[f].kind != trace::FrameKind::kKernelRecords) continue;
    Status st = (*r)->read_kernels(static_cast<int64_t>(f), &part);
    EXPECT_TRUE(st.ok()) << st.to_string();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

TEST(StepSplitter, SyncModeCountsBoundariesBelowTheCorrelationId) {
  StepSplitter s(StepSplitter::Mode::kSync);
  EXPECT_EQ(s.step_of(1), 0);  // before any synchronisation
  s.sync(10);
  s.sync(20);
  EXPECT_EQ(s.step_of(5), 0);
  EXPECT_EQ(s.step_of(10), 0);  // the synchronisation's own id: launched before it
  EXPECT_EQ(s.step_of(11), 1);
  EXPECT_EQ(s.step_of(25), 2);
  // A boundary from another thread that arrives late still lands in order.
  s.sync(15);
  EXPECT_EQ(s.step_of(12), 1);
  EXPECT_EQ(s.step_of(16), 2);
  EXPECT_EQ(s.step_of(25), 3);
  EXPECT_EQ(s.boundaries(), 3);
}

TEST(StepSplitter, RangeModeGivesOutsideRecordsMinusOne) {
  StepSplitter s(StepSplitter::Mode::kRange);
  EXPECT_EQ(s.step_of(3), -1);
  EXPECT_EQ(s.range_begin(10), 0);
  s.range_end(20);
  EXPECT_EQ(s.range_begin(30), 1);
  s.range_end(40);
  EXPECT_EQ(s.step_of(5), -1);
  EXPECT_EQ(s.step_of(11), 0);
  EXPECT_EQ(s.step_of(19), 0);
  EXPECT_EQ(s.step_of(25), -1);  // between two ranges
  EXPECT_EQ(s.step_of(35), 1);
  EXPECT_EQ(s.step_of(45), -1);
}

TEST(StepSplitter, MemoryIsBoundedAndStepNumbersSurvivePruning) {
  StepSplitter s(StepSplitter::Mode::kSync, 8);
  for (uint64_t c = 1; c <= 100; ++c) s.sync(c * 10);
  EXPECT_EQ(s.boundaries(), 100);
  // Recent records still get their exact step although old boundaries were forgotten.
  EXPECT_EQ(s.step_of(995), 99);
  EXPECT_EQ(s.step_of(1005), 100);
}

TEST(BufferPool, RefusesInsteadOfGrowingAndReusesReleasedBuffers) {
  BufferPool pool(2, 5000);
  EXPECT_EQ(pool.buffer_bytes() % 8, 0u);
  EXPECT_GE(pool.buffer_bytes(), 5000u);
  uint8_t* a = pool.acquire();
  uint8_t* b = pool.acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 8, 0u);
  EXPECT_EQ(pool.acquire(), nullptr);
  EXPECT_EQ(pool.acquire(), nullptr);
  EXPECT_EQ(pool.refused(), 2);
  pool.release(a);
  pool.release(a);  // twice: still one buffer back
  uint8_t foreign[16];
  pool.release(foreign);  // not ours: ignored
  EXPECT_EQ(pool.available(), 1u);
  EXPECT_EQ(pool.acquire(), a);
  EXPECT_EQ(pool.acquire(), nullptr);
  EXPECT_EQ(pool.refused(), 3);
}

TEST(BufferPool, ConcurrentAcquireNeverHandsOutABufferTwice) {
  BufferPool pool(16, 4096);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<uint8_t*> seen;
  int64_t got = 0;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 8; ++i) {
        uint8_t* p = pool.acquire();
        if (p == nullptr) continue;
        std::lock_guard<std::mutex> lk(mu);
        EXPECT_TRUE(seen.insert(p).second);
        ++got;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(got, 16);
  EXPECT_EQ(pool.refused(), 16);
}

TEST(ActivitySink, AssignsStepsWritesFramesAndReadsBack) {
  test::TempDir dir("llmrr-cupti");
  const std::string path = dir.file("sink.trace");
  auto w = trace::TraceWriter::open(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(header()).ok());
  StepSplitter split(StepSplitter::Mode::kSync);
  ActivitySink sink(w->get(), &split, 3);  // three records per frame
  split.sync(100);
  std::vector<KernelRecord> buf = {kernel("gemm", 10), kernel("gemm", 20), kernel("relu", 150)};
  KernelRecord copy;
  copy.kind = ActivityKind::kMemcpy;
  copy.copy_kind = 2;
  copy.bytes = 4096;
  copy.correlation = 160;
  buf.push_back(copy);
  sink.consume(&buf, ParseStats{});
  EXPECT_TRUE(buf.empty());
  KernelRecord range;
  range.kind = ActivityKind::kRange;
  range.name = "decode";
  range.step = 1;
  sink.add_range(range);
  std::vector<KernelRecord> more = {kernel("softmax", 170)};
  sink.consume(&more, ParseStats{});
  ASSERT_TRUE(sink.finish().ok());
  ASSERT_TRUE(sink.finish().ok());  // idempotent
  ASSERT_TRUE((*w)->close().ok());
  const auto c = sink.counts();
  EXPECT_EQ(c.kernels, 4);
  EXPECT_EQ(c.memcpys, 1);
  EXPECT_EQ(c.ranges, 1);
  EXPECT_EQ(c.dropped, 0);
  EXPECT_EQ(c.frames, 2);
  EXPECT_EQ(c.last_step, 1);

  std::vector<KernelRecord> got = read_all(path);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0].name, "gemm");
  EXPECT_EQ(got[0].step, 0);
  EXPECT_EQ(got[1].step, 0);
  EXPECT_EQ(got[2].name, "relu");
  EXPECT_EQ(got[2].step, 1);
  EXPECT_EQ(got[3].kind, ActivityKind::kMemcpy);
  EXPECT_EQ(got[3].bytes, 4096u);
  EXPECT_EQ(got[3].step, 1);
  EXPECT_EQ(got[4].kind, ActivityKind::kRange);
  EXPECT_EQ(got[4].name, "decode");
  EXPECT_EQ(got[5].name, "softmax");
  EXPECT_EQ(got[5].grid, (std::vector<int32_t>{4, 1, 1}));

  auto r = trace::TraceReader::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->kernel_record_count(), 6);
  EXPECT_EQ((*r)->dropped_records(), 0);
  EXPECT_FALSE((*r)->lossy());
  EXPECT_EQ((*r)->step_count(), 0);
  trace::VerifyReport rep;
  Status st = (*r)->verify(&rep);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(rep.kernel_records, 6);
}

TEST(ActivitySink, DropsAreCountedInTheFooterAndMakeTheTraceLossy) {
  test::TempDir dir("llmrr-cupti");
  const std::string path = dir.file("drops.trace");
  auto w = trace::TraceWriter::open(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(header()).ok());
  StepSplitter split(StepSplitter::Mode::kSync);
  ActivitySink sink(w->get(), &split);
  std::vector<KernelRecord> buf = {kernel("gemm", 1)};
  sink.consume(&buf, ParseStats{});
  sink.add_dropped(41);
  sink.add_dropped(1);
  sink.add_refused_buffers(3);
  ASSERT_TRUE(sink.finish().ok());
  // Records after finish() are not written but counted.
  std::vector<KernelRecord> late = {kernel("late", 2)};
  sink.consume(&late, ParseStats{});
  EXPECT_EQ(sink.counts().dropped, 43);
  ASSERT_TRUE((*w)->close().ok());
  auto r = trace::TraceReader::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->lossy());
  EXPECT_EQ((*r)->dropped_records(), 42);
  EXPECT_NE((*r)->lossy_reason().find("42 activity records dropped"), std::string::npos)
      << (*r)->lossy_reason();
  EXPECT_NE((*r)->lossy_reason().find("3 CUPTI buffer requests refused"), std::string::npos);
  EXPECT_EQ((*r)->kernel_record_count(), 1);
  EXPECT_TRUE((*r)->verify().ok());
}

TEST(ActivitySink, RefusedBuffersAloneStillMarkTheTraceLossy) {
  test::TempDir dir("llmrr-cupti");
  const std::string path = dir.file("refused.trace");
  auto w = trace::TraceWriter::open(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(header()).ok());
  ActivitySink sink(w->get(), nullptr);
  sink.add_refused_buffers(2);
  ASSERT_TRUE(sink.finish().ok());
  ASSERT_TRUE((*w)->close().ok());
  auto r = trace::TraceReader::open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->lossy());
  EXPECT_EQ((*r)->dropped_records(), 0);
}

TEST(ActivitySink, AWriterErrorTurnsRecordsIntoDropsWithoutStoppingTheProgram) {
  test::TempDir dir("llmrr-cupti");
  auto w = trace::TraceWriter::open(dir.file("nohdr.trace"));
  ASSERT_TRUE(w.ok());
  // No run header: append_kernels refuses, the sink keeps counting instead of failing.
  StepSplitter split(StepSplitter::Mode::kSync);
  ActivitySink sink(w->get(), &split, 1);
  std::vector<KernelRecord> buf = {kernel("a", 1), kernel("b", 2)};
  sink.consume(&buf, ParseStats{});
  EXPECT_FALSE(sink.finish().ok());
  EXPECT_EQ(sink.counts().dropped, 2);
  EXPECT_EQ(sink.counts().frames, 0);
}

TEST(TraceWriter, RejectsMalformedKernelRecords) {
  test::TempDir dir("llmrr-cupti");
  auto w = trace::TraceWriter::open(dir.file("bad.trace"));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(header()).ok());
  KernelRecord k = kernel("k", 1);
  k.grid = {1, 2};
  Status st = (*w)->append_kernels({k});
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("grid: expected 0 or 3 entries, found 2"), std::string::npos)
      << st.message();
  k = kernel("k", 1);
  k.end_ns = k.start_ns - 1;
  EXPECT_FALSE((*w)->append_kernels({k}).ok());
  k = kernel("k", 1);
  k.step = -2;
  EXPECT_FALSE((*w)->append_kernels({k}).ok());
  k = kernel("k", 1);
  k.kind = static_cast<ActivityKind>(7);
  EXPECT_FALSE((*w)->append_kernels({k}).ok());
  EXPECT_TRUE((*w)->append_kernels({kernel("k", 1)}).ok());
  EXPECT_TRUE((*w)->close().ok());
}

}  // namespace
