// Runtime ↔ trace record conversions, both ways: the recorder writes what the engine
// reports, the replayer feeds records back to an engine. One place, so that a field added
// to either side is converted the same way in both directions (the enums share their
// numeric values).
#pragma once

#include <string>

#include "llmrr/format/records.h"
#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/observer.h"
#include "llmrr/runtime/policy.h"

namespace llmrr {

trace::PlanRecord to_plan_record(const Plan& plan);
Plan to_plan(const trace::PlanRecord& record);
// The one text form of a recorded plan (plan_to_string of its Plan: "split-K 2, k-tile 32"),
// for diff, replay, dump and bisect; "unknown op N" for an op this build does not know.
std::string plan_text(const trace::PlanRecord& record);

trace::RequestRecord to_request_record(const RequestSpec& spec);
RequestSpec to_request_spec(const trace::RequestRecord& record);

trace::Segment to_trace_segment(const BatchSegment& segment);
BatchSegment to_segment(const trace::Segment& segment);

}  // namespace llmrr
