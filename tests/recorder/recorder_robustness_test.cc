// The recorder never takes down the engine it observes: I/O errors and records the writer
// refuses stop recording and mark the trace lossy (with the reason) while the engine runs
// on unchanged; callbacks out of order or after close are harmless; nothing written before
// the error is lost.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "recorder_test_util.h"

namespace llmrr::rectest {
namespace {

RunSpec busy_spec() {
  RunSpec spec;
  spec.model = "tiny-moe";
  spec.config.threads = 1;
  spec.recorder.capture = trace::CaptureLevel::kAll;
  // Small chunks, so that a run writes many frames while it runs.
  spec.recorder.writer.chunk_target_bytes = 16 << 10;
  spec.requests.push_back(request(0, "The quick brown fox jumps over the lazy dog", 16));
  for (const RequestSpec& r : load_requests(builtin("tiny-moe"), 4, 3, 1)) {
    spec.requests.push_back(r);
  }
  return spec;
}

// In a child process with a file size limit: the writer's pwrite fails with EFBIG in the
// middle of the run. Returns "" when every expectation holds, else what failed.
std::string record_under_size_limit(const RunSpec& spec, uint64_t limit, int64_t full_steps,
                                    const MemoryTrace& reference) {
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = limit;
  if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) return "setrlimit failed";
  RecordedRun run = record_run(spec);
  if (!run.run_status.ok()) return "the engine failed: " + run.run_status.to_string();
  if (run.close_status.ok()) return "close() did not report the I/O error";
  if (run.close_status.code() != ErrorCode::kIo) {
    return "expected an io error, got " + run.close_status.to_string();
  }
  // The engine's output is what an unrecorded run produces.
  for (const RequestSpec& r : spec.requests) {
    if (run.memory->tokens(r.id) != reference.tokens(r.id)) {
      return "tokens of request " + std::to_string(r.id) + " changed";
    }
  }
  auto reader = trace::TraceReader::open(run.path);
  if (!reader.ok()) return "the lossy trace does not open: " + reader.status().to_string();
  if (!(*reader)->lossy()) return "the trace is not marked lossy";
  const std::string& why = (*reader)->lossy_reason();
  if (why.find("File too large") == std::string::npos && why.find("io") == std::string::npos) {
    return "lossy reason does not name the I/O error: " + why;
  }
  if ((*reader)->step_count() <= 0) return "no step survived";
  if ((*reader)->step_count() >= full_steps) return "every step survived a mid-run error";
  Status v = (*reader)->verify();
  if (!v.ok()) return "the lossy trace does not verify: " + v.to_string();
  // Every surviving step equals the engine's.
  std::vector<trace::StepRecord> steps;
  trace::StepCursor cur = (*reader)->steps();
  size_t i = 0;
  for (;; ++i) {
    trace::StepRecord s;
    Result<bool> got = cur.next(&s);
    if (!got.ok()) return "reading a surviving step: " + got.status().to_string();
    if (!*got) break;
    if (i >= run.memory->steps().size() || s.step != run.memory->steps()[i].step) {
      return "surviving step " + std::to_string(i) + " is not the engine's";
    }
  }
  std::fprintf(stderr, "lossy after %zu of %lld steps: %s\n", i, static_cast<long long>(full_steps),
               why.c_str());
  return "";
}

TEST(RecorderRobustness, IoErrorMidRunMarksTheTraceLossyAndTheEngineRunsOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  RunSpec spec = busy_spec();
  // A full recording first, to place the limit in the middle of a frame.
  RecordedRun full = record_run(spec);
  ASSERT_TRUE(full.close_status.ok()) << full.close_status.to_string();
  auto reader = open_reader(full.path);
  ASSERT_NE(reader, nullptr);
  const auto& frames = reader->frames();
  ASSERT_GE(frames.size(), 5u) << "the run should write several step chunks";
  const trace::FrameInfo& victim = frames[frames.size() / 2];
  ASSERT_GT(victim.stored_size, 2048u) << "the footer must fit in the half frame left";
  const uint64_t limit = victim.offset + trace::kFrameHeaderBytes + victim.stored_size / 2;
  const int64_t full_steps = reader->step_count();
  std::unique_ptr<MemoryTrace> reference = plain_run(spec);
  ASSERT_NE(reference, nullptr);
  spec.path = temp_path("limited.trace");

  EXPECT_EXIT(
      {
        std::string err = record_under_size_limit(spec, limit, full_steps, *reference);
        if (!err.empty()) std::fprintf(stderr, "FAILED: %s\n", err.c_str());
        std::fflush(stderr);
        remove_temp_files();
        std::_Exit(err.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "lossy after");
}

// A trace that cannot even be created is an error at open, before the engine runs.
TEST(RecorderRobustness, UnwritablePathFailsAtOpen) {
  trace::RunHeader h = base_run_header();
  auto rec = TraceRecorder::open("/dev/full", h);
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.status().code(), ErrorCode::kIo);
  EXPECT_NE(rec.status().message().find("/dev/full"), std::string::npos);

  auto missing = TraceRecorder::open(temp_path("no/such/dir/run.trace"), h);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);

  RecorderOptions bad;
  bad.top_k = -1;
  auto neg = TraceRecorder::open(temp_path("neg.trace"), h, bad);
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().code(), ErrorCode::kInvalidArgument);
}

