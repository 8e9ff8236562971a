// The C ABI (llmrr/recorder.h) through libllmrr_recorder_c.so: what it records reads back
// exactly; bad calls return stable codes with a message and mark the trace lossy without
// stopping; I/O errors stop recording; nothing but llmrr_* is exported.
#include "llmrr/recorder.h"
#include "llmrr/reader.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/format/site.h"
#include "recorder_test_util.h"

namespace llmrr::rectest {
namespace {

uint16_t to_bf16(float f) {  // truncation: exact for the values used here
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}

uint16_t to_f16(float f) {  // exact for small integers and halves, all used here are
  if (f == 0.0f) return std::signbit(f) ? 0x8000 : 0;
  uint32_t b;
  std::memcpy(&b, &f, 4);
  uint32_t sign = (b >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((b >> 23) & 0xff) - 127 + 15;
  uint32_t man = (b >> 13) & 0x3ffu;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | man);
}

llmrr_recorder* open_or_fail(const std::string& path, llmrr_recorder_config* cfg = nullptr) {
  llmrr_recorder_config local;
  if (!cfg) {
    llmrr_recorder_config_init(&local);
    local.vocab = 16;
    local.capture = LLMRR_CAPTURE_ALL;
    local.top_k = 4;
    cfg = &local;
  }
  llmrr_recorder* r = nullptr;
  int rc = llmrr_recorder_open(path.c_str(), cfg, &r);
  EXPECT_EQ(rc, LLMRR_OK) << llmrr_recorder_last_error();
  return r;
}

const int32_t kPrompt[] = {1, 2, 3};

llmrr_request make_request(uint64_t id) {
  llmrr_request q{};
  q.id = id;
  q.prompt = kPrompt;
  q.prompt_len = 3;
  q.top_p = 1.0f;
  q.max_tokens = 64;
  q.stop_at_eos = 1;
  q.label = "c";
  return q;
}

// One complete, valid step of request `id` (prefill of 3 rows on step 0, then decodes).
void good_step(llmrr_recorder* r, int64_t step, uint64_t id, bool last) {
  llmrr_segment seg{};
  seg.request = id;
  seg.start = step == 0 ? 0 : 2 + static_cast<int32_t>(step);
  seg.count = step == 0 ? 3 : 1;
  seg.cached = seg.start;
  seg.kind = step == 0 ? LLMRR_SEGMENT_PREFILL : LLMRR_SEGMENT_DECODE;
  seg.sample = 1;
  ASSERT_EQ(llmrr_recorder_begin_step(r, step, &seg, 1), LLMRR_OK) << llmrr_recorder_last_error();
  llmrr_plan plan{};
  plan.op = LLMRR_OP_GEMM;
  plan.splits = 2;
  ASSERT_EQ(llmrr_recorder_record_plan(r, "L0.mlp.down", &plan), LLMRR_OK)
      << llmrr_recorder_last_error();
  std::vector<float> rows(static_cast<size_t>(seg.count) * 8);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 7) - 2.5f;
  ASSERT_EQ(llmrr_recorder_record_rows(r, "L0.out", rows.data(), LLMRR_DTYPE_F32, seg.count, 8, 0,
                                       nullptr),
            LLMRR_OK)
      << llmrr_recorder_last_error();
  float logits[16];
  for (int i = 0; i < 16; ++i) logits[i] = static_cast<float>((i * 5) % 16);
  const int32_t pos = seg.start + seg.count - 1;
  ASSERT_EQ(llmrr_recorder_record_logits(r, id, pos, seg.count - 1, logits, LLMRR_DTYPE_F32, 16),
            LLMRR_OK)
      << llmrr_recorder_last_error();
  ASSERT_EQ(llmrr_recorder_record_token(r, id, pos + 1, 3, -1.0), LLMRR_OK)
      << llmrr_recorder_last_error();
  if (last) {
    ASSERT_EQ(llmrr_recorder_record_finish(r, id, LLMRR_FINISH_MAX_TOKENS,
                                           static_cast<int32_t>(step) + 1),
              LLMRR_OK)
        << llmrr_recorder_last_error();
  }
  ASSERT_EQ(llmrr_recorder_end_step(r), LLMRR_OK) << llmrr_recorder_last_error();
}

TEST(CApi, RecordsReadBackExactly) {
  const std::string path = temp_path("capi.trace");
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  EXPECT_EQ(cfg.struct_size, sizeof cfg);
  EXPECT_EQ(cfg.top_k, 32);
  EXPECT_EQ(cfg.capture, LLMRR_CAPTURE_LAYERS);
  cfg.tool_version = "myruntime 2.1";
  cfg.model_name = "org/model";
  cfg.model_path = "/models/m";
  cfg.architecture = "llama";
  cfg.weight_hash = "xxh3-64:0123456789abcdef";
  cfg.layers = 2;
  cfg.hidden = 8;
  cfg.vocab = 16;
  cfg.experts = 4;
  cfg.experts_per_token = 2;
  cfg.policy = "cublas-default";
  cfg.threads = 3;
  cfg.seed = 77;
  cfg.capture = LLMRR_CAPTURE_ALL;
  cfg.logits_mode = LLMRR_LOGITS_FULL;
  cfg.top_k = 5;
  cfg.extra_config_json = "{\"tp\": 2}";
  cfg.command_line = "myruntime --serve";
  cfg.device_name = "NVIDIA H100";
  cfg.device_kind = "cuda";
  llmrr_recorder* r = open_or_fail(path, &cfg);
  ASSERT_NE(r, nullptr);

  llmrr_request q = make_request(9);
  q.temperature = 0.5f;
  q.top_k = 4;
  q.top_p = 0.9f;
  q.seed = 1234;
  q.arrival_step = 0;
  ASSERT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK) << llmrr_recorder_last_error();
  llmrr_segment seg{9, 0, 3, 0, LLMRR_SEGMENT_PREFILL, 1};
  ASSERT_EQ(llmrr_recorder_begin_step(r, 4, &seg, 1), LLMRR_OK);

  uint16_t arrival[] = {1, 0};
  llmrr_plan plan{};
  plan.op = LLMRR_OP_GEMM;
  plan.order = LLMRR_ORDER_ARRIVAL;
  plan.splits = 2;
  plan.k_tile = 32;
  plan.arrival = arrival;
  plan.arrival_len = 2;
  ASSERT_EQ(llmrr_recorder_record_plan(r, "L1.mlp.down", &plan), LLMRR_OK)
      << llmrr_recorder_last_error();
  llmrr_plan attn{};
  attn.op = LLMRR_OP_ATTENTION;
  attn.mode = LLMRR_SPLIT_SIZE;
  attn.split_size = 256;
  attn.splits = 1;
  attn.separate_new_kv = 1;
  ASSERT_EQ(llmrr_recorder_record_plan(r, "L0.attn.core", &attn), LLMRR_OK);

