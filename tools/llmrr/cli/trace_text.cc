#include "cli/trace_text.h"

#include <cstdio>
#include <ctime>

#include "llmrr/kernels/plan.h"
#include "llmrr/recorder/convert.h"
#include "llmrr/format/site.h"

namespace llmrr::cli {

std::string site_text(uint64_t packed_site) {
  return site_name(SiteId::unpack(packed_site));
}

uint64_t site_order(uint64_t packed_site) {
  return SiteId::unpack(packed_site).forward_key();
}

std::string hash_text(uint64_t hash) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(hash));
  return b;
}

std::string fingerprint_text(const trace::Fingerprint& fp) {
  char b[96];
  std::snprintf(b, sizeof b, "%016llx l2 %.6g max %.6g", static_cast<unsigned long long>(fp.hash),
                static_cast<double>(fp.l2), static_cast<double>(fp.max_abs));
  return b;
}

std::string time_text(int64_t unix_ns) {
  if (unix_ns == 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm;
  if (gmtime_r(&t, &tm) == nullptr) return "-";
  char b[64];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return b;
}

}  // namespace llmrr::cli
