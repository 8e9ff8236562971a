// The float rows a producer hands the recorder, as views into its own memory (valid only for
// the call): a site's rows, one MoE layer's routing, one sampled row's logits. The trace's
// vocabulary only (format/): the engine's Observer (runtime/observer.h) and the C ABI
// (llmrr/recorder.h) both describe their rows with these.
#pragma once

#include <cstdint>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/site.h"
#include "llmrr/format/vocab.h"

namespace llmrr::recording {

// Rows of one site: row r of `data` (stride `ld` floats) is batch row batch_rows[r]
// (identity when null). A producer that hashes rows where they live (a device engine, a C ABI
// caller with fingerprint "mixsum64") hands `fingerprints` instead (one per row) and `data`
// null.
struct RowsView {
  int64_t step = 0;
  SiteId site;
  const float* data = nullptr;
  int64_t ld = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  const int32_t* batch_rows = nullptr;
  const trace::Fingerprint* fingerprints = nullptr;
};

// Routing of every token of a step at one MoE layer. Arrays are rows × k, rank order.
struct RoutingView {
  int64_t step = 0;
  int32_t layer = 0;
  int64_t rows = 0;                 // tokens (= batch rows)
  int32_t k = 0;
  int32_t experts_total = 0;
  int32_t capacity = 0;             // per expert; 0 = unbounded (dropless)
  const int32_t* chosen = nullptr;  // the router's top-k before capacity
  const int32_t* experts = nullptr; // the experts used after overflow handling (-1 dropped)
  const float* gates = nullptr;     // combine weights of the slots
  const trace::RouteOutcome* outcome = nullptr;
  // Row r of the arrays is batch row batch_rows[r] of the step (identity when null; set in
  // request-alone replay, where only some rows of the recorded batch are computed).
  const int32_t* batch_rows = nullptr;
};

struct LogitsView {
  int64_t step = 0;
  uint64_t request = 0;
  int32_t position = 0;             // position of the row whose logits these are
  int64_t batch_row = 0;
  const float* logits = nullptr;
  int64_t vocab = 0;
  // >= 0: these floats are row `logits_site_row` of the rows this step reported for the
  // "logits" site, unchanged since: the recorder uses the copy it made then.
  // −1 (a C ABI caller, or no such promise): a row of its own.
  int64_t logits_site_row = -1;
};

}  // namespace llmrr::recording