  // The same values as f32 (with a row stride), bf16 and f16 fingerprint the same.
  const float vals[3][4] = {
      {1.0f, -2.0f, 0.5f, 3.0f}, {0.0f, 4.0f, -0.25f, 1.5f}, {-1.0f, 2.0f, 8.0f, -0.5f}};
  std::vector<float> strided(3 * 6, 99.0f);
  std::vector<uint16_t> bf(12), hf(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      strided[i * 6 + j] = vals[i][j];
      bf[i * 4 + j] = to_bf16(vals[i][j]);
      hf[i * 4 + j] = to_f16(vals[i][j]);
    }
  ASSERT_EQ(
      llmrr_recorder_record_rows(r, "L0.attn.q", strided.data(), LLMRR_DTYPE_F32, 3, 4, 6, nullptr),
      LLMRR_OK)
      << llmrr_recorder_last_error();
  const int32_t order[] = {2, 0, 1};
  ASSERT_EQ(llmrr_recorder_record_rows(r, "L0.attn.k", bf.data(), LLMRR_DTYPE_BF16, 3, 4, 0, order),
            LLMRR_OK)
      << llmrr_recorder_last_error();
  ASSERT_EQ(
      llmrr_recorder_record_rows(r, "L0.attn.v", hf.data(), LLMRR_DTYPE_F16, 3, 4, 4, nullptr),
      LLMRR_OK)
      << llmrr_recorder_last_error();

  const int32_t experts[] = {0, 1, 2, -1, 3, 1};
  const int32_t chosen[] = {0, 1, 2, 3, 3, 0};
  const float gates[] = {0.6f, 0.4f, 1.0f, 0.0f, 0.7f, 0.3f};
  const uint8_t outcome[] = {LLMRR_ROUTE_KEPT,    LLMRR_ROUTE_KEPT, LLMRR_ROUTE_KEPT,
                             LLMRR_ROUTE_DROPPED, LLMRR_ROUTE_KEPT, LLMRR_ROUTE_REROUTED};
  llmrr_routing routing{1, 3, 2, 4, 2, chosen, experts, gates, outcome};
  ASSERT_EQ(llmrr_recorder_record_routing(r, &routing), LLMRR_OK) << llmrr_recorder_last_error();

  float logits[16];
  for (int i = 0; i < 16; ++i) logits[i] = static_cast<float>((i * 7) % 16) * 0.5f;
  ASSERT_EQ(llmrr_recorder_record_logits(r, 9, 2, 2, logits, LLMRR_DTYPE_F32, 16), LLMRR_OK)
      << llmrr_recorder_last_error();
  ASSERT_EQ(llmrr_recorder_record_token(r, 9, 3, 5, 0.25), LLMRR_OK);
  ASSERT_EQ(llmrr_recorder_end_step(r), LLMRR_OK);
  EXPECT_EQ(llmrr_recorder_status(r), LLMRR_OK);

  // A bf16 logits row: widened exactly.
  llmrr_segment dec{9, 3, 1, 3, LLMRR_SEGMENT_DECODE, 1};
  ASSERT_EQ(llmrr_recorder_begin_step(r, 6, &dec, 1), LLMRR_OK);
  std::vector<uint16_t> bl(16);
  for (int i = 0; i < 16; ++i) bl[i] = to_bf16(logits[15 - i]);
  ASSERT_EQ(llmrr_recorder_record_logits(r, 9, 3, 0, bl.data(), LLMRR_DTYPE_BF16, 16), LLMRR_OK)
      << llmrr_recorder_last_error();
  ASSERT_EQ(llmrr_recorder_record_token(r, 9, 4, 1, 0.5), LLMRR_OK);
  ASSERT_EQ(llmrr_recorder_record_finish(r, 9, LLMRR_FINISH_MAX_TOKENS, 2), LLMRR_OK);
  ASSERT_EQ(llmrr_recorder_end_step(r), LLMRR_OK);
  ASSERT_EQ(llmrr_recorder_close(r), LLMRR_OK) << llmrr_recorder_last_error();

  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->complete());
  EXPECT_FALSE(reader->lossy()) << reader->lossy_reason();
  Status v = reader->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
  const trace::RunHeader& h = reader->run_header();
  EXPECT_EQ(h.tool_version.rfind("myruntime 2.1 (llmrr C ABI ", 0), 0u) << h.tool_version;
  EXPECT_EQ(h.model.name, "org/model");
  EXPECT_EQ(h.model.path, "/models/m");
  EXPECT_EQ(h.model.architecture, "llama");
  EXPECT_EQ(h.model.weight_hash, "xxh3-64:0123456789abcdef");
  EXPECT_EQ(h.model.vocab, 16);
  EXPECT_EQ(h.model.experts, 4);
  EXPECT_EQ(h.engine.policy, "cublas-default");
  EXPECT_EQ(h.engine.threads, 3);
  EXPECT_EQ(h.engine.seed, 77u);
  EXPECT_EQ(h.engine.capture, trace::CaptureLevel::kAll);
  EXPECT_EQ(h.engine.logits_mode, trace::LogitsMode::kFull);
  EXPECT_EQ(h.engine.top_k, 5);
  EXPECT_EQ(h.extra_config_json, "{\"tp\": 2}");
  EXPECT_EQ(h.command_line, "myruntime --serve");
  EXPECT_EQ(h.device.name, "NVIDIA H100");
  EXPECT_EQ(h.device.kind, "cuda");
  EXPECT_FALSE(h.host.isa.empty());

  std::vector<trace::StepRecord> steps = read_steps(*reader);
  ASSERT_EQ(steps.size(), 2u);
  const trace::StepRecord& s = steps[0];
  EXPECT_EQ(s.step, 4);
  ASSERT_EQ(s.arrivals.size(), 1u);
  EXPECT_EQ(s.arrivals[0].id, 9u);
  EXPECT_EQ(s.arrivals[0].prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(s.arrivals[0].temperature, 0.5f);
  EXPECT_EQ(s.arrivals[0].top_k, 4);
  EXPECT_EQ(s.arrivals[0].top_p, 0.9f);
  EXPECT_EQ(s.arrivals[0].seed, 1234u);
  EXPECT_EQ(s.arrivals[0].label, "c");
  ASSERT_EQ(s.segments.size(), 1u);
  EXPECT_EQ(s.segments[0].count, 3);
  EXPECT_TRUE(s.segments[0].sample);

  const trace::PlanRecord* p = s.find_plan(parse_site("L1.mlp.down")->packed());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->order, trace::CombineOrder::kArrival);
  EXPECT_EQ(p->splits, 2u);
  EXPECT_EQ(p->k_tile, 32u);
  EXPECT_EQ(p->arrival, (std::vector<uint16_t>{1, 0}));
  const trace::PlanRecord* a = s.find_plan(parse_site("L0.attn.core")->packed());
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->op, trace::OpKind::kAttention);
  EXPECT_EQ(a->mode, trace::SplitMode::kSize);
  EXPECT_EQ(a->split_size, 256u);
  EXPECT_TRUE(a->separate_new_kv);

  const trace::SiteRows* q_rows = s.find_rows(parse_site("L0.attn.q")->packed());
  const trace::SiteRows* k_rows = s.find_rows(parse_site("L0.attn.k")->packed());
  const trace::SiteRows* v_rows = s.find_rows(parse_site("L0.attn.v")->packed());
  ASSERT_TRUE(q_rows && k_rows && v_rows);
  ASSERT_EQ(q_rows->rows.size(), 3u);
  EXPECT_EQ(q_rows->cols, 4);
  for (int i = 0; i < 3; ++i) {
    const trace::Fingerprint want = trace::fingerprint_row(vals[i], 4);
    EXPECT_EQ(q_rows->rows[i], want) << "row " << i;
    EXPECT_EQ(v_rows->rows[i], want) << "f16 row " << i;
    EXPECT_EQ(k_rows->rows[i], want) << "bf16 row " << i;
  }
  EXPECT_EQ(k_rows->batch_rows, (std::vector<int32_t>{2, 0, 1}));

  ASSERT_EQ(s.routing.size(), 1u);
  const trace::Routing& rt = s.routing[0];
  EXPECT_EQ(rt.layer, 1);
  EXPECT_EQ(rt.rows, 3);
  EXPECT_EQ(rt.k, 2);
  EXPECT_EQ(rt.experts_total, 4);
  EXPECT_EQ(rt.capacity, 2);
  EXPECT_EQ(rt.experts, std::vector<int32_t>(experts, experts + 6));
  EXPECT_EQ(rt.chosen, std::vector<int32_t>(chosen, chosen + 6));
  EXPECT_EQ(rt.gates, std::vector<float>(gates, gates + 6));
  EXPECT_EQ(rt.outcome[3], trace::RouteOutcome::kDropped);
  EXPECT_EQ(rt.outcome[5], trace::RouteOutcome::kRerouted);

  ASSERT_EQ(s.logits.size(), 1u);
  const trace::LogitsRecord& lr = s.logits[0];
  EXPECT_EQ(lr.request, 9u);
  EXPECT_EQ(lr.position, 2);
  EXPECT_EQ(lr.batch_row, 2);
  EXPECT_EQ(lr.top_ids.size(), 5u);
  EXPECT_EQ(lr.top_values[0], 7.5f);  // (i*7)%16 == 15 at i = 9
  EXPECT_EQ(lr.top_ids[0], 9);
  EXPECT_EQ(lr.margin, 0.5f);
  EXPECT_EQ(lr.full, trace::fingerprint_row(logits, 16));
  ASSERT_GE(lr.blob, 0);
  std::vector<uint8_t> blob;
  ASSERT_TRUE(reader->read_blob(lr.blob, &blob).ok());
  ASSERT_EQ(blob.size(), sizeof logits);
  EXPECT_EQ(0, std::memcmp(blob.data(), logits, sizeof logits));
  ASSERT_EQ(s.tokens.size(), 1u);
  EXPECT_EQ(s.tokens[0].token, 5);
  EXPECT_EQ(s.tokens[0].position, 3);
  EXPECT_EQ(s.tokens[0].uniform, 0.25);

  const trace::StepRecord& d = steps[1];
  ASSERT_EQ(d.logits.size(), 1u);
  std::vector<float> reversed(logits, logits + 16);
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_EQ(d.logits[0].full, trace::fingerprint_row(reversed.data(), 16));
  ASSERT_EQ(d.finishes.size(), 1u);
  EXPECT_EQ(d.finishes[0].generated, 2);
  ASSERT_EQ(reader->requests().size(), 1u);
  EXPECT_EQ(reader->requests()[0].finish_step, 6);
}

