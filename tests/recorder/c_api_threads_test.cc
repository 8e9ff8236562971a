// The C ABI (llmrr/recorder.h) driven from several threads, as the header allows: distinct
// handles recording at once; one handle shared by threads that take turns on steps and record
// the sites of one step concurrently, while other threads poll status / wants_rows and fail
// calls of their own (last_error is per thread); short-lived handles opened, filled and closed
// while others record; distinct reader handles on the same traces at once. Every trace is
// read back and must hold exactly what was recorded. tools/ci/tsan runs this under TSan
// (label tsan); it is part of the normal suite too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "llmrr/format/container.h"
#include "llmrr/format/fingerprint.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/reader.h"
#include "llmrr/recorder.h"

namespace llmrr {
namespace {

constexpr int32_t kVocab = 256;  // full logits rows of 1 KiB: a blob frame per sample
constexpr int64_t kCols = 12;
constexpr int64_t kLd = kCols + 3;  // rows are passed with a stride
constexpr int kExperts = 4;

// Sites whose rows every step records, and sites that get a plan.
const char* const kRowSites[] = {"embed",       "L0.attn_norm", "L0.attn.q", "L0.attn.o",
                                 "L0.mlp.down", "L0.out",       "L1.attn.q", "L1.attn.o",
                                 "L1.mlp.down", "L1.out",       "final_norm"};
const char* const kPlanSites[] = {"L0.mlp.down", "L0.attn.core", "L0.mlp_norm", "L1.mlp.down",
                                  "L1.attn.core"};
constexpr int kRowSiteCount = sizeof kRowSites / sizeof kRowSites[0];
constexpr int kPlanSiteCount = sizeof kPlanSites / sizeof kPlanSites[0];
constexpr int kRoutingLayer = 1;

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Exact binary fractions, so every value is representable and reproducible.
float value(uint64_t seed, int64_t step, int64_t what, int64_t row, int64_t col) {
  const uint64_t h =
      mix(seed ^ mix(static_cast<uint64_t>(step) * 131 + static_cast<uint64_t>(what)) ^
          mix(static_cast<uint64_t>(row) * 7919 + static_cast<uint64_t>(col)));
  return static_cast<float>(static_cast<int32_t>(h % 2001) - 1000) / 64.0f;
}

uint64_t site_pack(const char* name) {
  int ok = 0;
  const uint64_t packed = llmrr_site_pack(name, &ok);
  EXPECT_EQ(ok, 1) << name;
  return packed;
}

struct Request {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
};

struct Sample {  // the last row of a sampled segment: its logits, token, maybe the finish
  uint64_t request = 0;
  int32_t position = 0;
  int64_t batch_row = 0;
  int32_t token = 0;
  bool finish = false;
  int32_t generated = 0;
};

struct Step {
  int64_t step = 0;
  std::vector<size_t> arrivals;  // indices into Workload::requests, added before begin_step
  std::vector<llmrr_segment> segments;
  std::vector<Sample> samples;
  int64_t rows = 0;
};

// A deterministic continuous-batching run: a request arrives with every step until all have,
// is prefilled in one segment, then decodes one row per step until max_tokens (8..31), so a
// long run holds ~20 rows per step and spans several 1 MiB step chunks.
struct Workload {
  uint64_t seed = 0;
  std::vector<Request> requests;
  std::vector<Step> steps;
};

Workload make_workload(uint64_t seed, int n_requests) {
  Workload w;
  w.seed = seed;
  for (int j = 0; j < n_requests; ++j) {
    Request q;
    q.id = seed * 1000 + static_cast<uint64_t>(j) + 1;
    const uint64_t h = mix(seed * 7 + static_cast<uint64_t>(j));
    const int len = 1 + static_cast<int>(h % 6);
    for (int i = 0; i < len; ++i)
      q.prompt.push_back(static_cast<int32_t>(mix(h + static_cast<uint64_t>(i)) % kVocab));
    q.max_tokens = 8 + static_cast<int32_t>((h >> 8) % 24);
    w.requests.push_back(std::move(q));
  }
  struct Active {
    size_t index;
    int32_t next = 0;  // position of the next row to process
    int32_t generated = 0;
  };
  std::vector<Active> active;
  size_t arrived = 0;
  const int64_t stride = 1 + static_cast<int64_t>(seed % 3);  // step numbers with gaps
  for (int64_t i = 0; arrived < w.requests.size() || !active.empty(); ++i) {
    Step s;
    s.step = i * stride + static_cast<int64_t>(seed % 2);
    if (arrived < w.requests.size()) {
      s.arrivals.push_back(arrived);
      active.push_back({arrived});
      ++arrived;
    }
    for (Active& a : active) {
      const Request& q = w.requests[a.index];
      llmrr_segment g{};
      g.request = q.id;
      g.start = a.next;
      g.count = a.next == 0 ? static_cast<int32_t>(q.prompt.size()) : 1;
      g.cached = a.next;
      g.kind = a.next == 0 ? LLMRR_SEGMENT_PREFILL : LLMRR_SEGMENT_DECODE;
      g.sample = 1;
      s.rows += g.count;
      s.segments.push_back(g);
      Sample x;
      x.request = q.id;
      x.position = g.start + g.count - 1;
      x.batch_row = s.rows - 1;
      x.token = static_cast<int32_t>(
          mix(seed ^ mix(q.id * 31 + static_cast<uint64_t>(x.position))) % kVocab);
      a.next = g.start + g.count;
      x.generated = ++a.generated;
      x.finish = a.generated == q.max_tokens;
      s.samples.push_back(x);
    }
    std::erase_if(active,
                  [&](const Active& a) { return a.generated == w.requests[a.index].max_tokens; });
    w.steps.push_back(std::move(s));
  }
  return w;
}

llmrr_plan plan_of(int64_t step, int site) {
  llmrr_plan p{};
  if (site == 1 || site == 4) {  // attn.core
    p.op = LLMRR_OP_ATTENTION;
    p.mode = LLMRR_SPLIT_SIZE;
    p.splits = 1;
    p.split_size = 64u << (step % 3);
    p.separate_new_kv = 1;
  } else if (site == 2) {  // mlp_norm
    p.op = LLMRR_OP_RMSNORM;
    p.splits = 1;
  } else {  // mlp.down: split-K, every fourth step in arrival order
    p.op = LLMRR_OP_GEMM;
    p.splits = 1u + static_cast<uint32_t>((step + site) % 3);
    p.k_tile = 32;
  }
  return p;
}

const uint16_t kArrival[] = {2, 0, 1};

// The work of one step after begin_step, as independent items: rows of each site, plans,
// the routing of one MoE layer, and each sample's logits / token / finish. Any thread may do
// any item, in any order; each is done once.
int item_count(const Step& s) {
  return kRowSiteCount + kPlanSiteCount + 1 + static_cast<int>(s.samples.size());
}

// Fills `rows` with the step's rows of row site `site`.
void site_rows(const Workload& w, const Step& s, int site, std::vector<float>* rows) {
  rows->assign(static_cast<size_t>(s.rows * kLd), -777.0f);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < kCols; ++c)
      (*rows)[static_cast<size_t>(r * kLd + c)] = value(w.seed, s.step, site, r, c);
}

void logits_row(const Workload& w, const Step& s, const Sample& x, std::vector<float>* out) {
  out->resize(kVocab);
  for (int32_t v = 0; v < kVocab; ++v)
    (*out)[static_cast<size_t>(v)] =
        value(w.seed, s.step, 1000 + x.position, static_cast<int64_t>(x.request), v);
}

void routing_of(const Step& s, std::vector<int32_t>* experts, std::vector<float>* gates) {
  experts->resize(static_cast<size_t>(s.rows * 2));
  gates->resize(experts->size());
  for (int64_t r = 0; r < s.rows; ++r)
    for (int k = 0; k < 2; ++k) {
      const size_t i = static_cast<size_t>(r * 2 + k);
      (*experts)[i] = static_cast<int32_t>((r + k + s.step) % kExperts);
      (*gates)[i] = k == 0 ? 0.75f : 0.25f;
    }
}

#define CHECK_OK(call) EXPECT_EQ((call), LLMRR_OK) << #call << ": " << llmrr_recorder_last_error()

void do_item(llmrr_recorder* r, const Workload& w, const Step& s, int item) {
  if (item < kRowSiteCount) {
    std::vector<float> rows;
    site_rows(w, s, item, &rows);
    CHECK_OK(llmrr_recorder_record_rows(r, kRowSites[item], rows.data(), LLMRR_DTYPE_F32, s.rows,
                                        kCols, kLd, nullptr));
    return;
  }
  item -= kRowSiteCount;
  if (item < kPlanSiteCount) {
    llmrr_plan p = plan_of(s.step, item);
    if (p.op == LLMRR_OP_GEMM && p.splits == 3 && s.step % 4 == 0) {
      p.order = LLMRR_ORDER_ARRIVAL;
      p.arrival = kArrival;
      p.arrival_len = 3;
    }
    CHECK_OK(llmrr_recorder_record_plan(r, kPlanSites[item], &p));
    return;
  }
  item -= kPlanSiteCount;
  if (item == 0) {
    std::vector<int32_t> experts;
    std::vector<float> gates;
    routing_of(s, &experts, &gates);
    llmrr_routing g{kRoutingLayer,  s.rows,       2,      kExperts, 0, nullptr,
                    experts.data(), gates.data(), nullptr};
    CHECK_OK(llmrr_recorder_record_routing(r, &g));
    return;
  }
  const Sample& x = s.samples[static_cast<size_t>(item - 1)];
  std::vector<float> logits;
  logits_row(w, s, x, &logits);
  CHECK_OK(llmrr_recorder_record_logits(r, x.request, x.position, x.batch_row, logits.data(),
                                        LLMRR_DTYPE_F32, kVocab));
  CHECK_OK(llmrr_recorder_record_token(r, x.request, x.position + 1, x.token, -1.0));
  if (x.finish) {
    CHECK_OK(llmrr_recorder_record_finish(r, x.request, LLMRR_FINISH_MAX_TOKENS, x.generated));
  }
}

void add_arrivals(llmrr_recorder* r, const Workload& w, const Step& s) {
  for (size_t i : s.arrivals) {
    const Request& q = w.requests[i];
    llmrr_request c{};
    c.id = q.id;
    c.prompt = q.prompt.data();
    c.prompt_len = q.prompt.size();
    c.top_p = 1.0f;
    c.max_tokens = q.max_tokens;
    c.arrival_step = s.step;
    c.stop_at_eos = 0;
    CHECK_OK(llmrr_recorder_add_request(r, &c));
  }
}

void begin(llmrr_recorder* r, const Workload& w, const Step& s) {
  add_arrivals(r, w, s);
  CHECK_OK(llmrr_recorder_begin_step(r, s.step, s.segments.data(), s.segments.size()));
}

// One thread, one handle: every step in order.
void record_all(llmrr_recorder* r, const Workload& w) {
  for (const Step& s : w.steps) {
    begin(r, w, s);
    for (int i = 0; i < item_count(s); ++i) do_item(r, w, s, i);
    CHECK_OK(llmrr_recorder_end_step(r));
  }
}

std::string temp_path(const std::string& stem) {
  return ::testing::TempDir() + "llmrr_threads_" + std::to_string(::getpid()) + "_" + stem;
}

llmrr_recorder* open_handle(const std::string& path, int32_t logits_mode) {
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.model_name = "threads";
  cfg.vocab = kVocab;
  cfg.layers = 2;
  cfg.hidden = static_cast<int32_t>(kCols);
  cfg.experts = kExperts;
  cfg.experts_per_token = 2;
  cfg.capture = LLMRR_CAPTURE_ALL;
  cfg.logits_mode = logits_mode;
  cfg.top_k = 5;
  llmrr_recorder* r = nullptr;
  EXPECT_EQ(llmrr_recorder_open(path.c_str(), &cfg, &r), LLMRR_OK) << llmrr_recorder_last_error();
  return r;
}

// The trace at `path` verifies, is complete and not lossy, spans at least `min_chunks` step
// chunks, and holds every record of `w`.
void expect_holds(const std::string& path, const Workload& w, bool full_logits, int min_chunks) {
  SCOPED_TRACE(path);
  Result<std::unique_ptr<trace::TraceReader>> opened = trace::TraceReader::open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  trace::TraceReader& reader = **opened;
  EXPECT_TRUE(reader.complete());
  EXPECT_FALSE(reader.lossy()) << reader.lossy_reason();
  Status v = reader.verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
  ASSERT_EQ(reader.step_count(), static_cast<int64_t>(w.steps.size()));
  EXPECT_GE(std::count_if(
                reader.frames().begin(), reader.frames().end(),
                [](const trace::FrameInfo& f) { return f.kind == trace::FrameKind::kStepChunk; }),
            min_chunks);
  ASSERT_EQ(reader.requests().size(), w.requests.size());

  trace::StepCursor cursor = reader.steps();
  trace::StepRecord got;
  std::vector<float> buf;
  for (const Step& s : w.steps) {
    Result<bool> more = cursor.next(&got);
    ASSERT_TRUE(more.ok()) << more.status().to_string();
    ASSERT_TRUE(*more);
    SCOPED_TRACE("step " + std::to_string(s.step));
    ASSERT_EQ(got.step, s.step);
    ASSERT_EQ(got.arrivals.size(), s.arrivals.size());
    for (size_t i = 0; i < s.arrivals.size(); ++i) {
      EXPECT_EQ(got.arrivals[i].id, w.requests[s.arrivals[i]].id);
      EXPECT_EQ(got.arrivals[i].prompt, w.requests[s.arrivals[i]].prompt);
    }
    ASSERT_EQ(got.segments.size(), s.segments.size());
    for (size_t i = 0; i < s.segments.size(); ++i) {
      EXPECT_EQ(got.segments[i].request, s.segments[i].request);
      EXPECT_EQ(got.segments[i].start, s.segments[i].start);
      EXPECT_EQ(got.segments[i].count, s.segments[i].count);
      EXPECT_EQ(got.segments[i].cached, s.segments[i].cached);
      EXPECT_EQ(got.segments[i].kind == trace::SegmentKind::kDecode,
                s.segments[i].kind == LLMRR_SEGMENT_DECODE);
    }
    ASSERT_EQ(got.rows.size(), static_cast<size_t>(kRowSiteCount));
    for (int site = 0; site < kRowSiteCount; ++site) {
      const trace::SiteRows* rows = got.find_rows(site_pack(kRowSites[site]));
      ASSERT_NE(rows, nullptr) << kRowSites[site];
      EXPECT_EQ(rows->cols, kCols);
      ASSERT_EQ(rows->rows.size(), static_cast<size_t>(s.rows));
      site_rows(w, s, site, &buf);
      for (int64_t r = 0; r < s.rows; ++r) {
        EXPECT_EQ(rows->rows[static_cast<size_t>(r)],
                  trace::fingerprint_row(buf.data() + r * kLd, kCols))
            << kRowSites[site] << " row " << r;
      }
    }
    ASSERT_EQ(got.plans.size(), static_cast<size_t>(kPlanSiteCount));
    for (int site = 0; site < kPlanSiteCount; ++site) {
      const trace::PlanRecord* p = got.find_plan(site_pack(kPlanSites[site]));
      ASSERT_NE(p, nullptr) << kPlanSites[site];
      const llmrr_plan want = plan_of(s.step, site);
      EXPECT_EQ(static_cast<int32_t>(p->op), want.op) << kPlanSites[site];
      EXPECT_EQ(p->splits, want.splits) << kPlanSites[site];
      EXPECT_EQ(p->split_size, want.split_size) << kPlanSites[site];
      const bool arrival = want.op == LLMRR_OP_GEMM && want.splits == 3 && s.step % 4 == 0;
      EXPECT_EQ(p->arrival,
                arrival ? std::vector<uint16_t>(kArrival, kArrival + 3) : std::vector<uint16_t>{})
          << kPlanSites[site];
    }
    ASSERT_EQ(got.routing.size(), 1u);
    std::vector<int32_t> experts;
    std::vector<float> gates;
    routing_of(s, &experts, &gates);
    EXPECT_EQ(got.routing[0].layer, kRoutingLayer);
    EXPECT_EQ(got.routing[0].experts, experts);
    EXPECT_EQ(got.routing[0].gates, gates);

    // Logits, tokens and finishes: one of each per sample, in whatever order they were made.
    ASSERT_EQ(got.logits.size(), s.samples.size());
    ASSERT_EQ(got.tokens.size(), s.samples.size());
    std::map<std::pair<uint64_t, int32_t>, const trace::LogitsRecord*> logits;
    for (const trace::LogitsRecord& l : got.logits) logits[{l.request, l.position}] = &l;
    std::set<std::tuple<uint64_t, int32_t, int32_t>> tokens, want_tokens;
    for (const trace::TokenRecord& t : got.tokens) tokens.insert({t.request, t.position, t.token});
    std::set<std::pair<uint64_t, int32_t>> finishes, want_finishes;
    for (const trace::FinishRecord& f : got.finishes) finishes.insert({f.request, f.generated});
    for (const Sample& x : s.samples) {
      want_tokens.insert({x.request, x.position + 1, x.token});
      if (x.finish) want_finishes.insert({x.request, x.generated});
      auto it = logits.find({x.request, x.position});
      ASSERT_NE(it, logits.end()) << "request " << x.request << " position " << x.position;
      const trace::LogitsRecord& l = *it->second;
      logits_row(w, s, x, &buf);
      EXPECT_EQ(l.batch_row, x.batch_row);
      EXPECT_EQ(l.full, trace::fingerprint_row(buf.data(), kVocab));
      ASSERT_EQ(l.top_ids.size(), 5u);
      EXPECT_EQ(l.top_values[0], *std::max_element(buf.begin(), buf.end()));
      if (full_logits) {
        ASSERT_GE(l.blob, 0);
        std::vector<uint8_t> blob;
        Status st = reader.read_blob(l.blob, &blob);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_EQ(blob.size(), buf.size() * sizeof(float));
        EXPECT_EQ(std::memcmp(blob.data(), buf.data(), blob.size()), 0);
      } else {
        EXPECT_EQ(l.blob, -1);
      }
    }
    EXPECT_EQ(tokens, want_tokens);
    EXPECT_EQ(finishes, want_finishes);
  }
  Result<bool> end = cursor.next(&got);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end) << "a step more than was recorded";
}

