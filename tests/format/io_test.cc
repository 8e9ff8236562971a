// Writer I/O errors, back-pressure and argument checks: nothing throws, every failure is a
// Status naming the file, and the file stays readable up to its last whole frame.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "raw_trace.h"
#include "test_util.h"

namespace llmrr::trace {
namespace {

using namespace testing;

TEST(WriterIo, DevFullFailsAtOpenWithIoError) {
  auto w = TraceWriter::open("/dev/full");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), ErrorCode::kIo);
  EXPECT_NE(w.status().message().find("/dev/full"), std::string::npos);
  EXPECT_NE(w.status().message().find("No space left"), std::string::npos) << w.status().message();
}

TEST(WriterIo, MissingDirectoryAndDirectoryPath) {
  auto w = TraceWriter::open("/nonexistent_llmrr_dir/x.trace");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), ErrorCode::kNotFound);
  auto d = TraceWriter::open("/tmp");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kIsDirectory);
}

TEST(WriterIo, UnwritableLocation) {
  // /sys refuses new files even to root.
  auto w = TraceWriter::open("/sys/llmrr_cannot_write.trace");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), ErrorCode::kIo) << w.status().to_string();
  EXPECT_NE(w.status().message().find("/sys/llmrr_cannot_write.trace"), std::string::npos);
}

// ENOENT from a directory that exists but takes no new files (/proc) is not a missing
// directory; an empty path says it is empty.
TEST(WriterIo, ExistingDirectoryThatTakesNoFilesAndEmptyPath) {
  auto w = TraceWriter::open("/proc/llmrr_cannot_write.trace");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), ErrorCode::kIo) << w.status().to_string();
  EXPECT_NE(w.status().message().find("the directory /proc/ exists but takes no new files"),
            std::string::npos)
      << w.status().message();
  EXPECT_EQ(w.status().message().find("does not exist"), std::string::npos);
  auto e = TraceWriter::open("");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("the output path is empty"), std::string::npos)
      << e.status().message();
}

TEST(WriterIo, ReadOnlyDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not apply";
  std::string dir = temp_path("rodir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0555), 0);
  auto w = TraceWriter::open(dir + "/x.trace");
  ::rmdir(dir.c_str());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), ErrorCode::kIo);
  EXPECT_NE(w.status().message().find("Permission denied"), std::string::npos);
}

// The file system refuses bytes past a size limit mid-recording (like a full disk).
TEST(WriterIo, DiskFullMidStreamLeavesAReadableTrace) {
  TempFile f("diskfull");
  std::vector<StepRecord> steps = sorted_plans(SampleRun(4, 8, 30).all());
  ASSERT_GT(steps.size(), 30u);
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 12000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  Status first_error;
  size_t accepted = 0;
  {
    WriterOptions opt;
    opt.max_steps_per_chunk = 2;
    auto w = TraceWriter::open(f.path, opt);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
    for (const StepRecord& s : steps) {
      Status st = (*w)->append_step(s);
      if (!st.ok()) {
        first_error = st;
        break;
      }
      ++accepted;
      if (accepted % 4 == 0 && !(*w)->flush().ok()) {
        first_error = (*w)->status();
        break;
      }
    }
    ASSERT_FALSE(first_error.ok()) << "the size limit was never hit";
    EXPECT_EQ(first_error.code(), ErrorCode::kIo) << first_error.to_string();
    EXPECT_NE(first_error.message().find(f.path), std::string::npos);
    // Sticky: every later append is refused with the same cause.
    Status again = (*w)->append_step(steps.back());
    EXPECT_EQ(again.code(), ErrorCode::kIo);
    EXPECT_NE(again.message().find("earlier error"), std::string::npos) << again.message();
    BlobSpec b;
    b.shape = {0};
    EXPECT_FALSE((*w)->append_blob(b).ok());
    (*w)->mark_lossy("recorder stopped: disk full");
    Status closed = (*w)->close();
    EXPECT_FALSE(closed.ok());
    EXPECT_EQ((*w)->close().code(), closed.code());  // idempotent
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  // Readable up to the last whole frame.
  struct stat st;
  ASSERT_EQ(::stat(f.path.c_str(), &st), 0);
  EXPECT_LE(st.st_size, 12000);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::vector<StepRecord> got;
  ASSERT_TRUE(read_all(**r, &got).ok());
  EXPECT_GT(got.size(), 0u);
  EXPECT_LT(got.size(), steps.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], steps[i]);
  EXPECT_TRUE((*r)->verify().ok());
  // Either the footer did not fit (scan: complete=false), or it did and says lossy.
  if ((*r)->has_footer()) {
    EXPECT_TRUE((*r)->lossy());
  } else {
    EXPECT_FALSE((*r)->complete());
  }
}

