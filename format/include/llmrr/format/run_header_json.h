// The run header as JSON: the one encoder behind `llmrr inspect --json`'s "run_header", the
// reader C ABI's llmrr_reader_header_json (Python's Trace.header) and the HTML report's run
// header. Every RunHeader field (records.h) under its own name, nested as the structs are;
// enums by name (overflow_policy_name, ...), engine.fingerprint as fingerprint_kind() (""
// read as "xxh3-64"), extra_config_json as the string it is (readers that want it parsed
// parse it under safeio's caps). tests/cli_format/run_header_json_test.cc checks that the
// three outputs hold every field records.h declares.
#pragma once

#include <nlohmann/json.hpp>

#include "llmrr/format/records.h"

namespace llmrr::trace {

nlohmann::json run_header_json(const RunHeader& header);

}  // namespace llmrr::trace
