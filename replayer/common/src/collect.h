// What `llmrr report` draws, gathered from a trace in one streaming pass (bounded: per
// sampled position a few numbers, per step a few numbers, per layer-output row only for the
// requests asked for).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "llmrr/format/records.h"
#include "llmrr/format/status.h"
#include "llmrr/format/trace_reader.h"

namespace llmrr::report {

struct Sample {
  int32_t position = -1;
  int64_t step = -1;
  float margin = 0.0f;
  int32_t top1 = -1, top2 = -1;
  bool has_logits = false;
};

struct RequestData {
  trace::RequestRecord record;  // arrival record (prompt ids, params, label)
  trace::RequestSummary summary;
  std::vector<Sample> samples;                      // by position
  std::vector<std::pair<int32_t, int32_t>> tokens;  // (position, token), in order
  // Layer-output fingerprints by (position, packed site), for the requests of interest.
  std::map<std::pair<int32_t, uint64_t>, trace::Fingerprint> layer_rows;
  // Experts used by each (position, layer), for the requests of interest.
  std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> experts;
};

struct StepData {
  int64_t step = 0;
  int64_t rows = 0;
  int32_t requests = 0;
  int32_t prefill = 0, decode = 0;
  int64_t rerouted = 0, dropped = 0;
  // Plan in force per site kind (the lowest layer / expert that has one): kind → plan
  // text (arrival orders named, not listed).
  std::map<int, std::string> plans;
};

struct TraceData {
  std::string path;
  trace::RunHeader header;
  bool complete = true;
  bool lossy = false;
  std::string lossy_reason;
  int64_t tokens = 0;
  uint64_t file_bytes = 0;
  std::vector<RequestData> requests;  // arrival order
  std::vector<StepData> steps;
  int32_t layers = 0, experts = 0;
  std::vector<int64_t> expert_load;  // layers × experts: tokens routed (kept or rerouted)
  const RequestData* find(uint64_t id) const;
};

// Reads `reader` once. Row fingerprints and experts are kept for the requests in
// `interest` only.
Result<TraceData> collect(const trace::TraceReader& reader, const std::set<uint64_t>& interest);

// "split-K 4", "split-KV 3 parts", ... with arrival permutations shortened to "arrival".
std::string plan_label(const trace::PlanRecord& plan);

}  // namespace llmrr::report