TEST(WriterIo, FooterAfterAnErrorStillAgreesWithTheFile) {
  // The limit leaves room for the footer after the failing frame is cut back: close()
  // writes a lossy footer whose counts match what is on disk.
  TempFile f("lossy_footer");
  std::vector<StepRecord> steps = sorted_plans(SampleRun(4, 3, 4).all());
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  Status err;
  {
    WriterOptions opt;
    opt.max_steps_per_chunk = 1;
    auto w = TraceWriter::open(f.path, opt);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
    for (size_t i = 0; i < 3; ++i) ASSERT_TRUE((*w)->append_step(steps[i]).ok());
    ASSERT_TRUE((*w)->flush().ok());
    struct stat st;
    ASSERT_EQ(::stat(f.path.c_str(), &st), 0);
    // A big blob cannot fit; the footer (small) can.
    struct rlimit lim = old;
    lim.rlim_cur = static_cast<rlim_t>(st.st_size) + 3000;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
    std::vector<float> big = logit_like(20000, 3);
    BlobSpec b;
    b.shape = {20000};
    b.data = big.data();
    b.bytes = big.size() * 4;
    ASSERT_TRUE((*w)->append_blob(b).ok());  // accepted; fails on the background thread
    err = (*w)->flush();
    EXPECT_EQ(err.code(), ErrorCode::kIo) << err.to_string();
    Status closed = (*w)->close();
    EXPECT_EQ(closed.code(), ErrorCode::kIo);
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE((*r)->has_footer());
  EXPECT_TRUE((*r)->lossy());
  EXPECT_NE((*r)->lossy_reason().find("io"), std::string::npos) << (*r)->lossy_reason();
  EXPECT_EQ((*r)->step_count(), 3);
  EXPECT_EQ((*r)->blob_count(), 0);
  Status v = (*r)->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
}

TEST(WriterIo, MarkLossyIsRecorded) {
  TempFile f("lossy");
  auto w = TraceWriter::open(f.path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  (*w)->mark_lossy("recorder stopped after step 3");
  (*w)->mark_lossy("second reason is ignored");
  ASSERT_TRUE((*w)->close().ok());
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->complete());
  EXPECT_TRUE((*r)->lossy());
  EXPECT_EQ((*r)->lossy_reason(), "recorder stopped after step 3");
}

TEST(WriterBackpressure, BytesInFlightStayBounded) {
  TempFile f("backpressure");
  WriterOptions opt;
  opt.zstd_level = 19;  // slow compression: the caller outruns the background thread
  opt.max_bytes_in_flight = 256 * 1024;
  opt.chunk_target_bytes = 32 * 1024;
  auto w = TraceWriter::open(f.path, opt);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  SampleRun run(2, 64, 40, 4, 4096, 32, 64);
  std::vector<StepRecord> steps;
  while (!run.done()) steps.push_back(run.next());
  for (const StepRecord& s : steps) ASSERT_TRUE((*w)->append_step(s).ok());
  std::vector<float> v = logit_like(40000, 1);
  for (int i = 0; i < 8; ++i) {
    BlobSpec b;
    b.shape = {40000};
    b.data = v.data();
    b.bytes = v.size() * 4;
    ASSERT_TRUE((*w)->append_blob(b).ok());
  }
  WriterStats s = (*w)->stats();
  ASSERT_TRUE((*w)->close().ok());
  EXPECT_GT(s.backpressure_waits, 0);
  EXPECT_LE(s.max_bytes_in_flight_seen, opt.max_bytes_in_flight);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok());
  std::vector<StepRecord> got;
  ASSERT_TRUE(read_all(**r, &got).ok());
  EXPECT_EQ(got, sorted_plans(steps));
}

