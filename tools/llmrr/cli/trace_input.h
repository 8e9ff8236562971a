// Trace arguments that may also be bundles (`llmrr pack`): replay, diff, inspect and report
// take either. A bundle is extracted into a private temporary directory that lives as long
// as the TraceInput.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/replayer/pack.h"

namespace llmrr::cli {

struct TraceInput {
  std::vector<std::string> traces;  // one for a trace file; the bundle's traces otherwise
  bool from_pack = false;
  std::string model;  // a bundled model's spec, or ""
  bool redacted = false;
  std::vector<RequestId> kept;  // the requests a redacted bundle keeps whole
  std::string temp_dir;         // removed with the TraceInput
  TraceInput() = default;
  TraceInput(TraceInput&&) noexcept;
  TraceInput& operator=(TraceInput&&) noexcept;
  TraceInput(const TraceInput&) = delete;
  TraceInput& operator=(const TraceInput&) = delete;
  ~TraceInput();
};

// `path` as a trace (returned as is: the trace reader reports its errors) or, when it starts
// with the bundle magic, the bundle checked and extracted.
Result<TraceInput> open_trace_input(const std::string& path);

// For replay: the one trace to replay (*path), the bundled model unless *model is set, and
// for a redacted bundle the kept request (a redacted trace replays its kept requests alone
// only): *request is set to it when unset, refused when it names a redacted request.
Status use_bundle_for_replay(const TraceInput& input, std::string* path, std::string* model,
                             std::optional<RequestId>* request);

}  // namespace llmrr::cli
