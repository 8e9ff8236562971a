#include "llmrr/safeio/json.h"

#include <cstdio>

namespace llmrr::safeio {
namespace {

using nlohmann::json;

// Bytes outside printable ASCII as \xNN, so a message stays one readable line.
std::string printable(std::string_view s, size_t max_chars) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  return out;
}

// The byte offset (0-based) where the nesting first exceeds max_depth, or npos.
size_t too_deep_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace

Status check_json_depth(std::string_view text, const std::string& where, ErrorCode code,
                        int max_depth) {
  if (size_t at = too_deep_at(text, max_depth); at != std::string_view::npos) {
    return make_error(code, where + ": JSON nested deeper than " + std::to_string(max_depth) +
                                " levels at byte " + std::to_string(at + 1) +
                                ", expected at most " + std::to_string(max_depth));
  }
  return Status::Ok();
}

Result<json> parse_json(std::string_view text, const std::string& where, ErrorCode code,
                        int max_depth) {
  RETURN_IF_ERROR(check_json_depth(text, where, code, max_depth));
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const size_t reason = what.find("syntax error");
    what = reason == std::string::npos ? what : what.substr(reason);
    return make_error(code, where + ": invalid JSON at byte " + std::to_string(e.byte) + ": " +
                                printable(what, 200));
  } catch (const json::exception& e) {
    return make_error(code, where + ": invalid JSON: " + printable(e.what(), 200));
  }
}

Result<json> parse_json_object(std::string_view text, const std::string& where, ErrorCode code,
                               size_t max_bytes) {
  if (text.empty()) return json::object();
  if (text.size() > max_bytes) {
    return make_error(code, where + ": " + std::to_string(text.size()) +
                                " bytes of JSON, expected at most " + std::to_string(max_bytes));
  }
  ASSIGN_OR_RETURN(json j, parse_json(text, where, code));
  if (!j.is_object()) {
    return make_error(code, where + ": the top level is " + type_name(j) + " (" +
                                dump_short(j, 40) + "), expected a JSON object");
  }
  return j;
}

std::string dump(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::string dump_short(const json& j, size_t max_chars) {
  // A deep value would be dumped recursively; parse_json bounds the depth of what it returns.
  return printable(dump(j), max_chars);
}

std::string type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "invalid";
  }
  return "invalid";
}

namespace {
Status wrong_type(const json& v, std::string_view key, const std::string& where,
                  std::string_view expected) {
  return make_error(ErrorCode::kSemantic, where + ": field \"" + std::string(key) + "\" is " +
                                              type_name(v) + " (" + dump_short(v, 40) +
                                              "), expected " + std::string(expected));
}
const json* find(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}
}  // namespace

Result<std::string> string_field(const json& obj, std::string_view key, const std::string& where,
                                 std::string fallback) {
  const json* v = find(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) return wrong_type(*v, key, where, "a string");
  return v->get<std::string>();
}

Result<bool> bool_field(const json& obj, std::string_view key, const std::string& where,
                        bool fallback) {
  const json* v = find(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return wrong_type(*v, key, where, "true or false");
  return v->get<bool>();
}

Result<uint64_t> uint_field(const json& obj, std::string_view key, const std::string& where,
                            uint64_t fallback) {
  const json* v = find(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_unsigned()) return wrong_type(*v, key, where, "a non-negative integer");
  return v->get<uint64_t>();
}

}  // namespace llmrr::safeio
