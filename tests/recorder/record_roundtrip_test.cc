// record → TraceReader → every record equals what a MemoryTrace (and a DetailObserver for
// what MemoryTrace does not keep) attached to the same engine saw: segments, plans per site
// per step, row fingerprints at the capture level, routing, logits top-K and fingerprints,
// tokens with their sampler draws, arrivals and finishes. Then full-logit blobs and
// XOR-against-a-reference blobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include "llmrr/format/fingerprint.h"
#include "recorder_test_util.h"

namespace llmrr::rectest {
namespace {

using trace::CaptureLevel;

bool same_float_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

trace::Segment to_trace(const BatchSegment& g) {
  trace::Segment s;
  s.request = g.request;
  s.start = g.start;
  s.count = g.count;
  s.cached = g.cached;
  s.kind =
      g.kind == SegmentKind::kDecode ? trace::SegmentKind::kDecode : trace::SegmentKind::kPrefill;
  s.sample = g.sample;
  return s;
}

bool captured(CaptureLevel level, uint64_t packed) {
  switch (level) {
    case CaptureLevel::kNone:
      return false;
    case CaptureLevel::kLayers:
      return is_layer_output(SiteId::unpack(packed));
    case CaptureLevel::kAll:
      return true;
  }
  return false;
}

// Checks a logits record against the full row, independently of kernels::topk.
void check_logits(const trace::LogitsRecord& rec, const std::vector<float>& row, int top_k) {
  ASSERT_EQ(rec.vocab, static_cast<int32_t>(row.size()));
  const size_t k = std::min<size_t>(static_cast<size_t>(top_k), row.size());
  ASSERT_EQ(rec.top_ids.size(), k);
  ASSERT_EQ(rec.top_values.size(), k);
  std::set<int32_t> in_top;
  for (size_t j = 0; j < k; ++j) {
    const int32_t id = rec.top_ids[j];
    ASSERT_TRUE(id >= 0 && id < rec.vocab) << id;
    EXPECT_TRUE(same_float_bits(rec.top_values[j], row[static_cast<size_t>(id)])) << "entry " << j;
    if (j > 0) {
      const float prev = rec.top_values[j - 1];
      EXPECT_TRUE(prev > rec.top_values[j] ||
                  (prev == rec.top_values[j] && rec.top_ids[j - 1] < id))
          << "top-K not in descending order (ties to the lower id) at " << j;
    }
    in_top.insert(id);
  }
  if (k > 0) {
    const float last = rec.top_values[k - 1];
    const int32_t last_id = rec.top_ids[k - 1];
    for (int32_t id = 0; id < rec.vocab; ++id) {
      if (in_top.count(id)) continue;
      const float v = row[static_cast<size_t>(id)];
      EXPECT_TRUE(v < last || (v == last && id > last_id))
          << "token " << id << " (" << v << ") belongs in the top-" << k;
    }
  }
  std::vector<float> sorted = row;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  EXPECT_TRUE(same_float_bits(rec.margin, sorted[0] - sorted[1]))
      << rec.margin << " vs " << sorted[0] - sorted[1];
  EXPECT_EQ(rec.full, trace::fingerprint_row(row.data(), static_cast<int64_t>(row.size())));
  EXPECT_EQ(rec.full.hash, hash_row(row.data(), static_cast<int64_t>(row.size())));
}

// The whole comparison. `level` is the capture level the run was recorded at.
void expect_trace_matches(const RecordedRun& run, trace::TraceReader& reader, CaptureLevel level,
                          int top_k, trace::LogitsMode logits_mode, int32_t experts) {
  const MemoryTrace& mt = *run.memory;
  const DetailObserver& dt = *run.detail;
  std::vector<trace::StepRecord> steps = read_steps(reader);
  ASSERT_EQ(steps.size(), mt.steps().size());
  ASSERT_GT(steps.size(), 0u);
  EXPECT_EQ(reader.step_count(), static_cast<int64_t>(steps.size()));
  EXPECT_EQ(reader.run_header().engine.capture, level);
  EXPECT_EQ(reader.run_header().engine.logits_mode, logits_mode);
  EXPECT_EQ(reader.run_header().engine.top_k, top_k);

  std::map<RequestId, std::vector<int32_t>> tokens;
  std::vector<trace::RequestRecord> arrivals;
  std::map<RequestId, trace::FinishRecord> finishes;
  std::map<RequestId, int64_t> finish_step;
  int64_t fingerprints = 0, routings = 0, plans = 0, logits_records = 0;

  for (size_t i = 0; i < steps.size(); ++i) {
    const trace::StepRecord& s = steps[i];
    const ScheduledStep& m = mt.steps()[i];
    SCOPED_TRACE("step " + std::to_string(m.step));
    ASSERT_EQ(s.step, m.step);

    // Batch composition.
    ASSERT_EQ(s.segments.size(), m.segments.size());
    int sampled = 0;
    for (size_t g = 0; g < m.segments.size(); ++g) {
      EXPECT_EQ(s.segments[g], to_trace(m.segments[g])) << "segment " << g;
      sampled += m.segments[g].sample ? 1 : 0;
    }

    // Plans: every (site, plan) the engine reported at this step, nothing else.
    std::vector<trace::SitePlan> want;
    for (const auto& [key, plan] : mt.plans().all()) {
      if (key.first != m.step) continue;
      trace::SitePlan sp;
      sp.site = key.second;
      sp.plan.op = plan.op;
      sp.plan.mode = plan.mode;
      sp.plan.order = plan.order;
      sp.plan.separate_new_kv = plan.separate_new_kv;
      sp.plan.splits = plan.splits;
      sp.plan.split_size = plan.split_size;
      sp.plan.k_tile = plan.k_tile;
      sp.plan.arrival = plan.arrival;
      want.push_back(sp);
    }
    std::sort(want.begin(), want.end(),
              [](const trace::SitePlan& a, const trace::SitePlan& b) { return a.site < b.site; });
    std::vector<trace::SitePlan> got = s.plans;
    std::sort(got.begin(), got.end(),
              [](const trace::SitePlan& a, const trace::SitePlan& b) { return a.site < b.site; });
    ASSERT_EQ(got.size(), want.size());
    for (size_t p = 0; p < want.size(); ++p) {
      EXPECT_EQ(got[p], want[p]) << site_name(SiteId::unpack(want[p].site));
      const trace::PlanRecord* found = s.find_plan(want[p].site);
      EXPECT_TRUE(found != nullptr && *found == want[p].plan);
    }
    plans += static_cast<int64_t>(want.size());

    // Row fingerprints at the capture level.
    std::set<std::pair<uint64_t, int64_t>> want_rows;
    for (const auto& [key, hash] : mt.row_hashes()) {
      if (std::get<0>(key) != m.step || !captured(level, std::get<1>(key))) continue;
      want_rows.insert({std::get<1>(key), std::get<2>(key)});
    }
    std::set<std::pair<uint64_t, int64_t>> got_rows;
    for (const trace::SiteRows& sr : s.rows) {
      const std::string name = site_name(SiteId::unpack(sr.site));
      EXPECT_TRUE(captured(level, sr.site))
          << name << " recorded at capture " << trace::capture_level_name(level);
      auto c = dt.cols.find({m.step, sr.site});
      ASSERT_NE(c, dt.cols.end()) << name;
      EXPECT_EQ(sr.cols, c->second) << name;
      ASSERT_TRUE(sr.batch_rows.empty() || sr.batch_rows.size() == sr.rows.size()) << name;
      for (size_t r = 0; r < sr.rows.size(); ++r) {
        const int64_t row = sr.batch_rows.empty() ? static_cast<int64_t>(r) : sr.batch_rows[r];
        EXPECT_TRUE(got_rows.insert({sr.site, row}).second) << name << " row " << row << " twice";
        auto h = mt.row_hashes().find({m.step, sr.site, row});
        ASSERT_NE(h, mt.row_hashes().end()) << name << " row " << row;
        EXPECT_EQ(sr.rows[r].hash, h->second) << name << " row " << row;
        auto f = dt.fingerprints.find({m.step, sr.site, row});
        ASSERT_NE(f, dt.fingerprints.end());
        EXPECT_EQ(sr.rows[r], f->second) << name << " row " << row;
      }
    }
    EXPECT_EQ(got_rows, want_rows);
    fingerprints += static_cast<int64_t>(got_rows.size());

    // Routing of every MoE layer.
    size_t want_routing = 0;
    for (const auto& [key, fr] : const_cast<MemoryTrace&>(mt).routings()) {
      if (key.first == m.step) ++want_routing;
    }
    EXPECT_EQ(s.routing.size(), want_routing);
    for (const trace::Routing& r : s.routing) {
      SCOPED_TRACE("layer " + std::to_string(r.layer));
      auto& all = const_cast<MemoryTrace&>(mt).routings();
      auto it = all.find({m.step, r.layer});
      ASSERT_NE(it, all.end());
      const ForcedRouting& fr = it->second;
      EXPECT_EQ(r.rows, fr.rows);
      EXPECT_EQ(r.k, fr.k);
      EXPECT_EQ(r.capacity, fr.capacity);
      EXPECT_EQ(r.experts_total, experts);
      EXPECT_EQ(r.experts, fr.experts);
      ASSERT_EQ(r.outcome.size(), fr.outcome.size());
      for (size_t j = 0; j < fr.outcome.size(); ++j) {
        EXPECT_EQ(static_cast<int>(r.outcome[j]), static_cast<int>(fr.outcome[j])) << j;
      }
      EXPECT_EQ(r.chosen, dt.chosen.at({m.step, r.layer}));
      const std::vector<float>& gates = dt.gates.at({m.step, r.layer});
      ASSERT_EQ(r.gates.size(), gates.size());
      EXPECT_EQ(0, std::memcmp(r.gates.data(), gates.data(), gates.size() * sizeof(float)));
      ++routings;
    }

    // Logits of every sampled row.
    EXPECT_EQ(static_cast<int>(s.logits.size()), sampled);
    for (const trace::LogitsRecord& lr : s.logits) {
      SCOPED_TRACE("logits of request " + std::to_string(lr.request) + " at " +
                   std::to_string(lr.position));
      const std::vector<float>* row = mt.logits_at(lr.request, lr.position);
      ASSERT_NE(row, nullptr);
      EXPECT_EQ(lr.batch_row, mt.batch_row_of(lr.request, lr.position));
      check_logits(lr, *row, top_k);
      if (logits_mode == trace::LogitsMode::kTopK) {
        EXPECT_EQ(lr.blob, -1);
      }
      ++logits_records;
    }

    // Tokens, arrivals, finishes.
    for (const trace::TokenRecord& t : s.tokens) {
      tokens[t.request].push_back(t.token);
      auto u = dt.uniform.find({t.request, t.position});
      ASSERT_NE(u, dt.uniform.end());
      EXPECT_EQ(t.uniform, u->second);
    }
    for (const trace::RequestRecord& a : s.arrivals) {
      arrivals.push_back(a);
      EXPECT_EQ(dt.arrival_step.at(a.id), s.step) << "arrival of " << a.id;
    }
    for (const trace::FinishRecord& f : s.finishes) {
      EXPECT_TRUE(finishes.emplace(f.request, f).second);
      finish_step[f.request] = s.step;
    }
  }
  EXPECT_GT(plans, 0);
  if (level != CaptureLevel::kNone) {
    EXPECT_GT(fingerprints, 0);
  }
  EXPECT_EQ(logits_records, reader.token_count());

  // Arrivals in the engine's order, field for field.
  ASSERT_EQ(arrivals.size(), mt.arrivals().size());
  for (size_t i = 0; i < arrivals.size(); ++i) {
    const RequestSpec& r = mt.arrivals()[i];
    const trace::RequestRecord& a = arrivals[i];
    EXPECT_EQ(a.id, r.id);
    EXPECT_EQ(a.prompt, r.prompt);
    EXPECT_TRUE(same_float_bits(a.temperature, r.sampling.temperature));
    EXPECT_EQ(a.top_k, r.sampling.top_k);
    EXPECT_TRUE(same_float_bits(a.top_p, r.sampling.top_p));
    EXPECT_EQ(a.seed, r.sampling.seed);
    EXPECT_EQ(a.max_tokens, r.max_tokens);
    EXPECT_EQ(a.arrival_step, r.arrival_step);
    EXPECT_EQ(a.stop_at_eos, r.stop_at_eos);
    EXPECT_EQ(a.label, r.label);
    EXPECT_EQ(tokens[r.id], mt.tokens(r.id)) << "tokens of request " << r.id;
    auto f = mt.finishes().find(r.id);
    ASSERT_NE(f, mt.finishes().end());
    ASSERT_TRUE(finishes.count(r.id)) << "no finish for " << r.id;
    EXPECT_EQ(static_cast<int>(finishes[r.id].reason), static_cast<int>(f->second.reason));
    EXPECT_EQ(finishes[r.id].generated, f->second.generated);
    EXPECT_EQ(finish_step[r.id], f->second.step);
  }
  EXPECT_EQ(finishes.size(), mt.finishes().size());

  // The footer's request summaries agree.
  ASSERT_EQ(reader.requests().size(), mt.arrivals().size());
  for (const trace::RequestSummary& rs : reader.requests()) {
    auto f = mt.finishes().find(rs.id);
    ASSERT_NE(f, mt.finishes().end());
    EXPECT_EQ(rs.finish_step, f->second.step);
    EXPECT_EQ(rs.generated, f->second.generated);
  }
}

struct Case {
  const char* name;
  const char* model;
  const char* policy;
  CaptureLevel capture;
  float temperature = 0.0f;
  double capacity = 0.0;
  Overflow overflow = Overflow::kNone;
  int top_k = 32;
  int threads = 1;
};

class RecordRoundTrip : public ::testing::TestWithParam<Case> {};

RunSpec spec_for(const Case& c) {
  RunSpec spec;
  spec.model = c.model;
  spec.policy = c.policy;
  spec.config.threads = c.threads;
  spec.config.scheduler.prefill_chunk = 16;  // chunked prefill: cached + new KV segments
  spec.config.capacity.factor = c.capacity;
  spec.config.capacity.overflow = c.overflow;
  spec.recorder.capture = c.capture;
  spec.recorder.top_k = c.top_k;
  const LoadedModel& model = builtin(c.model);
  RequestSpec target = request(0, "The quick brown fox jumps over the lazy dog", 10);
  target.sampling.temperature = c.temperature;
  target.sampling.seed = 42;
  spec.requests.push_back(target);
  RequestSpec late = request(1, "Hello", 6, /*arrival=*/3);
  late.sampling.temperature = c.temperature;
  late.sampling.top_k = c.temperature > 0 ? 20 : 0;
  late.sampling.top_p = c.temperature > 0 ? 0.9f : 1.0f;
  late.sampling.seed = 7;
  spec.requests.push_back(late);
  for (const RequestSpec& r : load_requests(model, 3, 11, 2)) spec.requests.push_back(r);
  return spec;
}

TEST_P(RecordRoundTrip, EveryRecordEqualsWhatTheEngineDid) {
  const Case& c = GetParam();
  RunSpec spec = spec_for(c);
  RecordedRun run = record_run(spec);
  ASSERT_TRUE(run.run_status.ok()) << run.run_status.to_string();
  ASSERT_TRUE(run.close_status.ok()) << run.close_status.to_string();
  auto reader = open_reader(run.path);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->complete());
  EXPECT_FALSE(reader->lossy()) << reader->lossy_reason();
  trace::VerifyReport report;
  Status v = reader->verify(&report);
  EXPECT_TRUE(v.ok()) << v.to_string();
  EXPECT_EQ(report.steps, static_cast<int64_t>(run.memory->steps().size()));
  EXPECT_EQ(run.stats.steps, static_cast<int64_t>(run.memory->steps().size()));
  expect_trace_matches(run, *reader, c.capture, c.top_k, trace::LogitsMode::kTopK,
                       builtin(c.model).config.experts);

