// JSON from untrusted text: a nesting cap, errors as Status, invalid UTF-8 escaped on output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "llmrr/format/status.h"

namespace llmrr::safeio {

// Deeper than any file llmrr reads needs (config.json nests 3 levels, a bundle manifest 4).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`. Errors (code `code`, kBadModel for model files, kBadRequest for requests,
// kSemantic for bundles) say where: "<where>: invalid JSON at byte N: <reason>" or
// "<where>: JSON nested deeper than 64 levels at byte N". The depth is checked by a scan
// before nlohmann's parser runs, so no recursion ever sees a deep document.
Result<nlohmann::json> parse_json(std::string_view text, const std::string& where,
                                  ErrorCode code, int max_depth = kMaxJsonDepth);

// JSON embedded in a file llmrr reads (a trace's run header extra_config_json): written by
// whoever produced the file, so capped like a file. Bigger than this is refused unparsed.
inline constexpr size_t kMaxEmbeddedJsonBytes = 16u << 20;

// An embedded JSON object: "" is an empty object; otherwise the size cap, then parse_json
// (the nesting cap), and the top level must be an object. `where` names the file and the
// field ("run.trace: run header extra_config_json").
Result<nlohmann::json> parse_json_object(std::string_view text, const std::string& where,
                                         ErrorCode code,
                                         size_t max_bytes = kMaxEmbeddedJsonBytes);

// The nesting check alone (what parse_json does first), for callers with their own messages.
Status check_json_depth(std::string_view text, const std::string& where, ErrorCode code,
                        int max_depth = kMaxJsonDepth);

// j.dump() that cannot throw: invalid UTF-8 in strings becomes U+FFFD, and text is cut to
// `max_chars` (with "...") for use in error messages. indent < 0: one line.
std::string dump(const nlohmann::json& j, int indent = -1);
std::string dump_short(const nlohmann::json& j, size_t max_chars = 80);

// The JSON type name of j for messages: "a string", "a number", "an array", ...
std::string type_name(const nlohmann::json& j);

// Typed fields of an object, each error naming the field and what was expected:
// "<where>: field \"format\" is a number, expected a string". A missing field gives
// `fallback` (or, for the required forms, an error saying it is missing).
Result<std::string> string_field(const nlohmann::json& obj, std::string_view key,
                                 const std::string& where, std::string fallback);
Result<bool> bool_field(const nlohmann::json& obj, std::string_view key, const std::string& where,
                        bool fallback);
Result<uint64_t> uint_field(const nlohmann::json& obj, std::string_view key,
                            const std::string& where, uint64_t fallback);

}  // namespace llmrr::safeio
