// join_traces and cut_request (llmrr/format/splice.h): a request's life cut out of a run
// carries in the requests already running, with the tokens they had generated; blobs travel
// with their steps; parts of one run join back into the run.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "llmrr/format/splice.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "sample_records.h"
#include "test_util.h"

namespace llmrr::trace {
namespace {

using testing::sample_header;
using testing::TempFile;

// Requests (id, prompt length, arrival step, finish step): 1 runs 0..6, 2 runs 3..8, 3 runs
// 7..10; each decodes one token per step after its prefill, token = 100 * id + position.
struct Life {
  uint64_t id;
  int32_t prompt;
  int64_t arrive, finish;
};
const Life kLives[] = {{1, 3, 0, 6}, {2, 4, 3, 8}, {3, 2, 7, 10}};

std::vector<StepRecord> run_steps() {
  std::vector<StepRecord> steps;
  for (int64_t s = 0; s <= 10; ++s) {
    StepRecord st;
    st.step = s;
    for (const Life& l : kLives) {
      if (s < l.arrive || s > l.finish) continue;
      if (s == l.arrive) {
        RequestRecord r;
        r.id = l.id;
        for (int32_t i = 0; i < l.prompt; ++i) r.prompt.push_back(10 * static_cast<int32_t>(l.id) + i);
        r.max_tokens = 64;
        r.label = "cmpl-" + std::to_string(l.id) + "-abc";
        st.arrivals.push_back(r);
      }
      Segment g;
      g.request = l.id;
      g.kind = s == l.arrive ? SegmentKind::kPrefill : SegmentKind::kDecode;
      g.start = s == l.arrive ? 0 : l.prompt + static_cast<int32_t>(s - l.arrive) - 1;
      g.count = s == l.arrive ? l.prompt : 1;
      g.sample = true;
      st.segments.push_back(g);
      const int32_t pos = g.start + g.count;
      st.tokens.push_back({l.id, pos, 100 * static_cast<int32_t>(l.id) + pos, -1.0});
      if (s == l.finish)
        st.finishes.push_back({l.id, FinishReason::kMaxTokens, static_cast<int32_t>(s - l.arrive + 1)});
    }
    steps.push_back(std::move(st));
  }
  return steps;
}

// Writes steps [first, last] of the run; with `carry`, the requests alive before `first`
// are carried into it (as the ring writes a segment). A full-logits blob for request 2 at
// step 5 and one for request 1 at step 1, when those steps are written.
void write_part(const std::string& path, int64_t first, int64_t last, bool carry) {
  auto w = TraceWriter::open(path);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  std::map<uint64_t, RequestRecord> alive;
  int64_t blobs = 0;
  for (StepRecord s : run_steps()) {
    if (s.step < first) {
      for (const RequestRecord& r : s.arrivals) alive[r.id] = r;
      for (const TokenRecord& t : s.tokens) alive[t.request].history.push_back(t.token);
      for (const FinishRecord& f : s.finishes) alive.erase(f.request);
      continue;
    }
    if (s.step > last) break;
    if (carry && s.step == first) {
      std::vector<RequestRecord> a;
      for (auto& [id, r] : alive) {
        r.carried = true;
        a.push_back(r);
      }
      a.insert(a.end(), s.arrivals.begin(), s.arrivals.end());
      s.arrivals = a;
    }
    for (uint64_t who : {uint64_t{1}, uint64_t{2}}) {
      if (!((who == 1 && s.step == 1) || (who == 2 && s.step == 5))) continue;
      std::vector<float> v(16, 0.0f);
      v[3] = 1.0f + static_cast<float>(s.step);
      BlobSpec b;
      b.dtype = DType::kF32;
      b.shape = {16};
      b.data = v.data();
      b.bytes = v.size() * 4;
      b.name = "logits:" + std::to_string(s.step);
      b.step = s.step;
      b.request = who;
      auto id = (*w)->append_blob(b);
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      for (const Segment& g : s.segments) {
        if (g.request != who) continue;
        LogitsRecord l;
        l.request = who;
        l.position = g.start + g.count - 1;
        l.vocab = 16;
        l.top_ids = {3, 0};
        l.top_values = {v[3], 0.0f};
        l.blob = *id;
        s.logits.push_back(l);
      }
      ++blobs;
    }
    Status st = (*w)->append_step(s);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  ASSERT_TRUE((*w)->close().ok());
}

TEST(Splice, CutKeepsTheRequestsLifeAndCarriesTheRunningOnesIn) {
  TempFile in("cut-in"), out("cut-out");
  write_part(in.path, 0, 10, false);
  CutSpec spec;
  spec.request = 2;
  Result<SpliceReport> rep = cut_request(in.path, spec, out.path);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->first_step, 3);
  EXPECT_EQ(rep->last_step, 8);
  EXPECT_EQ(rep->steps, 6);
  EXPECT_EQ(rep->requests, 3);  // 1 carried in, 2 itself, 3 arriving at step 7
  EXPECT_EQ(rep->carried, 1);
  EXPECT_EQ(rep->blobs, 1);     // request 2's at step 5; request 1's at step 1 is before

  auto r = TraceReader::open(out.path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  VerifyReport vr;
  ASSERT_TRUE((*r)->verify(&vr).ok());
  EXPECT_TRUE((*r)->complete());
  EXPECT_TRUE((*r)->lossy());
  EXPECT_NE((*r)->lossy_reason().find("a cut: steps 3..8 of 0..10"), std::string::npos)
      << (*r)->lossy_reason();
  EXPECT_NE((*r)->run_header().extra_config_json.find("\"cut\""), std::string::npos);
  StepRecord first;
  ASSERT_TRUE((*r)->read_step(3, &first).ok());
  ASSERT_EQ(first.arrivals.size(), 2u);
  const RequestRecord& carried = first.arrivals[0];
  EXPECT_EQ(carried.id, 1u);
  EXPECT_TRUE(carried.carried);
  // Request 1 generated positions 3, 4, 5 at steps 0..2 before the cut.
  EXPECT_EQ(carried.history, (std::vector<int32_t>{103, 104, 105}));
  EXPECT_EQ(first.arrivals[1].id, 2u);
  EXPECT_FALSE(first.arrivals[1].carried);
  EXPECT_TRUE(first.arrivals[1].history.empty());
  // Every row of every request is in the kept steps, the same as in the source.
  auto src = TraceReader::open(in.path);
  ASSERT_TRUE(src.ok());
  for (int64_t s = 3; s <= 8; ++s) {
    StepRecord a, b;
    ASSERT_TRUE((*src)->read_step(s, &a).ok());
    ASSERT_TRUE((*r)->read_step(s, &b).ok());
    EXPECT_EQ(a.segments, b.segments) << s;
    EXPECT_EQ(a.tokens, b.tokens) << s;
    EXPECT_EQ(a.finishes, b.finishes) << s;
    ASSERT_EQ(a.logits.size(), b.logits.size()) << s;
    for (size_t i = 0; i < a.logits.size(); ++i) {
      std::vector<uint8_t> x, y;
      ASSERT_TRUE((*src)->read_blob(a.logits[i].blob, &x).ok());
      ASSERT_TRUE((*r)->read_blob(b.logits[i].blob, &y).ok());
      EXPECT_EQ(x, y);
      EXPECT_EQ(b.logits[i].blob, 0);  // renumbered
    }
  }
  bool carried_summary = false;
  for (const RequestSummary& q : (*r)->requests()) carried_summary |= q.id == 1 && q.carried;
  EXPECT_TRUE(carried_summary);
}

TEST(Splice, WholeLivesStartsWhereNoRequestIsCarried) {
  TempFile in("cut-whole-in"), out("cut-whole-out"), late("cut-whole-late");
  write_part(in.path, 0, 10, false);
  CutSpec spec;
  spec.request = 2;  // arrives at 3 while request 1 (0..6) runs: back to 0
  spec.whole_lives = true;
  Result<SpliceReport> rep = cut_request(in.path, spec, out.path);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->first_step, 0);
  EXPECT_EQ(rep->last_step, 8);
  EXPECT_EQ(rep->carried, 0);
  spec.request = 3;  // arrives at 7 while 2 (3..8) runs, which arrived while 1 ran
  rep = cut_request(in.path, spec, late.path);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->first_step, 0);
  EXPECT_EQ(rep->carried, 0);
}

TEST(Splice, CutOfAnUnknownRequestNamesTheOnesThere) {
  TempFile in("cut-unknown"), out("cut-unknown-out");
  write_part(in.path, 0, 10, false);
  CutSpec spec;
  spec.request = 9;
  Result<SpliceReport> rep = cut_request(in.path, spec, out.path);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(rep.status().message().find("no request 9 (it has 1, 2, 3)"), std::string::npos)
      << rep.status().to_string();
}

TEST(Splice, PartsOfOneRunJoinBackIntoIt) {
  TempFile a("join-a"), b("join-b"), whole("join-whole"), out("join-out");
  write_part(a.path, 0, 4, false);
  write_part(b.path, 5, 10, true);  // carries 1 and 2 in, as a ring segment does
  write_part(whole.path, 0, 10, false);
  Result<SpliceReport> rep = join_traces({a.path, b.path}, out.path, "");
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->steps, 11);
  EXPECT_EQ(rep->requests, 3);
  EXPECT_EQ(rep->carried, 0);  // the later part's carried copies are known already
  EXPECT_EQ(rep->blobs, 2);
  auto r = TraceReader::open(out.path);
  auto w = TraceReader::open(whole.path);
  ASSERT_TRUE(r.ok() && w.ok());
  ASSERT_TRUE((*r)->verify().ok());
  EXPECT_FALSE((*r)->lossy());
  EXPECT_EQ((*r)->requests(), (*w)->requests());
  for (int64_t s = 0; s <= 10; ++s) {
    StepRecord x, y;
    ASSERT_TRUE((*r)->read_step(s, &x).ok());
    ASSERT_TRUE((*w)->read_step(s, &y).ok());
    EXPECT_EQ(x, y) << "step " << s;
  }
}

TEST(Splice, JoinRefusesPartsOfDifferentRuns) {
  TempFile a("join-run-a"), b("join-run-b"), out("join-run-out");
  write_part(a.path, 0, 4, false);
  {
    auto w = TraceWriter::open(b.path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->append_run_header(sample_header("run-0002")).ok());
    ASSERT_TRUE((*w)->close().ok());
  }
  Result<SpliceReport> rep = join_traces({a.path, b.path}, out.path, "");
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.status().message().find("not parts of one run"), std::string::npos)
      << rep.status().to_string();
}

TEST(Splice, HistoryWithoutCarriedIsRefused) {
  TempFile f("history-refused");
  auto w = TraceWriter::open(f.path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->append_run_header(sample_header()).ok());
  StepRecord s;
  RequestRecord r;
  r.id = 1;
  r.prompt = {1};
  r.history = {2, 3};
  s.arrivals.push_back(r);
  Status st = (*w)->append_step(s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("history: expected none for a request that was not carried"),
            std::string::npos)
      << st.to_string();
}

}  // namespace
}  // namespace llmrr::trace