  // What the case is about actually happened.
  if (std::string(c.policy) == "atomics") {
    bool arrival = false;
    for (const auto& [key, plan] : run.memory->plans().all()) {
      arrival = arrival || plan.order == CombineOrder::kArrival;
    }
    EXPECT_TRUE(arrival) << "no arrival-order plan in an --atomics run";
  }
  if (c.overflow != Overflow::kNone) {
    bool moved = false;
    for (const auto& [key, fr] : run.memory->routings()) {
      for (RouteOutcome o : fr.outcome) moved = moved || o != RouteOutcome::kKept;
    }
    EXPECT_TRUE(moved) << "capacity never rerouted or dropped a token";
  }
  if (c.temperature > 0) {
    bool drawn = false;
    for (const auto& [key, u] : run.detail->uniform) drawn = drawn || u >= 0;
    EXPECT_TRUE(drawn);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RecordRoundTrip,
    ::testing::Values(Case{"moe_production_layers", "tiny-moe", "production",
                           CaptureLevel::kLayers},
                      Case{"moe_production_none", "tiny-moe", "production", CaptureLevel::kNone},
                      Case{"moe_production_all", "tiny-moe", "production", CaptureLevel::kAll},
                      Case{"dense_invariant_all", "tiny-dense", "invariant", CaptureLevel::kAll},
                      Case{"dense_production_layers_2threads", "tiny-dense", "production",
                           CaptureLevel::kLayers, 0.0f, 0.0, Overflow::kNone, 32, 2},
                      Case{"moe_atomics_all", "tiny-moe", "atomics", CaptureLevel::kAll},
                      Case{"moe_capacity_reroute_all", "tiny-moe", "production", CaptureLevel::kAll,
                           0.0f, 1.0, Overflow::kReroute},
                      Case{"moe_capacity_drop_layers", "tiny-moe", "production",
                           CaptureLevel::kLayers, 0.0f, 0.5, Overflow::kDrop},
                      Case{"moe_sampling_layers_top5", "tiny-moe", "production",
                           CaptureLevel::kLayers, 0.9f, 0.0, Overflow::kNone, 5},
                      Case{"moe_top1", "tiny-moe", "invariant", CaptureLevel::kNone, 0.0f, 0.0,
                           Overflow::kNone, 1},
                      Case{"moe_top0", "tiny-moe", "production", CaptureLevel::kNone, 0.0f, 0.0,
                           Overflow::kNone, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// The real model when it is cached (tools/setup/smollm2): BPE vocabulary of 49152, 30 layers.
TEST(Recorder, SmolLM2RoundTrip) {
  const std::string path = find_smollm2();
  if (path.empty())
    GTEST_SKIP() << "SmolLM2 is not in " << model_cache_dir() << " (tools/setup/smollm2)";
  const LoadedModel& m = builtin(path);
  ASSERT_GT(m.config.vocab, 0);
  RunSpec spec;
  spec.model = path;
  spec.config.threads = 2;
  spec.recorder.capture = CaptureLevel::kLayers;
  RequestSpec target;
  target.id = 0;
  target.prompt = m.tokenizer->encode("The capital of France is");
  target.max_tokens = 4;
  target.label = "target";
  spec.requests.push_back(target);
  RequestSpec other = target;
  other.id = 1;
  other.prompt = m.tokenizer->encode("Once upon a time");
  other.arrival_step = 1;
  other.label = "other";
  spec.requests.push_back(other);
  RecordedRun run = record_run(spec);
  ASSERT_TRUE(run.close_status.ok()) << run.close_status.to_string();
  auto reader = open_reader(run.path);
  ASSERT_NE(reader, nullptr);
  Status v = reader->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
  expect_trace_matches(run, *reader, CaptureLevel::kLayers, 32, trace::LogitsMode::kTopK,
                       m.config.experts);
}

// An observer must not change what it observes: the recorded run's tokens and logits are
// bit-identical to an unobserved run's.
TEST(Recorder, RecordingDoesNotChangeTheRun) {
  RunSpec spec = spec_for(Case{"", "tiny-moe", "production", CaptureLevel::kAll});
  spec.recorder.logits = trace::LogitsMode::kFull;
  RecordedRun run = record_run(spec);
  ASSERT_TRUE(run.close_status.ok()) << run.close_status.to_string();
  std::unique_ptr<MemoryTrace> plain = plain_run(spec);
  ASSERT_NE(plain, nullptr);
  ASSERT_EQ(run.memory->logits().size(), plain->logits().size());
  for (const auto& [key, row] : plain->logits()) {
    const std::vector<float>* got = run.memory->logits_at(key.first, key.second);
    ASSERT_NE(got, nullptr);
    ASSERT_EQ(got->size(), row.size());
    EXPECT_EQ(0, std::memcmp(got->data(), row.data(), row.size() * sizeof(float)));
  }
  for (const RequestSpec& r : spec.requests)
    EXPECT_EQ(run.memory->tokens(r.id), plain->tokens(r.id));
}

TEST(Recorder, FullLogitBlobsRoundTrip) {
  RunSpec spec = spec_for(Case{"", "tiny-moe", "production", CaptureLevel::kLayers});
  spec.recorder.logits = trace::LogitsMode::kFull;
  RecordedRun run = record_run(spec);
  ASSERT_TRUE(run.close_status.ok()) << run.close_status.to_string();
  auto reader = open_reader(run.path);
  ASSERT_NE(reader, nullptr);
  Status v = reader->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
  expect_trace_matches(run, *reader, CaptureLevel::kLayers, 32, trace::LogitsMode::kFull,
                       builtin("tiny-moe").config.experts);
  int64_t blobs = 0;
  std::set<int64_t> ids;
  for (const trace::StepRecord& s : read_steps(*reader)) {
    for (const trace::LogitsRecord& lr : s.logits) {
      ASSERT_GE(lr.blob, 0);
      EXPECT_TRUE(ids.insert(lr.blob).second);
      Result<trace::BlobInfo> info = reader->blob_info(lr.blob);
      ASSERT_TRUE(info.ok()) << info.status().to_string();
      EXPECT_EQ(info->dtype, trace::DType::kF32);
      EXPECT_EQ(info->shape, std::vector<int64_t>{lr.vocab});
      EXPECT_EQ(info->step, s.step);
      EXPECT_EQ(info->request, lr.request);
      EXPECT_EQ(info->site, (SiteId{SiteKind::kLogits, -1, -1}.packed()));
      EXPECT_FALSE(info->xor_coded);
      std::vector<uint8_t> bytes;
      Status st = reader->read_blob(lr.blob, &bytes);
      ASSERT_TRUE(st.ok()) << st.to_string();
      const std::vector<float>* row = run.memory->logits_at(lr.request, lr.position);
      ASSERT_NE(row, nullptr);
      ASSERT_EQ(bytes.size(), row->size() * sizeof(float));
      EXPECT_EQ(0, std::memcmp(bytes.data(), row->data(), bytes.size()));
      ++blobs;
    }
  }
  EXPECT_EQ(blobs, reader->blob_count());
  EXPECT_EQ(blobs, run.stats.blobs);
  EXPECT_EQ(blobs, reader->token_count());
}

// The recorder's thread and the inline mode (everything on the engine's thread) write the
// same records and blobs, at every capture level with full logits.
TEST(Recorder, PipelinedAndInlineWriteTheSameRecords) {
  for (CaptureLevel capture : {CaptureLevel::kLayers, CaptureLevel::kAll}) {
    RunSpec spec = spec_for(Case{"", "tiny-moe", "production", capture});
    spec.recorder.logits = trace::LogitsMode::kFull;
    spec.recorder.writer.chunk_target_bytes = 8 << 10;  // several chunks
    spec.recorder.background = true;
    RecordedRun piped = record_run(spec);
    spec.recorder.background = false;
    RecordedRun inline_run = record_run(spec);
    ASSERT_TRUE(piped.close_status.ok()) << piped.close_status.to_string();
    ASSERT_TRUE(inline_run.close_status.ok()) << inline_run.close_status.to_string();
    auto a = open_reader(piped.path);
    auto b = open_reader(inline_run.path);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    const std::vector<trace::StepRecord> sa = read_steps(*a), sb = read_steps(*b);
    ASSERT_EQ(sa.size(), piped.memory->steps().size());
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(sa[i] == sb[i]) << "step " << sa[i].step;
    ASSERT_EQ(a->blob_count(), b->blob_count());
    ASSERT_GT(a->blob_count(), 0);
    for (int64_t id = 0; id < a->blob_count(); ++id) {
      std::vector<uint8_t> x, y;
      ASSERT_TRUE(a->read_blob(id, &x).ok());
      ASSERT_TRUE(b->read_blob(id, &y).ok());
      EXPECT_EQ(x, y) << "blob " << id;
    }
    EXPECT_EQ(piped.stats.steps, inline_run.stats.steps);
    EXPECT_EQ(piped.stats.tokens, inline_run.stats.tokens);
    EXPECT_EQ(piped.stats.fingerprints, inline_run.stats.fingerprints);
    EXPECT_EQ(piped.stats.blobs, inline_run.stats.blobs);
    expect_trace_matches(piped, *a, capture, 32, trace::LogitsMode::kFull,
                         builtin("tiny-moe").config.experts);
  }
}

// Views die with their callback: the recorder copies what it completes later, so a caller
// that reuses its buffers at once (as a C ABI caller does) still gets what it handed over.
TEST(Recorder, BuffersReusedAfterEachCallbackAreRecordedAsHandedOver) {
  const std::string path = temp_path("reused.trace");
  auto rec_or = TraceRecorder::open(path, base_run_header());
  ASSERT_TRUE(rec_or.ok()) << rec_or.status().to_string();
  TraceRecorder& rec = **rec_or;
  ASSERT_TRUE(rec.pipelined());
  constexpr int kSteps = 6, kRows = 3, kCols = 40, kVocab = 300;
  std::vector<BatchSegment> segs = {{5, 0, kRows, 0, SegmentKind::kPrefill, true}};
  RequestSpec r;
  r.id = 5;
  r.prompt = {1, 2, 3};
  r.max_tokens = 100;
  rec.on_arrival(0, r);
  std::vector<float> buf(kRows * (kCols + 4)), logits(kVocab);
  std::vector<std::vector<trace::Fingerprint>> want_rows(kSteps);
  std::vector<trace::Fingerprint> want_logits(kSteps);
  std::vector<int32_t> want_top(kSteps);
  const SiteId site{SiteKind::kLayerOut, 0, -1};
  for (int step = 0; step < kSteps; ++step) {
    StepInfo info;
    info.step = step;
    info.segments = segs;
    info.rows = kRows;
    rec.on_step(info);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = std::sin(0.1f * (i + 7 * step));
    RowsView v;
    v.step = step;
    v.site = site;
    v.data = buf.data();
    v.ld = kCols + 4;  // strided rows
    v.rows = kRows;
    v.cols = kCols;
    for (int row = 0; row < kRows; ++row)
      want_rows[step].push_back(trace::fingerprint_row(buf.data() + row * v.ld, kCols));
    rec.on_rows(v);
    std::fill(buf.begin(), buf.end(), -1.0f);  // reused at once
    for (int i = 0; i < kVocab; ++i) logits[i] = std::cos(0.37f * (i + step));
    want_top[step] = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                          logits.begin());
    want_logits[step] = trace::fingerprint_row(logits.data(), kVocab);
    LogitsView lv;
    lv.step = step;
    lv.request = 5;
    lv.position = 2 + step;
    lv.batch_row = kRows - 1;
    lv.logits = logits.data();
    lv.vocab = kVocab;
    rec.on_logits(lv);
    std::fill(logits.begin(), logits.end(), 0.0f);
    TokenEvent t;
    t.step = step;
    t.request = 5;
    t.position = lv.position + 1;
    t.token = want_top[step];
    rec.on_token(t);
    rec.on_step_end(step);
  }
  ASSERT_TRUE(rec.close().ok()) << rec.status().to_string();
  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  const std::vector<trace::StepRecord> steps = read_steps(*reader);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  for (int step = 0; step < kSteps; ++step) {
    const trace::SiteRows* rows = steps[step].find_rows(site.packed());
    ASSERT_NE(rows, nullptr);
    EXPECT_EQ(rows->rows, want_rows[step]) << "step " << step;
    ASSERT_EQ(steps[step].logits.size(), 1u);
    EXPECT_EQ(steps[step].logits[0].full, want_logits[step]) << "step " << step;
    EXPECT_EQ(steps[step].logits[0].top_ids[0], want_top[step]) << "step " << step;
  }
}

uint64_t blob_stored_bytes(const trace::TraceReader& reader) {
  uint64_t n = 0;
  for (const trace::FrameInfo& f : reader.frames()) {
    if (f.kind == trace::FrameKind::kTensorBlob) n += trace::kFrameHeaderBytes + f.stored_size;
  }
  return n;
}

// Records `spec` with and without `reference`; checks every XOR-coded blob decodes to the
// logits the engine produced and returns plain / XOR-coded blob bytes.
double xor_gain(RunSpec spec, const std::string& reference_path, int64_t* xor_blobs) {
  auto ref = open_reader(reference_path);
  if (!ref) return 0;
  spec.recorder.reference = ref.get();
  RecordedRun coded = record_run(spec);
  EXPECT_TRUE(coded.close_status.ok()) << coded.close_status.to_string();
  spec.recorder.reference = nullptr;
  RecordedRun plain = record_run(spec);
  EXPECT_TRUE(plain.close_status.ok()) << plain.close_status.to_string();
  auto coded_reader = open_reader(coded.path);
  auto plain_reader = open_reader(plain.path);
  if (!coded_reader || !plain_reader) return 0;
  Status v = coded_reader->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
  *xor_blobs = 0;
  for (const trace::StepRecord& s : read_steps(*coded_reader)) {
    for (const trace::LogitsRecord& lr : s.logits) {
      Result<trace::BlobInfo> info = coded_reader->blob_info(lr.blob);
      EXPECT_TRUE(info.ok());
      if (!info.ok()) continue;
      std::vector<uint8_t> bytes;
      if (info->xor_coded) {
        ++*xor_blobs;
        EXPECT_EQ(info->reference_trace, ref->run_header().run_id);
        // Without its reference an XOR-coded blob cannot be decoded, and says so.
        EXPECT_FALSE(coded_reader->read_blob(lr.blob, &bytes).ok());
        Status st = coded_reader->read_blob(lr.blob, &bytes, *ref);
        EXPECT_TRUE(st.ok()) << st.to_string();
        if (!st.ok()) continue;
      } else {
        Status st = coded_reader->read_blob(lr.blob, &bytes);
        EXPECT_TRUE(st.ok()) << st.to_string();
        if (!st.ok()) continue;
      }
      const std::vector<float>* row = coded.memory->logits_at(lr.request, lr.position);
      EXPECT_NE(row, nullptr);
      if (!row) continue;
      EXPECT_EQ(bytes.size(), row->size() * sizeof(float));
      if (bytes.size() != row->size() * sizeof(float)) continue;
      EXPECT_EQ(0, std::memcmp(bytes.data(), row->data(), bytes.size()))
          << "blob " << lr.blob << " of request " << lr.request << " at " << lr.position;
    }
  }
  EXPECT_EQ(*xor_blobs, coded.stats.xor_blobs);
  // Everything but the blobs is recorded the same way.
  const double p = static_cast<double>(blob_stored_bytes(*plain_reader));
  const double c = static_cast<double>(blob_stored_bytes(*coded_reader));
  return c > 0 ? p / c : 0;
}

RunSpec xor_spec() {
  RunSpec spec;
  spec.model = "tiny-moe";
  spec.config.threads = 1;
  spec.recorder.capture = CaptureLevel::kNone;
  spec.recorder.logits = trace::LogitsMode::kFull;
  spec.requests.push_back(request(0, "The quick brown fox jumps over the lazy dog", 24));
  for (const RequestSpec& r : load_requests(builtin("tiny-moe"), 3, 5, 1)) {
    spec.requests.push_back(r);
  }
  return spec;
}

// A rerun of the same requests on another thread count is bit-identical: XOR leaves zeros.
TEST(Recorder, ReferenceXorOfAnIdenticalRunIsTiny) {
  RunSpec a = xor_spec();
  RecordedRun ref = record_run(a);
  ASSERT_TRUE(ref.close_status.ok());
  RunSpec b = xor_spec();
  b.config.threads = 2;
  int64_t coded = 0;
  double gain = xor_gain(b, ref.path, &coded);
  EXPECT_EQ(coded, ref.stats.blobs) << "every blob has its twin in the reference";
  // Bound by the per-blob frame and metadata (~150 bytes) next to a 1 KiB row of the tiny
  // vocabulary; real vocabularies gain far more (bench/README.md).
  EXPECT_GE(gain, 3.5) << "blob bytes plain / XOR-coded";
  std::printf("identical run: blob bytes plain / XOR-coded = %.2f\n", gain);
}

// A near-identical run (the same requests with arrival-order reductions: last-bit
// differences, and then whatever follows a flipped token) still shrinks.
TEST(Recorder, ReferenceXorOfANearIdenticalRunIsSmaller) {
  RunSpec a = xor_spec();
  RecordedRun ref = record_run(a);
  ASSERT_TRUE(ref.close_status.ok());
  RunSpec b = xor_spec();
  b.policy = "atomics";
  int64_t coded = 0;
  double gain = xor_gain(b, ref.path, &coded);
  EXPECT_GT(coded, 0);
  EXPECT_GE(gain, 1.5) << "blob bytes plain / XOR-coded";
  std::printf("near-identical run: blob bytes plain / XOR-coded = %.2f (%lld XOR-coded)\n", gain,
              static_cast<long long>(coded));
}

// Blobs whose request is not in the reference are stored plainly.
TEST(Recorder, ReferenceWithoutMatchingRequestsStoresPlainBlobs) {
  RunSpec a = xor_spec();
  a.requests.resize(1);
  RecordedRun ref = record_run(a);
  ASSERT_TRUE(ref.close_status.ok());
  RunSpec b = xor_spec();
  b.requests[0] = request(0, "A different prompt entirely", 8);
  b.requests.resize(1);
  int64_t coded = 0;
  double gain = xor_gain(b, ref.path, &coded);
  EXPECT_EQ(coded, 0);
  EXPECT_NEAR(gain, 1.0, 0.05);
}

}  // namespace
}  // namespace llmrr::rectest
