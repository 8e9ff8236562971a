// Observer: the hook points of the engine (DESIGN, data flow). The recorder, the replay
// verifier and tests implement it.
//
// Ask-then-observe: before producing the rows of a site, the engine asks wants_rows(site);
// a site's rows are handed over only when someone asked, and an engine with no observer
// pays for nothing. Callbacks run on the engine's thread, in this order per step:
// on_arrival* (requests that arrive at this step), on_step, then in forward order
// on_plan / on_rows / on_routing per site, on_logits* (sampled rows), on_token*,
// on_finish*, on_step_end. Views point into engine memory valid only during the callback.
// An observer must not throw; the engine does not catch.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/vocab.h"
#include "llmrr/kernels/plan.h"
#include "llmrr/kernels/sample.h"
#include "llmrr/kernels/threadpool.h"
#include "llmrr/format/site.h"
#include "llmrr/recording/views.h"

namespace llmrr {

using RequestId = uint64_t;

// A request as submitted (also what a trace records on arrival).
struct RequestSpec {
  RequestId id = 0;
  std::vector<int32_t> prompt;        // token ids
  kernels::SamplingParams sampling;
  int32_t max_tokens = 16;
  int64_t arrival_step = 0;           // first step at which the scheduler may admit it
  bool stop_at_eos = true;
  std::string label;                  // optional, e.g. "target" or "load-3"
};

using SegmentKind = trace::SegmentKind;  // kPrefill, kDecode (llmrr/format/vocab.h)

// Consecutive rows of one request in a step's batch: positions [start, start + count).
struct BatchSegment {
  RequestId request = 0;
  int32_t start = 0;          // position of the first row
  int32_t count = 0;          // rows (1 for decode)
  int32_t cached = 0;         // positions already in the KV cache before this step
  SegmentKind kind = SegmentKind::kPrefill;
  bool sample = false;        // the last row produces logits and a token
  bool operator==(const BatchSegment&) const = default;
};

struct StepInfo {
  int64_t step = 0;
  std::span<const BatchSegment> segments;  // in batch row order
  int64_t rows = 0;                        // Σ count
};

// The rows an engine hands its observers (the recording SDK's views: site rows with row
// fingerprints when a device engine hashed them where they live, MoE routing, logits).
using RowsView = recording::RowsView;
using RouteOutcome = trace::RouteOutcome;  // kKept, kRerouted, kDropped
using RoutingView = recording::RoutingView;
using LogitsView = recording::LogitsView;

struct TokenEvent {
  int64_t step = 0;
  RequestId request = 0;
  int32_t position = 0;             // position the token will occupy
  int32_t token = 0;
  kernels::SampleResult sample;     // the draw used
};

using FinishReason = trace::FinishReason;  // kEos, kMaxTokens, kAborted

struct RequestFinish {
  int64_t step = 0;
  RequestId request = 0;
  FinishReason reason = FinishReason::kMaxTokens;
  int32_t generated = 0;
};

class Observer {
 public:
  virtual ~Observer() = default;

  // Asked once per step per site before the site's rows exist.
  virtual bool wants_rows(SiteId site) { return false; }

  virtual void on_arrival(int64_t step, const RequestSpec& request) {}
  virtual void on_step(const StepInfo& step) {}
  virtual void on_plan(int64_t step, SiteId site, const Plan& plan) {}
  virtual void on_rows(const RowsView& rows) {}
  virtual void on_routing(const RoutingView& routing) {}
  virtual void on_logits(const LogitsView& logits) {}
  virtual void on_token(const TokenEvent& token) {}
  virtual void on_finish(const RequestFinish& finish) {}
  virtual void on_step_end(int64_t step) {}

  // Only for an observer added with lend_idle_threads (Engine::add_observer): called by an
  // engine's pool worker that has found no work for a while, on that worker's thread,
  // concurrently with the callbacks above (and with itself, from several workers). Does a
  // bounded piece of the observer's deferred work, and starts none that is long once
  // `signal` says the engine has a job for the worker; returns whether there was any.
  // Must not throw.
  virtual bool on_idle(const kernels::JobSignal& signal) { return false; }
};

}  // namespace llmrr
