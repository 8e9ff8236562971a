// Packing ggml blocks into quantized panels (gemm_internal.h QuantLayout), the value each
// packed weight stands for (quant.h), and table lookups from packed weights.
//
// Each ggml block is split into groups of G k with one (A, B) per group and one integer code
// per element, following runtime/src/loaders/dequant.cc (ggml's dequantize_row_*) line by
// line: the same scale products in the same order, so A·float(c) (+ B) is the fp32 value that
// the dequantizer writes (tests/loaders/quant_pack_test.cc checks every format bit for bit).
#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "cpu/gemm_internal.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/quant.h"

namespace llmrr::kernels {
namespace {

constexpr int kQK = 256;

inline uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline float h16(const uint8_t* p) { return numerics::f16_to_f32(u16(p)); }
inline uint32_t le32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

struct Format {
  uint32_t type;
  int64_t block_elems, block_bytes;
  int group, bits, offset;
  bool has_min, f16_scales;
};

constexpr Format kFormats[] = {
    {2, 32, 18, 32, 4, 8, false, true},     // Q4_0
    {3, 32, 20, 32, 4, 0, true, true},      // Q4_1
    {6, 32, 22, 32, 8, 0, false, true},     // Q5_0
    {7, 32, 24, 32, 8, 0, true, true},      // Q5_1
    {8, 32, 34, 32, 8, 0, false, true},     // Q8_0
    {10, 256, 84, 16, 4, 0, true, false},   // Q2_K
    {11, 256, 110, 16, 4, 4, false, false}, // Q3_K
    {12, 256, 144, 32, 4, 0, true, false},  // Q4_K
    {13, 256, 176, 32, 8, 0, true, false},  // Q5_K
    {14, 256, 210, 16, 8, 0, false, false}, // Q6_K
    {15, 256, 292, 32, 8, 0, false, false}, // Q8_K
};

const Format* find_format(uint32_t type) {
  for (const Format& f : kFormats)
    if (f.type == type) return &f;
  return nullptr;
}

// One block, decomposed: per group g, the scale (as binary16 bits for legacy formats, else
// binary32) and minimum; per element the code in its stored form (4-bit: the nibble, value =
// nibble − offset; 8-bit: the signed value).
struct Decomposed {
  uint16_t a16[16], b16[16];
  float a[16], b[16];
  int code[kQK];
};

void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void decompose(uint32_t type, const uint8_t* b, Decomposed* o) {
  switch (type) {
    case 2: {  // Q4_0: (lo − 8)·d, (hi − 8)·d
      o->a16[0] = u16(b);
      for (int j = 0; j < 16; ++j) {
        o->code[j] = b[2 + j] & 0x0f;
        o->code[j + 16] = b[2 + j] >> 4;
      }
      return;
    }
    case 3: {  // Q4_1: d·q + m
      o->a16[0] = u16(b);
      o->b16[0] = u16(b + 2);
      for (int j = 0; j < 16; ++j) {
        o->code[j] = b[4 + j] & 0x0f;
        o->code[j + 16] = b[4 + j] >> 4;
      }
      return;
    }
    case 6: {  // Q5_0: d·(q5 − 16)
      o->a16[0] = u16(b);
      const uint32_t qh = le32(b + 2);
      for (int j = 0; j < 16; ++j) {
        o->code[j] = static_cast<int>((b[6 + j] & 0x0f) | (((qh >> j) & 1) << 4)) - 16;
        o->code[j + 16] = static_cast<int>((b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      }
      return;
    }
    case 7: {  // Q5_1: d·q5 + m
      o->a16[0] = u16(b);
      o->b16[0] = u16(b + 2);
      const uint32_t qh = le32(b + 4);
      for (int j = 0; j < 16; ++j) {
        o->code[j] = static_cast<int>((b[8 + j] & 0x0f) | (((qh >> j) & 1) << 4));
        o->code[j + 16] = static_cast<int>((b[8 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      }
      return;
    }
    case 8: {  // Q8_0: q·d
      o->a16[0] = u16(b);
      for (int j = 0; j < 32; ++j) o->code[j] = static_cast<int8_t>(b[2 + j]);
      return;
    }
    case 10: {  // Q2_K: dl·q − ml per 16
      const uint8_t* scales = b;
      const uint8_t* q = b + 16;
      const float d = h16(b + 80), min = h16(b + 82);
      int is = 0, e = 0;
      for (int n = 0; n < kQK; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
          for (int half = 0; half < 2; ++half) {
            const uint8_t sc = scales[is];
            o->a[is] = d * static_cast<float>(sc & 0xf);
            o->b[is] = -(min * static_cast<float>(sc >> 4));
            ++is;
            for (int l = 0; l < 16; ++l) o->code[e++] = (q[l + 16 * half] >> shift) & 3;
          }
          shift += 2;
        }
        q += 32;
      }
      return;
    }
    case 11: {  // Q3_K: dl·(q − (hm ? 0 : 4)) per 16; stored nibble = value + 4
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
      int is = 0, e = 0;
      uint8_t m = 1;
      for (int n = 0; n < kQK; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; ++j) {
          for (int half = 0; half < 2; ++half) {
            o->a[is] = d_all * static_cast<float>(scales[is]);
            ++is;
            for (int l = 0; l < 16; ++l) {
              const int i = l + 16 * half;
              o->code[e++] = ((q[i] >> shift) & 3) - ((hm[i] & m) ? 0 : 4) + 4;
            }
          }
          shift += 2;
          m = static_cast<uint8_t>(m << 1);
        }
        q += 32;
      }
      return;
    }
    case 12:    // Q4_K: d1·q − m1 per 32
    case 13: {  // Q5_K: d1·(q + 16·h) − m1 per 32
      const bool q5 = type == 13;
      const float d = h16(b), min = h16(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* q = b + (q5 ? 48 : 16);
      int is = 0, e = 0;
      uint8_t u1 = 1, u2 = 2;
      for (int j = 0; j < kQK; j += 64) {
        for (int half = 0; half < 2; ++half) {
          uint8_t sc, mm;
          scale_min_k4(is, scales, &sc, &mm);
          o->a[is] = d * static_cast<float>(sc);
          o->b[is] = -(min * static_cast<float>(mm));
          ++is;
          for (int l = 0; l < 32; ++l) {
            int v = half == 0 ? (q[l] & 0xf) : (q[l] >> 4);
            if (q5) v += (qh[l] & (half == 0 ? u1 : u2)) ? 16 : 0;
            o->code[e++] = v;
          }
        }
        q += 32;
        u1 = static_cast<uint8_t>(u1 << 2);
        u2 = static_cast<uint8_t>(u2 << 2);
      }
      return;
    }
    case 14: {  // Q6_K: (d·scale)·(q − 32) per 16
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = h16(b + 208);
      for (int g = 0; g < 16; ++g) o->a[g] = d * static_cast<float>(sc[g]);
      int* y = o->code;
      for (int n = 0; n < kQK; n += 128) {
        for (int l = 0; l < 32; ++l) {
          y[l] = static_cast<int>((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
          y[l + 32] = static_cast<int>((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
          y[l + 64] = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          y[l + 96] = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        }
        y += 128;
        ql += 64;
        qh += 32;
      }
      return;
    }
    case 15: {  // Q8_K: d·q, one f32 d per 256
      float d;
      std::memcpy(&d, b, 4);
      for (int g = 0; g < 8; ++g) o->a[g] = d;
      for (int j = 0; j < kQK; ++j) o->code[j] = static_cast<int8_t>(b[4 + j]);
      return;
    }
    default:
      return;
  }
}

QuantLayout layout_for(const Format& f, int64_t k) {
  QuantLayout q;
  q.ggml_type = f.type;
  q.group = f.group;
  q.bits = f.bits;
  q.offset = f.offset;
  q.has_min = f.has_min;
  q.f16_scales = f.f16_scales;
  const int64_t one = (f.f16_scales ? 2 : 4) * kPanel;
  q.hdr_bytes = one * (f.has_min ? 2 : 1);
  q.hdr_bytes = (q.hdr_bytes + 63) / 64 * 64;
  q.quad_bytes = f.bits == 4 ? 64 : 128;
  q.group_bytes = q.hdr_bytes + (f.group / 4) * q.quad_bytes;
  q.panel_bytes = (k / f.group) * q.group_bytes;
  return q;
}

}  // namespace

bool ggml_quant_block(uint32_t ggml_type, int64_t* block_elems, int64_t* block_bytes) {
  const Format* f = find_format(ggml_type);
  if (!f) return false;
  *block_elems = f->block_elems;
  *block_bytes = f->block_bytes;
  return true;
}

PackedWeight pack_ggml(uint32_t ggml_type, const uint8_t* const* rows, int64_t n, int64_t k) {
  PackedWeight out;
  const Format* f = find_format(ggml_type);
  if (!f || k % f->block_elems != 0 || n < 0) return out;
  out.n_ = n;
  out.k_ = k;
  out.type_ = WeightType::kQuant;
  out.s_ = std::make_unique<PackedWeight::Storage>();
  PackedWeight::Storage& s = *out.s_;
  s.q = layout_for(*f, k);
  const QuantLayout& q = s.q;
  s.panels = (n + kPanel - 1) / kPanel;
  s.bytes = static_cast<size_t>(s.panels) * static_cast<size_t>(q.panel_bytes);
  s.data = ::operator new(std::max<size_t>(s.bytes, 64), std::align_val_t(64));
  std::memset(s.data, 0, std::max<size_t>(s.bytes, 64));
  uint8_t* base = static_cast<uint8_t*>(s.data);
  const int64_t blocks = k / f->block_elems;
  const int groups_per_block = static_cast<int>(f->block_elems / f->group);
  Decomposed d;
  for (int64_t col = 0; col < n; ++col) {
    const int64_t p = col / kPanel;
    const int j = static_cast<int>(col % kPanel);
    uint8_t* panel = base + p * q.panel_bytes;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      decompose(ggml_type, rows[col] + blk * f->block_bytes, &d);
      for (int gi = 0; gi < groups_per_block; ++gi) {
        const int64_t g = blk * groups_per_block + gi;
        uint8_t* grp = panel + g * q.group_bytes;
        if (q.f16_scales) {
          reinterpret_cast<uint16_t*>(grp)[j] = d.a16[gi];
          if (q.has_min) reinterpret_cast<uint16_t*>(grp)[kPanel + j] = d.b16[gi];
        } else {
          reinterpret_cast<float*>(grp)[j] = d.a[gi];
          if (q.has_min) reinterpret_cast<float*>(grp)[kPanel + j] = d.b[gi];
        }
        uint8_t* codes = grp + q.hdr_bytes;
        for (int e = 0; e < f->group; ++e) {
          const int c = d.code[gi * f->group + e];
          uint8_t* quad = codes + (e / 4) * q.quad_bytes;
          const int i = e % 4;
          if (q.bits == 4) {
            uint8_t& byte = quad[(j % 16) * 4 + i];
            byte = static_cast<uint8_t>(byte | ((c & 0xf) << (j < 16 ? 0 : 4)));
          } else {
            quad[j * 4 + i] = static_cast<uint8_t>(static_cast<int8_t>(c));
          }
        }
      }
    }
  }
  return out;
}

float quant_value(const PackedWeight::Storage& s, int64_t /*k_total*/, int64_t n, int64_t k) {
  const QuantLayout& q = s.q;
  const int64_t p = n / kPanel, g = k / q.group, e = k % q.group;
  const int j = static_cast<int>(n % kPanel), i = static_cast<int>(e % 4);
  const uint8_t* grp = static_cast<const uint8_t*>(s.data) + p * q.panel_bytes + g * q.group_bytes;
  float a, b = 0.0f;
  if (q.f16_scales) {
    a = numerics::f16_to_f32(reinterpret_cast<const uint16_t*>(grp)[j]);
    if (q.has_min) b = numerics::f16_to_f32(reinterpret_cast<const uint16_t*>(grp)[kPanel + j]);
  } else {
    a = reinterpret_cast<const float*>(grp)[j];
    if (q.has_min) b = reinterpret_cast<const float*>(grp)[kPanel + j];
  }
  const uint8_t* quad = grp + q.hdr_bytes + (e / 4) * q.quad_bytes;
  int c;
  if (q.bits == 4) {
    c = ((quad[(j % 16) * 4 + i] >> (j < 16 ? 0 : 4)) & 0xf) - q.offset;
  } else {
    c = static_cast<int8_t>(quad[j * 4 + i]);
  }
  const float v = a * static_cast<float>(c);
  return q.has_min ? v + b : v;
}

void embedding_packed(const PackedWeight& table, const int32_t* ids, int64_t rows, float* out,
                      int64_t ldo) {
  const int64_t vocab = table.n(), dim = table.k();
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * ldo;
    const int64_t id = ids[r];
    if (id < 0 || id >= vocab) {
      for (int64_t d = 0; d < dim; ++d) o[d] = 0.0f;
      continue;
    }
    for (int64_t d = 0; d < dim; ++d) o[d] = table.at(id, d);
  }
}

}  // namespace llmrr::kernels
