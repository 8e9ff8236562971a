// GGUF reader (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), versions 2 and 3,
// little-endian. Layout: magic "GGUF", u32 version, u64 tensor count, u64 metadata count,
// metadata (key string, u32 type, value), tensor infos (name, u32 n_dims, u64 ne[n_dims],
// u32 type, u64 offset), padding to general.alignment, tensor data.
//
// Untrusted input: every count is checked against the bytes left before a container is
// sized from it (a count of N items needs at least N × the item's minimum encoded size),
// every string length against the bytes left, every tensor's extent against the file.
#include "llmrr/runtime/gguf.h"

#include <algorithm>
#include <cstring>

#include "loaders/loader_util.h"

namespace llmrr {

struct GgufFile::Mapping {
  loaders::MappedFile file;
};

GgufFile::GgufFile() = default;
GgufFile::~GgufFile() = default;
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;

const std::string& GgufFile::path() const {
  static const std::string kEmpty;
  return map_ ? map_->file.path() : kEmpty;
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const {
  return map_->file.data() + data_offset_ + t.offset;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;

enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// Encoded size of a scalar value type (0 for string / array / unknown).
uint64_t scalar_size(uint32_t t) {
  switch (t) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

const char* type_name(uint32_t t) {
  static const char* kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                 "bool", "string", "array", "u64", "i64", "f64"};
  return t < 13 ? kNames[t] : "unknown";
}

}  // namespace

// Reads the file front to back with a cursor; every read is bounds-checked.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, uint64_t size, std::string path)
      : p_(data), size_(size), path_(std::move(path)) {}

  Status parse(GgufFile* out) {
    uint32_t magic = 0;
    RETURN_IF_ERROR(u32(&magic, "magic"));
    if (magic != kMagic)
      return make_error(ErrorCode::kBadModel, path_ + ": not a GGUF file (magic " + hex(magic) +
                                                  " at offset 0, expected \"GGUF\")");
    RETURN_IF_ERROR(u32(&out->version_, "version"));
    if (out->version_ == 1)
      return make_error(ErrorCode::kUnsupported, path_ + ": GGUF version 1 is not supported "
                                                         "(versions 2 and 3)");
    if (out->version_ < 2 || out->version_ > 3)
      return make_error(ErrorCode::kUnsupported,
                        path_ + ": GGUF version " + std::to_string(out->version_) +
                            (out->version_ > 0xffff ? " (a big-endian file?)" : "") +
                            " is not supported (versions 2 and 3)");
    uint64_t n_tensors = 0, n_kv = 0;
    RETURN_IF_ERROR(u64(&n_tensors, "tensor count"));
    RETURN_IF_ERROR(u64(&n_kv, "metadata count"));
    // Minimum encodings: a key-value is 8 (key length) + 4 (type) + 1 bytes; a tensor info is
    // 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
    RETURN_IF_ERROR(check_count(n_kv, 13, "metadata count"));
    RETURN_IF_ERROR(check_count(n_tensors, 24, "tensor count"));

    for (uint64_t i = 0; i < n_kv; ++i) {
      const uint64_t at = pos_;
      std::string key;
      RETURN_IF_ERROR(str(&key, "metadata key"));
      uint32_t type = 0;
      RETURN_IF_ERROR(u32(&type, "metadata type of " + key));
      GgufValue v;
      RETURN_IF_ERROR(value(type, &v, key, 0));
      if (!out->kv_.emplace(key, std::move(v)).second)
        return make_error(ErrorCode::kBadModel, path_ + ": metadata key " + key +
                                                    " appears twice (offset " +
                                                    std::to_string(at) + ")");
    }
    if (const GgufValue* a = out->find("general.alignment")) {
      if (a->kind != GgufValue::Kind::kUint && a->kind != GgufValue::Kind::kInt)
        return make_error(ErrorCode::kBadModel, path_ + ": general.alignment is not an integer");
      const uint64_t al = a->kind == GgufValue::Kind::kUint ? a->u : static_cast<uint64_t>(a->i);
      if (al == 0 || (al & (al - 1)) != 0 || al > (1u << 20))
        return make_error(ErrorCode::kBadModel, path_ + ": general.alignment " +
                                                    std::to_string(al) +
                                                    " is not a power of two up to 1 MiB");
      out->alignment_ = al;
    }

    out->tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensorInfo t;
      RETURN_IF_ERROR(str(&t.name, "tensor name"));
      const std::string where = path_ + ": tensor " + t.name;
      uint32_t n_dims = 0;
      RETURN_IF_ERROR(u32(&n_dims, "dimension count of " + t.name));
      if (n_dims == 0 || n_dims > kMaxDims)
        return make_error(ErrorCode::kBadModel, where + ": " + std::to_string(n_dims) +
                                                    " dimensions (1 to 4)");
      uint64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t ne = 0;
        RETURN_IF_ERROR(u64(&ne, "dimension of " + t.name));
        if (ne == 0 || ne > (uint64_t{1} << 40) || loaders::mul_overflows(numel, ne, &numel))
          return make_error(ErrorCode::kBadModel, where + ": dimension " + std::to_string(d) +
                                                      " is " + std::to_string(ne));
        t.ne.push_back(static_cast<int64_t>(ne));
      }
      RETURN_IF_ERROR(u32(&t.type, "type of " + t.name));
      RETURN_IF_ERROR(u64(&t.offset, "offset of " + t.name));
      int64_t be = 0, bb = 0;
      if (!ggml_type_layout(t.type, &be, &bb))
        return make_error(ErrorCode::kUnsupported, where + " has ggml type " +
                                                       ggml_type_name(t.type) +
                                                       ", which this loader cannot dequantize");
      if (t.ne[0] % be != 0)
        return make_error(ErrorCode::kBadModel,
                          where + ": row length " + std::to_string(t.ne[0]) +
                              " is not a multiple of the " + ggml_type_name(t.type) +
                              " block size " + std::to_string(be));
      const uint64_t blocks = numel / static_cast<uint64_t>(be);
      if (loaders::mul_overflows(blocks, static_cast<uint64_t>(bb), &t.bytes))
        return make_error(ErrorCode::kBadModel, where + ": byte size overflows");
      if (t.offset % out->alignment_ != 0)
        return make_error(ErrorCode::kBadModel, where + ": offset " + std::to_string(t.offset) +
                                                    " is not a multiple of the alignment " +
                                                    std::to_string(out->alignment_));
      out->tensors_.push_back(std::move(t));
    }