// Every misuse: a stable code, a message, nothing recorded for that call, the trace marked
// lossy with the first such message, and recording goes on.
TEST(CApi, BadCallsAreRefusedAndRecordingGoesOn) {
  EXPECT_EQ(llmrr_recorder_begin_step(nullptr, 0, nullptr, 0), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("null recorder"), std::string::npos);
  EXPECT_EQ(llmrr_recorder_close(nullptr), LLMRR_OK);
  EXPECT_STREQ(llmrr_error_name(LLMRR_E_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(llmrr_error_name(LLMRR_E_IO), "io");
  EXPECT_STREQ(llmrr_error_name(12345), "unknown");
  EXPECT_STREQ(llmrr_error_name(-1), "unknown");
  EXPECT_EQ(llmrr_recorder_abi_version(), LLMRR_RECORDER_ABI_VERSION);

  const std::string path = temp_path("misuse.trace");
  llmrr_recorder* r = open_or_fail(path);
  ASSERT_NE(r, nullptr);
  float row[8] = {0};
  llmrr_plan plan{};
  plan.op = LLMRR_OP_GEMM;
  plan.splits = 1;

  // Outside a step.
  EXPECT_EQ(llmrr_recorder_record_plan(r, "L0.mlp.down", &plan), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("no open step"), std::string::npos);
  EXPECT_EQ(llmrr_recorder_end_step(r), LLMRR_E_INVALID_ARGUMENT);
  // A segment of a request that never arrived.
  llmrr_segment seg{5, 0, 3, 0, LLMRR_SEGMENT_PREFILL, 1};
  EXPECT_EQ(llmrr_recorder_begin_step(r, 0, &seg, 1), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("never added"), std::string::npos);
  llmrr_request q = make_request(5);
  q.prompt_len = 0;
  EXPECT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_E_INVALID_ARGUMENT);
  q = make_request(5);
  q.top_p = 0.0f;
  EXPECT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_E_INVALID_ARGUMENT);
  const int32_t big[] = {1, 99};
  q = make_request(5);
  q.prompt = big;
  q.prompt_len = 2;
  EXPECT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_E_INVALID_ARGUMENT) << "99 >= vocab 16";
  q = make_request(5);
  EXPECT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK) << llmrr_recorder_last_error();
  EXPECT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_E_INVALID_ARGUMENT) << "id reused";

  seg.count = 0;
  EXPECT_EQ(llmrr_recorder_begin_step(r, 0, &seg, 1), LLMRR_E_INVALID_ARGUMENT);
  seg.count = 3;
  seg.kind = 7;
  EXPECT_EQ(llmrr_recorder_begin_step(r, 0, &seg, 1), LLMRR_E_INVALID_ARGUMENT);
  seg.kind = LLMRR_SEGMENT_PREFILL;
  EXPECT_EQ(llmrr_recorder_begin_step(r, 0, nullptr, 1), LLMRR_E_INVALID_ARGUMENT);
  ASSERT_EQ(llmrr_recorder_begin_step(r, 0, &seg, 1), LLMRR_OK) << llmrr_recorder_last_error();
  EXPECT_EQ(llmrr_recorder_begin_step(r, 1, &seg, 1), LLMRR_E_INVALID_ARGUMENT) << "still open";

  // Sites, plans, rows.
  EXPECT_EQ(llmrr_recorder_record_plan(r, "L0.mlp.sideways", &plan), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("unknown site 'L0.mlp.sideways'"),
            std::string::npos)
      << llmrr_recorder_last_error();
  EXPECT_EQ(llmrr_recorder_record_plan(r, nullptr, &plan), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_wants_rows(r, "nope"), -LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_wants_rows(r, "L0.out"), 1);
  llmrr_plan bad = plan;
  bad.splits = 0;
  EXPECT_EQ(llmrr_recorder_record_plan(r, "L0.mlp.down", &bad), LLMRR_E_INVALID_ARGUMENT);
  bad = plan;
  bad.order = LLMRR_ORDER_ARRIVAL;
  bad.splits = 2;
  uint16_t not_perm[] = {1, 1};
  bad.arrival = not_perm;
  bad.arrival_len = 2;
  EXPECT_EQ(llmrr_recorder_record_plan(r, "L0.mlp.down", &bad), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("permutation"), std::string::npos);
  EXPECT_EQ(llmrr_recorder_record_plan(r, "L0.mlp.down", &plan), LLMRR_OK);
  EXPECT_EQ(llmrr_recorder_record_plan(r, "L0.mlp.down", &plan), LLMRR_E_INVALID_ARGUMENT)
      << "same site twice in a step";
  EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", row, 9, 1, 8, 0, nullptr),
            LLMRR_E_INVALID_ARGUMENT)
      << "unknown dtype";
  EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", row, LLMRR_DTYPE_F32, 4, 2, 0, nullptr),
            LLMRR_E_INVALID_ARGUMENT)
      << "4 rows in a batch of 3";
  EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", row, LLMRR_DTYPE_F32, 1, 8, 4, nullptr),
            LLMRR_E_INVALID_ARGUMENT)
      << "ld < cols";
  EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", nullptr, LLMRR_DTYPE_F32, 1, 8, 0, nullptr),
            LLMRR_E_INVALID_ARGUMENT);
  const int32_t dup[] = {1, 1};
  EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", row, LLMRR_DTYPE_F32, 2, 4, 0, dup),
            LLMRR_E_INVALID_ARGUMENT);
  const int32_t out_of_batch[] = {3};
  EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", row, LLMRR_DTYPE_F32, 1, 8, 0, out_of_batch),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", row, LLMRR_DTYPE_F32, 1, 8, 0, nullptr),
            LLMRR_OK);
  EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", row, LLMRR_DTYPE_F32, 1, 8, 0, nullptr),
            LLMRR_E_INVALID_ARGUMENT)
      << "same site twice";

  // Routing, logits, tokens, finishes.
  const int32_t ex[] = {0, 1, 0, 9, 1, 0};
  llmrr_routing rt{0, 3, 2, 4, 0, nullptr, ex, nullptr, nullptr};
  EXPECT_EQ(llmrr_recorder_record_routing(r, &rt), LLMRR_E_INVALID_ARGUMENT) << "expert 9 of 4";
  rt.rows = 2;
  EXPECT_EQ(llmrr_recorder_record_routing(r, &rt), LLMRR_E_INVALID_ARGUMENT) << "not every row";
  float logits[16] = {0};
  EXPECT_EQ(llmrr_recorder_record_logits(r, 5, 7, 0, logits, LLMRR_DTYPE_F32, 16),
            LLMRR_E_INVALID_ARGUMENT)
      << "position 7 is not in this step";
  EXPECT_EQ(llmrr_recorder_record_logits(r, 5, 2, 0, logits, LLMRR_DTYPE_F32, 16),
            LLMRR_E_INVALID_ARGUMENT)
      << "position 2 is batch row 2";
  EXPECT_EQ(llmrr_recorder_record_logits(r, 5, 2, 2, logits, LLMRR_DTYPE_F32, 15),
            LLMRR_E_INVALID_ARGUMENT)
      << "vocab differs from the config";
  EXPECT_EQ(llmrr_recorder_record_logits(r, 5, 2, 2, logits, LLMRR_DTYPE_F32, 16), LLMRR_OK);
  EXPECT_EQ(llmrr_recorder_record_logits(r, 5, 2, 2, logits, LLMRR_DTYPE_F32, 16),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_record_token(r, 5, 3, 16, -1.0), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_record_token(r, 5, 3, 1, 1.5), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_record_token(r, 6, 3, 1, -1.0), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_record_token(r, 5, 3, 1, -1.0), LLMRR_OK);
  EXPECT_EQ(llmrr_recorder_record_finish(r, 5, 9, 1), LLMRR_E_INVALID_ARGUMENT);
  // Op records (format 1.6): each bad one refused, naming what; the good ones kept in order.
  EXPECT_EQ(llmrr_recorder_record_op(r, 0, 2, 0, 0, 3, "kq", "MUL_MAT", "src1=f32:8x3 dst=f32:4x3"),
            LLMRR_OK)
      << llmrr_recorder_last_error();
  EXPECT_EQ(llmrr_recorder_record_op(r, 0, 1, 0, 0, 4, "kq", "MUL_MAT", nullptr),
            LLMRR_E_INVALID_ARGUMENT)
      << "rows past the step's 3";
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("outside the step's 3 rows"),
            std::string::npos)
      << llmrr_recorder_last_error();
  EXPECT_EQ(llmrr_recorder_record_op(r, 0, 1, 0, 0, 0, nullptr, nullptr, nullptr),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_record_op(r, 0, 1, 0, 0, 0, "a b", nullptr, nullptr),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_record_op(r, -1, 3, 0, 0, 0, "kq", nullptr, nullptr),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_record_op(r, 0, 1, 0, 0, 0, "kq", nullptr, "x=1 x=2"),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("key 'x' twice"), std::string::npos)
      << llmrr_recorder_last_error();
  EXPECT_EQ(llmrr_recorder_record_op(r, -1, 1, 1, 0, 0, "graph", "GRAPH", "nodes=9"), LLMRR_OK);
  EXPECT_EQ(llmrr_recorder_end_step(r), LLMRR_OK);
  EXPECT_EQ(llmrr_recorder_record_op(r, 0, 1, 0, 0, 0, "kq", nullptr, nullptr),
            LLMRR_E_INVALID_ARGUMENT)
      << "no open step";
  EXPECT_EQ(llmrr_recorder_begin_step(r, 0, &seg, 1), LLMRR_E_INVALID_ARGUMENT) << "steps increase";
  EXPECT_EQ(llmrr_recorder_status(r), LLMRR_OK) << "bad calls do not stop recording";
  good_step(r, 1, 5, true);
  EXPECT_EQ(llmrr_recorder_close(r), LLMRR_OK);

  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->lossy());
  EXPECT_NE(reader->lossy_reason().find("no open step"), std::string::npos)
      << "the first dropped record is the reason: " << reader->lossy_reason();
  EXPECT_EQ(reader->step_count(), 2);
  Status v = reader->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
  trace::StepRecord s;
  ASSERT_TRUE(reader->read_step(0, &s).ok());
  EXPECT_EQ(s.plans.size(), 1u);
  ASSERT_EQ(s.rows.size(), 1u);
  EXPECT_EQ(s.rows[0].rows.size(), 1u);
  EXPECT_TRUE(s.routing.empty());
  EXPECT_EQ(s.logits.size(), 1u);
  EXPECT_EQ(s.tokens.size(), 1u);
  ASSERT_EQ(s.ops.size(), 2u);
  EXPECT_EQ(s.ops[0], (trace::OpRecord{0, 2, 0, 3, 0, "kq", "MUL_MAT", "src1=f32:8x3 dst=f32:4x3"}));
  EXPECT_EQ(s.ops[1], (trace::OpRecord{-1, 1, 0, 0, 1, "graph", "GRAPH", "nodes=9"}));
}