// Drives the recorder by hand: a step the writer refuses (the same site planned twice)
// stops recording; the steps before it survive; the engine-facing callbacks stay silent.
class RefusedRecord : public ::testing::TestWithParam<bool> {};

TEST_P(RefusedRecord, StopsRecordingAndKeepsEarlierSteps) {
  const bool background = GetParam();
  const std::string path = temp_path(background ? "refused.trace" : "refused_inline.trace");
  trace::RunHeader h = base_run_header();
  RecorderOptions options;
  options.background = background;
  auto rec_or = TraceRecorder::open(path, h, options);
  ASSERT_TRUE(rec_or.ok()) << rec_or.status().to_string();
  TraceRecorder& rec = **rec_or;
  EXPECT_EQ(rec.pipelined(), background);

  std::vector<BatchSegment> segs = {{7, 0, 3, 0, SegmentKind::kPrefill, true}};
  std::vector<float> logits(10);
  for (int i = 0; i < 10; ++i) logits[i] = static_cast<float>(i % 4) - 0.5f * i;
  const SiteId site{SiteKind::kQ, 0, -1};
  Plan plan;
  plan.splits = 2;

  RequestSpec r;
  r.id = 7;
  r.prompt = {1, 2, 3};
  rec.on_arrival(0, r);
  for (int64_t step = 0; step < 3; ++step) {
    StepInfo info;
    info.step = step;
    info.segments = segs;
    info.rows = 3;
    rec.on_step(info);
    rec.on_plan(step, site, plan);
    if (step == 1) rec.on_plan(step, site, plan);  // refused: duplicate site
    LogitsView lv;
    lv.step = step;
    lv.request = 7;
    lv.position = 2 + static_cast<int32_t>(step);
    lv.batch_row = 2;
    lv.logits = logits.data();
    lv.vocab = 10;
    rec.on_logits(lv);
    TokenEvent t;
    t.step = step;
    t.request = 7;
    t.position = lv.position + 1;
    t.token = 0;
    rec.on_token(t);
    rec.on_step_end(step);
    if (step == 0) {
      EXPECT_TRUE(rec.status().ok()) << rec.status().to_string();
    }
    if (step == 1 && !background) {
      EXPECT_FALSE(rec.status().ok()) << "inline, the refusal is known at once";
    }
    if (step == 2) {
      // Step 1 is appended on the recorder's thread; its refusal is known no later than
      // the end of the next step.
      EXPECT_FALSE(rec.status().ok()) << "step 1's refusal not reported by step 2's end";
    }
  }
  EXPECT_FALSE(rec.status().ok());
  EXPECT_FALSE(rec.recording());
  EXPECT_FALSE(rec.wants_rows(site)) << "a stopped recorder asks for nothing";
  EXPECT_NE(rec.status().message().find("step 1"), std::string::npos) << rec.status().to_string();
  Status closed = rec.close();
  EXPECT_FALSE(closed.ok());
  EXPECT_EQ(closed.code(), rec.status().code());
  EXPECT_EQ(rec.stats().steps, 1);

  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->lossy());
  EXPECT_NE(reader->lossy_reason().find("step 1"), std::string::npos) << reader->lossy_reason();
  EXPECT_EQ(reader->step_count(), 1);
  trace::StepRecord s;
  Status st = reader->read_step(0, &s);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(s.plans.size(), 1u);
  EXPECT_EQ(s.plans[0].plan.splits, 2u);
  ASSERT_EQ(s.logits.size(), 1u);
  EXPECT_EQ(s.logits[0].top_ids[0], 3);  // 1.5 at id 3 is the largest of the row
  ASSERT_EQ(s.arrivals.size(), 1u);
  EXPECT_EQ(s.arrivals[0].prompt, (std::vector<int32_t>{1, 2, 3}));
  Status v = reader->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
}

