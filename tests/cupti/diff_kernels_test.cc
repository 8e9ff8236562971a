// Diff of kernel sequences on synthetic record-cuda traces (kernel-record frames only, no
// engine steps), through the library and through `llmrr diff`; and inspect / dump / verify
// / record-cuda on such traces.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/replayer/diff_kernels.h"
#include "run_cli.h"
#include "test_common.h"

namespace {

using namespace llmrr;
using llmrr::testing::run_llmrr;
using trace::ActivityKind;
using trace::KernelRecord;

const char* kGemv =
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false>(float*)";
const char* kGemm = "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_tn_align1>(Params)";
const char* kSplitK =
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, "
    "float>(cublasLt::cublasSplitKParams<float>)";
const char* kRelu = "relu(float*, int)";

struct Launch {
  const char* name;  // nullptr: a DtoH memcpy
  int grid;
};

// Steps of launches; correlation ids increase through the trace like CUPTI's. Records are
// written in reverse within each frame to check that the diff orders by correlation id.
void write_trace(const std::string& path, const std::vector<std::vector<Launch>>& steps,
                 const std::string& step_source = "synchronisations") {
  auto w = trace::TraceWriter::open(path);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  trace::RunHeader h;
  h.tool_version = "test";
  h.device.kind = "cuda";
  h.device.name = "NVIDIA H200";
  h.extra_config_json = nlohmann::json{
      {"source", "llmrr record-cuda (CUPTI activity)"},
      {"steps",
       step_source}}.dump();
  h.command_line = "./gemm";
  ASSERT_TRUE((*w)->append_run_header(h).ok());
  uint64_t corr = 100;
  for (size_t s = 0; s < steps.size(); ++s) {
    std::vector<KernelRecord> recs;
    for (const Launch& l : steps[s]) {
      KernelRecord k;
      k.step = static_cast<int64_t>(s);
      k.correlation = corr++;
      k.start_ns = static_cast<int64_t>(corr) * 1000;
      k.end_ns = k.start_ns + 500;
      if (l.name == nullptr) {
        k.kind = ActivityKind::kMemcpy;
        k.copy_kind = 2;
        k.bytes = 256;
      } else {
        k.name = l.name;
        k.grid = {l.grid, 1, 1};
        k.block = {128, 1, 1};
        k.dynamic_shared = 1024;
      }
      recs.push_back(k);
    }
    corr += 3;  // the synchronisation and other API calls between steps
    std::reverse(recs.begin(), recs.end());
    ASSERT_TRUE((*w)->append_kernels(recs).ok());
  }
  ASSERT_TRUE((*w)->close().ok());
}

// M=1 and M=64 runs of the same program: cuBLAS picks a GEMV at M=1, and a split-K GEMM
// plus its reduction kernel at M=64 in the second step.
std::vector<std::vector<Launch>> run_m1() {
  return {{{kRelu, 4}, {nullptr, 0}}, {{kGemv, 64}, {nullptr, 0}}, {{kRelu, 4}}};
}
std::vector<std::vector<Launch>> run_m64() {
  return {{{kRelu, 4}, {nullptr, 0}}, {{kGemm, 16}, {kSplitK, 8}, {nullptr, 0}}, {{kRelu, 4}}};
}

TEST(DiffKernels, IdenticalSequencesAreIdentical) {
  test::TempDir dir("llmrr-kdiff");
  write_trace(dir.file("a.trace"), run_m1());
  write_trace(dir.file("b.trace"), run_m1());
  auto d = replay::diff_kernel_traces(dir.file("a.trace"), dir.file("b.trace"));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE(d->identical());
  EXPECT_EQ(d->steps_compared, 3);
  EXPECT_EQ(d->steps_differing, 0);
  EXPECT_EQ(d->a.kernels, 3);
  EXPECT_EQ(d->a.memcpys, 2);
  EXPECT_EQ(d->a.steps, 3);
  EXPECT_EQ(d->a.step_source, "synchronisations");
}

TEST(DiffKernels, AnExtraSplitKReduceIsNamedWithItsStep) {
  test::TempDir dir("llmrr-kdiff");
  // Same GEMM kernel in both, B also launches the split-K reduction after it.
  write_trace(dir.file("a.trace"), {{{kRelu, 4}}, {{kGemm, 16}, {nullptr, 0}}});
  write_trace(dir.file("b.trace"), {{{kRelu, 4}}, {{kGemm, 16}, {kSplitK, 8}, {nullptr, 0}}});
  auto d = replay::diff_kernel_traces(dir.file("a.trace"), dir.file("b.trace"));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FALSE(d->identical());
  EXPECT_EQ(d->difference, replay::KernelDifference::kOnlyInB);
  EXPECT_EQ(d->step_a, 1);
  EXPECT_EQ(d->step_b, 1);
  EXPECT_EQ(d->index, 1);
  ASSERT_TRUE(d->kernel_b.has_value());
  EXPECT_EQ(d->kernel_b->name, kSplitK);
  ASSERT_TRUE(d->previous.has_value());
  EXPECT_EQ(d->previous->name, kGemm);
  ASSERT_EQ(d->only_b.size(), 1u);
  EXPECT_EQ(d->only_b[0], kSplitK);
  EXPECT_TRUE(d->only_a.empty());
  const std::string story = replay::format_kernel_diff(*d);
  EXPECT_NE(story.find("first at step 1"), std::string::npos) << story;
  EXPECT_NE(story.find("present in B only"), std::string::npos) << story;
  EXPECT_NE(story.find("splitKreduce_kernel"), std::string::npos) << story;
}

TEST(DiffKernels, ADifferentGemmKernelAndItsConfiguration) {
  test::TempDir dir("llmrr-kdiff");
  write_trace(dir.file("m1.trace"), run_m1());
  write_trace(dir.file("m64.trace"), run_m64());
  auto d = replay::diff_kernel_traces(dir.file("m1.trace"), dir.file("m64.trace"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->difference, replay::KernelDifference::kDifferent);
  EXPECT_EQ(d->ordinal, 1);
  EXPECT_EQ(d->index, 0);
  EXPECT_EQ(d->kernel_a->name, kGemv);
  EXPECT_EQ(d->kernel_b->name, kGemm);
  EXPECT_EQ(d->steps_compared, 3);
  EXPECT_EQ(d->steps_differing, 1);
  EXPECT_EQ(d->only_a, std::vector<std::string>{kGemv});
  EXPECT_EQ(d->only_b, (std::vector<std::string>{kGemm, kSplitK}));

  // Same kernel, other grid.
  write_trace(dir.file("g.trace"), {{{kGemm, 16}}});
  write_trace(dir.file("h.trace"), {{{kGemm, 32}}});
  d = replay::diff_kernel_traces(dir.file("g.trace"), dir.file("h.trace"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->difference, replay::KernelDifference::kConfig);
  EXPECT_EQ(d->kernel_a->grid[0], 16);
  EXPECT_EQ(d->kernel_b->grid[0], 32);
  EXPECT_TRUE(d->only_a.empty());
}

TEST(DiffKernels, StepsAlignByOrderAndExtraStepsAreReported) {
  test::TempDir dir("llmrr-kdiff");
  // An empty step (two synchronisations in a row) does not shift the comparison.
  write_trace(dir.file("a.trace"), {{{kRelu, 4}}, {}, {{kGemv, 64}}});
  write_trace(dir.file("b.trace"), {{{kRelu, 4}}, {{kGemv, 64}}, {{kRelu, 4}}});
  auto d = replay::diff_kernel_traces(dir.file("a.trace"), dir.file("b.trace"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->difference, replay::KernelDifference::kStepCount);
  EXPECT_EQ(d->steps_compared, 2);
  EXPECT_EQ(d->step_b, 2);
  EXPECT_FALSE(d->kernel_a.has_value());
  ASSERT_TRUE(d->kernel_b.has_value());
  EXPECT_EQ(d->kernel_b->name, kRelu);
}

TEST(DiffKernels, NotesDifferentStepDelimiters) {
  test::TempDir dir("llmrr-kdiff");
  write_trace(dir.file("a.trace"), run_m1());
  write_trace(dir.file("b.trace"), run_m1(), "nvtx range decode");
  auto d = replay::diff_kernel_traces(dir.file("a.trace"), dir.file("b.trace"));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->identical());
  ASSERT_FALSE(d->notes.empty());
  EXPECT_NE(d->notes[0].find("delimited differently"), std::string::npos);
}

TEST(DiffKernelsCli, ExitCodesTextAndJson) {
  test::TempDir dir("llmrr-kdiff");
  const std::string m1 = dir.file("m1.trace"), m1b = dir.file("m1b.trace"),
                    m64 = dir.file("m64.trace");
  write_trace(m1, run_m1());
  write_trace(m1b, run_m1());
  write_trace(m64, run_m64());
  auto same = run_llmrr({"diff", m1, m1b});
  EXPECT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("kernel sequences identical: 3 steps compared"), std::string::npos)
      << same.out;
  auto differ = run_llmrr({"diff", m1, m64});
  EXPECT_EQ(differ.exit_code, 1) << differ.err;
  EXPECT_NE(differ.out.find("kernel sequences differ: first at step 1"), std::string::npos)
      << differ.out;
  EXPECT_NE(differ.out.find("splitKreduce_kernel"), std::string::npos) << differ.out;
  auto js = run_llmrr({"diff", m1, m64, "--json"});
  EXPECT_EQ(js.exit_code, 1);
  nlohmann::json j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["identical"], false);
  EXPECT_EQ(j["step_a"], 1);
  EXPECT_EQ(j["difference"], "different kernel");
  EXPECT_EQ(j["kernel_b"]["name"], kGemm);
  EXPECT_EQ(j["only_b"][1], kSplitK);
  auto missing = run_llmrr({"diff", m1, dir.file("none.trace")});
  EXPECT_EQ(missing.exit_code, 2);
}

// diff_traces on two kernel-only traces: one result holding the kernel diff alone, which
// render_diff writes as the kernel diff's own text and JSON (what `llmrr diff` prints).
TEST(DiffKernels, DiffTracesCarriesTheKernelReport) {
  test::TempDir dir("llmrr-kdiff");
  const std::string m1 = dir.file("m1.trace"), m64 = dir.file("m64.trace");
  write_trace(m1, run_m1());
  write_trace(m64, run_m64());
  auto d = replay::diff_traces(m1, m64);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FALSE(d->engine);
  ASSERT_TRUE(d->kernels.has_value());
  EXPECT_FALSE(d->identical());
  auto k = replay::diff_kernel_traces(m1, m64);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(replay::render_diff(*d, false), replay::format_kernel_diff(*k));
  EXPECT_EQ(replay::render_diff(*d, true), replay::kernel_diff_json(*k) + "\n");
  auto same = replay::diff_traces(m1, m1);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->identical());
  // A trace with neither steps nor kernel records is refused, whichever side it is on.
  const std::string empty = dir.file("empty.trace");
  write_trace(empty, {});
  for (auto [x, y] : {std::pair{m1, empty}, std::pair{empty, m1}}) {
    auto e = replay::diff_traces(x, y);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find(empty + ": holds no whole step"), std::string::npos)
        << e.status().to_string();
  }
}

