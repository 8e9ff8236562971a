// Fuzz target: records built from fuzz bytes → TraceWriter → TraceReader. Whatever the
// writer accepts must come back equal (sequentially and by random access) and verify;
// whatever it refuses must be refused with a Status, never a crash.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz_util.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"

using namespace llmrr;
using namespace llmrr::trace;

namespace {

[[noreturn]] void fail(const char* what, const Status& st) {
  std::fprintf(stderr, "roundtrip: %s: %s\n", what, st.to_string().c_str());
  std::abort();
}

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "roundtrip: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

PlanRecord make_plan(fuzz::Bytes& in) {
  PlanRecord p;
  p.op = static_cast<OpKind>(in.range(0, 4));  // 4: invalid, must be refused
  p.mode = static_cast<SplitMode>(in.range(0, 1));
  p.separate_new_kv = in.flag();
  p.splits = static_cast<uint32_t>(in.range(0, 9));
  p.split_size = static_cast<uint32_t>(in.range(0, 512));
  p.k_tile = static_cast<uint32_t>(16 * in.range(0, 8) + (in.range(0, 15) == 0 ? 3 : 0));
  if (in.range(0, 3) == 0) {
    p.order = CombineOrder::kArrival;
    const int64_t n = in.flag() ? p.splits : in.range(0, 12);
    for (int64_t i = 0; i < n; ++i) p.arrival.push_back(static_cast<uint16_t>(i));
    for (size_t i = p.arrival.size(); i > 1; --i)
      std::swap(p.arrival[i - 1], p.arrival[in.range(0, static_cast<int64_t>(i - 1))]);
  }
  return p;
}

StepRecord make_step(fuzz::Bytes& in, int64_t step, std::vector<uint64_t>& live, uint64_t& next_id,
                     int64_t blobs) {
  StepRecord s;
  s.step = step;
  const int64_t arrivals = in.range(0, 2);
  for (int64_t i = 0; i < arrivals; ++i) {
    RequestRecord r;
    r.id = in.range(0, 7) == 0 ? (live.empty() ? 0 : live[0]) : next_id++;  // sometimes a duplicate
    const int64_t n = in.range(0, 6);
    for (int64_t t = 0; t < n; ++t) r.prompt.push_back(static_cast<int32_t>(in.u16()));
    r.temperature = in.flag() ? 0.0f : static_cast<float>(in.range(0, 200)) / 100.0f;
    r.top_k = static_cast<int32_t>(in.range(0, 50));
    r.top_p = static_cast<float>(in.range(0, 100)) / 100.0f;
    r.seed = in.u64();
    r.max_tokens = static_cast<int32_t>(in.range(-1, 20));
    r.arrival_step = step;
    r.stop_at_eos = in.flag();
    if (in.flag())
      r.label = std::string(static_cast<size_t>(in.range(0, 5)),
                            'a' + static_cast<char>(in.range(0, 25)));
    s.arrivals.push_back(r);
  }
  std::vector<uint64_t> candidates = live;
  for (const RequestRecord& r : s.arrivals) candidates.push_back(r.id);
  int32_t rows = 0;
  const int64_t segs =
      candidates.empty() ? 0 : in.range(0, static_cast<int64_t>(candidates.size()));
  for (int64_t i = 0; i < segs; ++i) {
    Segment g;
    g.request = in.range(0, 15) == 0 ? 9999 : candidates[static_cast<size_t>(i)];
    g.kind = static_cast<SegmentKind>(in.range(0, 1));
    g.start = static_cast<int32_t>(in.range(0, 40));
    g.count = g.kind == SegmentKind::kDecode ? 1 : static_cast<int32_t>(in.range(1, 6));
    g.cached = static_cast<int32_t>(in.range(0, g.start));
    g.sample = in.flag();
    rows += g.count;
    s.segments.push_back(g);
  }
  const int64_t plans = in.range(0, 6);
  for (int64_t i = 0; i < plans; ++i)
    s.plans.push_back({static_cast<uint64_t>(in.range(0, 9)), make_plan(in)});
  const int64_t sites = in.range(0, 3);
  for (int64_t i = 0; i < sites; ++i) {
    SiteRows r;
    r.site = in.u64() % 1000;
    r.cols = static_cast<int32_t>(in.range(0, 64));
    const int64_t n = in.range(0, rows + 1);
    const bool mapped = in.flag();
    for (int64_t k = 0; k < n; ++k) {
      r.rows.push_back({in.u64(), in.f32(), in.f32()});
      if (mapped) r.batch_rows.push_back(static_cast<int32_t>(in.range(0, rows)));
    }
    s.rows.push_back(r);
  }
  if (in.flag()) {
    Routing ro;
    ro.layer = static_cast<int32_t>(in.range(0, 3));
    ro.rows = rows;
    ro.k = static_cast<int32_t>(in.range(1, 3));
    ro.experts_total = static_cast<int32_t>(in.range(1, 9));
    ro.capacity = static_cast<int32_t>(in.range(0, 4));
    const int64_t n = static_cast<int64_t>(rows) * ro.k - (in.range(0, 20) == 0 ? 1 : 0);
    for (int64_t k = 0; k < n; ++k) {
      ro.chosen.push_back(static_cast<int32_t>(in.range(0, ro.experts_total - 1)));
      const int64_t o = in.range(0, 2);
      ro.outcome.push_back(static_cast<RouteOutcome>(o));
      ro.experts.push_back(o == 2 ? -1 : static_cast<int32_t>(in.range(0, ro.experts_total - 1)));
      ro.gates.push_back(in.f32());
    }
    s.routing.push_back(ro);
  }
  for (const Segment& g : s.segments) {
    if (!g.sample || !in.flag()) continue;
    LogitsRecord l;
    l.request = g.request;
    l.position = g.start + g.count - 1;
    l.batch_row = static_cast<int32_t>(in.range(0, rows));
    l.vocab = static_cast<int32_t>(in.range(0, 100));
    const int64_t k = in.range(0, 5);
    float v = 100.0f;
    for (int64_t i = 0; i < k; ++i) {
      l.top_ids.push_back(static_cast<int32_t>(in.range(0, 100)));
      v -= static_cast<float>(in.range(0, 3));
      l.top_values.push_back(v);
    }
    l.full = {in.u64(), in.f32(), in.f32()};
    l.margin = in.f32();
    l.blob = in.range(-1, blobs);
    s.logits.push_back(l);
    TokenRecord t;
    t.request = g.request;
    t.position = g.start + g.count;
    t.token = static_cast<int32_t>(in.range(-1, 1000));
    t.uniform = in.flag() ? -1.0 : static_cast<double>(in.range(0, 1000)) / 1000.0;
    s.tokens.push_back(t);
  }
  if (!live.empty() && in.range(0, 3) == 0) {
    s.finishes.push_back(
        {live[static_cast<size_t>(in.range(0, static_cast<int64_t>(live.size()) - 1))],
         static_cast<FinishReason>(in.range(0, 3)), static_cast<int32_t>(in.range(-1, 10))});
  }
  // Op records (format 1.6): names, kinds and attrs from an alphabet with the characters and
  // shapes the grammar refuses (space, '=', upper case, '\t'), spans and rows at the bounds.
  const int64_t ops = in.range(0, 3);
  static const char kAlphabet[] = "ab=  x:1Z.\t_9";
  auto text = [&](int64_t max) {
    std::string t;
    const int64_t n = in.range(0, max);
    for (int64_t k = 0; k < n; ++k)
      t += kAlphabet[static_cast<size_t>(in.range(0, static_cast<int64_t>(sizeof kAlphabet) - 2))];
    return t;
  };
  for (int64_t i = 0; i < ops; ++i) {
    OpRecord o;
    o.layer = static_cast<int32_t>(in.range(-2, 4));
    o.layers = static_cast<int32_t>(in.range(0, 3));
    o.first_row = static_cast<int32_t>(in.range(-1, rows));
    o.rows = static_cast<int32_t>(in.range(-1, rows + 1));
    o.graph = static_cast<int32_t>(in.range(-1, 2));
    o.name = in.flag() ? "kq" : text(6);
    o.op = in.flag() ? "MUL_MAT" : text(4);
    o.attrs = in.flag() ? "src1=f32:64x" + std::to_string(rows) + " dst=f32:32" : text(12);
    s.ops.push_back(o);
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file;
  if (!file.ok()) return 0;
  fuzz::Bytes in(data, size);
  WriterOptions opt;
  opt.zstd_level = static_cast<int>(in.range(0, 3));
  opt.max_steps_per_chunk = static_cast<int>(in.range(1, 8));
  opt.max_bytes_in_flight = static_cast<size_t>(in.range(1, 64)) * 1024;
  opt.shuffle_blobs = in.flag();
  auto w = TraceWriter::open(file.path(), opt);
  if (!w.ok()) fail("open for writing", w.status());
  RunHeader h;
  h.tool_version = "fuzz";
  h.run_id = "fuzz-run";
  h.engine.policy = in.flag() ? "production" : "invariant";
  h.engine.seed = in.u64();
  Status st = (*w)->append_run_header(h);
  if (!st.ok()) fail("run header", st);

  std::vector<StepRecord> accepted;
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<uint64_t> live;
  uint64_t next_id = 1;
  int64_t step = static_cast<int64_t>(in.range(0, 5)) - 2;
  while (!in.empty() && accepted.size() < 64) {
    if (in.range(0, 4) == 0) {
      std::vector<uint8_t> b(static_cast<size_t>(in.range(0, 64)) * 4);
      for (uint8_t& x : b) x = in.u8();
      BlobSpec spec;
      spec.dtype = in.flag() ? DType::kF32 : DType::kBF16;
      spec.shape = {static_cast<int64_t>(b.size() / (spec.dtype == DType::kF32 ? 4 : 2))};
      spec.data = b.data();
      spec.bytes = b.size();
      auto id = (*w)->append_blob(spec);
      if (!id.ok()) fail("blob", id.status());
      CHECK(*id == static_cast<int64_t>(blobs.size()));
      blobs.push_back(b);
      continue;
    }
    step += in.range(0, 3);  // 0: a repeat, which must be refused
    StepRecord s = make_step(in, step, live, next_id, static_cast<int64_t>(blobs.size()));
    st = (*w)->append_step(s);
    if (!st.ok()) {
      CHECK(st.code() == ErrorCode::kInvalidArgument);
      continue;
    }
    for (const RequestRecord& r : s.arrivals) live.push_back(r.id);
    for (const FinishRecord& f : s.finishes)
      live.erase(std::remove(live.begin(), live.end(), f.request), live.end());
    std::stable_sort(s.plans.begin(), s.plans.end(),
                     [](const SitePlan& a, const SitePlan& b) { return a.site < b.site; });
    accepted.push_back(s);
  }
  st = (*w)->close();
  if (!st.ok()) fail("close", st);

  auto r = TraceReader::open(file.path());
  if (!r.ok()) fail("reopen", r.status());
  CHECK((*r)->complete());
  CHECK((*r)->step_count() == static_cast<int64_t>(accepted.size()));
  StepCursor c = (*r)->steps();
  StepRecord got;
  for (const StepRecord& e : accepted) {
    auto more = c.next(&got);
    if (!more.ok()) fail("read", more.status());
    CHECK(*more);
    CHECK(got == e);
  }
  auto end = c.next(&got);
  CHECK(end.ok() && !*end);
  for (const StepRecord& e : accepted) {
    st = (*r)->read_step(e.step, &got);
    if (!st.ok()) fail("read_step", st);
    CHECK(got == e);
  }
  CHECK((*r)->blob_count() == static_cast<int64_t>(blobs.size()));
  std::vector<uint8_t> out;
  for (size_t b = 0; b < blobs.size(); ++b) {
    st = (*r)->read_blob(static_cast<int64_t>(b), &out);
    if (!st.ok()) fail("read_blob", st);
    CHECK(out == blobs[b]);
  }
  st = (*r)->verify();
  if (!st.ok()) fail("verify", st);
  return 0;
}
