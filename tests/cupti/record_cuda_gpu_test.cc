// llmrr record-cuda on a real GPU: a cuBLAS SGEMM at M=1 and M=64 (tests/cupti/gemm_probe.cu)
// recorded without touching the program, then `llmrr diff` on the two traces. Skips without
// a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "llmrr/replayer/diff_kernels.h"
#include "run_cli.h"
#include "test_common.h"

namespace {

using namespace llmrr;
using llmrr::testing::run_llmrr;

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void record(const std::string& out, int m, const std::string& step_range = "") {
  std::vector<std::string> args = {"record-cuda", "-o", out};
  if (!step_range.empty()) {
    args.push_back("--step-range");
    args.push_back(step_range);
  }
  args.insert(args.end(), {"--", LLMRR_PATH(LLMRR_GEMM_PROBE), std::to_string(m)});
  auto r = run_llmrr(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("M=" + std::to_string(m)), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("kernels"), std::string::npos) << r.err;
  auto v = run_llmrr({"verify", out});
  EXPECT_EQ(v.exit_code, 0) << v.err;
}

TEST(RecordCudaGpu, SyncStepsAndTheFirstDifferingStep) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  test::TempDir dir("llmrr-cupti-gpu");
  const std::string m1 = dir.file("m1.trace"), m1b = dir.file("m1b.trace"),
                    m64 = dir.file("m64.trace");
  record(m1, 1);
  record(m1b, 1);
  record(m64, 64);
  for (const std::string& p : {m1, m64}) {
    auto s = replay::summarize_kernel_trace(p);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    // fill | gemm | scale + copy (more if cuBLAS synchronises inside)
    EXPECT_GE(s->steps, 3) << p;
    EXPECT_GE(s->kernels, 4) << p;  // 2 fills, >= 1 GEMM kernel, scale
    EXPECT_GE(s->memcpys, 1) << p;
    EXPECT_EQ(s->dropped, 0) << p;
    EXPECT_EQ(s->engine_steps, 0) << p;
  }
  auto same = run_llmrr({"diff", m1, m1b});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  auto differ = run_llmrr({"diff", m1, m64});
  EXPECT_EQ(differ.exit_code, 1) << differ.out << differ.err;
  EXPECT_NE(differ.out.find("kernel sequences differ: first at step "), std::string::npos)
      << differ.out;
  std::printf("%s", differ.out.c_str());  // the README quotes this
  auto d = replay::diff_kernel_traces(m1, m64);
  ASSERT_TRUE(d.ok());
  EXPECT_GE(d->step_a, 1);  // not the fill step: the GEMM's (or later)
  EXPECT_NE(d->difference, replay::KernelDifference::kStepCount);
}

TEST(RecordCudaGpu, NvtxStepRange) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  test::TempDir dir("llmrr-cupti-gpu");
  const std::string m1 = dir.file("m1.trace"), m64 = dir.file("m64.trace");
  record(m1, 1, "gemm");
  record(m64, 64, "gemm");
  auto s = replay::summarize_kernel_trace(m1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->steps, 1);  // only the GEMM is inside the range
  EXPECT_EQ(s->ranges, 1);
  EXPECT_GE(s->outside_steps, 3);
  auto differ = run_llmrr({"diff", m1, m64});
  EXPECT_EQ(differ.exit_code, 1) << differ.out << differ.err;
  EXPECT_NE(differ.out.find("first at step 0"), std::string::npos) << differ.out;
}

}  // namespace
