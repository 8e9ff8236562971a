// `llmrr report`: one self-contained HTML page about one trace or about two runs' split.
//
//   ASSIGN_OR_RETURN(std::string html, render_report({"a.trace", "b.trace"}, {}));
//
// The page has no external resource (inline CSS and SVG; one small inline script, allowed by
// a nonce in the page's Content-Security-Policy, that only marks the page as rendered): the
// run headers side by side; for two traces the split summary of every common request (from
// diff) and, per split request, the top1−top2 margin over positions with the split marked,
// a layer × position heatmap of layer-output fingerprint distance from the first differing
// row on (from the float summaries: |Δl2| / l2), routing differences per layer, and the two
// continuations side by side with the split token highlighted; for both, batch size and the
// plans in force over steps and the expert load per layer. One trace: margins, outputs,
// batch sizes, plans, routing over time. Every string taken from a trace is escaped.
//
// Elements a test (or a script) can look for: #runs, #summary, #requests, #batches, #plans,
// #routing; charts are <figure class="chart" id="..."> with an <svg> inside.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "llmrr/format/status.h"

namespace llmrr::replay {

struct ReportOptions {
  std::string model;       // tokenizer for token text ("" = as recorded, "none" = ids)
  int max_requests = 12;   // requests drawn in detail
  int max_positions = 96;  // heatmap columns from the first differing position
  std::string title;       // default: the trace names
};

// One or two traces.
Result<std::string> render_report(const std::vector<std::string>& traces,
                                  const ReportOptions& options = {});

// HTML-escapes text taken from a trace (&, <, >, quotes; invalid UTF-8 and control bytes
// as visible \xNN).
std::string html_escape(std::string_view text);

}  // namespace llmrr::replay
