// llmrr export: Perfetto / Chrome trace-event JSON checked against the format (with the
// kernel records of a trace that has them), and .npy arrays loaded by NumPy with the shapes
// and values the trace holds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "llmrr/replayer/export.h"
#include "trace_test_util.h"

namespace llmrr {
namespace {

using rtest::builtin;
using rtest::read_file;
using rtest::run_command;
using rtest::temp_path;

const std::string& moe_trace() {
  static const std::string path = [] {
    const LoadedModel& m = builtin("tiny-moe");
    rtest::RunSpec spec;
    spec.requests = rtest::target_and_load(m, "Export me", 6, 3);
    rtest::Recorded rec = rtest::record(m, spec, temp_path("export.trace"));
    EXPECT_TRUE(rec.ok);
    return rec.path;
  }();
  return path;
}

// The same trace with two kernel-record frames, as the CUDA recorder writes them.
const std::string& trace_with_kernels() {
  static const std::string path = [] {
    const std::string out = temp_path("kernels.trace");
    auto r = trace::TraceReader::open(moe_trace());
    EXPECT_TRUE(r.ok());
    auto w = trace::TraceWriter::open(out);
    EXPECT_TRUE(w.ok());
    EXPECT_TRUE((*w)->append_run_header((*r)->run_header()).ok());
    trace::StepCursor cur = (*r)->steps();
    trace::StepRecord s;
    while (*cur.next(&s)) {
      EXPECT_TRUE((*w)->append_step(s).ok());
      if (s.step <= 1) {
        std::vector<trace::KernelRecord> ks(2);
        ks[0] = {"gemm_splitk<4>",
                 s.step,
                 {8, 1, 1},
                 {128, 1, 1},
                 7,
                 static_cast<uint64_t>(100 + s.step * 10),
                 1000000 + s.step * 50000,
                 1000000 + s.step * 50000 + 20000};
        ks[1] = {"rmsnorm",
                 s.step,
                 {4, 1, 1},
                 {256, 1, 1},
                 7,
                 static_cast<uint64_t>(101 + s.step * 10),
                 1000000 + s.step * 50000 + 21000,
                 1000000 + s.step * 50000 + 25000};
        EXPECT_TRUE((*w)->append_kernels(ks).ok());
      }
    }
    EXPECT_TRUE((*w)->close().ok());
    return out;
  }();
  return path;
}

std::string python() {
  return LLMRR_PYTHON3;
}

TEST(Export, PerfettoJsonFollowsTheTraceEventFormat) {
  if (python().empty()) GTEST_SKIP() << "no python3 to run the format check";
  const std::string json_path = temp_path("perfetto.json");
  std::string out;
  ASSERT_EQ(run_command(rtest::llmrr_binary() + " export " + trace_with_kernels() + " --perfetto " +
                            json_path,
                        &out, true),
            0)
      << out;
  ASSERT_EQ(
      run_command(python() + " " + LLMRR_EXPORT_TEST_DIR "/check_trace_events.py " + json_path,
                  &out, true),
      0)
      << out;
  nlohmann::json sum = nlohmann::json::parse(out);
  auto r = trace::TraceReader::open(trace_with_kernels());
  ASSERT_TRUE(r.ok());
  // One track per request plus the steps track plus a kernel stream.
  std::set<std::string> names(sum["thread_names"].begin(), sum["thread_names"].end());
  EXPECT_TRUE(names.count("steps"));
  EXPECT_TRUE(names.count("stream 7"));
  for (const trace::RequestSummary& q : (*r)->requests()) {
    std::string n = "request " + std::to_string(q.id) + (q.label.empty() ? "" : " " + q.label);
    EXPECT_TRUE(names.count(n)) << n;
  }
  // Slices: one per step, one per (step, segment); kernels: the four written.
  int64_t segments = 0, sampled = 0;
  trace::StepCursor cur = (*r)->steps();
  trace::StepRecord s;
  while (*cur.next(&s)) {
    segments += static_cast<int64_t>(s.segments.size());
    sampled += static_cast<int64_t>(s.logits.size());
  }
  EXPECT_EQ(sum["slices"]["step"], (*r)->step_count());
  EXPECT_EQ(sum["slices"].value("prefill", 0) + sum["slices"].value("decode", 0), segments);
  EXPECT_EQ(sum["slices"]["kernel"], 4);
  EXPECT_EQ(sum["counters"]["batch rows"], (*r)->step_count());
  int64_t margins = 0;
  for (auto& [k, v] : sum["counters"].items()) {
    if (k.rfind("margin r", 0) == 0) margins += v.get<int64_t>();
  }
  EXPECT_EQ(margins, sampled);
  // The checker rejects what is not the format: it can fail.
  const std::string bad = temp_path("bad-events.json");
  rtest::write_file(bad,
                    R"({"traceEvents":[{"ph":"X","pid":1,"tid":1,"name":"a","ts":-1,"dur":1}]})");
  EXPECT_NE(run_command(python() + " " + LLMRR_EXPORT_TEST_DIR "/check_trace_events.py " + bad,
                        &out, true),
            0);
}

TEST(Export, NpyArraysLoadInNumpyWithTheTracesValues) {
  if (std::string(LLMRR_NUMPY_PYTHON).empty()) {
    GTEST_SKIP() << "no python3 with numpy at configure time (tools/setup/build installs python3-numpy)";
  }
  const std::string dir = temp_path("npy");
  std::string out;
  ASSERT_EQ(
      run_command(rtest::llmrr_binary() + " export " + moe_trace() + " --npy " + dir, &out, true),
      0)
      << out;
  ASSERT_EQ(run_command(std::string(LLMRR_NUMPY_PYTHON) + " " +
                            LLMRR_EXPORT_TEST_DIR "/check_npy.py " + dir,
                        &out, true),
            0)
      << out;
  nlohmann::json a = nlohmann::json::parse(out);
  // What the trace holds.
  auto r = trace::TraceReader::open(moe_trace());
  ASSERT_TRUE(r.ok());
  int64_t rows = 0, logits = 0, routed = 0;
  uint64_t hash_sum = 0;
  double margin_sum = 0;
  trace::Fingerprint first{};
  bool have_first = false;
  trace::LogitsRecord first_logits;
  int32_t k = 0;
  trace::StepCursor cur = (*r)->steps();
  trace::StepRecord s;
  while (*cur.next(&s)) {
    for (const trace::SiteRows& sr : s.rows) {
      for (const trace::Fingerprint& f : sr.rows) {
        if (!have_first) first = f, have_first = true;
        hash_sum += f.hash;
        ++rows;
      }
    }
    for (const trace::LogitsRecord& l : s.logits) {
      if (logits == 0) first_logits = l;
      margin_sum += l.margin;
      ++logits;
    }
    for (const trace::Routing& rt : s.routing) {
      routed += rt.rows;
      k = rt.k;
    }
  }
  ASSERT_GT(rows, 0);
  EXPECT_EQ(a["fingerprints.hash.npy"]["shape"], nlohmann::json::array({rows}));
  EXPECT_EQ(a["fingerprints.hash.npy"]["dtype"], "<u8");
  EXPECT_EQ(a["fingerprints.hash.npy"]["first"][0], std::to_string(first.hash));
  EXPECT_EQ(a["fingerprints.hash.npy"]["sum"], std::to_string(hash_sum));  // uint64 wraps alike
  EXPECT_EQ(a["fingerprints.summary.npy"]["shape"], nlohmann::json::array({rows, 2}));
  EXPECT_FLOAT_EQ(std::stof(a["fingerprints.summary.npy"]["first"][0].get<std::string>()),
                  first.l2);
  EXPECT_EQ(a["fingerprints.index.npy"]["shape"], nlohmann::json::array({rows, 4}));
  EXPECT_EQ(a["logits.margin.npy"]["shape"], nlohmann::json::array({logits}));
  EXPECT_NEAR(std::stod(a["logits.margin.npy"]["sum"].get<std::string>()), margin_sum, 1e-3);
  EXPECT_EQ(a["logits.top_ids.npy"]["shape"],
            nlohmann::json::array({logits, static_cast<int64_t>(first_logits.top_ids.size())}));
  EXPECT_EQ(a["logits.top_ids.npy"]["first"][0], std::to_string(first_logits.top_ids[0]));
  EXPECT_EQ(a["logits.index.npy"]["first"][1], std::to_string(first_logits.request));
  EXPECT_EQ(a["logits.index.npy"]["first"][2], std::to_string(first_logits.position));
  ASSERT_GT(routed, 0);
  EXPECT_EQ(a["routing.experts.npy"]["shape"], nlohmann::json::array({routed, k}));
  EXPECT_EQ(a["routing.gates.npy"]["dtype"], "<f4");
  EXPECT_EQ(a["routing.index.npy"]["shape"], nlohmann::json::array({routed, 4}));
}

TEST(Export, UsageErrors) {
  std::string out;
  EXPECT_EQ(run_command(rtest::llmrr_binary() + " export " + moe_trace(), &out, true), 2) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  const std::string junk = temp_path("junk.trace");
  rtest::write_file(junk, "junk");
  EXPECT_EQ(run_command(rtest::llmrr_binary() + " export " + junk + " --npy " + temp_path("j"),
                        &out, true),
            2);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

}  // namespace
}  // namespace llmrr
