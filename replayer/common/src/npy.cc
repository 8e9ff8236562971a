#include "llmrr/replayer/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "llmrr/safeio/output.h"

namespace llmrr::replay {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

Status io_error(const std::string& path, const std::string& what) {
  return make_error(ErrorCode::kIo, path + ": " + what + ": " + std::strerror(errno));
}

Status write_npy(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                 const void* data, size_t elem) {
  std::string dims;
  size_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += (i ? ", " : "") + std::to_string(shape[i]);
    n *= static_cast<size_t>(shape[i]);
  }
  if (shape.size() == 1) dims += ",";  // "(3, 4)" but "(3,)"
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  File f(safeio::open_for_writing(path.c_str()));
  if (!f) return io_error(path, "cannot create");
  const uint16_t len = static_cast<uint16_t>(header.size());
  const unsigned char pre[10] = {0x93,
                                 'N',
                                 'U',
                                 'M',
                                 'P',
                                 'Y',
                                 1,
                                 0,
                                 static_cast<unsigned char>(len & 0xff),
                                 static_cast<unsigned char>(len >> 8)};
  if (std::fwrite(pre, 1, sizeof pre, f.get()) != sizeof pre ||
      std::fwrite(header.data(), 1, header.size(), f.get()) != header.size() ||
      (n > 0 && std::fwrite(data, elem, n, f.get()) != n)) {
    return io_error(path, "write failed");
  }
  if (std::fclose(f.release()) != 0) return io_error(path, "close failed");
  return Status::Ok();
}

}  // namespace

Status write_npy_f32(const std::string& path, const std::vector<int64_t>& shape,
                     const float* data) {
  return write_npy(path, "<f4", shape, data, sizeof(float));
}

Status write_npy_i32(const std::string& path, const std::vector<int64_t>& shape,
                     const int32_t* data) {
  return write_npy(path, "<i4", shape, data, sizeof(int32_t));
}

Status write_npy_i64(const std::string& path, const std::vector<int64_t>& shape,
                     const int64_t* data) {
  return write_npy(path, "<i8", shape, data, sizeof(int64_t));
}

Status write_npy_u64(const std::string& path, const std::vector<int64_t>& shape,
                     const uint64_t* data) {
  return write_npy(path, "<u8", shape, data, sizeof(uint64_t));
}

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<NpyArray> read_npy(const std::string& path) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kCorruptPayload, path + ": not a readable .npy file: " + why);
  };
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return io_error(path, "cannot open");
  unsigned char pre[12];
  if (std::fread(pre, 1, 10, f.get()) != 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    return bad("no NUMPY magic");
  }
  size_t len;
  if (pre[6] == 1) {
    len = pre[8] | (pre[9] << 8);
  } else if (pre[6] == 2 || pre[6] == 3) {
    if (std::fread(pre + 10, 1, 2, f.get()) != 2) return bad("truncated header length");
    len = pre[8] | (pre[9] << 8) | (static_cast<size_t>(pre[10]) << 16) |
          (static_cast<size_t>(pre[11]) << 24);
    if (len > (1u << 20)) return bad("header length " + std::to_string(len));
  } else {
    return bad("version " + std::to_string(pre[6]));
  }
  std::string header(len, '\0');
  if (std::fread(header.data(), 1, len, f.get()) != len) return bad("truncated header");
  NpyArray a;
  auto value_of = [&](const std::string& key) -> std::string {
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) return "";
    size_t colon = header.find(':', k);
    if (colon == std::string::npos) return "";
    size_t start = header.find_first_not_of(' ', colon + 1);
    if (start == std::string::npos) return "";
    size_t end =
        header[start] == '(' ? header.find(')', start) + 1 : header.find_first_of(",}", start);
    if (end == std::string::npos || end == 0) return "";
    return header.substr(start, end - start);
  };
  std::string descr = value_of("descr");
  if (descr == "'<f4'") {
    a.descr = "<f4";
  } else if (descr == "'<i4'") {
    a.descr = "<i4";
  } else {
    return bad("dtype " + descr + " (only '<f4' and '<i4')");
  }
  if (value_of("fortran_order") != "False") return bad("Fortran order");
  std::string shape = value_of("shape");
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') return bad("no shape");
  size_t i = 1;
  while (i + 1 < shape.size()) {
    while (i + 1 < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i + 1 >= shape.size()) break;
    int64_t d = 0;
    size_t digits = 0;
    while (i + 1 < shape.size() && shape[i] >= '0' && shape[i] <= '9') {
      d = d * 10 + (shape[i] - '0');
      if (d > (int64_t{1} << 40)) return bad("dimension too large");
      ++i;
      ++digits;
    }
    if (digits == 0) return bad("shape " + shape);
    a.shape.push_back(d);
  }
  const int64_t n = a.numel();
  if (n > (int64_t{1} << 32)) return bad("too many elements");
  a.bytes.resize(static_cast<size_t>(n) * 4);
  if (n > 0 && std::fread(a.bytes.data(), 1, a.bytes.size(), f.get()) != a.bytes.size()) {
    return bad("data shorter than the shape says (" + std::to_string(n) + " elements)");
  }
  if (std::fgetc(f.get()) != EOF) return bad("data longer than the shape says");
  return a;
}

}  // namespace llmrr::replay
