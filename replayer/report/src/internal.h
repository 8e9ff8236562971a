// Internal to the report sources (report.h is the public face): what report.cc (the page,
// its request stories and render_report) and sections.cc (the runs, split summary, batches,
// plans and routing sections) share.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "collect.h"
#include "llmrr/replayer/diff.h"
#include "svg.h"

namespace llmrr::replay::report_internal {

using report::esc;
using report::TraceData;

inline std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// "L3" (snprintf: GCC 12 warns, wrongly, about "L" + std::to_string at -O2).
inline std::string layer_label(int32_t layer) {
  char b[16];
  std::snprintf(b, sizeof b, "L%d", layer);
  return b;
}

inline std::string base_name(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

inline std::string verdict_badge(Verdict v) {
  const char* cls = v == Verdict::kIdentical   ? "v-identical"
                    : v == Verdict::kNumerical ? "v-numerical"
                                               : "v-visible";
  return std::string("<span class=\"verdict ") + cls + "\">" + esc(verdict_name(v)) + "</span>";
}

// Page sections (sections.cc).
std::string runs_section(const std::vector<const TraceData*>& ts);
std::string summary_section(const DiffReport& r);
std::string batches_section(const std::vector<const TraceData*>& ts);
std::string plans_section(const std::vector<const TraceData*>& ts);
std::string routing_section(const std::vector<const TraceData*>& ts);

}  // namespace llmrr::replay::report_internal