// Deferred wakes: frames are compressed by whoever calls help() (an engine's idle worker),
// concurrently with the appends; without any help the writer's own thread still writes
// them (second queued frame, back-pressure, flush, close). Every step lands either way.
TEST(WriterHelp, HelpersAndTheWritersThreadShareTheFrames) {
  SampleRun run(2, 64, 40, 4, 4096, 32, 64);
  std::vector<StepRecord> steps;
  while (!run.done()) steps.push_back(run.next());
  for (int helpers : {0, 1, 2}) {
    TempFile f("help" + std::to_string(helpers));
    WriterOptions opt;
    opt.chunk_target_bytes = 8 * 1024;
    opt.max_bytes_in_flight = 64 * 1024;
    auto w = TraceWriter::open(f.path, opt);
    ASSERT_TRUE(w.ok());
    (*w)->defer_wakes(true);
    ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
    std::atomic<bool> stop{false};
    std::atomic<int> helped{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < helpers; ++i) {
      threads.emplace_back([&] {
        while (!stop.load()) {
          if ((*w)->help()) {
            helped.fetch_add(1);
          } else {
            std::this_thread::yield();
          }
        }
      });
    }
    Status st = Status::Ok();  // no ASSERT while the helpers run
    for (size_t i = 0; i < steps.size() && st.ok(); ++i) {
      st = (*w)->append_step(steps[i]);
      if (st.ok() && i == steps.size() / 2) st = (*w)->flush();
    }
    if (st.ok()) st = (*w)->close();
    stop = true;
    for (std::thread& t : threads) t.join();
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_FALSE((*w)->help()) << "nothing is left to help with after close";
    if (helpers == 0) {
      EXPECT_EQ(helped.load(), 0);
    }
    auto r = TraceReader::open(f.path);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE((*r)->complete());
    std::vector<StepRecord> got;
    ASSERT_TRUE(read_all(**r, &got).ok());
    EXPECT_EQ(got, sorted_plans(steps)) << helpers << " helpers";
    EXPECT_TRUE((*r)->verify().ok());
  }
}

