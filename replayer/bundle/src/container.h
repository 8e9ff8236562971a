// The bundle container's shared pieces (layout in pack.h): entry framing, little-endian
// fields, names a bundle may hold. pack.cc writes bundles, unpack.cc reads them.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "llmrr/format/status.h"

namespace llmrr::replay::bundle_internal {

constexpr unsigned char kEntryMagic[4] = {'L', 'R', 'P', 'E'};
constexpr unsigned char kEndMagic[4] = {'L', 'R', 'P', 'Z'};
constexpr size_t kEntryHeaderBytes = 24;
constexpr size_t kCopyChunk = 1 << 20;

inline void put_u16(unsigned char* p, uint16_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
inline void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline uint16_t get_u16(const unsigned char* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
inline uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
inline uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

inline Status io_error(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kIo, path + ": " + what + ": " + std::strerror(errno));
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;


inline bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 1024 || name.front() == '/' || name.back() == '/') return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-' || c == '+';
      if (!ok) return false;
    }
    start = end + 1;
  }
  return true;
}

}  // namespace llmrr::replay::bundle_internal
