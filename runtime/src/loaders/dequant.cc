// ggml dequantization, one function per type. Each follows ggml's dequantize_row_* (and
// gguf-py's quants.py, which transformers calls) term by term: the same products in the
// same order, each rounded to fp32 (-ffp-contract=off keeps the compiler from fusing
// d*q - m into an FMA, which numpy does not do either). Little-endian fields throughout.
#include <cstring>

#include "llmrr/runtime/gguf.h"
#include "loaders/loader_util.h"

namespace llmrr {
namespace {

using loaders::half_to_float;

constexpr int kQK = 256;  // QK_K: super-block size of the k-quants

inline float h16(const uint8_t* p) { return half_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// Q4_0: {f16 d; u8 qs[16]}; y[j] = (lo(qs[j]) - 8)·d, y[j+16] = (hi(qs[j]) - 8)·d.
void q4_0(const uint8_t* b, float* y) {
  const float d = h16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: {f16 d, m; u8 qs[16]}; y = q·d + m.
void q4_1(const uint8_t* b, float* y) {
  const float d = h16(b), m = h16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

inline uint32_t le32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Q5_0: {f16 d; u8 qh[4]; u8 qs[16]}; bit j of qh is the fifth bit of element j.
void q5_0(const uint8_t* b, float* y) {
  const float d = h16(b);
  const uint32_t qh = le32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int x0 = static_cast<int>((qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - 16;
    const int x1 = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
    y[j] = d * static_cast<float>(x0);
    y[j + 16] = d * static_cast<float>(x1);
  }
}

// Q5_1: {f16 d, m; u8 qh[4]; u8 qs[16]}; y = q·d + m.
void q5_1(const uint8_t* b, float* y) {
  const float d = h16(b), m = h16(b + 2);
  const uint32_t qh = le32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const uint32_t x0 = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
    const uint32_t x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(x0) + m;
    y[j + 16] = d * static_cast<float>(x1) + m;
  }
}

// Q8_0: {f16 d; i8 qs[32]}; y = q·d.
void q8_0(const uint8_t* b, float* y) {
  const float d = h16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d, dmin}.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = h16(b + 80), min = h16(b + 82);
  int is = 0;
  for (int n = 0; n < kQK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      uint8_t sc = scales[is++];
      float dl = d * static_cast<float>(sc & 0xf), ml = min * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
      sc = scales[is++];
      dl = d * static_cast<float>(sc & 0xf);
      ml = min * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16] >> shift) & 3) - ml;
      shift += 2;
    }
    q += 32;
  }
}

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}; 16 six-bit scales, offset 32.
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* sc = b + 96;
  const float d_all = h16(b + 108);
  int8_t scales[16];
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (sc[j] & 0x0f) : (sc[j - 8] >> 4);
    const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kQK; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      float dl = d_all * static_cast<float>(scales[is++]);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * static_cast<float>(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
      dl = d_all * static_cast<float>(scales[is++]);
      for (int l = 0; l < 16; ++l)
        *y++ = dl * static_cast<float>(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
      shift += 2;
      m <<= 1;
    }
    q += 32;
  }
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block (get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K: {f16 d, dmin; u8 scales[12]; u8 qs[128]}.
void q4_k(const uint8_t* b, float* y) {
  const float d = h16(b), min = h16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int is = 0;
  for (int j = 0; j < kQK; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xf) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// Q5_K: {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}.
void q5_k(const uint8_t* b, float* y) {
  const float d = h16(b), min = h16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < kQK; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l)
      *y++ = d1 * static_cast<float>((ql[l] & 0xf) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}; y = (d·scale)·q.
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = h16(b + 208);
  for (int n = 0; n < kQK; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// Q8_K: {f32 d; i8 qs[256]; i16 bsums[16]}; y = d·q.
void q8_k(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

struct TypeInfo {
  uint32_t type;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
  void (*block_fn)(const uint8_t*, float*);
};

constexpr TypeInfo kTypes[] = {
    {0, "F32", 1, 4, nullptr},          {1, "F16", 1, 2, nullptr},
    {2, "Q4_0", 32, 18, &q4_0},         {3, "Q4_1", 32, 20, &q4_1},
    {6, "Q5_0", 32, 22, &q5_0},         {7, "Q5_1", 32, 24, &q5_1},
    {8, "Q8_0", 32, 34, &q8_0},         {10, "Q2_K", 256, 84, &q2_k},
    {11, "Q3_K", 256, 110, &q3_k},      {12, "Q4_K", 256, 144, &q4_k},
    {13, "Q5_K", 256, 176, &q5_k},      {14, "Q6_K", 256, 210, &q6_k},
    {15, "Q8_K", 256, 292, &q8_k},      {30, "BF16", 1, 2, nullptr},
};

const TypeInfo* find_type(uint32_t type) {
  for (const TypeInfo& t : kTypes)
    if (t.type == type) return &t;
  return nullptr;
}

// Names of ggml types we recognise but do not dequantize (for messages).
const char* other_type_name(uint32_t type) {
  switch (type) {
    case 9: return "Q8_1";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    case 29: return "IQ1_M";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 39: return "MXFP4";
    default: return nullptr;
  }
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
  if (const TypeInfo* t = find_type(type)) return t->name;
  if (const char* n = other_type_name(type)) return n;
  return "type " + std::to_string(type);
}

bool ggml_type_layout(uint32_t type, int64_t* block_elems, int64_t* block_bytes) {
  const TypeInfo* t = find_type(type);
  if (!t) return false;
  *block_elems = t->block_elems;
  *block_bytes = t->block_bytes;
  return true;
}

Status ggml_dequantize(uint32_t type, const uint8_t* src, uint64_t src_bytes, int64_t n,
                       float* dst) {
  const TypeInfo* t = find_type(type);
  if (!t)
    return make_error(ErrorCode::kUnsupported,
                      "ggml type " + ggml_type_name(type) + " cannot be dequantized (supported: "
                      "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, Q8_K)");
  if (n < 0 || n % t->block_elems != 0)
    return make_error(ErrorCode::kBadModel, std::to_string(n) + " values of " + t->name +
                                                " are not a whole number of blocks of " +
                                                std::to_string(t->block_elems));
  const uint64_t blocks = static_cast<uint64_t>(n / t->block_elems);
  if (src_bytes != blocks * static_cast<uint64_t>(t->block_bytes))
    return make_error(ErrorCode::kBadModel,
                      std::string(t->name) + ": " + std::to_string(src_bytes) + " bytes for " +
                          std::to_string(n) + " values, expected " +
                          std::to_string(blocks * t->block_bytes));
  switch (type) {
    case 0:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return Status::Ok();
    case 1:
      for (int64_t i = 0; i < n; ++i) dst[i] = h16(src + 2 * i);
      return Status::Ok();
    case 30:
      for (int64_t i = 0; i < n; ++i)
        dst[i] = loaders::bf16_to_float(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
      return Status::Ok();
    default:
      for (uint64_t i = 0; i < blocks; ++i)
        t->block_fn(src + i * t->block_bytes, dst + i * t->block_elems);
      return Status::Ok();
  }
}

}  // namespace llmrr
