#include "llmrr/recording/ring.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace llmrr::recording {

Result<RingOptions> parse_ring(const std::string& spec) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kInvalidArgument,
                      "ring '" + spec.substr(0, 40) + "': " + why +
                          " (expected a size such as 64M, 512K, 2G or a duration such as 30s, "
                          "10min, 2h)");
  };
  size_t i = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) ++i;
  if (i == 0) return bad("no number");
  if (i > 12) return bad("number too large");
  const uint64_t n = std::strtoull(spec.substr(0, i).c_str(), nullptr, 10);
  if (n == 0) return bad("must be > 0");
  std::string unit = spec.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  RingOptions r;
  if (unit.empty() || unit == "b") {
    r.bytes = n;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    r.bytes = n << 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    r.bytes = n << 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    r.bytes = n << 30;
  } else if (unit == "s") {
    r.seconds = static_cast<int64_t>(n);
  } else if (unit == "min") {
    r.seconds = static_cast<int64_t>(n) * 60;
  } else if (unit == "h") {
    r.seconds = static_cast<int64_t>(n) * 3600;
  } else {
    return bad("unknown unit '" + unit.substr(0, 8) + "'");
  }
  if (r.bytes > 0 && r.bytes < (uint64_t{64} << 10)) return bad("at least 64K");
  return r;
}

std::string ring_folder(const std::string& trace) { return trace + ".ring"; }

std::string ring_segment(const std::string& trace, int64_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "/seg-%06lld.trace", static_cast<long long>(index));
  return ring_folder(trace) + name;
}

std::vector<std::string> ring_segments(const std::string& trace) {
  const std::string dir = ring_folder(trace);
  std::vector<std::string> parts;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return parts;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("seg-", 0) == 0 && name.size() > 10 &&
        name.compare(name.size() - 6, 6, ".trace") == 0)
      parts.push_back(dir + "/" + name);
  }
  ::closedir(d);
  std::sort(parts.begin(), parts.end());  // seg-NNNNNN: zero-padded, so in recording order
  return parts;
}

std::string describe_ring(const RingOptions& ring) {
  if (ring.bytes > 0) {
    if (ring.bytes % (uint64_t{1} << 30) == 0) return std::to_string(ring.bytes >> 30) + " GiB";
    if (ring.bytes % (uint64_t{1} << 20) == 0) return std::to_string(ring.bytes >> 20) + " MiB";
    if (ring.bytes % (uint64_t{1} << 10) == 0) return std::to_string(ring.bytes >> 10) + " KiB";
    return std::to_string(ring.bytes) + " bytes";
  }
  if (ring.seconds % 3600 == 0) return std::to_string(ring.seconds / 3600) + " h";
  if (ring.seconds % 60 == 0) return std::to_string(ring.seconds / 60) + " min";
  return std::to_string(ring.seconds) + " s";
}

}  // namespace llmrr::recording
