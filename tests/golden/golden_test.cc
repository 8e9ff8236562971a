// The committed golden traces keep decoding to exactly the records they were written from.
// A change to the format that breaks this needs a new major version (or new goldens and a
// minor version that still reads these).
#include <gtest/gtest.h>

#include "golden_cases.h"

namespace llmrr::trace::golden {
namespace {

std::string golden(const std::string& file) {
  return std::string(LLMRR_GOLDEN_DIR) + "/" + file;
}

void expect_decodes_to(TraceReader& r, const Expected& e, size_t steps_limit = SIZE_MAX) {
  RunHeader h = e.header;
  h.format_major = r.format_major();
  h.format_minor = r.format_minor();
  EXPECT_EQ(r.run_header(), h);
  std::vector<StepRecord> got;
  ASSERT_TRUE(testing::read_all(r, &got).ok());
  std::vector<StepRecord> expect = testing::sorted_plans(e.steps);
  if (expect.size() > steps_limit) expect.resize(steps_limit);
  ASSERT_EQ(got.size(), expect.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expect[i]) << "step " << expect[i].step;
  for (size_t i = 0; i < got.size(); ++i) {  // random access agrees
    StepRecord s;
    ASSERT_TRUE(r.read_step(expect[i].step, &s).ok());
    EXPECT_EQ(s, expect[i]);
  }
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, DecodesToItsRecords) {
  const Case& c = GetParam();
  auto r = TraceReader::open(golden(c.file));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Expected e = c.expected();
  EXPECT_TRUE((*r)->complete());
  EXPECT_EQ((*r)->lossy(), e.lossy);
  EXPECT_EQ((*r)->lossy_reason(), e.lossy_reason);
  EXPECT_TRUE((*r)->warnings().empty());
  expect_decodes_to(**r, e);
  ASSERT_EQ((*r)->blob_count(), static_cast<int64_t>(e.blobs.size()));
  std::vector<float> ref = logit_like(512, 0);
  for (size_t b = 0; b < e.blobs.size(); ++b) {
    std::vector<uint8_t> out;
    auto info = (*r)->blob_info(static_cast<int64_t>(b));
    ASSERT_TRUE(info.ok());
    Status st = info->xor_coded
                    ? (*r)->read_blob(static_cast<int64_t>(b), &out, ref.data(), ref.size() * 4)
                    : (*r)->read_blob(static_cast<int64_t>(b), &out);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(out, e.blobs[b]) << "blob " << b;
  }
  std::vector<KernelRecord> kernels;
  for (size_t i = 0; i < (*r)->frames().size(); ++i)
    if ((*r)->frames()[i].kind == FrameKind::kKernelRecords) {
      std::vector<KernelRecord> k;
      ASSERT_TRUE((*r)->read_kernels(static_cast<int64_t>(i), &k).ok());
      kernels.insert(kernels.end(), k.begin(), k.end());
    }
  EXPECT_EQ(kernels, e.kernels);
  VerifyReport rep;
  Status v = (*r)->verify(&rep);
  EXPECT_TRUE(v.ok()) << v.to_string();
  EXPECT_EQ(rep.steps, static_cast<int64_t>(e.steps.size()));
}

INSTANTIATE_TEST_SUITE_P(Files, Golden, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.file;
                           return n.substr(0, n.find('.'));
                         });

TEST(GoldenCrashed, DecodesItsWholeFrames) {
  auto r = TraceReader::open(golden("crashed.trace"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE((*r)->complete());
  EXPECT_FALSE((*r)->has_footer());
  bool torn = false;
  for (const std::string& w : (*r)->warnings()) torn |= w.find("torn") != std::string::npos;
  EXPECT_TRUE(torn);
  // Chunks hold 4 steps; the cut is inside chunk kCrashedChunk.
  const Expected e = moe_run();
  expect_decodes_to(**r, e, 4 * kCrashedChunk);
  EXPECT_TRUE((*r)->verify().ok());
}

// The layouts the goldens pin: format 1.2's plain step chunks everywhere but columns.trace,
// column-coded (1.3). A reader that read both through one path would pass the rest while
// never decoding a column chunk.
TEST(GoldenLayouts, PlainChunksAndColumnChunksBothDecode) {
  for (const Case& c : cases()) {
    auto r = TraceReader::open(golden(c.file));
    ASSERT_TRUE(r.ok()) << c.file << ": " << r.status().to_string();
    const bool columns = std::string(c.file) == "columns.trace";
    int chunks = 0;
    for (const FrameInfo& f : (*r)->frames()) {
      if (f.kind != FrameKind::kStepChunk) continue;
      ++chunks;
      const Codec plain = std::string(c.file) == "uncompressed.trace" ? Codec::kNone : Codec::kZstd;
      EXPECT_EQ(f.codec, columns ? Codec::kColumnZstd : plain) << c.file;
    }
    EXPECT_EQ(chunks > 0, !c.expected().steps.empty()) << c.file;
  }
}

TEST(GoldenXor, DecodesAgainstTheMoeRunTrace) {
  auto x = TraceReader::open(golden("xor_reference.trace"));
  auto m = TraceReader::open(golden("moe_run.trace"));
  ASSERT_TRUE(x.ok() && m.ok());
  std::vector<uint8_t> out;
  ASSERT_TRUE((*x)->read_blob(0, &out, **m).ok());
  EXPECT_EQ(out, as_bytes(xor_variant()));
}

}  // namespace
}  // namespace llmrr::trace::golden