// A producer that finds its records wrong says so: mark_lossy keeps recording with the
// reason in the footer; discard_step drops the open step whole (its arrivals come with the
// next step, its finishes are undone) and says which step went.
TEST(CApi, ProducerMarksLossyAndDiscardsAStep) {
  const std::string path = temp_path("discard.trace");
  llmrr_recorder* r = open_or_fail(path);
  ASSERT_NE(r, nullptr);
  llmrr_request q = make_request(7);
  ASSERT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK);
  good_step(r, 0, 7, false);
  // Step 1: a full step, a new request and a finish, then dropped.
  llmrr_segment seg{7, 3, 1, 3, LLMRR_SEGMENT_DECODE, 1};
  ASSERT_EQ(llmrr_recorder_begin_step(r, 1, &seg, 1), LLMRR_OK);
  llmrr_request q8 = make_request(8);
  ASSERT_EQ(llmrr_recorder_add_request(r, &q8), LLMRR_OK);
  float row[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(llmrr_recorder_record_rows(r, "L0.out", row, LLMRR_DTYPE_F32, 1, 8, 0, nullptr),
            LLMRR_OK);
  ASSERT_EQ(llmrr_recorder_record_token(r, 7, 4, 3, -1.0), LLMRR_OK);
  ASSERT_EQ(llmrr_recorder_record_finish(r, 7, LLMRR_FINISH_MAX_TOKENS, 2), LLMRR_OK);
  ASSERT_EQ(llmrr_recorder_discard_step(r, "rows credited to the wrong request"), LLMRR_OK)
      << llmrr_recorder_last_error();
  EXPECT_EQ(llmrr_recorder_end_step(r), LLMRR_E_INVALID_ARGUMENT) << "the step is gone";
  EXPECT_EQ(llmrr_recorder_status(r), LLMRR_OK) << "recording goes on";
  ASSERT_EQ(llmrr_recorder_mark_lossy(r, "a later reason"), LLMRR_OK);
  // Request 7 runs on (its finish went with step 1) and finishes at step 2.
  good_step(r, 2, 7, true);
  EXPECT_EQ(llmrr_recorder_close(r), LLMRR_OK) << llmrr_recorder_last_error();

  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->lossy());
  EXPECT_EQ(reader->lossy_reason(),
            "step 1 discarded by the producer: rows credited to the wrong request")
      << "the first reason wins";
  ASSERT_EQ(reader->step_count(), 2);
  Status v = reader->verify();
  EXPECT_TRUE(v.ok()) << v.to_string();
  trace::StepRecord s;
  EXPECT_EQ(reader->read_step(1, &s).code(), ErrorCode::kNotFound) << "step 1 is not written";
  ASSERT_TRUE(reader->read_step(2, &s).ok());
  ASSERT_EQ(s.arrivals.size(), 1u) << "request 8 arrives with the next step";
  EXPECT_EQ(s.arrivals[0].id, 8u);
  ASSERT_EQ(s.finishes.size(), 1u);
  EXPECT_EQ(s.finishes[0].request, 7u);

  // mark_lossy alone: nothing dropped, the reason in the footer.
  const std::string path2 = temp_path("marked.trace");
  r = open_or_fail(path2);
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK);
  good_step(r, 0, 7, false);
  ASSERT_EQ(llmrr_recorder_mark_lossy(r, "llmrr.vllm: a hook failed at step 0"), LLMRR_OK);
  good_step(r, 1, 7, true);
  EXPECT_EQ(llmrr_recorder_discard_step(r, "no step"), LLMRR_E_INVALID_ARGUMENT)
      << "outside a step";
  EXPECT_EQ(llmrr_recorder_close(r), LLMRR_OK);
  reader = open_reader(path2);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->lossy());
  EXPECT_EQ(reader->lossy_reason(), "llmrr.vllm: a hook failed at step 0");
  EXPECT_EQ(reader->step_count(), 2);
}

