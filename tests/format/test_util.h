// Temp files and small helpers shared by the format tests.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llmrr/format/trace_reader.h"
#include "llmrr/format/trace_writer.h"
#include "sample_records.h"

namespace llmrr::trace::testing {

inline std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  std::string base = dir ? dir : "/tmp";
  return base + "/llmrr_format_" + std::to_string(::getpid()) + "_" + name + ".trace";
}

struct TempFile {
  explicit TempFile(const std::string& name) : path(temp_path(name)) {}
  ~TempFile() { std::remove(path.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path;
};

// Steps with plans sorted by site, as the reader returns them.
inline std::vector<StepRecord> sorted_plans(std::vector<StepRecord> steps) {
  for (StepRecord& s : steps)
    std::stable_sort(s.plans.begin(), s.plans.end(),
                     [](const SitePlan& a, const SitePlan& b) { return a.site < b.site; });
  return steps;
}

// Reads every step through a cursor; returns the error status if any.
inline Status read_all(TraceReader& r, std::vector<StepRecord>* out) {
  StepCursor c = r.steps();
  StepRecord s;
  for (;;) {
    auto more = c.next(&s);
    if (!more.ok()) return more.status();
    if (!*more) return Status::Ok();
    out->push_back(s);
  }
}

}  // namespace llmrr::trace::testing