// An existing trace is replaced by a new file, not truncated: a reader that has the old
// one open reads it whole; the new file keeps the old one's permission bits.
TEST(WriterIo, AnExistingTraceIsReplacedNotTruncated) {
  TempFile f("replace");
  auto write = [&](int tokens) {
    auto w = TraceWriter::open(f.path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
    SampleRun run(1, 4, tokens);
    while (!run.done()) ASSERT_TRUE((*w)->append_step(run.next()).ok());
    ASSERT_TRUE((*w)->close().ok());
  };
  write(30);
  ASSERT_EQ(::chmod(f.path.c_str(), 0640), 0);
  auto old = TraceReader::open(f.path);
  ASSERT_TRUE(old.ok());
  write(5);
  std::vector<StepRecord> got;
  ASSERT_TRUE(read_all(**old, &got).ok()) << "the old trace, open before, reads whole";
  EXPECT_EQ(static_cast<int64_t>(got.size()), (*old)->step_count());
  auto fresh = TraceReader::open(f.path);
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE((*fresh)->step_count(), (*old)->step_count());
  struct stat st;
  ASSERT_EQ(::stat(f.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(WriterArguments, RejectedRecordsLeaveTheWriterUsable) {
  TempFile f("args");
  auto w = TraceWriter::open(f.path);
  ASSERT_TRUE(w.ok());
  StepRecord s;
  s.step = 1;
  EXPECT_EQ((*w)->append_step(s).code(), ErrorCode::kInvalidArgument);  // before the header
  RunHeader no_version = sample_header();
  no_version.tool_version.clear();
  EXPECT_EQ((*w)->append_run_header(no_version).code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  EXPECT_EQ((*w)->append_run_header(sample_header()).code(), ErrorCode::kInvalidArgument);

  ASSERT_TRUE((*w)->append_step(s).ok());
  Status same = (*w)->append_step(s);
  EXPECT_EQ(same.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(same.message().find("strictly increasing"), std::string::npos) << same.message();

  StepRecord dup;
  dup.step = 2;
  dup.plans = {{5, gemm_plan(1)}, {5, gemm_plan(2)}};
  EXPECT_EQ((*w)->append_step(dup).code(), ErrorCode::kInvalidArgument);
  StepRecord bad_plan;
  bad_plan.step = 2;
  bad_plan.plans = {{5, gemm_plan(0)}};
  EXPECT_EQ((*w)->append_step(bad_plan).code(), ErrorCode::kInvalidArgument);
  StepRecord ghost;
  ghost.step = 2;
  ghost.segments = {{777, 0, 1, 0, SegmentKind::kDecode, true}};
  Status g = (*w)->append_step(ghost);
  EXPECT_EQ(g.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(g.message().find("777"), std::string::npos) << g.message();
  StepRecord bad_blob_ref;
  bad_blob_ref.step = 2;
  RequestRecord req;
  req.id = 1;
  req.prompt = {1, 2, 3};
  bad_blob_ref.arrivals = {req};
  bad_blob_ref.segments = {{1, 0, 3, 0, SegmentKind::kPrefill, true}};
  LogitsRecord l;
  l.request = 1;
  l.position = 2;
  l.batch_row = 2;
  l.vocab = 10;
  l.blob = 0;  // no blob appended yet
  bad_blob_ref.logits = {l};
  EXPECT_EQ((*w)->append_step(bad_blob_ref).code(), ErrorCode::kInvalidArgument);

  BlobSpec b;
  float x[6] = {};
  b.shape = {2, 2};
  b.data = x;
  b.bytes = sizeof x;  // 6 floats for a 2x2 shape
  EXPECT_EQ((*w)->append_blob(b).status().code(), ErrorCode::kInvalidArgument);
  std::vector<uint8_t> huge(kMaxFrameRawBytes);
  BlobSpec hb;
  hb.dtype = DType::kU8;
  hb.shape = {static_cast<int64_t>(huge.size())};
  hb.data = huge.data();
  hb.bytes = huge.size();
  EXPECT_EQ((*w)->append_blob(hb).status().code(), ErrorCode::kResourceLimit);
  b.shape = {2, 3};
  auto id = (*w)->append_blob(b);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 0);  // rejected blobs consumed no id
  // Now the same step is fine (blob 0 exists), and the writer is healthy.
  EXPECT_TRUE((*w)->append_step(bad_blob_ref).ok());
  EXPECT_TRUE((*w)->status().ok());
  ASSERT_TRUE((*w)->close().ok());
  EXPECT_EQ((*w)->append_step(s).code(), ErrorCode::kInvalidArgument);  // closed
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->step_count(), 2);
  EXPECT_TRUE((*r)->verify().ok());
}

TEST(WriterArguments, OversizedStepIsRefused) {
  TempFile f("huge_step");
  auto w = TraceWriter::open(f.path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  StepRecord s;
  s.step = 0;
  SiteRows r;
  r.site = 1;
  r.rows.resize(kMaxFrameRawBytes / 16 + 1);
  s.rows.push_back(r);
  Status st = (*w)->append_step(s);
  EXPECT_EQ(st.code(), ErrorCode::kResourceLimit) << st.to_string();
  EXPECT_TRUE((*w)->close().ok());
}

}  // namespace
}  // namespace llmrr::trace