// A trace whose row hashes are mixsum64: rows the library hashes (record_rows) and
// fingerprints the caller made on its device (record_fingerprints) read back as
// mixsum64 of the same bits, and the header says the kind; the two calls are refused on a
// trace of the other kind, and an unknown kind at open.
TEST(CApi, CallerFingerprintsAreMixsum64) {
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.vocab = 16;
  cfg.capture = LLMRR_CAPTURE_ALL;
  cfg.fingerprint = "mixsum64";
  const std::string path = temp_path("mixsum.trace");
  llmrr_recorder* r = open_or_fail(path, &cfg);
  ASSERT_NE(r, nullptr);
  llmrr_request q = make_request(0);
  ASSERT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK);
  llmrr_segment seg{};
  seg.request = 0;
  seg.count = 3;
  seg.sample = 1;
  ASSERT_EQ(llmrr_recorder_begin_step(r, 0, &seg, 1), LLMRR_OK) << llmrr_recorder_last_error();
  std::vector<float> rows(3 * 8);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i) * 0.37f - 3.0f;
  ASSERT_EQ(llmrr_recorder_record_rows(r, "L0.out", rows.data(), LLMRR_DTYPE_F32, 3, 8, 0,
                                       nullptr),
            LLMRR_OK)
      << llmrr_recorder_last_error();
  const uint64_t hashes[2] = {llmrr_fingerprint_mixsum64(rows.data() + 8, 8), 42};
  const float l2[2] = {1.5f, 2.5f}, mx[2] = {0.5f, 0.25f};
  const int32_t batch_rows[2] = {1, 2};
  ASSERT_EQ(llmrr_recorder_record_fingerprints(r, "L0.attn.q", hashes, l2, mx, 2, 8, batch_rows),
            LLMRR_OK)
      << llmrr_recorder_last_error();
  EXPECT_EQ(llmrr_recorder_record_fingerprints(r, "L0.attn.q", hashes, l2, mx, 2, 8, batch_rows),
            LLMRR_E_INVALID_ARGUMENT);  // each site once per step
  EXPECT_EQ(llmrr_recorder_record_fingerprints(r, "L0.attn.k", nullptr, l2, mx, 2, 8, nullptr),
            LLMRR_E_INVALID_ARGUMENT);
  ASSERT_EQ(llmrr_recorder_end_step(r), LLMRR_OK) << llmrr_recorder_last_error();
  ASSERT_EQ(llmrr_recorder_close(r), LLMRR_OK) << llmrr_recorder_last_error();

  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->run_header().engine.fingerprint, "mixsum64");
  trace::StepRecord step;
  ASSERT_TRUE(reader->read_step(0, &step).ok());
  ASSERT_EQ(step.rows.size(), 2u);
  const trace::SiteRows& out = step.rows[0];
  ASSERT_EQ(out.rows.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const trace::Fingerprint want = trace::fingerprint_row(rows.data() + i * 8, 8);
    EXPECT_EQ(out.rows[static_cast<size_t>(i)].hash, trace::mixsum64(rows.data() + i * 8, 8));
    EXPECT_EQ(out.rows[static_cast<size_t>(i)].l2, want.l2);
    EXPECT_EQ(out.rows[static_cast<size_t>(i)].max_abs, want.max_abs);
  }
  const trace::SiteRows& q_rows = step.rows[1];
  ASSERT_EQ(q_rows.rows.size(), 2u);
  EXPECT_EQ(q_rows.rows[0].hash, trace::mixsum64(rows.data() + 8, 8));
  EXPECT_EQ(q_rows.rows[1].hash, 42u);
  EXPECT_EQ(q_rows.rows[1].l2, 2.5f);
  EXPECT_EQ(q_rows.rows[1].max_abs, 0.25f);
  EXPECT_EQ(q_rows.batch_rows, (std::vector<int32_t>{1, 2}));

  // An xxh3-64 trace takes no caller fingerprints.
  llmrr_recorder* x = open_or_fail(temp_path("xxh.trace"));
  ASSERT_NE(x, nullptr);
  ASSERT_EQ(llmrr_recorder_add_request(x, &q), LLMRR_OK);
  ASSERT_EQ(llmrr_recorder_begin_step(x, 0, &seg, 1), LLMRR_OK);
  EXPECT_EQ(llmrr_recorder_record_fingerprints(x, "L0.out", hashes, l2, mx, 2, 8, batch_rows),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("xxh3-64"), std::string::npos);
  llmrr_recorder_close(x);

  cfg.fingerprint = "md5";
  llmrr_recorder* bad = nullptr;
  EXPECT_EQ(llmrr_recorder_open(temp_path("bad.trace").c_str(), &cfg, &bad),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("fingerprint"), std::string::npos);
  EXPECT_EQ(bad, nullptr);
}