// Several threads, each with its own handle and trace, recording at the same time.
TEST(CApiThreads, HandlesRecordConcurrently) {
  constexpr int kThreads = 4;
  std::vector<Workload> work;
  std::vector<std::string> paths;
  for (int t = 0; t < kThreads; ++t) {
    work.push_back(make_workload(static_cast<uint64_t>(t) + 1, 240));
    paths.push_back(temp_path("own" + std::to_string(t) + ".trace"));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      llmrr_recorder* r = open_handle(paths[t], t % 2 ? LLMRR_LOGITS_FULL : LLMRR_LOGITS_TOPK);
      if (r == nullptr) return;
      record_all(r, work[t]);
      EXPECT_EQ(llmrr_recorder_status(r), LLMRR_OK);
      EXPECT_EQ(llmrr_recorder_close(r), LLMRR_OK) << llmrr_recorder_last_error();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    expect_holds(paths[t], work[t], t % 2 != 0, 2);
    std::remove(paths[t].c_str());
  }
}

// One handle shared by several threads. Steps go round the threads (the owner of a step adds
// its arrivals, begins it and ends it); inside a step every thread records a share of the
// sites, plans and samples at the same time. Meanwhile pollers call status and wants_rows,
// and fail calls whose messages only their own thread may see.
TEST(CApiThreads, SharedHandleTakingTurns) {
  constexpr int kWorkers = 4;
  constexpr int kPollers = 2;
  for (int32_t mode : {LLMRR_LOGITS_TOPK, LLMRR_LOGITS_FULL}) {
    SCOPED_TRACE(mode == LLMRR_LOGITS_FULL ? "full logits" : "top-k logits");
    const Workload w = make_workload(11 + static_cast<uint64_t>(mode), 240);
    const std::string path = temp_path("shared" + std::to_string(mode) + ".trace");
    llmrr_recorder* r = open_handle(path, mode);
    ASSERT_NE(r, nullptr);

    std::atomic<bool> done{false};
    std::vector<std::thread> pollers;
    for (int p = 0; p < kPollers; ++p) {
      pollers.emplace_back([&, p] {
        int64_t calls = 0;
        while (!done.load()) {
          EXPECT_EQ(llmrr_recorder_status(r), LLMRR_OK);
          EXPECT_EQ(llmrr_recorder_wants_rows(r, "L1.out"), 1);
          // An unknown site fails without touching the trace; the message is this thread's.
          const std::string bogus = "L0.bogus" + std::to_string(p) + "x" + std::to_string(calls);
          EXPECT_EQ(llmrr_recorder_wants_rows(r, bogus.c_str()), -LLMRR_E_INVALID_ARGUMENT);
          const std::string msg = llmrr_recorder_last_error();
          EXPECT_NE(msg.find("'" + bogus + "'"), std::string::npos) << msg;
          ++calls;
          std::this_thread::yield();
        }
        EXPECT_GT(calls, 0);
      });
    }

    std::barrier sync(kWorkers);
    std::vector<std::thread> workers;
    for (int t = 0; t < kWorkers; ++t) {
      workers.emplace_back([&, t] {
        for (size_t i = 0; i < w.steps.size(); ++i) {
          const Step& s = w.steps[i];
          const bool owner = static_cast<int>(i % kWorkers) == t;
          if (owner) begin(r, w, s);
          sync.arrive_and_wait();  // the step is open
          // Items dealt round the threads, starting at a different thread each step.
          for (int k = 0; k < item_count(s); ++k) {
            if ((k + static_cast<int>(i)) % kWorkers == t) do_item(r, w, s, k);
          }
          sync.arrive_and_wait();  // every item is recorded
          if (owner) {
            CHECK_OK(llmrr_recorder_end_step(r));
          }
          // A successful call leaves this thread's last failure message alone.
          EXPECT_STREQ(llmrr_recorder_last_error(), "");
          sync.arrive_and_wait();  // the step is closed before the next owner begins
        }
      });
    }
    for (std::thread& t : workers) t.join();
    done = true;
    for (std::thread& t : pollers) t.join();
    EXPECT_EQ(llmrr_recorder_status(r), LLMRR_OK);
    ASSERT_EQ(llmrr_recorder_close(r), LLMRR_OK) << llmrr_recorder_last_error();
    expect_holds(path, w, mode == LLMRR_LOGITS_FULL, 2);
    std::remove(path.c_str());
  }
}

