// The parser of CUPTI activity buffers. It needs the record layouts of cupti_activity.h
// (headers only: no CUPTI library, no device), so it builds wherever the CUDA toolkit
// headers are installed and is tested with buffers made of the real structs.
#include <cupti_activity.h>
#include <cupti_version.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "llmrr/cupti/activity.h"

namespace llmrr::cupti {

// The structs this build decodes. A new CUPTI renames them (Kernel10 → Kernel11); the
// static_asserts below say where to look when the headers change.
using KernelRec = CUpti_ActivityKernel10;
using MemcpyRec = CUpti_ActivityMemcpy6;
using MarkerRec = CUpti_ActivityMarker2;
static_assert(sizeof(KernelRec) % 8 == 0 && sizeof(MemcpyRec) % 8 == 0 &&
                  sizeof(MarkerRec) % 8 == 0,
              "CUPTI records are 8-byte aligned (PACKED_ALIGNMENT)");

std::string demangle(const char* name) {
  if (name == nullptr) return "";
  if (name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

LayoutInfo layout_info() {
  return {CUPTI_API_VERSION, sizeof(KernelRec), sizeof(MemcpyRec), sizeof(MarkerRec)};
}

namespace {

size_t record_bytes(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(KernelRec);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(MemcpyRec);
    case CUPTI_ACTIVITY_KIND_MARKER:
      return sizeof(MarkerRec);
    default:
      return 0;
  }
}

// CUPTI timestamps are unsigned ns; the trace stores signed ns (2^63 ns is 292 years).
int64_t ns(uint64_t t) {
  return static_cast<int64_t>(t & 0x7fffffffffffffffull);
}

}  // namespace

const void* layout_walk(const uint8_t* buffer, size_t valid, const void* prev, void*) {
  size_t at = 0;
  if (prev != nullptr) {
    const auto* p = static_cast<const uint8_t*>(prev);
    CUpti_ActivityKind kind;
    std::memcpy(&kind, p, sizeof kind);
    at = static_cast<size_t>(p - buffer) + record_bytes(kind);
  }
  if (at + sizeof(CUpti_ActivityKind) > valid) return nullptr;
  CUpti_ActivityKind kind;
  std::memcpy(&kind, buffer + at, sizeof kind);
  const size_t n = record_bytes(kind);
  if (n == 0 || at + n > valid) return nullptr;
  return buffer + at;
}

const std::string& ActivityParser::kernel_name(const char* mangled) {
  if (mangled == nullptr) return empty_;
  auto it = names_.find(std::string_view(mangled));
  if (it != names_.end()) return it->second;
  // Demangling costs microseconds and a kernel name repeats thousands of times; the cache
  // is bounded (a program with more distinct kernels than that just demangles again).
  if (names_.size() >= kMaxNameCache) names_.clear();
  return names_.emplace(mangled, demangle(mangled)).first->second;
}

void ActivityParser::decode(const void* record, size_t available,
                            std::vector<trace::KernelRecord>* out, ParseStats* stats) {
  CUpti_ActivityKind kind;
  if (available < sizeof kind) {
    ++stats->malformed;
    return;
  }
  std::memcpy(&kind, record, sizeof kind);
  const size_t need = record_bytes(kind);
  if (need == 0) {
    ++stats->skipped;
    return;
  }
  if (available < need) {
    ++stats->malformed;
    return;
  }
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      KernelRec k;
      std::memcpy(&k, record, sizeof k);
      trace::KernelRecord r;
      r.kind = trace::ActivityKind::kKernel;
      r.name = kernel_name(k.name);
      r.grid = {k.gridX, k.gridY, k.gridZ};
      r.block = {k.blockX, k.blockY, k.blockZ};
      r.static_shared = k.staticSharedMemory;
      r.dynamic_shared = k.dynamicSharedMemory;
      r.stream = k.streamId;
      r.correlation = k.correlationId;
      r.device = static_cast<int32_t>(k.deviceId);
      r.start_ns = ns(k.start);
      r.end_ns = k.end >= k.start ? ns(k.end) : r.start_ns;
      if (std::string e = trace::check_kernel_record(r); !e.empty()) {
        ++stats->malformed;  // e.g. a negative grid from a corrupted buffer
        return;
      }
      out->push_back(std::move(r));
      ++stats->kernels;
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      MemcpyRec m;
      std::memcpy(&m, record, sizeof m);
      trace::KernelRecord r;
      r.kind = trace::ActivityKind::kMemcpy;
      r.bytes = m.bytes;
      r.copy_kind = m.copyKind;
      r.stream = m.streamId;
      r.correlation = m.correlationId;
      r.device = static_cast<int32_t>(m.deviceId);
      r.start_ns = ns(m.start);
      r.end_ns = m.end >= m.start ? ns(m.end) : r.start_ns;
      out->push_back(std::move(r));
      ++stats->memcpys;
      return;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
      MarkerRec m;
      std::memcpy(&m, record, sizeof m);
      if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
        if (open_.size() >= kMaxOpenRanges) {
          // A range never closed (or closed after thousands of others): forget the oldest.
          auto oldest = open_.begin();
          for (auto it = open_.begin(); it != open_.end(); ++it)
            if (it->second.order < oldest->second.order) oldest = it;
          open_.erase(oldest);
          ++stats->malformed;
        }
        open_[m.id] = {m.name ? std::string(m.name) : std::string(), ns(m.timestamp), opened_++};
      } else if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
        auto it = open_.find(m.id);
        if (it == open_.end()) {
          ++stats->malformed;
          return;
        }
        trace::KernelRecord r;
        r.kind = trace::ActivityKind::kRange;
        r.name = std::move(it->second.name);
        r.start_ns = it->second.start_ns;
        r.end_ns = std::max(r.start_ns, ns(m.timestamp));
        r.correlation = m.id;
        open_.erase(it);
        out->push_back(std::move(r));
        ++stats->ranges;
      } else {
        ++stats->skipped;  // instantaneous markers, sync markers
      }
      return;
    }
    default:
      ++stats->skipped;
      return;
  }
}

ParseStats ActivityParser::parse_buffer(const uint8_t* buffer, size_t valid,
                                        std::vector<trace::KernelRecord>* out, RecordWalker walker,
                                        void* walker_context) {
  ParseStats st;
  const bool own_walk = walker == nullptr;
  if (own_walk) walker = layout_walk;
  const void* rec = nullptr;
  size_t end = 0;
  while ((rec = walker(buffer, valid, rec, walker_context)) != nullptr) {
    const size_t at = static_cast<size_t>(static_cast<const uint8_t*>(rec) - buffer);
    decode(rec, valid - at, out, &st);
    CUpti_ActivityKind kind;
    std::memcpy(&kind, rec, sizeof kind);
    end = at + std::max(record_bytes(kind), sizeof kind);
  }
  // Only our own walk knows where records end; CUPTI's steps over kinds we do not decode.
  if (own_walk) st.bytes_left = static_cast<int64_t>(valid > end ? valid - end : 0);
  return st;
}

}  // namespace llmrr::cupti