// config.inline_steps: rows fingerprinted where they are on the calling thread, and each
// step completed there. The trace holds the same records as one the library's thread wrote:
// both hash kinds, fp32 and bf16 rows, strided rows (ld > cols), rows of part of the batch.
TEST(CApi, InlineStepsWriteTheSameTrace) {
  std::vector<float> data(6 * 24);
  for (size_t i = 0; i < data.size(); ++i) data[i] = std::sin(static_cast<float>(i)) * 7.0f;
  std::vector<uint16_t> bf(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &data[i], sizeof u);
    bf[i] = static_cast<uint16_t>(u >> 16);
  }
  auto record = [&](const char* kind, int32_t inline_steps, const std::string& path) {
    llmrr_recorder_config cfg;
    llmrr_recorder_config_init(&cfg);
    cfg.vocab = 16;
    cfg.capture = LLMRR_CAPTURE_ALL;
    cfg.fingerprint = kind;
    cfg.inline_steps = inline_steps;
    llmrr_recorder* r = open_or_fail(path, &cfg);
    if (r == nullptr) return false;
    llmrr_request q = make_request(0);
    EXPECT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK);
    llmrr_segment seg{};
    seg.request = 0;
    seg.count = 6;
    seg.sample = 1;
    for (int64_t step = 0; step < 3; ++step) {
      seg.start = static_cast<int32_t>(step * 6);
      EXPECT_EQ(llmrr_recorder_begin_step(r, step, &seg, 1), LLMRR_OK)
          << llmrr_recorder_last_error();
      const float* d = data.data() + step;
      EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.out", d, LLMRR_DTYPE_F32, 6, 20, 24, nullptr),
                LLMRR_OK)
          << llmrr_recorder_last_error();
      EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.attn.q", bf.data(), LLMRR_DTYPE_BF16, 6, 24, 0,
                                           nullptr),
                LLMRR_OK)
          << llmrr_recorder_last_error();
      const int32_t some[2] = {4, 1};
      EXPECT_EQ(llmrr_recorder_record_rows(r, "L0.mlp.down", d + 24, LLMRR_DTYPE_F32, 2, 24, 0,
                                           some),
                LLMRR_OK)
          << llmrr_recorder_last_error();
      EXPECT_EQ(llmrr_recorder_end_step(r), LLMRR_OK) << llmrr_recorder_last_error();
    }
    return llmrr_recorder_close(r) == LLMRR_OK;
  };
  for (const char* kind : {"xxh3-64", "mixsum64"}) {
    const std::string a = temp_path(std::string("bg-") + kind + ".trace");
    const std::string b = temp_path(std::string("inline-") + kind + ".trace");
    ASSERT_TRUE(record(kind, 0, a)) << llmrr_recorder_last_error();
    ASSERT_TRUE(record(kind, 1, b)) << llmrr_recorder_last_error();
    auto ra = open_reader(a), rb = open_reader(b);
    ASSERT_NE(ra, nullptr);
    ASSERT_NE(rb, nullptr);
    for (int64_t step = 0; step < 3; ++step) {
      trace::StepRecord sa, sb;
      ASSERT_TRUE(ra->read_step(step, &sa).ok());
      ASSERT_TRUE(rb->read_step(step, &sb).ok());
      ASSERT_EQ(sa.rows.size(), 3u);
      ASSERT_EQ(sb.rows.size(), 3u);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(sa.rows[i].site, sb.rows[i].site);
        EXPECT_EQ(sa.rows[i].cols, sb.rows[i].cols);
        EXPECT_EQ(sa.rows[i].batch_rows, sb.rows[i].batch_rows);
        ASSERT_EQ(sa.rows[i].rows.size(), sb.rows[i].rows.size());
        for (size_t k = 0; k < sa.rows[i].rows.size(); ++k) {
          EXPECT_EQ(sa.rows[i].rows[k].hash, sb.rows[i].rows[k].hash) << kind << " step " << step;
          EXPECT_EQ(sa.rows[i].rows[k].l2, sb.rows[i].rows[k].l2);
          EXPECT_EQ(sa.rows[i].rows[k].max_abs, sb.rows[i].rows[k].max_abs);
        }
      }
      // And the hash is the kind's, of the row's own elements (the stride skipped).
      const float* row0 = data.data() + step;
      EXPECT_EQ(sb.rows[0].rows[0].hash, std::string(kind) == "mixsum64"
                                             ? trace::mixsum64(row0, 20)
                                             : trace::fingerprint_row(row0, 20).hash);
    }
  }
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.inline_steps = 2;
  llmrr_recorder* bad = nullptr;
  EXPECT_EQ(llmrr_recorder_open(temp_path("bad-inline.trace").c_str(), &cfg, &bad),
            LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("inline_steps"), std::string::npos);
}

TEST(CApi, OpenErrors) {
  llmrr_recorder* r = reinterpret_cast<llmrr_recorder*>(0x1);
  EXPECT_EQ(llmrr_recorder_open("/dev/full", nullptr, &r), LLMRR_E_IO);
  EXPECT_EQ(r, nullptr);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("/dev/full"), std::string::npos);
  EXPECT_EQ(llmrr_recorder_open(temp_path("no/dir/x.trace").c_str(), nullptr, &r),
            LLMRR_E_NOT_FOUND);
  EXPECT_EQ(llmrr_recorder_open(::testing::TempDir().c_str(), nullptr, &r), LLMRR_E_IS_DIRECTORY);
  EXPECT_EQ(llmrr_recorder_open(nullptr, nullptr, &r), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(llmrr_recorder_open("x.trace", nullptr, nullptr), LLMRR_E_INVALID_ARGUMENT);
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.capture = 3;
  EXPECT_EQ(llmrr_recorder_open(temp_path("c.trace").c_str(), &cfg, &r), LLMRR_E_INVALID_ARGUMENT);
  llmrr_recorder_config_init(&cfg);
  cfg.extra_config_json = "[1, 2]";
  EXPECT_EQ(llmrr_recorder_open(temp_path("c.trace").c_str(), &cfg, &r), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("extra_config_json"), std::string::npos);
  llmrr_recorder_config_init(&cfg);
  cfg.struct_size = 2;
  EXPECT_EQ(llmrr_recorder_open(temp_path("c.trace").c_str(), &cfg, &r), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(r, nullptr);
}

// A caller built against an older, shorter config struct gets defaults for the new fields.
TEST(CApi, ShorterConfigFromAnOlderCaller) {
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.model_name = "old";
  cfg.device_kind = "garbage beyond the caller's struct";
  cfg.struct_size = offsetof(llmrr_recorder_config, device_name);
  const std::string path = temp_path("old.trace");
  llmrr_recorder* r = nullptr;
  ASSERT_EQ(llmrr_recorder_open(path.c_str(), &cfg, &r), LLMRR_OK) << llmrr_recorder_last_error();
  ASSERT_EQ(llmrr_recorder_close(r), LLMRR_OK);
  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->run_header().model.name, "old");
  EXPECT_EQ(reader->run_header().device.kind, "cpu");
}

