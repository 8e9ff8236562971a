#include "cli/cli.h"

#include <charconv>
#include <cstdio>
#include <limits>

namespace llmrr::cli {

int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ConversionError& e) {
    // CLI11 says "Could not convert: --jobs = 99999999999": say what was expected instead.
    std::string what = e.what();
    const std::string prefix = "Could not convert: ";
    if (what.rfind(prefix, 0) == 0 && what.find(" = ") != std::string::npos) {
      const size_t eq = what.find(" = ");
      const std::string name = what.substr(prefix.size(), eq - prefix.size());
      const std::string value = what.substr(eq + 3);
      what = name + ": expected a number in the option's range, found '" + value + "'";
    }
    std::fprintf(stderr, "llmrr %s: %s (see llmrr %s --help)\n", app.get_name().c_str(),
                 what.c_str(), app.get_name().c_str());
    return kExitBadInput;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "llmrr %s: %s (see llmrr %s --help)\n", app.get_name().c_str(), e.what(),
                 app.get_name().c_str());
    return kExitBadInput;
  }
  return -1;
}

int exit_code(const Status& status) {
  return exit_code_for(status);
}

int report(std::string_view command, const Status& status) {
  std::string line = status.to_string();
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "llmrr %.*s: error: %s\n", static_cast<int>(command.size()), command.data(),
               line.c_str());
  return exit_code(status);
}

void warn(std::string_view command, std::string_view text) {
  std::fprintf(stderr, "llmrr %.*s: warning: %.*s\n", static_cast<int>(command.size()),
               command.data(), static_cast<int>(text.size()), text.data());
}

CLI::Validator non_negative() {
  return CLI::Validator(
      [](const std::string& v) {
        return v.find('-') == std::string::npos ? std::string()
                                                : "expected an integer >= 0, found " + v;
      },
      "UINT", "non-negative");
}

std::string human_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char b[32];
  std::snprintf(b, sizeof b, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, kUnits[u]);
  return b;
}

std::string human_number(double v) {
  char b[32];
  const double a = v < 0 ? -v : v;
  std::snprintf(b, sizeof b, a < 10 ? "%.2f" : a < 100 ? "%.1f" : "%.0f", v);
  return b;
}

namespace {
bool parse_i64(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}
}  // namespace

bool parse_range(std::string_view text, int64_t* first, int64_t* last) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    if (!parse_i64(text, first)) return false;
    *last = *first;
    return true;
  }
  std::string_view a = text.substr(0, colon), b = text.substr(colon + 1);
  *first = std::numeric_limits<int64_t>::min();
  *last = std::numeric_limits<int64_t>::max();
  if (!a.empty() && !parse_i64(a, first)) return false;
  if (!b.empty() && !parse_i64(b, last)) return false;
  return *first <= *last;
}

namespace {

bool parse_request_id(std::string_view s, uint64_t* id) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *id = v;
  return true;
}

}  // namespace

Result<std::pair<uint64_t, uint64_t>> parse_request_pair(const std::string& text) {
  uint64_t a = 0, b = 0;
  const size_t colon = text.find(':');
  const bool ok = colon == std::string::npos
                      ? parse_request_id(text, &a) && parse_request_id(text, &b)
                      : parse_request_id(std::string_view(text).substr(0, colon), &a) &&
                            parse_request_id(std::string_view(text).substr(colon + 1), &b);
  if (!ok) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--request '" + text + "': expected R or RA:RB (request ids)");
  }
  return std::make_pair(a, b);
}

}  // namespace llmrr::cli
