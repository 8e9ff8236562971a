// Kernel activity records (CUPTI): names of their enums and the well-formedness rules the
// writer and verify() share.
#include <string>

#include "llmrr/format/records.h"

namespace llmrr::trace {

const char* activity_kind_name(ActivityKind kind) {
  switch (kind) {
    case ActivityKind::kKernel:
      return "kernel";
    case ActivityKind::kMemcpy:
      return "memcpy";
    case ActivityKind::kRange:
      return "range";
  }
  return "unknown";
}

const char* memcpy_kind_name(uint8_t copy_kind) {
  // CUpti_ActivityMemcpyKind (cupti_activity.h); values are stable across CUPTI versions.
  static constexpr const char* kNames[] = {"unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                           "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
  if (copy_kind < sizeof kNames / sizeof kNames[0]) return kNames[copy_kind];
  return "other";
}

namespace {

std::string check_dims(const char* what, const std::vector<int32_t>& d) {
  if (d.empty()) return "";
  if (d.size() != 3)
    return std::string(what) + ": expected 0 or 3 entries, found " + std::to_string(d.size());
  for (int32_t v : d)
    if (v < 0) return std::string(what) + ": expected entries >= 0, found " + std::to_string(v);
  return "";
}

}  // namespace

std::string check_kernel_record(const KernelRecord& k) {
  if (static_cast<uint8_t>(k.kind) > static_cast<uint8_t>(ActivityKind::kRange))
    return "kind: expected 0 (kernel), 1 (memcpy) or 2 (range), found " +
           std::to_string(static_cast<int>(k.kind));
  if (k.step < -1) return "step: expected >= -1, found " + std::to_string(k.step);
  if (std::string e = check_dims("grid", k.grid); !e.empty()) return e;
  if (std::string e = check_dims("block", k.block); !e.empty()) return e;
  if (k.static_shared < 0 || k.dynamic_shared < 0)
    return "shared memory: expected sizes >= 0, found static " + std::to_string(k.static_shared) +
           ", dynamic " + std::to_string(k.dynamic_shared);
  if (k.end_ns < k.start_ns)
    return "end_ns: expected >= start_ns (" + std::to_string(k.start_ns) + "), found " +
           std::to_string(k.end_ns);
  return "";
}

}  // namespace llmrr::trace