// A caller built against an older, shorter config: config_init writes its bytes and no
// more (the bytes past them stay as the caller had them), says its size in struct_size, and
// open gives the fields it lacks their defaults.
TEST(CApi, ConfigInitWritesOnlyTheCallersBytes) {
  constexpr size_t kShort = offsetof(llmrr_recorder_config, layers);  // an "ABI 0" caller
  constexpr size_t kCanary = 64;
  alignas(llmrr_recorder_config) unsigned char buf[sizeof(llmrr_recorder_config) + kCanary];
  std::memset(buf, 0xa5, sizeof buf);
  auto* cfg = reinterpret_cast<llmrr_recorder_config*>(buf);
  llmrr_recorder_config_init_sized(cfg, kShort);
  for (size_t i = kShort; i < sizeof buf; ++i)
    ASSERT_EQ(buf[i], 0xa5) << "byte " << i << " of a " << kShort << "-byte config written";
  EXPECT_EQ(cfg->struct_size, kShort);
  EXPECT_EQ(cfg->model_name, nullptr);
  cfg->model_name = "short";
  const std::string path = temp_path("short.trace");
  llmrr_recorder* r = nullptr;
  ASSERT_EQ(llmrr_recorder_open(path.c_str(), cfg, &r), LLMRR_OK) << llmrr_recorder_last_error();
  ASSERT_EQ(llmrr_recorder_close(r), LLMRR_OK);
  auto reader = open_reader(path);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->run_header().model.name, "short");
  EXPECT_EQ(reader->run_header().engine.capture, trace::CaptureLevel::kLayers);  // the default

  // A larger caller (a newer header): this library's struct is written, nothing past it.
  std::memset(buf, 0xa5, sizeof buf);
  llmrr_recorder_config_init_sized(cfg, sizeof buf);
  EXPECT_EQ(cfg->struct_size, sizeof(llmrr_recorder_config));
  EXPECT_EQ(cfg->top_k, 32);
  for (size_t i = sizeof(llmrr_recorder_config); i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xa5);

  // Too small to hold struct_size: nothing is written.
  std::memset(buf, 0xa5, sizeof buf);
  llmrr_recorder_config_init_sized(cfg, 2);
  for (unsigned char b : buf) ASSERT_EQ(b, 0xa5);
  llmrr_recorder_config_init_sized(nullptr, sizeof *cfg);  // no crash

  // ABI 2's symbol (called around the macro): ABI 2's 192 bytes, however the struct grows.
  std::memset(buf, 0xa5, sizeof buf);
  (llmrr_recorder_config_init)(cfg);
  EXPECT_EQ(cfg->struct_size, 192u);
  for (size_t i = 192; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xa5);
}

// Two handles on two threads at once, and one handle shared by two threads (serialized by
// its mutex): every trace complete and valid.
TEST(CApi, ThreadSafety) {
  auto worker = [](const std::string& path) {
    llmrr_recorder* r = open_or_fail(path);
    if (!r) return;
    llmrr_request q = make_request(1);
    EXPECT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK);
    for (int64_t s = 0; s < 40; ++s) good_step(r, s, 1, s == 39);
    EXPECT_EQ(llmrr_recorder_close(r), LLMRR_OK);
  };
  const std::string a = temp_path("ta.trace"), b = temp_path("tb.trace");
  std::thread ta(worker, a), tb(worker, b);
  ta.join();
  tb.join();
  for (const std::string& p : {a, b}) {
    auto reader = open_reader(p);
    ASSERT_NE(reader, nullptr);
    EXPECT_EQ(reader->step_count(), 40);
    EXPECT_FALSE(reader->lossy());
    EXPECT_TRUE(reader->verify().ok());
  }

  const std::string c = temp_path("tc.trace");
  llmrr_recorder* r = open_or_fail(c);
  ASSERT_NE(r, nullptr);
  llmrr_request q = make_request(1);
  ASSERT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK);
  std::atomic<bool> done{false};
  std::thread poller([&] {
    while (!done) {
      EXPECT_EQ(llmrr_recorder_status(r), LLMRR_OK);
      EXPECT_EQ(llmrr_recorder_wants_rows(r, "L0.out"), 1);
    }
  });
  for (int64_t s = 0; s < 40; ++s) good_step(r, s, 1, s == 39);
  done = true;
  poller.join();
  EXPECT_EQ(llmrr_recorder_close(r), LLMRR_OK);
  auto reader = open_reader(c);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->step_count(), 40);
}

// The child of IoErrorStopsRecording; "" when every expectation holds.
std::string io_error_child(const std::string& path, int* first_error) {
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = 5 << 19;  // 2.5 MiB: two 1 MiB step chunks fit, the third does not
  ::setrlimit(RLIMIT_FSIZE, &rl);
  std::string err;
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.capture = LLMRR_CAPTURE_ALL;
  cfg.zstd_level = 0;  // stored: the size grows with every step
  llmrr_recorder* r = nullptr;
  if (llmrr_recorder_open(path.c_str(), &cfg, &r) != LLMRR_OK) err = "open failed";
  llmrr_request q = make_request(1);
  q.max_tokens = 1 << 20;
  if (err.empty() && llmrr_recorder_add_request(r, &q) != LLMRR_OK) err = "add failed";
  std::vector<float> rows(64 * 64, 1.0f);
  int first_error_step = -1, errors_after = 0;
  for (int64_t s = 0; err.empty() && s < 2000; ++s) {
    llmrr_segment seg{1, 0, 64, 0, LLMRR_SEGMENT_PREFILL, 0};
    seg.start = static_cast<int32_t>(s * 64);
    seg.cached = seg.start;
    int rc = llmrr_recorder_begin_step(r, s, &seg, 1);
    for (int site = 0; site < 8 && rc == LLMRR_OK; ++site) {
      rows[0] = static_cast<float>(s * 8 + site);
      std::string name = "L";
      name += std::to_string(site);
      name += ".out";
      rc = llmrr_recorder_record_rows(r, name.c_str(), rows.data(), LLMRR_DTYPE_F32, 64, 64, 0,
                                      nullptr);
    }
    if (rc == LLMRR_OK) rc = llmrr_recorder_end_step(r);
    if (rc != LLMRR_OK) {
      if (rc != LLMRR_E_IO) err = std::string("unexpected code: ") + llmrr_recorder_last_error();
      if (first_error_step < 0) first_error_step = static_cast<int>(s);
      ++errors_after;
    }
  }
  if (err.empty() && first_error_step < 0) err = "no I/O error";
  if (err.empty() && errors_after < 10) err = "calls after the error did not fail at once";
  if (err.empty() && llmrr_recorder_status(r) != LLMRR_E_IO) err = "status is not io";
  if (err.empty() && llmrr_recorder_close(r) != LLMRR_E_IO) err = "close did not report io";
  if (err.empty()) {
    auto reader = trace::TraceReader::open(path);
    if (!reader.ok()) {
      err = "lossy trace does not open: " + reader.status().to_string();
    } else if (!(*reader)->lossy()) {
      err = "trace not marked lossy";
    } else if ((*reader)->step_count() <= 0 || (*reader)->step_count() >= first_error_step + 1) {
      err = "unexpected surviving steps: " + std::to_string((*reader)->step_count());
    } else if (!(*reader)->verify().ok()) {
      err = "lossy trace does not verify";
    }
  }
  *first_error = first_error_step;
  return err;
}