INSTANTIATE_TEST_SUITE_P(Modes, RefusedRecord, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Pipelined" : "Inline");
                         });

// The hand-off between the engine's thread and the recorder's: with a core left free
// (header.engine.threads below the cores) the recorder's thread looks on the step period and
// is not woken per step; otherwise it is. Either way a step it has not taken by the next
// step's end is completed by the engine's thread. Steps back to back (the engine's thread
// completes many) and steps with pauses (the recorder's thread takes them) all land, in
// order, with the right contents.
//
// Parameter 2: the engine lends its idle pool workers (on_idle), here a helper thread that
// calls on_idle as a worker would, with a signal that says "a job waits" now and then.
class HandOff : public ::testing::TestWithParam<int> {};

class FlickeringSignal final : public kernels::JobSignal {
 public:
  bool job_waiting() const override { return (calls_.fetch_add(1) / 3) % 2 == 1; }

 private:
  mutable std::atomic<uint64_t> calls_{0};
};

TEST_P(HandOff, EveryStepLandsWhicheverThreadCompletesIt) {
  const bool lent = GetParam() == 2;
  const int engine_threads = lent ? 0 : GetParam();
  const std::string path = temp_path("handoff" + std::to_string(GetParam()) + ".trace");
  trace::RunHeader h = base_run_header();
  h.engine.threads = engine_threads;
  RecorderOptions options;
  options.writer.chunk_target_bytes = 4 << 10;  // many chunks for the helper to compress
  auto rec_or = TraceRecorder::open(path, h, options);
  ASSERT_TRUE(rec_or.ok()) << rec_or.status().to_string();
  TraceRecorder& rec = **rec_or;
  ASSERT_TRUE(rec.pipelined());
  std::atomic<bool> stop_helper{false};
  std::atomic<bool> offered{false};
  std::atomic<int64_t> helped{0};
  std::thread helper;
  if (lent) {
    helper = std::thread([&] {
      FlickeringSignal signal;
      while (!stop_helper.load()) {
        const bool took = rec.on_idle(signal);
        offered.store(true);
        if (took) {
          helped.fetch_add(1);
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  // Once a worker has offered (on_idle), no handoff wakes the recorder's thread: the steps
  // it hands over wait for the helper or for the next step's end.
  while (lent && !offered.load()) std::this_thread::yield();
  constexpr int kSteps = 120;
  std::vector<float> logits(64);
  RequestSpec r;
  r.id = 3;
  r.prompt = {1, 2};
  r.max_tokens = kSteps;
  rec.on_arrival(0, r);
  for (int64_t step = 0; step < kSteps; ++step) {
    StepInfo info;
    info.step = step;
    std::vector<BatchSegment> segs = {
        {3, step == 0 ? 0 : 1 + static_cast<int32_t>(step), step == 0 ? 2 : 1,
         step == 0 ? 0 : 1 + static_cast<int32_t>(step),
         step == 0 ? SegmentKind::kPrefill : SegmentKind::kDecode, true}};
    info.segments = segs;
    info.rows = segs[0].count;
    rec.on_step(info);
    for (int i = 0; i < 64; ++i) logits[i] = (i == step % 64) ? 10.0f : 0.01f * i;
    LogitsView lv;
    lv.step = step;
    lv.request = 3;
    lv.position = 1 + static_cast<int32_t>(step);
    lv.batch_row = segs[0].count - 1;
    lv.logits = logits.data();
    lv.vocab = 64;
    rec.on_logits(lv);
    std::fill(logits.begin(), logits.end(), -1.0f);  // the view dies with the callback
    TokenEvent t;
    t.step = step;
    t.request = 3;
    t.position = lv.position + 1;
    t.token = static_cast<int32_t>(step % 64);
    rec.on_token(t);
    rec.on_step_end(step);
    // Pauses in the first third: the recorder's thread has time to take those steps. With
    // the workers lent, the first third waits until each step is appended instead of
    // sleeping: the engine's thread takes a step only at the next step's end and no handoff
    // wakes the recorder's thread, so the helper takes them however slowly it is scheduled
    // (the recorder's thread may take one when it starts late or is woken by the engine's
    // thread waiting for a step still being appended, then sleeps again: at most every
    // other step). The rest runs unpaused, the steps raced for.
    if (lent && step < kSteps / 3) {
      while (rec.stats().steps <= step && rec.status().ok()) std::this_thread::yield();
    } else if (step < kSteps / 3 && step % 4 == 0) {
      usleep(3000);
    }
    ASSERT_TRUE(rec.status().ok()) << rec.status().to_string();
  }
  if (lent) {
    stop_helper = true;  // as Engine::remove_observer: nobody calls on_idle after this
    helper.join();
  }
  ASSERT_TRUE(rec.close().ok()) << rec.status().to_string();
  const RecorderStats st = rec.stats();
  EXPECT_EQ(st.steps, kSteps);
  EXPECT_GE(st.inline_steps, 0);
  EXPECT_LE(st.inline_steps + st.idle_steps, kSteps);
  if (lent) {
    EXPECT_GT(st.idle_steps, 0) << "the helper took none of the steps the engine waited on";
    EXPECT_GE(helped.load(), st.idle_steps);
  } else {
    EXPECT_EQ(st.idle_steps, 0);
  }
  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  ASSERT_EQ(reader->step_count(), kSteps);
  for (int64_t step = 0; step < kSteps; ++step) {
    trace::StepRecord s;
    ASSERT_TRUE(reader->read_step(step, &s).ok());
    ASSERT_EQ(s.step, step);
    ASSERT_EQ(s.logits.size(), 1u);
    EXPECT_EQ(s.logits[0].top_ids[0], step % 64) << "step " << step;
    EXPECT_EQ(s.logits[0].top_values[0], 10.0f);
    ASSERT_EQ(s.tokens.size(), 1u);
    EXPECT_EQ(s.tokens[0].token, step % 64);
  }
  EXPECT_TRUE(reader->verify().ok());
}

INSTANTIATE_TEST_SUITE_P(EngineThreads, HandOff, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0   ? std::string("Unknown_WokenPerStep")
                                  : info.param == 1 ? std::string("One_LooksOnItsClock")
                                                    : std::string("IdleWorkersLent");
                         });

// An engine whose threads fill the cores, its idle pool workers lent to the recorder: the
// trace holds exactly the records of one recorded inline on the engine's thread, whichever
// threads completed its steps.
TEST(RecorderRobustness, IdleWorkersRecordTheSameTrace) {
  RunSpec spec = busy_spec();
  spec.config.threads = 2;
  const std::string inline_path = temp_path("idle_inline.trace");
  const std::string lent_path = temp_path("idle_lent.trace");
  RecorderStats lent_stats;
  for (bool lend : {false, true}) {
    auto e = Engine::create(builtin("tiny-moe"), spec.config, make_policy("production"));
    ASSERT_TRUE(e.ok());
    trace::RunHeader h = base_run_header();
    // "Fill the cores" whatever this machine has: the recorder lends itself to idle
    // workers only when its own thread has no core to itself.
    h.engine.threads = static_cast<int32_t>(std::max(2u, std::thread::hardware_concurrency()));
    RecorderOptions o = spec.recorder;
    o.background = lend;
    auto rec = TraceRecorder::open(lend ? lent_path : inline_path, h, o);
    ASSERT_TRUE(rec.ok());
    (*e)->add_observer(rec->get(), lend);
    for (const RequestSpec& r : spec.requests) ASSERT_TRUE((*e)->add_request(r).ok());
    ASSERT_TRUE((*e)->run().ok());
    (*e)->remove_observer(rec->get());
    ASSERT_TRUE((*rec)->close().ok()) << (*rec)->status().to_string();
    if (lend) lent_stats = (*rec)->stats();
  }
  auto a = open_reader(inline_path);
  auto b = open_reader(lent_path);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(a->step_count(), b->step_count());
  trace::StepCursor ca = a->steps(), cb = b->steps();
  for (int64_t i = 0; i < a->step_count(); ++i) {
    trace::StepRecord sa, sb;
    auto ra = ca.next(&sa);
    auto rb = cb.next(&sb);
    ASSERT_TRUE(ra.ok() && *ra);
    ASSERT_TRUE(rb.ok() && *rb);
    ASSERT_EQ(sa, sb) << "step " << sa.step;
  }
  EXPECT_EQ(lent_stats.steps, a->step_count());
  EXPECT_LE(lent_stats.idle_steps + lent_stats.inline_steps, lent_stats.steps);
  // Whether a pool worker (awake only ~300 us after each job) got to a step depends on the
  // scheduler; HandOff/IdleWorkersLent shows deterministically that one that calls on_idle
  // takes steps. What holds whoever completed them: the records are the same.
  RecordProperty("idle_steps", std::to_string(lent_stats.idle_steps));
  EXPECT_TRUE(b->verify().ok());
}

// Callbacks out of order, after close, or with views the recorder cannot record: no crash,
// no exception; the recorder records what it can and says what it could not.
TEST(RecorderRobustness, OutOfOrderAndLateCallbacksAreHarmless) {
  const std::string path = temp_path("odd.trace");
  auto rec_or = TraceRecorder::open(path, base_run_header());
  ASSERT_TRUE(rec_or.ok());
  TraceRecorder& rec = **rec_or;
  rec.on_step_end(5);  // no on_step before it: nothing to write
  EXPECT_TRUE(rec.status().ok());

  std::vector<BatchSegment> segs = {{1, 0, 2, 0, SegmentKind::kPrefill, false}};
  StepInfo info;
  info.step = 0;
  info.segments = segs;
  info.rows = 2;
  rec.on_step(info);
  // Routing of a request-alone run covers only some rows: refused, recording stops.
  std::vector<int32_t> experts = {0, 1}, rows = {1};
  std::vector<float> gates = {0.5f, 0.5f};
  std::vector<RouteOutcome> outcome = {RouteOutcome::kKept, RouteOutcome::kKept};
  RoutingView rv;
  rv.step = 0;
  rv.rows = 1;
  rv.k = 2;
  rv.experts_total = 4;
  rv.chosen = experts.data();
  rv.experts = experts.data();
  rv.gates = gates.data();
  rv.outcome = outcome.data();
  rv.batch_rows = rows.data();
  rec.on_routing(rv);
  EXPECT_FALSE(rec.status().ok());
  EXPECT_EQ(rec.status().code(), ErrorCode::kInvalidArgument);
  rec.on_step_end(0);
  (void)rec.close();
  // After close: ignored.
  rec.on_step(info);
  rec.on_step_end(0);
  EXPECT_FALSE(rec.close().ok()) << "close is idempotent and keeps the first error";

  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->lossy());
  EXPECT_NE(reader->lossy_reason().find("request-alone"), std::string::npos);
  EXPECT_EQ(reader->step_count(), 0);
}

// A recorder destroyed without close() still leaves a complete, readable trace.
TEST(RecorderRobustness, DestructorCloses) {
  RunSpec spec = busy_spec();
  spec.requests.resize(1);
  const std::string path = temp_path("dtor.trace");
  {
    auto e = Engine::create(builtin("tiny-moe"), spec.config, make_policy("production"));
    ASSERT_TRUE(e.ok());
    auto rec = TraceRecorder::open(path, base_run_header());
    ASSERT_TRUE(rec.ok());
    (*e)->add_observer(rec->get());
    ASSERT_TRUE((*e)->add_request(spec.requests[0]).ok());
    ASSERT_TRUE((*e)->run().ok());
    (*e)->remove_observer(rec->get());
  }
  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->complete());
  EXPECT_FALSE(reader->lossy());
  EXPECT_EQ(reader->token_count(), 16);
}

}  // namespace
}  // namespace llmrr::rectest
