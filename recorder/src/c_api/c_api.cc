// The C ABI (llmrr/recorder.h) over TraceRecorder: each call is checked, converted into the
// Observer callback the engine would make, and never lets an exception out.
#include "llmrr/recorder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "c_api_internal.h"
#include "llmrr/format/fingerprint.h"
#include "llmrr/format/status.h"
#include "llmrr/format/vocab.h"
#include "llmrr/recording/step_recorder.h"
#include "llmrr/format/site.h"
#include "llmrr/safeio/json.h"

using namespace llmrr::c_api_internal;

// The C ABI's numbers are the trace's vocabulary (llmrr/format/vocab.h): a caller's value is
// the record's value, no table in between. tests/python/test_abi_constants.py checks
// Python's copies (python/llmrr/core/_lib.py) against these macros.
#define LLMRR_ABI_IS(macro, E, v) \
  static_assert((macro) == static_cast<int>(llmrr::trace::E::v), #macro " vs vocab.h " #E "::" #v)
LLMRR_ABI_IS(LLMRR_DTYPE_F32, DType, kF32);
LLMRR_ABI_IS(LLMRR_DTYPE_BF16, DType, kBF16);
LLMRR_ABI_IS(LLMRR_DTYPE_F16, DType, kF16);
LLMRR_ABI_IS(LLMRR_CAPTURE_NONE, CaptureLevel, kNone);
LLMRR_ABI_IS(LLMRR_CAPTURE_LAYERS, CaptureLevel, kLayers);
LLMRR_ABI_IS(LLMRR_CAPTURE_ALL, CaptureLevel, kAll);
LLMRR_ABI_IS(LLMRR_LOGITS_TOPK, LogitsMode, kTopK);
LLMRR_ABI_IS(LLMRR_LOGITS_FULL, LogitsMode, kFull);
LLMRR_ABI_IS(LLMRR_OP_GEMM, OpKind, kGemm);
LLMRR_ABI_IS(LLMRR_OP_RMSNORM, OpKind, kRmsNorm);
LLMRR_ABI_IS(LLMRR_OP_ATTENTION, OpKind, kAttention);
LLMRR_ABI_IS(LLMRR_OP_COMBINE, OpKind, kCombine);
LLMRR_ABI_IS(LLMRR_SPLIT_COUNT, SplitMode, kCount);
LLMRR_ABI_IS(LLMRR_SPLIT_SIZE, SplitMode, kSize);
LLMRR_ABI_IS(LLMRR_ORDER_FIXED, CombineOrder, kFixed);
LLMRR_ABI_IS(LLMRR_ORDER_ARRIVAL, CombineOrder, kArrival);
LLMRR_ABI_IS(LLMRR_SEGMENT_PREFILL, SegmentKind, kPrefill);
LLMRR_ABI_IS(LLMRR_SEGMENT_DECODE, SegmentKind, kDecode);
LLMRR_ABI_IS(LLMRR_ROUTE_KEPT, RouteOutcome, kKept);
LLMRR_ABI_IS(LLMRR_ROUTE_REROUTED, RouteOutcome, kRerouted);
LLMRR_ABI_IS(LLMRR_ROUTE_DROPPED, RouteOutcome, kDropped);
LLMRR_ABI_IS(LLMRR_FINISH_EOS, FinishReason, kEos);
LLMRR_ABI_IS(LLMRR_FINISH_MAX_TOKENS, FinishReason, kMaxTokens);
LLMRR_ABI_IS(LLMRR_FINISH_ABORTED, FinishReason, kAborted);
#undef LLMRR_ABI_IS

extern "C" {

// The size of ABI 2's llmrr_recorder_config, which llmrr_recorder_config_init (no size)
// writes: fixed, whatever the struct grows to.
constexpr size_t kConfigAbi2Size = 192;
static_assert(offsetof(llmrr_recorder_config, inline_steps) + sizeof(int32_t) <= kConfigAbi2Size &&
                  offsetof(llmrr_recorder_config, inline_steps) + sizeof(int32_t) >
                      kConfigAbi2Size - alignof(llmrr_recorder_config),
              "ABI 2's config ends with inline_steps: a field added since is past 192 bytes");

void llmrr_recorder_config_init_sized(llmrr_recorder_config* c, size_t size) {
  if (c == nullptr || size < sizeof(uint32_t)) return;
  const size_t n = std::min(size, sizeof *c);
  llmrr_recorder_config d;
  std::memset(&d, 0, sizeof d);
  d.struct_size = static_cast<uint32_t>(n);
  d.capture = LLMRR_CAPTURE_LAYERS;
  d.logits_mode = LLMRR_LOGITS_TOPK;
  d.top_k = 32;
  d.zstd_level = 1;
  std::memcpy(c, &d, n);  // the caller's bytes only
}

// ABI 2's symbol (the header's macro of the same name calls the sized form).
void(llmrr_recorder_config_init)(llmrr_recorder_config* c) {
  llmrr_recorder_config_init_sized(c, kConfigAbi2Size);
}

int llmrr_recorder_open(const char* path, const llmrr_recorder_config* config,
                        llmrr_recorder** out) {
  static const char* fn = "llmrr_recorder_open";
  if (out == nullptr)
    return fail_call(ErrorCode::kInvalidArgument, std::string(fn) + ": out is null");
  *out = nullptr;
  try {
    if (path == nullptr || *path == '\0') {
      return fail_call(ErrorCode::kInvalidArgument, std::string(fn) + ": empty path");
    }
    // A caller compiled against an older, shorter config gets defaults for the rest.
    llmrr_recorder_config c;
    llmrr_recorder_config_init_sized(&c, sizeof c);
    if (config != nullptr) {
      if (config->struct_size < offsetof(llmrr_recorder_config, tool_version) + sizeof(void*)) {
        return fail_call(ErrorCode::kInvalidArgument,
                         std::string(fn) + ": config.struct_size is " +
                             std::to_string(config->struct_size) +
                             " (call llmrr_recorder_config_init first)");
      }
      std::memcpy(&c, config, std::min<size_t>(config->struct_size, sizeof c));
    }
    auto bad = [&](const std::string& what) {
      return fail_call(ErrorCode::kInvalidArgument, std::string(fn) + ": " + what);
    };
    if (c.capture < LLMRR_CAPTURE_NONE || c.capture > LLMRR_CAPTURE_ALL) {
      return bad("capture must be LLMRR_CAPTURE_NONE, _LAYERS or _ALL, found " +
                 std::to_string(c.capture));
    }
    if (c.logits_mode != LLMRR_LOGITS_TOPK && c.logits_mode != LLMRR_LOGITS_FULL) {
      return bad("logits_mode must be LLMRR_LOGITS_TOPK or _FULL, found " +
                 std::to_string(c.logits_mode));
    }
    if (c.top_k < 0 || c.top_k > 65536) {
      return bad("top_k must be in [0, 65536], found " + std::to_string(c.top_k));
    }
    if (c.sync_on_close != 0 && c.sync_on_close != 1) {
      return bad("sync_on_close must be 0 or 1, found " + std::to_string(c.sync_on_close));
    }
    if (c.inline_steps != 0 && c.inline_steps != 1) {
      return bad("inline_steps must be 0 or 1, found " + std::to_string(c.inline_steps));
    }
    if (c.zstd_level < 0 || c.zstd_level > 19) {
      return bad("zstd_level must be in [0, 19], found " + std::to_string(c.zstd_level));
    }
    const int32_t sizes[] = {
        c.layers, c.hidden, c.vocab, c.heads, c.kv_heads, c.experts, c.experts_per_token,
        c.threads};
    for (int32_t v : sizes) {
      if (v < 0) return bad("model sizes and threads must be >= 0");
    }
    const std::string fingerprint = str(c.fingerprint);
    if (!fingerprint.empty() && fingerprint != llmrr::trace::kFingerprintXxh3 &&
        fingerprint != llmrr::trace::kFingerprintMixsum) {
      return bad("fingerprint must be \"xxh3-64\" or \"mixsum64\", found '" +
                 fingerprint.substr(0, 60) + "'");
    }
    const std::string extra = str(c.extra_config_json);
    // Under the caps every reader applies (safeio): what a reader would refuse is not written.
    if (llmrr::Result<nlohmann::json> j = llmrr::safeio::parse_json_object(
            extra, "extra_config_json", llmrr::ErrorCode::kInvalidArgument);
        !j.ok()) {
      return bad(j.status().message());
    }

    llmrr::trace::RunHeader h = llmrr::recording::base_run_header();
    const std::string tool = str(c.tool_version);
    h.tool_version = tool.empty() ? "llmrr C ABI " + h.tool_version
                                  : tool + " (llmrr C ABI " + h.tool_version + ")";
    h.model.name = str(c.model_name);
    h.model.path = str(c.model_path);
    h.model.architecture = str(c.architecture);
    h.model.weight_hash = str(c.weight_hash);
    h.model.weight_dtype = str(c.weight_dtype);
    h.model.compute_dtype = str(c.compute_dtype);
    h.model.layers = c.layers;
    h.model.hidden = c.hidden;
    h.model.vocab = c.vocab;
    h.model.heads = c.heads;
    h.model.kv_heads = c.kv_heads;
    h.model.experts = c.experts;
    h.model.experts_per_token = c.experts_per_token;
    h.engine.policy = c.policy && *c.policy ? std::string(c.policy) : std::string("external");
    h.engine.threads = c.threads;
    h.engine.seed = c.seed;
    h.engine.fingerprint = fingerprint == llmrr::trace::kFingerprintXxh3 ? "" : fingerprint;
    h.extra_config_json = extra;
    h.command_line = str(c.command_line);
    if (c.device_name && *c.device_name) h.device.name = c.device_name;
    if (c.device_kind && *c.device_kind) h.device.kind = c.device_kind;

    llmrr::recording::Options o;
    o.capture = static_cast<llmrr::trace::CaptureLevel>(c.capture);
    o.logits = static_cast<llmrr::trace::LogitsMode>(c.logits_mode);
    o.top_k = c.top_k;
    o.writer.zstd_level = c.zstd_level;
    o.writer.sync_on_close = c.sync_on_close != 0;
    o.background = c.inline_steps == 0;
    auto setting = [](const char* field, const char* env) {
      if (field != nullptr) return std::string(field);
      const char* v = std::getenv(env);
      return std::string(v != nullptr ? v : "");
    };
    if (const std::string ring = setting(c.ring, "LLMRR_RING"); !ring.empty()) {
      llmrr::Result<llmrr::recording::RingOptions> r = llmrr::recording::parse_ring(ring);
      if (!r.ok()) return bad(r.status().message());
      o.ring = *r;
    }
    o.snapshot.trigger = setting(c.snapshot_trigger, "LLMRR_SNAPSHOT_TRIGGER");
    o.snapshot.output = setting(c.snapshot_output, "LLMRR_SNAPSHOT_OUTPUT");
    llmrr::Result<std::unique_ptr<llmrr::recording::StepRecorder>> rec =
        llmrr::recording::StepRecorder::open(path, std::move(h), o);
    if (!rec.ok()) {
      g_last_error = rec.status().to_string();
      return code_of(rec.status());
    }
    auto handle = std::make_unique<llmrr_recorder>();
    handle->rec = std::move(rec).value();
    handle->vocab = c.vocab;
    handle->caller_hashes = fingerprint == llmrr::trace::kFingerprintMixsum;
    handle->inline_rows = c.inline_steps == 1;
    *out = handle.release();
    return LLMRR_OK;
  } catch (const std::bad_alloc&) {
    return fail_call(ErrorCode::kResourceLimit, std::string(fn) + ": out of memory");
  } catch (...) {
    return fail_call(ErrorCode::kInternal, std::string(fn) + ": unexpected exception");
  }
}

int llmrr_recorder_close(llmrr_recorder* r) {
  if (r == nullptr) return LLMRR_OK;
  int rc = LLMRR_OK;
  try {
    {
      std::lock_guard<std::mutex> lock(r->mu);
      if (r->rec) {
        Status st = r->rec->close();
        if (!st.ok()) {
          g_last_error = st.to_string();
          rc = code_of(st);
        }
        r->rec.reset();
      }
    }
    delete r;
  } catch (...) {
    rc = fail_call(ErrorCode::kInternal, "llmrr_recorder_close: unexpected exception");
  }
  return rc;
}

int llmrr_recorder_add_request(llmrr_recorder* r, const llmrr_request* q) {
  static const char* fn = "llmrr_recorder_add_request";
  return guarded(r, fn, [&]() -> int {
    if (q == nullptr) return bad_call(r, fn, "request is null");
    const std::string who = "request " + std::to_string(q->id);
    if (r->requests.count(q->id)) return bad_call(r, fn, who + ": id already added");
    if (q->prompt_len == 0 || q->prompt == nullptr) return bad_call(r, fn, who + ": empty prompt");
    if (q->prompt_len > (size_t{1} << 31)) return bad_call(r, fn, who + ": prompt too long");
    for (size_t i = 0; i < q->prompt_len; ++i) {
      if (q->prompt[i] < 0 || (r->vocab > 0 && q->prompt[i] >= r->vocab)) {
        return bad_call(r, fn,
                        who + ": prompt token " + std::to_string(i) + " is " +
                            std::to_string(q->prompt[i]) + ", outside [0, vocab)");
      }
    }
    if (!(std::isfinite(q->temperature) && q->temperature >= 0)) {
      return bad_call(r, fn, who + ": temperature must be >= 0");
    }
    if (q->top_k < 0) return bad_call(r, fn, who + ": top_k must be >= 0");
    if (!(q->top_p > 0 && q->top_p <= 1)) return bad_call(r, fn, who + ": top_p must be in (0, 1]");
    if (q->max_tokens < 1) return bad_call(r, fn, who + ": max_tokens must be >= 1");
    if (q->arrival_step < 0) return bad_call(r, fn, who + ": arrival_step must be >= 0");
    llmrr::trace::RequestRecord rec;
    rec.id = q->id;
    rec.prompt.assign(q->prompt, q->prompt + q->prompt_len);
    rec.temperature = q->temperature;
    rec.top_k = q->top_k;
    rec.top_p = q->top_p;
    rec.seed = q->seed;
    rec.max_tokens = q->max_tokens;
    rec.arrival_step = q->arrival_step;
    rec.stop_at_eos = q->stop_at_eos != 0;
    rec.label = str(q->label);
    r->requests.insert(q->id);
    r->rec->arrival(std::move(rec));
    return after(r);
  });
}

int llmrr_recorder_begin_step(llmrr_recorder* r, int64_t step, const llmrr_segment* segs,
                              size_t n) {
  static const char* fn = "llmrr_recorder_begin_step";
  return guarded(r, fn, [&]() -> int {
    if (r->in_step) {
      return bad_call(r, fn,
                      "step " + std::to_string(r->step) +
                          " is still open (call llmrr_recorder_end_step first)");
    }
    if (step < 0) return bad_call(r, fn, "step must be >= 0, found " + std::to_string(step));
    if (r->any_step && step <= r->step) {
      return bad_call(r, fn,
                      "steps must increase: step " + std::to_string(step) + " after " +
                          std::to_string(r->step));
    }
    if (n > 0 && segs == nullptr) return bad_call(r, fn, "segments is null");
    std::vector<llmrr::trace::Segment> segments;
    segments.reserve(n);
    int64_t rows = 0;
    for (size_t i = 0; i < n; ++i) {
      const llmrr_segment& g = segs[i];
      const std::string where =
          "segment " + std::to_string(i) + " (request " + std::to_string(g.request) + ")";
      if (!r->requests.count(g.request)) {
        return bad_call(r, fn,
                        where + ": the request was never added (llmrr_recorder_add_request)");
      }
      if (g.count < 1 || g.start < 0 || g.cached < 0) {
        return bad_call(r, fn, where + ": needs count >= 1, start >= 0, cached >= 0");
      }
      if (g.kind != LLMRR_SEGMENT_PREFILL && g.kind != LLMRR_SEGMENT_DECODE) {
        return bad_call(r, fn, where + ": kind must be LLMRR_SEGMENT_PREFILL or _DECODE");
      }
      if (g.sample != 0 && g.sample != 1) return bad_call(r, fn, where + ": sample must be 0 or 1");
      llmrr::trace::Segment b;
      b.request = g.request;
      b.start = g.start;
      b.count = g.count;
      b.cached = g.cached;
      b.kind = g.kind == LLMRR_SEGMENT_DECODE ? llmrr::trace::SegmentKind::kDecode
                                              : llmrr::trace::SegmentKind::kPrefill;
      b.sample = g.sample != 0;
      rows += g.count;
      if (rows > std::numeric_limits<int32_t>::max()) return bad_call(r, fn, "too many rows");
      segments.push_back(b);
    }
    r->segments = std::move(segments);
    r->step = step;
    r->any_step = true;
    r->in_step = true;
    r->step_rows = rows;
    r->plan_sites.clear();
    r->row_sites.clear();
    r->routing_layers.clear();
    r->logits_rows.clear();
    r->token_rows.clear();
    r->step_finished.clear();
    r->rec->begin_step(step);
    for (const llmrr::trace::Segment& g : r->segments) r->rec->segment(g);
    return after(r);
  });
}

int llmrr_recorder_record_plan(llmrr_recorder* r, const char* site_name, const llmrr_plan* p) {
  static const char* fn = "llmrr_recorder_record_plan";
  return guarded(r, fn, [&]() -> int {
    if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
    llmrr::SiteId site;
    if (!parse_site_name(site_name, &site)) return bad_call(r, fn, unknown_site(site_name));
    if (p == nullptr) return bad_call(r, fn, "plan is null");
    const std::string where = std::string("site ") + site_name;
    if (r->plan_sites.count(site.packed())) {
      return bad_call(r, fn, where + ": plan already recorded in step " + std::to_string(r->step));
    }
    if (p->op < LLMRR_OP_GEMM || p->op > LLMRR_OP_COMBINE || p->mode < 0 || p->mode > 1 ||
        p->order < 0 || p->order > 1) {
      return bad_call(r, fn, where + ": op, mode or order out of range");
    }
    if (p->arrival_len > 0 && p->arrival == nullptr) {
      return bad_call(
          r, fn, where + ": arrival is null with arrival_len " + std::to_string(p->arrival_len));
    }
    if (p->arrival_len > (size_t{1} << 24)) return bad_call(r, fn, where + ": arrival too long");
    llmrr::trace::PlanRecord plan;
    plan.op = static_cast<llmrr::trace::OpKind>(p->op);
    plan.mode = static_cast<llmrr::trace::SplitMode>(p->mode);
    plan.order = static_cast<llmrr::trace::CombineOrder>(p->order);
    plan.separate_new_kv = p->separate_new_kv != 0;
    plan.splits = p->splits;
    plan.split_size = p->split_size;
    plan.k_tile = p->k_tile;
    if (p->arrival_len > 0) plan.arrival.assign(p->arrival, p->arrival + p->arrival_len);
    // The writer's own check (format/): a plan it would refuse is dropped here instead.
    std::string why = llmrr::trace::check_plan(plan);
    if (!why.empty()) return bad_call(r, fn, where + ": bad plan: " + why);
    r->plan_sites.insert(site.packed());
    r->rec->plan(site, std::move(plan));
    return after(r);
  });
}

int llmrr_recorder_wants_rows(llmrr_recorder* r, const char* site_name) {
  static const char* fn = "llmrr_recorder_wants_rows";
  if (r == nullptr)
    return -fail_call(ErrorCode::kInvalidArgument, std::string(fn) + ": null recorder");
  try {
    std::lock_guard<std::mutex> lock(r->mu);
    llmrr::SiteId site;
    if (!parse_site_name(site_name, &site)) {
      return -fail_call(ErrorCode::kInvalidArgument,
                        std::string(fn) + ": " + unknown_site(site_name));
    }
    return r->rec && r->rec->wants_rows(site) ? 1 : 0;
  } catch (...) {
    return -fail_call(ErrorCode::kInternal, std::string(fn) + ": unexpected exception");
  }
}

int llmrr_recorder_record_routing(llmrr_recorder* r, const llmrr_routing* g) {
  static const char* fn = "llmrr_recorder_record_routing";
  return guarded(r, fn, [&]() -> int {
    if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
    if (g == nullptr) return bad_call(r, fn, "routing is null");
    const std::string where = "layer " + std::to_string(g->layer);
    if (g->layer < 0) return bad_call(r, fn, where + ": layer must be >= 0");
    if (r->routing_layers.count(g->layer)) {
      return bad_call(r, fn,
                      where + ": routing already recorded in step " + std::to_string(r->step));
    }
    if (g->rows != r->step_rows) {
      return bad_call(r, fn,
                      where + ": routing covers " + std::to_string(g->rows) +
                          " rows, the step has " + std::to_string(r->step_rows));
    }
    if (g->k < 1 || g->experts_total < 1 || g->experts_total > 32767 || g->capacity < 0) {
      return bad_call(r, fn, where + ": needs k >= 1, experts_total in [1, 32767], capacity >= 0");
    }
    if (g->experts == nullptr) return bad_call(r, fn, where + ": experts is null");
    const size_t n = static_cast<size_t>(g->rows) * static_cast<size_t>(g->k);
    std::vector<int32_t> chosen(n), experts(g->experts, g->experts + n);
    std::vector<float> gates(n, 0.0f);
    std::vector<llmrr::trace::RouteOutcome> outcome(n);
    for (size_t i = 0; i < n; ++i) {
      chosen[i] = g->chosen ? g->chosen[i] : g->experts[i];
      if (experts[i] < -1 || experts[i] >= g->experts_total || chosen[i] < 0 ||
          chosen[i] >= g->experts_total) {
        return bad_call(r, fn,
                        where + ": slot " + std::to_string(i) + ": expert " +
                            std::to_string(experts[i]) + " / chosen " + std::to_string(chosen[i]) +
                            " outside [0, experts_total)");
      }
      if (g->gates) gates[i] = g->gates[i];
      uint8_t o =
          g->outcome ? g->outcome[i] : (experts[i] < 0 ? LLMRR_ROUTE_DROPPED : LLMRR_ROUTE_KEPT);
      if (o > LLMRR_ROUTE_DROPPED) {
        return bad_call(r, fn,
                        where + ": slot " + std::to_string(i) + ": outcome " + std::to_string(o) +
                            " is not LLMRR_ROUTE_*");
      }
      outcome[i] = static_cast<llmrr::trace::RouteOutcome>(o);
    }
    r->routing_layers.insert(g->layer);
    llmrr::recording::RoutingView v;
    v.step = r->step;
    v.layer = g->layer;
    v.rows = g->rows;
    v.k = g->k;
    v.experts_total = g->experts_total;
    v.capacity = g->capacity;
    v.chosen = chosen.data();
    v.experts = experts.data();
    v.gates = gates.data();
    v.outcome = outcome.data();
    r->rec->routing(v);
    return after(r);
  });
}

int llmrr_recorder_record_logits(llmrr_recorder* r, uint64_t request, int32_t position,
                                 int64_t batch_row, const void* logits, int32_t dtype,
                                 int64_t vocab) {
  static const char* fn = "llmrr_recorder_record_logits";
  return guarded(r, fn, [&]() -> int {
    if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
    const std::string where =
        "request " + std::to_string(request) + " position " + std::to_string(position);
    int64_t row = -1;
    if (segment_of(r, request, position, &row) == nullptr) {
      return bad_call(r, fn, where + ": not a row of step " + std::to_string(r->step));
    }
    if (batch_row != row) {
      return bad_call(r, fn,
                      where + ": batch_row is " + std::to_string(batch_row) +
                          ", the segments put that row at " + std::to_string(row));
    }
    if (r->logits_rows.count({request, position})) {
      return bad_call(r, fn, where + ": logits already recorded");
    }
    if (!dtype_ok(dtype))
      return bad_call(r, fn, where + ": unknown dtype " + std::to_string(dtype));
    if (vocab < 1 || vocab > std::numeric_limits<int32_t>::max() ||
        (r->vocab > 0 && vocab != r->vocab)) {
      return bad_call(
          r, fn,
          where + ": vocab is " + std::to_string(vocab) +
              (r->vocab > 0 ? ", the config says " + std::to_string(r->vocab) : std::string()));
    }
    if (logits == nullptr) return bad_call(r, fn, where + ": logits is null");
    r->logits_rows.insert({request, position});
    llmrr::recording::LogitsView v;
    v.step = r->step;
    v.request = request;
    v.position = position;
    v.batch_row = batch_row;
    v.vocab = vocab;
    if (dtype == LLMRR_DTYPE_F32) {
      v.logits = static_cast<const float*>(logits);
    } else {
      widen(logits, dtype, 1, vocab, vocab, &r->scratch);
      v.logits = r->scratch.data();
    }
    r->rec->logits(v);
    return after(r);
  });
}

int llmrr_recorder_record_token(llmrr_recorder* r, uint64_t request, int32_t position,
                                int32_t token, double uniform) {
  static const char* fn = "llmrr_recorder_record_token";
  return guarded(r, fn, [&]() -> int {
    if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
    const std::string where =
        "request " + std::to_string(request) + " position " + std::to_string(position);
    if (!r->requests.count(request))
      return bad_call(r, fn, where + ": the request was never added");
    if (position < 1) return bad_call(r, fn, where + ": position must be >= 1");
    if (token < 0 || (r->vocab > 0 && token >= r->vocab)) {
      return bad_call(r, fn, where + ": token " + std::to_string(token) + " outside [0, vocab)");
    }
    if (!(uniform == -1.0 || (uniform >= 0.0 && uniform < 1.0))) {
      return bad_call(r, fn, where + ": uniform must be -1 (greedy) or in [0, 1)");
    }
    if (r->token_rows.count({request, position}))
      return bad_call(r, fn, where + ": token already recorded");
    r->token_rows.insert({request, position});
    r->rec->token({request, position, token, uniform});
    return after(r);
  });
}

int llmrr_recorder_record_finish(llmrr_recorder* r, uint64_t request, int32_t reason,
                                 int32_t generated) {
  static const char* fn = "llmrr_recorder_record_finish";
  return guarded(r, fn, [&]() -> int {
    if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
    const std::string where = "request " + std::to_string(request);
    if (!r->requests.count(request))
      return bad_call(r, fn, where + ": the request was never added");
    if (r->finished.count(request)) return bad_call(r, fn, where + ": already finished");
    if (reason < LLMRR_FINISH_EOS || reason > LLMRR_FINISH_ABORTED || generated < 0) {
      return bad_call(r, fn, where + ": reason must be LLMRR_FINISH_* and generated >= 0");
    }
    r->finished.insert(request);
    r->step_finished.push_back(request);
    llmrr::trace::FinishRecord f;
    f.request = request;
    f.reason = static_cast<llmrr::trace::FinishReason>(reason);
    f.generated = generated;
    r->rec->finish(f);
    return after(r);
  });
}

int llmrr_recorder_record_op(llmrr_recorder* r, int32_t layer, int32_t layers, int32_t graph,
                             int32_t first_row, int32_t rows, const char* name, const char* op,
                             const char* attrs) {
  static const char* fn = "llmrr_recorder_record_op";
  return guarded(r, fn, [&]() -> int {
    if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
    if (name == nullptr) return bad_call(r, fn, "name is null");
    llmrr::trace::OpRecord o;
    o.layer = layer;
    o.layers = layers;
    o.graph = graph;
    o.first_row = first_row;
    o.rows = rows;
    o.name = name;
    o.op = op != nullptr ? op : "";
    o.attrs = attrs != nullptr ? attrs : "";
    if (std::string e = llmrr::trace::op_record_problem(o, r->step_rows); !e.empty())
      return bad_call(r, fn, "op " + o.name.substr(0, 64) + ": " + e);
    r->rec->op(std::move(o));
    return after(r);
  });
}

int llmrr_recorder_end_step(llmrr_recorder* r) {
  static const char* fn = "llmrr_recorder_end_step";
  return guarded(r, fn, [&]() -> int {
    if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
    r->in_step = false;
    r->rec->end_step();
    return after(r);
  });
}

int llmrr_recorder_mark_lossy(llmrr_recorder* r, const char* reason) {
  static const char* fn = "llmrr_recorder_mark_lossy";
  return guarded(r, fn, [&]() -> int {
    const std::string why = str(reason);
    r->rec->mark_lossy(why.empty() ? "the producer marked the trace lossy" : why);
    return LLMRR_OK;
  });
}

int llmrr_recorder_discard_step(llmrr_recorder* r, const char* reason) {
  static const char* fn = "llmrr_recorder_discard_step";
  return guarded(r, fn, [&]() -> int {
    if (!r->in_step) return bad_call(r, fn, "no open step (call llmrr_recorder_begin_step)");
    const std::string why = str(reason);
    r->rec->mark_lossy("step " + std::to_string(r->step) + " discarded by the producer" +
                       (why.empty() ? std::string() : ": " + why));
    r->rec->discard_step();
    for (uint64_t id : r->step_finished) r->finished.erase(id);
    r->step_finished.clear();
    r->in_step = false;
    return after(r);
  });
}

int llmrr_recorder_status(const llmrr_recorder* r) {
  if (r == nullptr) return LLMRR_E_INVALID_ARGUMENT;
  auto* m = const_cast<llmrr_recorder*>(r);
  try {
    std::lock_guard<std::mutex> lock(m->mu);
    if (!m->rec) return LLMRR_OK;
    return code_of(m->rec->status());
  } catch (...) {
    return LLMRR_E_INTERNAL;
  }
}

const char* llmrr_recorder_last_error(void) {
  return g_last_error.c_str();
}

const char* llmrr_error_name(int code) {
  if (code < 0 || code > 0xffff) return "unknown";
  return llmrr::error_code_name(static_cast<ErrorCode>(code));
}

int llmrr_recorder_abi_version(void) {
  return LLMRR_RECORDER_ABI_VERSION;
}

}  // extern "C"
