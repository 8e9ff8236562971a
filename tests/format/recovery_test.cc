// Crash recovery: a trace cut anywhere (at every frame boundary and inside every frame,
// footer and trailer included) still opens, reports complete=false, and yields exactly
// the steps of its whole frames. A flipped bit anywhere is detected or harmless.
#include <gtest/gtest.h>

#include <cstring>

#include "raw_trace.h"
#include "test_util.h"

namespace llmrr::trace {
namespace {

using namespace testing;

class Recovery : public ::testing::Test {
 protected:
  void SetUp() override {
    steps_ = sorted_plans(SampleRun(9, 3, 5).all());
    WriterOptions opt;
    opt.max_steps_per_chunk = 2;
    auto w = TraceWriter::open(file_.path, opt);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
    for (size_t i = 0; i < steps_.size(); ++i) {
      ASSERT_TRUE((*w)->append_step(steps_[i]).ok());
      if (i == 3) {
        std::vector<float> v = logit_like(300, 5);
        BlobSpec b;
        b.shape = {300};
        b.data = v.data();
        b.bytes = 1200;
        ASSERT_TRUE((*w)->append_blob(b).ok());
      }
    }
    ASSERT_TRUE((*w)->close().ok());
    bytes_ = read_file(file_.path);
    auto r = TraceReader::open(file_.path);
    ASSERT_TRUE(r.ok());
    frames_ = (*r)->frames();
  }

  // Offsets worth testing: everything near the start, the end and every frame boundary,
  // and a stride through the rest (every offset would take too long on a shared machine).
  bool interesting(uint64_t i) const {
    if (i < 96 || i + 160 > bytes_.size() || i % 7 == 0) return true;
    for (const FrameInfo& f : frames_)
      if ((i + 40 > f.offset && i < f.offset + 40) || (i + 8 > f.end() && i < f.end() + 8))
        return true;
    return false;
  }

  // Steps fully contained in [0, cut).
  size_t whole_steps(uint64_t cut) const {
    size_t n = 0;
    for (const FrameInfo& f : frames_) {
      if (f.kind != FrameKind::kStepChunk || f.end() > cut) continue;
      for (const StepRecord& s : steps_)
        if (s.step >= f.first && s.step <= f.last) ++n;
    }
    return n;
  }

  TempFile file_{"recovery"};
  TempFile cut_{"recovery_cut"};
  std::vector<StepRecord> steps_;
  std::vector<uint8_t> bytes_;
  std::vector<FrameInfo> frames_;
};

TEST_F(Recovery, TruncatedAtEveryOffset) {
  ASSERT_GT(frames_.size(), 5u);
  const uint64_t run_header_end = frames_[0].end();
  int opened = 0;
  for (uint64_t cut = 0; cut < bytes_.size(); ++cut) {
    if (!interesting(cut)) continue;
    std::vector<uint8_t> prefix(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(cut));
    ASSERT_TRUE(write_file(cut_.path, prefix));
    auto r = TraceReader::open(cut_.path);
    if (cut < run_header_end) {
      ASSERT_FALSE(r.ok()) << "cut at " << cut;
      EXPECT_EQ(r.status().code(), ErrorCode::kTruncated) << r.status().to_string();
      continue;
    }
    ASSERT_TRUE(r.ok()) << "cut at " << cut << ": " << r.status().to_string();
    ++opened;
    EXPECT_FALSE((*r)->complete()) << cut;
    EXPECT_FALSE((*r)->has_footer()) << cut;
    EXPECT_FALSE((*r)->warnings().empty());
    std::vector<StepRecord> got;
    Status st = read_all(**r, &got);
    ASSERT_TRUE(st.ok()) << cut << ": " << st.to_string();
    const size_t expect = whole_steps(cut);
    ASSERT_EQ(got.size(), expect) << "cut at " << cut;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], steps_[i]);
    EXPECT_EQ((*r)->step_count(), static_cast<int64_t>(expect));
    Status v = (*r)->verify();
    EXPECT_TRUE(v.ok()) << "cut at " << cut << ": " << v.to_string();
    // Torn frames are named in a warning, with their offset.
    bool at_boundary = cut == run_header_end;
    for (const FrameInfo& f : frames_) at_boundary |= f.end() == cut;
    if (!at_boundary) {
      bool torn = false;
      for (const std::string& w : (*r)->warnings()) torn |= w.find("torn") != std::string::npos;
      EXPECT_TRUE(torn) << "cut at " << cut;
    }
  }
  EXPECT_GT(opened, 100);
}

TEST_F(Recovery, FlippedBitAnywhereIsDetectedOrHarmless) {
  // Bytes whose change a reader may ignore: the reserved header word, the minor version
  // (a newer minor reads with a warning), and the trailer (without it the file is scanned).
  auto harmless = [&](size_t i) {
    return (i >= 10 && i < 16) || i >= bytes_.size() - kTrailerBytes;
  };
  int detected = 0;
  int tried = 0;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!interesting(i)) continue;
    ++tried;
    std::vector<uint8_t> b = bytes_;
    b[i] ^= static_cast<uint8_t>(1u << (i % 8));
    ASSERT_TRUE(write_file(cut_.path, b));
    auto r = TraceReader::open(cut_.path);
    Status st = r.ok() ? (*r)->verify() : r.status();
    if (st.ok()) {
      std::vector<StepRecord> got;
      st = read_all(**r, &got);
      if (st.ok()) {
        EXPECT_TRUE(harmless(i)) << "flip at " << i << " went unnoticed";
        EXPECT_EQ(got.size(), steps_.size()) << i;
        continue;
      }
    }
    ++detected;
    EXPECT_NE(exit_code_for(st), 3) << "flip at " << i << ": " << st.to_string();
    EXPECT_NE(st.message().find(cut_.path), std::string::npos) << st.message();
  }
  EXPECT_GT(detected, tried - 40);
  EXPECT_GT(tried, 500);
}

TEST_F(Recovery, WriterKilledBeforeClose) {
  // A writer that never closes (as after kill -9) leaves whatever was flushed.
  TempFile f("killed");
  auto w = TraceWriter::open(f.path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  for (size_t i = 0; i < 5; ++i) ASSERT_TRUE((*w)->append_step(steps_[i]).ok());
  ASSERT_TRUE((*w)->flush().ok());
  // Simulate the kill: copy the file as it is now, before the destructor closes it.
  std::vector<uint8_t> now = read_file(f.path);
  ASSERT_TRUE(write_file(cut_.path, now));
  auto r = TraceReader::open(cut_.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE((*r)->complete());
  std::vector<StepRecord> got;
  ASSERT_TRUE(read_all(**r, &got).ok());
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[4], steps_[4]);
  size_t arrivals = 0;
  for (size_t i = 0; i < 5; ++i) arrivals += steps_[i].arrivals.size();
  ASSERT_EQ((*r)->requests().size(), arrivals);  // gathered by the scan
  EXPECT_EQ((*r)->requests()[0].id, 100u);
  EXPECT_TRUE((*r)->verify().ok());
}

TEST_F(Recovery, RefusesFooterlessWhenAsked) {
  std::vector<uint8_t> prefix(bytes_.begin(),
                              bytes_.begin() + static_cast<std::ptrdiff_t>(frames_[3].end()));
  ASSERT_TRUE(write_file(cut_.path, prefix));
  ReaderOptions opt;
  opt.scan_without_footer = false;
  auto r = TraceReader::open(cut_.path, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTruncated);
}

}  // namespace
}  // namespace llmrr::trace
