#include "loaders/loader_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <utility>

#include "llmrr/safeio/input.h"

namespace llmrr::loaders {

WeightHasher::WeightHasher() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
WeightHasher::~WeightHasher() { XXH3_freeState(state_); }

void WeightHasher::update(const void* p, size_t n) {
  if (n) XXH3_64bits_update(state_, p, n);
}

void WeightHasher::update_u64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  update(b, 8);
}

void WeightHasher::add(std::string_view name, std::string_view dtype,
                       std::span<const int64_t> shape, const void* bytes, size_t size) {
  update_u64(name.size());
  update(name.data(), name.size());
  update_u64(dtype.size());
  update(dtype.data(), dtype.size());
  update_u64(shape.size());
  for (int64_t d : shape) update_u64(static_cast<uint64_t>(d));
  update_u64(size);
  update(bytes, size);
}

uint64_t WeightHasher::digest() const { return XXH3_64bits_digest(state_); }

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise the mantissa.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
      path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

namespace {
Status errno_status(const std::string& what, const std::string& path) {
  int e = errno;
  ErrorCode code = e == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo;
  return make_error(code, path + ": " + what + ": " + std::strerror(e));
}
}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  // Refused unless a regular file, before an open that could block (a FIFO) or a mapping of
  // a device.
  ASSIGN_OR_RETURN(int fd, safeio::open_regular(path, "model"));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    Status s = errno_status("cannot stat", path);
    ::close(fd);
    return s;
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<uint64_t>(st.st_size);
  if (m.size_ > 0) {
    void* p = mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = errno_status("cannot mmap", path);
      ::close(fd);
      return s;
    }
    m.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

Result<std::string> read_text_file(const std::string& path, uint64_t limit) {
  return safeio::read_file(path, limit, "model file");
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

void release_pages(const void* p, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

}  // namespace llmrr::loaders
