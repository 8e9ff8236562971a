// verify() and read_kernels() on kernel-record frames that bypass the writer's checks: a
// malformed record and a footer whose kernel count lies are rejected with what was found.
#include <gtest/gtest.h>

#include "convert.h"
#include "llmrr/format/trace_reader.h"
#include "raw_trace.h"
#include "test_common.h"

namespace {

using namespace llmrr;
using namespace llmrr::trace;
using llmrr::trace::testing::RawTrace;

RunHeader header() {
  RunHeader h;
  h.tool_version = "test";
  h.device.kind = "cuda";
  return h;
}

KernelRecord good() {
  KernelRecord k;
  k.name = "gemm";
  k.step = 0;
  k.grid = {1, 1, 1};
  k.block = {32, 1, 1};
  return k;
}

std::string write(const test::TempDir& dir, const char* name, const std::vector<KernelRecord>& ks) {
  RawTrace t;
  t.add_run_header(header());
  std::vector<uint8_t> raw;
  detail::build_kernel_chunk(ks, &raw);
  t.add_frame(FrameKind::kKernelRecords, raw);
  t.finish();
  const std::string p = dir.file(name);
  EXPECT_TRUE(llmrr::trace::testing::write_file(p, t.bytes));
  return p;
}

TEST(VerifyKernels, MalformedRecordIsRejected) {
  test::TempDir dir("llmrr-vk");
  KernelRecord bad = good();
  bad.grid = {1, 2};
  const std::string p = write(dir, "bad.trace", {good(), bad});
  auto r = TraceReader::open(p);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  Status st = (*r)->verify();
  EXPECT_EQ(st.code(), ErrorCode::kSemantic) << st.to_string();
  EXPECT_NE(st.message().find("kernel record 1: grid: expected 0 or 3 entries, found 2"),
            std::string::npos)
      << st.message();
  std::vector<KernelRecord> got;
  EXPECT_EQ((*r)->read_kernels(1, &got).code(), ErrorCode::kSemantic);
}

TEST(VerifyKernels, FooterKernelCountMustMatchTheFrames) {
  test::TempDir dir("llmrr-vk");
  // RawTrace's footer leaves kernel_records at 0: a 1.1 reader must notice.
  const std::string p = write(dir, "count.trace", {good()});
  auto r = TraceReader::open(p);
  ASSERT_TRUE(r.ok());
  Status st = (*r)->verify();
  EXPECT_EQ(st.code(), ErrorCode::kBadFooter) << st.to_string();
  EXPECT_NE(st.message().find("kernel_records: expected 1 (from the frames), found 0"),
            std::string::npos)
      << st.message();
}

}  // namespace