    // Tensor data starts at the next multiple of the alignment.
    uint64_t data = pos_;
    if (data % out->alignment_) data += out->alignment_ - data % out->alignment_;
    if (n_tensors > 0 && data > size_)
      return make_error(ErrorCode::kTruncated, path_ + ": tensor data would start at offset " +
                                                   std::to_string(data) + ", past the end of the "
                                                   "file (" + std::to_string(size_) + " bytes)");
    out->data_offset_ = data;
    const uint64_t avail = size_ >= data ? size_ - data : 0;
    std::vector<std::pair<uint64_t, size_t>> extents;
    for (size_t i = 0; i < out->tensors_.size(); ++i) {
      const GgufTensorInfo& t = out->tensors_[i];
      uint64_t end = 0;
      if (loaders::add_overflows(t.offset, t.bytes, &end) || end > avail)
        return make_error(ErrorCode::kTruncated,
                          path_ + ": tensor " + t.name + " (" + ggml_type_name(t.type) + " " +
                              loaders::shape_string(t.ne) + ", " + std::to_string(t.bytes) +
                              " bytes at data offset " + std::to_string(t.offset) +
                              ") runs past the end of the file (" + std::to_string(avail) +
                              " bytes of tensor data)");
      extents.emplace_back(t.offset, i);
    }
    // Overlapping tensors would alias each other's bytes: a corrupt index.
    std::sort(extents.begin(), extents.end());
    for (size_t i = 1; i < extents.size(); ++i) {
      const GgufTensorInfo& a = out->tensors_[extents[i - 1].second];
      const GgufTensorInfo& b = out->tensors_[extents[i].second];
      if (a.offset + a.bytes > b.offset)
        return make_error(ErrorCode::kBadModel,
                          path_ + ": tensors " + a.name + " and " + b.name + " overlap");
    }
    std::vector<std::string> names;
    for (const auto& t : out->tensors_) names.push_back(t.name);
    std::sort(names.begin(), names.end());
    for (size_t i = 1; i < names.size(); ++i)
      if (names[i] == names[i - 1])
        return make_error(ErrorCode::kBadModel, path_ + ": tensor " + names[i] + " appears twice");
    return Status::Ok();
  }

 private:
  static std::string hex(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%08x", v);
    return b;
  }
  uint64_t left() const { return size_ - pos_; }

  Status truncated(const std::string& what, uint64_t need) {
    return make_error(ErrorCode::kTruncated,
                      path_ + ": file ends inside " + what + " at offset " + std::to_string(pos_) +
                          " (needs " + std::to_string(need) + " bytes, " +
                          std::to_string(left()) + " left)");
  }
  Status bytes(void* dst, uint64_t n, const std::string& what) {
    if (n > left()) return truncated(what, n);
    std::memcpy(dst, p_ + pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  // Reads little-endian integers byte by byte (host order independent).
  template <typename T>
  Status le(T* out, const std::string& what) {
    uint8_t b[sizeof(T)];
    RETURN_IF_ERROR(bytes(b, sizeof(T), what));
    uint64_t v = 0;
    for (size_t i = sizeof(T); i-- > 0;) v = (v << 8) | b[i];
    *out = static_cast<T>(v);
    return Status::Ok();
  }
  Status u32(uint32_t* v, const std::string& what) { return le(v, what); }
  Status u64(uint64_t* v, const std::string& what) { return le(v, what); }

  Status check_count(uint64_t count, uint64_t min_item, const std::string& what) {
    uint64_t need = 0;
    if (loaders::mul_overflows(count, min_item, &need) || need > left())
      return make_error(ErrorCode::kBadModel,
                        path_ + ": " + what + " " + std::to_string(count) + " at offset " +
                            std::to_string(pos_) + " cannot fit in the " +
                            std::to_string(left()) + " bytes left");
    return Status::Ok();
  }

  Status str(std::string* s, const std::string& what) {
    uint64_t n = 0;
    RETURN_IF_ERROR(u64(&n, what + " length"));
    if (n > left())
      return make_error(ErrorCode::kBadModel, path_ + ": " + what + " length " +
                                                  std::to_string(n) + " at offset " +
                                                  std::to_string(pos_ - 8) +
                                                  " runs past the end of the file");
    s->assign(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return Status::Ok();
  }

  Status scalar(uint32_t type, GgufValue* v, const std::string& key) {
    const uint64_t n = scalar_size(type);
    uint8_t b[8] = {};
    RETURN_IF_ERROR(bytes(b, n, std::string("value of ") + key));
    uint64_t u = 0;
    for (size_t i = n; i-- > 0;) u = (u << 8) | b[i];
    v->gguf_type = type;
    switch (type) {
      case kU8: case kU16: case kU32: case kU64:
        v->kind = GgufValue::Kind::kUint;
        v->u = u;
        break;
      case kI8: v->kind = GgufValue::Kind::kInt; v->i = static_cast<int8_t>(u); break;
      case kI16: v->kind = GgufValue::Kind::kInt; v->i = static_cast<int16_t>(u); break;
      case kI32: v->kind = GgufValue::Kind::kInt; v->i = static_cast<int32_t>(u); break;
      case kI64: v->kind = GgufValue::Kind::kInt; v->i = static_cast<int64_t>(u); break;
      case kF32: {
        float f;
        uint32_t w = static_cast<uint32_t>(u);
        std::memcpy(&f, &w, 4);
        v->kind = GgufValue::Kind::kFloat;
        v->f = f;
        break;
      }
      case kF64: {
        double f;
        std::memcpy(&f, &u, 8);
        v->kind = GgufValue::Kind::kFloat;
        v->f = f;
        break;
      }
      case kBool:
        if (u > 1)
          return make_error(ErrorCode::kBadModel, path_ + ": bool value of " + key + " is " +
                                                      std::to_string(u) + " at offset " +
                                                      std::to_string(pos_ - 1));
        v->kind = GgufValue::Kind::kBool;
        v->b = u != 0;
        break;
    }
    return Status::Ok();
  }

  Status value(uint32_t type, GgufValue* v, const std::string& key, int depth) {
    if (type == kString) {
      v->kind = GgufValue::Kind::kString;
      v->gguf_type = type;
      return str(&v->s, "string value of " + key);
    }
    if (scalar_size(type)) return scalar(type, v, key);
    if (type != kArray)
      return make_error(ErrorCode::kBadModel, path_ + ": metadata " + key + " has value type " +
                                                  std::to_string(type) + " at offset " +
                                                  std::to_string(pos_ - 4));
    if (depth >= kMaxArrayDepth)
      return make_error(ErrorCode::kBadModel, path_ + ": metadata " + key + " nests arrays "
                                                  "deeper than " + std::to_string(kMaxArrayDepth));
    uint32_t et = 0;
    uint64_t count = 0;
    RETURN_IF_ERROR(u32(&et, "array type of " + key));
    RETURN_IF_ERROR(u64(&count, "array length of " + key));
    v->kind = GgufValue::Kind::kArray;
    v->gguf_type = kArray;
    v->elem_type = et;
    v->count = count;
    const uint64_t item = et == kString ? 8 : et == kArray ? 12 : scalar_size(et);
    if (item == 0)
      return make_error(ErrorCode::kBadModel, path_ + ": array " + key + " has element type " +
                                                  std::to_string(et));
    RETURN_IF_ERROR(check_count(count, item, "length of array " + key));
    if (et == kString) {
      v->strings.resize(count);
      for (uint64_t i = 0; i < count; ++i) RETURN_IF_ERROR(str(&v->strings[i], "element of " + key));
    } else if (et == kArray) {
      // Each element is an array value (element type, length, items); parsed and dropped.
      for (uint64_t i = 0; i < count; ++i) {
        GgufValue skip;
        RETURN_IF_ERROR(value(kArray, &skip, key + "[]", depth + 1));
      }
    } else if (et == kF32 || et == kF64) {
      v->floats.resize(count);
      for (uint64_t i = 0; i < count; ++i) {
        GgufValue x;
        RETURN_IF_ERROR(scalar(et, &x, key));
        v->floats[i] = x.f;
      }
    } else {
      v->ints.resize(count);
      for (uint64_t i = 0; i < count; ++i) {
        GgufValue x;
        RETURN_IF_ERROR(scalar(et, &x, key));
        v->ints[i] = x.kind == GgufValue::Kind::kUint ? static_cast<int64_t>(x.u)
                     : x.kind == GgufValue::Kind::kBool ? int64_t{x.b} : x.i;
      }
    }
    return Status::Ok();
  }

  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string path_;
};

Result<GgufFile> GgufFile::open(const std::string& path) {
  ASSIGN_OR_RETURN(loaders::MappedFile file, loaders::MappedFile::open(path));
  GgufFile g;
  g.map_ = std::make_unique<Mapping>();
  g.map_->file = std::move(file);
  GgufParser parser(g.map_->file.data(), g.map_->file.size(), path);
  RETURN_IF_ERROR(parser.parse(&g));
  return g;
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error(ErrorCode::kNotFound, path() + ": metadata " + key + " is missing");
  if (v->kind != GgufValue::Kind::kString)
    return make_error(ErrorCode::kBadModel, path() + ": metadata " + key + " is " +
                                                type_name(v->gguf_type) + ", expected string");
  return v->s;
}

Result<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error(ErrorCode::kNotFound, path() + ": metadata " + key + " is missing");
  if (v->kind == GgufValue::Kind::kInt) return v->i;
  if (v->kind == GgufValue::Kind::kUint && v->u <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v->u);
  return make_error(ErrorCode::kBadModel, path() + ": metadata " + key + " is " +
                                              type_name(v->gguf_type) + ", expected an integer");
}

Result<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error(ErrorCode::kNotFound, path() + ": metadata " + key + " is missing");
  if (v->kind == GgufValue::Kind::kFloat) return v->f;
  if (v->kind == GgufValue::Kind::kInt) return static_cast<double>(v->i);
  if (v->kind == GgufValue::Kind::kUint) return static_cast<double>(v->u);
  return make_error(ErrorCode::kBadModel, path() + ": metadata " + key + " is " +
                                              type_name(v->gguf_type) + ", expected a number");
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return make_error(ErrorCode::kNotFound, path() + ": metadata " + key + " is missing");
  if (v->kind != GgufValue::Kind::kBool)
    return make_error(ErrorCode::kBadModel, path() + ": metadata " + key + " is " +
                                                type_name(v->gguf_type) + ", expected bool");
  return v->b;
}

}  // namespace llmrr