// Handles opened, filled and closed in quick succession on several threads, so that opens
// and closes (with the writer finishing the last steps) overlap other handles' recording;
// then several reader handles read the same traces at once.
TEST(CApiThreads, ShortLivedHandlesAndReaders) {
  constexpr int kThreads = 3;
  constexpr int kRounds = 6;
  std::vector<std::vector<std::string>> paths(kThreads);
  std::vector<std::vector<Workload>> work(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int k = 0; k < kRounds; ++k) {
      work[t].push_back(make_workload(100 + static_cast<uint64_t>(t * kRounds + k), 2 + k % 3));
      paths[t].push_back(
          temp_path("short" + std::to_string(t) + "_" + std::to_string(k) + ".trace"));
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kRounds; ++k) {
        llmrr_recorder* r =
            open_handle(paths[t][k], (t + k) % 2 ? LLMRR_LOGITS_FULL : LLMRR_LOGITS_TOPK);
        if (r == nullptr) continue;
        record_all(r, work[t][k]);
        EXPECT_EQ(llmrr_recorder_close(r), LLMRR_OK) << llmrr_recorder_last_error();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t)
    for (int k = 0; k < kRounds; ++k) expect_holds(paths[t][k], work[t][k], (t + k) % 2 != 0, 1);

  // The reader ABI: one handle per thread, every thread reading every file, from a different
  // file first.
  std::vector<std::thread> readers;
  for (int t = 0; t < kThreads; ++t) {
    readers.emplace_back([&, t] {
      for (int i = 0; i < kThreads; ++i) {
        const int u = (t + i) % kThreads;
        for (int k = 0; k < kRounds; ++k) {
          const Workload& w = work[u][k];
          llmrr_reader* rd = nullptr;
          ASSERT_EQ(llmrr_reader_open(paths[u][k].c_str(), &rd), LLMRR_OK)
              << llmrr_reader_last_error();
          EXPECT_EQ(llmrr_reader_verify(rd), LLMRR_OK) << llmrr_reader_last_error();
          EXPECT_EQ(llmrr_reader_rows(rd, "steps"), static_cast<int64_t>(w.steps.size()));
          int64_t rows = 0, samples = 0;
          for (const Step& s : w.steps) {
            rows += s.rows;
            samples += static_cast<int64_t>(s.samples.size());
          }
          EXPECT_EQ(llmrr_reader_rows(rd, "fingerprints"), rows * kRowSiteCount);
          EXPECT_EQ(llmrr_reader_rows(rd, "tokens"), samples);
          const void* data = nullptr;
          int64_t n = 0;
          ASSERT_EQ(llmrr_reader_column(rd, "fingerprints", "site", &data, &n), LLMRR_OK);
          ASSERT_EQ(n, rows * kRowSiteCount);
          // Site names through the per-thread buffer.
          std::set<std::string> names;
          for (int64_t i = 0; i < n; ++i)
            names.insert(llmrr_site_name(static_cast<const uint64_t*>(data)[i]));
          EXPECT_EQ(names, std::set<std::string>(kRowSites, kRowSites + kRowSiteCount));
          EXPECT_EQ(llmrr_reader_rows(rd, "no_such_table"), -1);
          EXPECT_EQ(llmrr_reader_columns(rd, "no_such_table"), nullptr);
          EXPECT_NE(std::string(llmrr_reader_last_error()).find("no_such_table"), std::string::npos)
              << llmrr_reader_last_error();
          llmrr_reader_close(rd);
        }
      }
    });
  }
  for (std::thread& t : readers) t.join();
  for (int t = 0; t < kThreads; ++t)
    for (const std::string& p : paths[t]) std::remove(p.c_str());
}

}  // namespace
}  // namespace llmrr
