// Helpers for the fuzz targets: an in-memory file with a path (the reader works on paths),
// and a byte consumer that turns fuzz input into values.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace llmrr::fuzz {

// A memfd that the trace reader and writer can open by path (/proc/self/fd/N), so fuzzing
// never touches the disk.
class MemFile {
 public:
  MemFile() : fd_(::memfd_create("llmrr-fuzz", 0)) {}
  ~MemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  bool ok() const { return fd_ >= 0; }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }
  bool assign(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) return false;
    size_t done = 0;
    while (done < size) {
      ssize_t w = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (w <= 0) return false;
      done += static_cast<size_t>(w);
    }
    return true;
  }

 private:
  int fd_;
};

// Consumes fuzz bytes front to back; returns zeros once they run out.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }
  size_t left() const { return n_; }
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
  uint32_t u32() { return static_cast<uint32_t>(u16()) | static_cast<uint32_t>(u16()) << 16; }
  uint64_t u64() { return static_cast<uint64_t>(u32()) | static_cast<uint64_t>(u32()) << 32; }
  // In [lo, hi].
  int64_t range(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(u32() % span);
  }
  bool flag() { return u8() & 1; }
  // Any float but NaN (NaN != NaN would make equal records compare unequal).
  float f32() {
    uint32_t u = u32();
    float f;
    std::memcpy(&f, &u, 4);
    return std::isnan(f) ? 0.0f : f;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

}  // namespace llmrr::fuzz
