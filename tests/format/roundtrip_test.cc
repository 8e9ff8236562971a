// Writer → reader round trips: every record kind comes back equal, sequentially and by
// random access, across chunk boundaries, with plans deduplicated.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "sample_records.h"
#include "test_util.h"

namespace llmrr::trace {
namespace {

using testing::sample_header;
using testing::SampleRun;

using testing::temp_path;
using testing::TempFile;

void write_trace(const std::string& path, const std::vector<StepRecord>& steps,
                 WriterOptions opt = {}, int blobs = 0) {
  auto w = TraceWriter::open(path, opt);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  for (int b = 0; b < blobs; ++b) {
    std::vector<float> v = testing::logit_like(1000, static_cast<uint64_t>(b));
    BlobSpec spec;
    spec.dtype = DType::kF32;
    spec.shape = {1000};
    spec.data = v.data();
    spec.bytes = v.size() * 4;
    spec.name = "logits";
    auto id = (*w)->append_blob(spec);
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    EXPECT_EQ(*id, b);
  }
  for (const StepRecord& s : steps) {
    Status st = (*w)->append_step(s);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  Status st = (*w)->close();
  ASSERT_TRUE(st.ok()) << st.to_string();
}

std::vector<StepRecord> sorted_plans(std::vector<StepRecord> steps) {
  for (StepRecord& s : steps)
    std::stable_sort(s.plans.begin(), s.plans.end(),
                     [](const SitePlan& a, const SitePlan& b) { return a.site < b.site; });
  return steps;
}

TEST(Roundtrip, EveryRecordComesBackEqual) {
  TempFile f("every");
  std::vector<StepRecord> steps = SampleRun(7).all();
  ASSERT_GT(steps.size(), 10u);
  write_trace(f.path, steps, {}, 2);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  TraceReader& rd = **r;
  EXPECT_TRUE(rd.complete());
  EXPECT_TRUE(rd.has_footer());
  EXPECT_FALSE(rd.lossy());
  EXPECT_TRUE(rd.warnings().empty());
  EXPECT_EQ(rd.format_major(), kFormatMajor);
  RunHeader expect_h = sample_header();
  expect_h.format_major = kFormatMajor;
  expect_h.format_minor = kFormatMinor;
  EXPECT_EQ(rd.run_header(), expect_h);
  EXPECT_EQ(rd.step_count(), static_cast<int64_t>(steps.size()));
  EXPECT_EQ(rd.first_step(), steps.front().step);
  EXPECT_EQ(rd.last_step(), steps.back().step);
  EXPECT_EQ(rd.blob_count(), 2);
  int64_t tokens = 0;
  for (const auto& s : steps) tokens += static_cast<int64_t>(s.tokens.size());
  EXPECT_EQ(rd.token_count(), tokens);
  ASSERT_EQ(rd.requests().size(), 4u);
  EXPECT_EQ(rd.requests()[0].id, 100u);
  EXPECT_EQ(rd.requests()[0].label, "target");
  EXPECT_GE(rd.requests()[0].finish_step, 0);
  EXPECT_EQ(rd.requests()[0].generated, 6);

  const std::vector<StepRecord> expect = sorted_plans(steps);
  StepCursor c = rd.steps();
  StepRecord got;
  size_t i = 0;
  for (;; ++i) {
    auto more = c.next(&got);
    ASSERT_TRUE(more.ok()) << more.status().to_string();
    if (!*more) break;
    ASSERT_LT(i, expect.size());
    EXPECT_EQ(got, expect[i]) << "step " << expect[i].step;
  }
  EXPECT_EQ(i, expect.size());

  VerifyReport rep;
  Status v = rd.verify(&rep);
  EXPECT_TRUE(v.ok()) << v.to_string();
  EXPECT_EQ(rep.steps, static_cast<int64_t>(steps.size()));
  EXPECT_EQ(rep.blobs, 2);
}

// Format 1.6: op records (what a runtime's op ran with) come back equal, in order, with
// their rows and layer span; the writer refuses a malformed one, naming the field.
TEST(Roundtrip, OpRecordsComeBackEqualAndAreChecked) {
  TempFile f("ops");
  std::vector<StepRecord> steps = SampleRun(7).all();
  ASSERT_GT(steps.size(), 3u);
  const int64_t rows1 = steps[1].row_count();
  ASSERT_GT(rows1, 1);
  steps[1].ops.push_back({0, 2, 0, static_cast<int32_t>(rows1), 0, "kq", "MUL_MAT",
                          "src0=f16:64x256x2 src0.view=1 src1=f32:64x3x4 dst=f32:256x3x4"});
  steps[1].ops.push_back({-1, 1, 0, 0, 1, "graph", "GRAPH", "nodes=904 tokens=3 threads=2"});
  steps[1].ops.push_back({-1, 1, 0, 0, 0, "result_output", "", ""});
  steps[3].ops.push_back({1, 1, 0, 1, 0, "attn_norm", "RMS_NORM", "src0=f32:64x1 dst=f32:64x1"});
  write_trace(f.path, steps);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->run_header().format_minor, kFormatMinor);
  const std::vector<StepRecord> expect = sorted_plans(steps);
  StepRecord got;
  for (size_t i : {size_t{1}, size_t{2}, size_t{3}}) {
    Status st = (*r)->read_step(expect[i].step, &got);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(got.ops, expect[i].ops) << "step " << expect[i].step;
    EXPECT_EQ(got, expect[i]);
  }
  VerifyReport rep;
  EXPECT_TRUE((*r)->verify(&rep).ok());
  EXPECT_EQ(op_attrs("a=1 b.c=x:2"),
            (std::vector<std::pair<std::string, std::string>>{{"a", "1"}, {"b.c", "x:2"}}));

  struct Bad {
    OpRecord op;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {{0, 1, 0, 0, 0, "", "MUL_MAT", ""}, "name: expected 1..128 bytes, found 0"},
      {{0, 1, 0, 0, 0, "k q", "MUL_MAT", ""}, "name: expected printable ASCII without spaces"},
      {{-2, 1, 0, 0, 0, "kq", "", ""}, "layer: expected -1 or >= 0, found -2"},
      {{-1, 2, 0, 0, 0, "kq", "", ""}, "layers: expected >= 1"},
      {{0, 0, 0, 0, 0, "kq", "", ""}, "layers: expected >= 1"},
      {{0, 1, 0, 0, -1, "kq", "", ""}, "graph: expected >= 0, found -1"},
      {{0, 1, 0, static_cast<int32_t>(rows1) + 1, 0, "kq", "", ""}, "within the step's"},
      {{0, 1, 0, 0, 0, "kq", "", "a=1  b=2"}, "attrs: expected one space between pairs"},
      {{0, 1, 0, 0, 0, "kq", "", "a=1 a=2"}, "attrs: key 'a' twice"},
      {{0, 1, 0, 0, 0, "kq", "", "A=1"}, "attrs: key 'A': expected letters"},
      {{0, 1, 0, 0, 0, "kq", "", "novalue"}, "attrs: expected key=value"},
      {{0, 1, 0, 0, 0, "kq", "", "a=1 "}, "attrs: expected no trailing space"},
  };
  for (const Bad& b : bad) {
    TempFile g("ops-bad");
    auto w = TraceWriter::open(g.path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
    std::vector<StepRecord> s2 = SampleRun(7).all();
    ASSERT_TRUE((*w)->append_step(s2[0]).ok());
    s2[1].ops.push_back(b.op);
    Status st = (*w)->append_step(s2[1]);
    EXPECT_FALSE(st.ok()) << b.says;
    EXPECT_NE(st.to_string().find(b.says), std::string::npos) << st.to_string();
    EXPECT_NE(st.to_string().find("ops[0]"), std::string::npos) << st.to_string();
  }
}

TEST(Roundtrip, RandomAccessAcrossManySmallChunks) {
  TempFile f("random");
  std::vector<StepRecord> steps = SampleRun(3, 6, 10).all();
  WriterOptions opt;
  opt.max_steps_per_chunk = 3;  // many chunks: every lookup crosses a chunk boundary
  write_trace(f.path, steps, opt);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  int chunks = 0;
  for (const FrameInfo& fi : (*r)->frames()) chunks += fi.kind == FrameKind::kStepChunk;
  EXPECT_EQ(chunks, static_cast<int>((steps.size() + 2) / 3));
  const std::vector<StepRecord> expect = sorted_plans(steps);
  StepRecord got;
  for (size_t k = expect.size(); k-- > 0;) {  // backwards, to defeat any sequential cache
    Status st = (*r)->read_step(expect[k].step, &got);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(got, expect[k]);
  }
  // A step number the run skipped.
  Status missing = (*r)->read_step(6, &got);
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound) << missing.to_string();
  // A sub-range through the cursor.
  StepCursor c = (*r)->steps(expect[4].step, expect[9].step);
  for (size_t k = 4; k <= 9; ++k) {
    auto more = c.next(&got);
    ASSERT_TRUE(more.ok() && *more);
    EXPECT_EQ(got.step, expect[k].step);
    EXPECT_EQ(got, expect[k]);
  }
  auto more = c.next(&got);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
}

TEST(Roundtrip, UnchangedPlansCostNoPlanBytes) {
  // Two traces of the same 200 steps: one whose plans never change, one whose plans change
  // every step. The first must spend almost nothing on plans after the first step.
  TempFile a("plans_same"), b("plans_change");
  std::vector<StepRecord> same, change;
  for (int i = 0; i < 200; ++i) {
    StepRecord s;
    s.step = i;
    for (int site = 0; site < 100; ++site)
      s.plans.push_back({static_cast<uint64_t>(site), testing::gemm_plan(4)});
    same.push_back(s);
    for (auto& p : s.plans) p.plan.splits = 1 + static_cast<uint32_t>(i % 4);
    change.push_back(s);
  }
  write_trace(a.path, same);
  write_trace(b.path, change);
  auto ra = TraceReader::open(a.path);
  auto rb = TraceReader::open(b.path);
  ASSERT_TRUE(ra.ok() && rb.ok());
  auto plan_bytes = [](const TraceReader& r) {
    for (const KindBytes& k : r.kind_bytes())
      if (k.kind == "plans") return k.raw_bytes;
    return uint64_t{0};
  };
  // First step: 100 delta entries (16 B) + one plan; later steps: nothing.
  EXPECT_LT(plan_bytes(**ra), 100u * 16 + 200);
  EXPECT_GT(plan_bytes(**rb), 100u * 16 * 150);
  StepRecord got;
  ASSERT_TRUE((*ra)->read_step(150, &got).ok());
  EXPECT_EQ(got.plans.size(), 100u);
  EXPECT_EQ(got.plans[7].plan, testing::gemm_plan(4));
  ASSERT_TRUE((*rb)->read_step(150, &got).ok());
  EXPECT_EQ(got.plans[7].plan.splits, 1u + 150 % 4);
  EXPECT_TRUE((*ra)->verify().ok());
  EXPECT_TRUE((*rb)->verify().ok());
}

TEST(Roundtrip, PlansAddedAndRemovedBetweenSteps) {
  TempFile f("plans_delta");
  std::vector<StepRecord> steps;
  for (int i = 0; i < 20; ++i) {
    StepRecord s;
    s.step = 10 + i;
    for (int site = 0; site < 10; ++site) {
      if ((site + i) % 3 == 0) continue;  // sites come and go
      PlanRecord p = testing::gemm_plan(1 + static_cast<uint32_t>((site * i) % 5));
      if (site == 4 && i % 2) {
        p.order = CombineOrder::kArrival;
        p.arrival.resize(p.splits);
        for (uint32_t k = 0; k < p.splits; ++k)
          p.arrival[k] = static_cast<uint16_t>(p.splits - 1 - k);
      }
      s.plans.push_back({static_cast<uint64_t>(1000 - site), p});  // unsorted input
    }
    steps.push_back(s);
  }
  WriterOptions opt;
  opt.max_steps_per_chunk = 7;
  write_trace(f.path, steps, opt);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok());
  const auto expect = sorted_plans(steps);
  StepCursor c = (*r)->steps();
  StepRecord got;
  for (const StepRecord& e : expect) {
    auto more = c.next(&got);
    ASSERT_TRUE(more.ok() && *more) << more.status().to_string();
    EXPECT_EQ(got.plans, e.plans) << "step " << e.step;
    for (const SitePlan& sp : e.plans) {
      const PlanRecord* p = got.find_plan(sp.site);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(*p, sp.plan);
    }
    EXPECT_EQ(got.find_plan(999999), nullptr);
  }
}

TEST(Roundtrip, BlobsShuffledAndXorCoded) {
  TempFile ref("blob_ref"), f("blob_xor");
  const size_t n = 4096;
  std::vector<float> a = testing::logit_like(n, 11);
  std::vector<float> b = a;
  for (size_t i = 0; i < n; i += 50) b[i] += 0.001f;  // 2 % of values differ
  std::vector<uint16_t> bf(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &a[i], 4);
    bf[i] = static_cast<uint16_t>(u >> 16);
  }
  {
    auto w = TraceWriter::open(ref.path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append_run_header(sample_header("ref-run")).ok());
    BlobSpec s;
    s.shape = {static_cast<int64_t>(n)};
    s.data = a.data();
    s.bytes = n * 4;
    s.name = "logits";
    s.step = 3;
    s.request = 100;
    ASSERT_EQ(*(*w)->append_blob(s), 0);
    ASSERT_TRUE((*w)->close().ok());
  }
  {
    auto w = TraceWriter::open(f.path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append_run_header(sample_header("xor-run")).ok());
    BlobSpec s;
    s.shape = {static_cast<int64_t>(n)};
    s.data = b.data();
    s.bytes = n * 4;
    s.xor_reference = a.data();
    s.reference_trace = "ref-run";
    s.reference_blob = 0;
    ASSERT_EQ(*(*w)->append_blob(s), 0);
    BlobSpec h;
    h.dtype = DType::kBF16;
    h.shape = {2, static_cast<int64_t>(n / 2)};
    h.data = bf.data();
    h.bytes = n * 2;
    ASSERT_EQ(*(*w)->append_blob(h), 1);
    BlobSpec empty;
    empty.shape = {0};
    ASSERT_EQ(*(*w)->append_blob(empty), 2);
    ASSERT_TRUE((*w)->close().ok());
  }
  auto rr = TraceReader::open(ref.path);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(rr.ok() && r.ok());
  std::vector<uint8_t> out;
  // Plain blob in the reference trace.
  ASSERT_TRUE((*rr)->read_blob(0, &out).ok());
  ASSERT_EQ(out.size(), n * 4);
  EXPECT_EQ(std::memcmp(out.data(), a.data(), n * 4), 0);
  auto info = (*r)->blob_info(0);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->xor_coded);
  EXPECT_TRUE(info->shuffled);
  EXPECT_EQ(info->reference_trace, "ref-run");
  EXPECT_EQ(info->reference_blob, 0);
  // XOR-coded: needs the reference.
  Status no_ref = (*r)->read_blob(0, &out);
  EXPECT_EQ(no_ref.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(no_ref.message().find("ref-run"), std::string::npos) << no_ref.message();
  Status wrong = (*r)->read_blob(0, &out, b.data(), n * 4);
  EXPECT_EQ(wrong.code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE((*r)->read_blob(0, &out, a.data(), n * 4).ok());
  EXPECT_EQ(std::memcmp(out.data(), b.data(), n * 4), 0);
  out.clear();
  Status via_trace = (*r)->read_blob(0, &out, **rr);
  ASSERT_TRUE(via_trace.ok()) << via_trace.to_string();
  EXPECT_EQ(std::memcmp(out.data(), b.data(), n * 4), 0);
  // Passing the wrong trace as reference is refused.
  EXPECT_EQ((*r)->read_blob(0, &out, **r).code(), ErrorCode::kInvalidArgument);
  // bf16 blob with its shape.
  ASSERT_TRUE((*r)->read_blob(1, &out).ok());
  EXPECT_EQ(std::memcmp(out.data(), bf.data(), n * 2), 0);
  auto i1 = (*r)->blob_info(1);
  ASSERT_TRUE(i1.ok());
  EXPECT_EQ(i1->dtype, DType::kBF16);
  EXPECT_EQ(i1->shape, (std::vector<int64_t>{2, static_cast<int64_t>(n / 2)}));
  ASSERT_TRUE((*r)->read_blob(2, &out).ok());
  EXPECT_TRUE(out.empty());
  EXPECT_EQ((*r)->blob_info(3).status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE((*r)->verify().ok());
  // XOR coding pays: the XOR blob frame is far smaller than the plain one.
  const auto& fr = (*r)->frames();
  const auto& frr = (*rr)->frames();
  EXPECT_LT(fr[1].stored_size * 10, frr[1].stored_size);
}

TEST(Roundtrip, KernelRecords) {
  TempFile f("kernels");
  auto w = TraceWriter::open(f.path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  std::vector<KernelRecord> ks(3);
  for (int i = 0; i < 3; ++i) {
    ks[i].name = "gemm_splitk_" + std::to_string(i);
    ks[i].step = i;
    ks[i].grid = {128, 1, 1};
    ks[i].block = {256, 1, 1};
    ks[i].stream = 7;
    ks[i].correlation = 1000 + i;
    ks[i].start_ns = 10 * i;
    ks[i].end_ns = 10 * i + 5;
  }
  ASSERT_TRUE((*w)->append_kernels(ks).ok());
  ASSERT_TRUE((*w)->close().ok());
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ((*r)->frames().size(), 2u);
  std::vector<KernelRecord> got;
  ASSERT_TRUE((*r)->read_kernels(1, &got).ok());
  EXPECT_EQ(got, ks);
  EXPECT_EQ((*r)->read_kernels(0, &got).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE((*r)->verify().ok());
}

TEST(Roundtrip, UncompressedAndEmptyTraces) {
  TempFile f("level0"), e("empty");
  std::vector<StepRecord> steps = SampleRun(5).all();
  WriterOptions opt;
  opt.zstd_level = 0;
  write_trace(f.path, steps, opt, 1);
  auto r = TraceReader::open(f.path);
  ASSERT_TRUE(r.ok());
  for (const FrameInfo& fi : (*r)->frames()) EXPECT_EQ(fi.codec, Codec::kNone);
  EXPECT_TRUE((*r)->verify().ok());
  StepRecord got;
  ASSERT_TRUE((*r)->read_step(steps[3].step, &got).ok());
  EXPECT_EQ(got.tokens, steps[3].tokens);

  write_trace(e.path, {});
  auto re = TraceReader::open(e.path);
  ASSERT_TRUE(re.ok());
  EXPECT_EQ((*re)->step_count(), 0);
  EXPECT_EQ((*re)->first_step(), -1);
  StepCursor c = (*re)->steps();
  auto more = c.next(&got);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
  EXPECT_TRUE((*re)->verify().ok());
}

}  // namespace
}  // namespace llmrr::trace