TEST(KernelTraceCli, InspectDumpVerifyHandleKernelOnlyTraces) {
  test::TempDir dir("llmrr-kdiff");
  const std::string p = dir.file("k.trace");
  write_trace(p, run_m64());
  auto v = run_llmrr({"verify", p});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  const std::string format = "ok: format 1." + std::to_string(llmrr::trace::kFormatMinor);
  EXPECT_NE(v.out.find(format), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("6 kernel records"), std::string::npos) << v.out;
  auto in = run_llmrr({"inspect", p});
  EXPECT_EQ(in.exit_code, 0) << in.err;
  EXPECT_NE(in.out.find("kernels    4 kernels, 2 memcpys, 0 ranges in 3 steps"), std::string::npos)
      << in.out;
  EXPECT_NE(in.out.find("model      none"), std::string::npos) << in.out;
  auto ij = run_llmrr({"inspect", p, "--json"});
  ASSERT_EQ(ij.exit_code, 0);
  nlohmann::json j = nlohmann::json::parse(ij.out);
  EXPECT_EQ(j["kernel_records"], 6);
  EXPECT_EQ(j["dropped_records"], 0);
  auto d = run_llmrr({"dump", p});
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("kernel step 1 corr "), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("splitKreduce_kernel"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("memcpy DtoH 256 B"), std::string::npos) << d.out;
  auto dj = run_llmrr({"dump", p, "--json", "--steps", "1"});
  ASSERT_EQ(dj.exit_code, 0) << dj.err;
  int kernels = 0;
  std::istringstream lines(dj.out);
  std::string line;
  while (std::getline(lines, line)) {
    nlohmann::json l = nlohmann::json::parse(line);
    if (l["type"] == "kernel") {
      ++kernels;
      EXPECT_EQ(l["step"], 1);
    }
  }
  EXPECT_EQ(kernels, 3);  // step 1: GEMM, split-K reduce, memcpy
}

TEST(RecordCudaCli, HelpAndBuildWithoutCuda) {
  auto h = run_llmrr({"record-cuda", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("--step-range"), std::string::npos);
  auto usage = run_llmrr({"record-cuda", "-o", "x.trace"});
  EXPECT_EQ(usage.exit_code, 2);
#ifndef LLMRR_HAVE_CUPTI
  test::TempDir dir("llmrr-kdiff");
  auto r = run_llmrr({"record-cuda", "-o", dir.file("x.trace"), "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("built without CUDA"), std::string::npos) << r.err;
#endif
}

}  // namespace