// An I/O error in the middle of a run (file size limit): later calls return LLMRR_E_IO at
// once, close() reports it, the trace is lossy with the reason and keeps what was written.
TEST(CApi, IoErrorStopsRecording) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = temp_path("capi_limited.trace");
  EXPECT_EXIT(
      {
        int first_error_step = -1;
        std::string err = io_error_child(path, &first_error_step);
        if (!err.empty()) std::fprintf(stderr, "FAILED: %s\n", err.c_str());
        std::fprintf(stderr, "io error at step %d of 2000\n", first_error_step);
        remove_temp_files();
        std::_Exit(err.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "io error at step [0-9]+ of 2000");
}

// A model's weight hash: the files' bytes as one stream, so two files hash as their
// concatenation does; an unreadable file is an error naming it.
TEST(CApi, FingerprintFilesHashesTheBytesAsOneStream) {
  const std::string a = temp_path("w1.bin"), b = temp_path("w2.bin"), ab = temp_path("w12.bin");
  auto write = [](const std::string& p, const std::string& bytes) {
    std::FILE* f = std::fopen(p.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  std::string big(3u << 20, 'x');  // past the 1 MiB read buffer
  big[12345] = 'y';
  write(a, big);
  write(b, "tail");
  write(ab, big + "tail");
  char h2[32], h1[32];
  const char* two[] = {a.c_str(), b.c_str()};
  const char* one[] = {ab.c_str()};
  ASSERT_EQ(llmrr_fingerprint_files(two, 2, h2, sizeof h2), LLMRR_OK) << llmrr_recorder_last_error();
  ASSERT_EQ(llmrr_fingerprint_files(one, 1, h1, sizeof h1), LLMRR_OK);
  EXPECT_STREQ(h1, h2);
  EXPECT_EQ(std::string(h1).rfind("xxh3-64:", 0), 0u) << h1;
  EXPECT_EQ(std::strlen(h1), 24u);
  const std::string missing = temp_path("absent.bin");
  const char* bad[] = {a.c_str(), missing.c_str()};
  EXPECT_NE(llmrr_fingerprint_files(bad, 2, h1, sizeof h1), LLMRR_OK);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find(missing), std::string::npos)
      << llmrr_recorder_last_error();
  EXPECT_NE(llmrr_fingerprint_files(two, 2, h1, 8), LLMRR_OK);  // too small for the answer
  for (const std::string& p : {a, b, ab}) std::remove(p.c_str());
}

// The flight recorder's setting is checked at open: a ring that is no size or duration is
// refused with what was expected.
TEST(CApi, ABadRingIsRefusedAtOpen) {
  const std::string path = temp_path("badring.trace");
  llmrr_recorder_config cfg;
  llmrr_recorder_config_init(&cfg);
  cfg.vocab = 8;
  cfg.ring = "12 parsecs";
  llmrr_recorder* r = nullptr;
  EXPECT_EQ(llmrr_recorder_open(path.c_str(), &cfg, &r), LLMRR_E_INVALID_ARGUMENT);
  EXPECT_EQ(r, nullptr);
  EXPECT_NE(std::string(llmrr_recorder_last_error()).find("expected a size such as 64M"),
            std::string::npos)
      << llmrr_recorder_last_error();
  std::remove(path.c_str());
}

// Only the C ABI leaves the shared library.
TEST(CApi, ExportsOnlyTheCAbi) {
  void* lib = ::dlopen(LLMRR_C_LIB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  for (const char* name :
       {"llmrr_recorder_open", "llmrr_recorder_close", "llmrr_recorder_add_request",
        "llmrr_recorder_begin_step", "llmrr_recorder_record_plan", "llmrr_recorder_record_rows",
        "llmrr_recorder_record_routing", "llmrr_recorder_record_logits",
        "llmrr_recorder_record_token", "llmrr_recorder_record_finish", "llmrr_recorder_end_step",
        "llmrr_recorder_last_error", "llmrr_recorder_status", "llmrr_recorder_wants_rows",
        "llmrr_recorder_config_init", "llmrr_recorder_config_init_sized", "llmrr_error_name", "llmrr_recorder_abi_version",
        "llmrr_recorder_mark_lossy", "llmrr_recorder_discard_step", "llmrr_fingerprint_files"}) {
    EXPECT_NE(::dlsym(lib, name), nullptr) << name;
  }
  for (const char* hidden : {"_ZN5llmrr9recording15base_run_headerEv",
                             "_ZN5llmrr5trace10hash_bytesEPKvm",
                             "_ZN5llmrr9recording12StepRecorder5closeEv"}) {
    EXPECT_EQ(::dlsym(lib, hidden), nullptr) << hidden << " is exported";
  }
  ::dlclose(lib);
}

// The recording SDK carries no engine: libllmrr_recorder_c.so is the C ABI over the
// recording module's StepRecorder, the writer and the reader ABI (format, safeio), linked with
// --no-undefined; none of its symbols, local ones included, is the engine's (kernels, runtime,
// the Observer adapter).
TEST(CApi, RecorderLibraryCarriesNoEngineCode) {
  const std::string cmd = std::string("nm -C --defined-only '") + LLMRR_C_LIB + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0 && out.find("no symbols") != std::string::npos)
    GTEST_SKIP() << "the library is stripped: " << out.substr(0, 200);
  ASSERT_EQ(rc, 0) << out.substr(0, 400);
  EXPECT_NE(out.find("llmrr::recording::StepRecorder::close()"), std::string::npos)
      << "expected the SDK's StepRecorder in the library";
  for (const char* engine : {"llmrr::kernels::", "llmrr::Engine", "llmrr::TraceRecorder",
                             "llmrr::Observer", "llmrr::Model"}) {
    const size_t at = out.find(engine);
    EXPECT_EQ(at, std::string::npos)
        << engine << " is in the recording SDK: "
        << out.substr(out.rfind('\n', at) + 1, 160);
  }
}

// The reader ABI by itself (libllmrr_reader_c.so: format and safeio, no engine code, linked
// with --no-undefined): it reads a trace the recorder ABI wrote, and exports no recording call.
TEST(CApi, ReaderLibraryAloneReadsATrace) {
  const std::string path = temp_path("reader_alone.trace");
  {
    llmrr_recorder* r = open_or_fail(path);
    ASSERT_NE(r, nullptr);
    llmrr_request q = make_request(7);
    ASSERT_EQ(llmrr_recorder_add_request(r, &q), LLMRR_OK);
    llmrr_segment g{7, 0, 3, 0, LLMRR_SEGMENT_PREFILL, 0};
    for (int64_t step = 0; step < 3; ++step) {
      ASSERT_EQ(llmrr_recorder_begin_step(r, step, &g, 1), LLMRR_OK);
      ASSERT_EQ(llmrr_recorder_end_step(r), LLMRR_OK);
    }
    ASSERT_EQ(llmrr_recorder_close(r), LLMRR_OK);
  }
  void* lib = ::dlopen(LLMRR_READER_LIB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  using Open = int (*)(const char*, llmrr_reader**);
  using Rows = int64_t (*)(const llmrr_reader*, const char*);
  using Close = void (*)(llmrr_reader*);
  auto open = reinterpret_cast<Open>(::dlsym(lib, "llmrr_reader_open"));
  auto rows = reinterpret_cast<Rows>(::dlsym(lib, "llmrr_reader_rows"));
  auto close = reinterpret_cast<Close>(::dlsym(lib, "llmrr_reader_close"));
  ASSERT_TRUE(open && rows && close);
  EXPECT_EQ(::dlsym(lib, "llmrr_recorder_open"), nullptr) << "the reader library records";
  llmrr_reader* rd = nullptr;
  ASSERT_EQ(open(path.c_str(), &rd), LLMRR_OK);
  EXPECT_EQ(rows(rd, "steps"), 3);
  EXPECT_EQ(rows(rd, "requests"), 1);
  EXPECT_EQ(rows(rd, "segments"), 3);
  close(rd);
  ::dlclose(lib);
}

}  // namespace
}  // namespace llmrr::rectest
