// XXH3-64 (seed 0, default secret) for host and device, bit for bit the function that
// format's hash_bytes computes through libxxhash (XXH3_64bits). The long-input path is
// split by accumulator lane: lane i of XXH3's eight 64-bit accumulators depends only on the
// input (words i and i ^ 1 of every stripe) and the secret, so eight threads run the eight
// lanes over the whole row and one thread merges them (xxh3_long_lane / xxh3_long_merge).
// Inputs of up to 240 bytes take the short paths (xxh3_short) in one thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "llmrr/kernels/hd.h"

// XXH3_kSecret (xxhash.h), the 192-byte default secret.
#define LLMRR_XXH3_SECRET_BYTES                                                                  \
  0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad,      \
      0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3,  \
      0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc,  \
      0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6,  \
      0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65,  \
      0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19,  \
      0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9,  \
      0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31,  \
      0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb,  \
      0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0,  \
      0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d,  \
      0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f,  \
      0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e

namespace llmrr::xxh3 {

inline constexpr uint64_t kP32_1 = 0x9E3779B1U, kP32_2 = 0x85EBCA77U, kP32_3 = 0xC2B2AE3DU;
inline constexpr uint64_t kP64_1 = 0x9E3779B185EBCA87ULL, kP64_2 = 0xC2B2AE3D27D4EB4FULL,
                          kP64_3 = 0x165667B19E3779F9ULL, kP64_4 = 0x85EBCA77C2B2AE63ULL,
                          kP64_5 = 0x27D4EB2F165667C5ULL;
inline constexpr size_t kSecretSize = 192;
inline constexpr size_t kStripe = 64;
inline constexpr size_t kStripesPerBlock = (kSecretSize - kStripe) / 8;  // 16
inline constexpr size_t kBlockLen = kStripe * kStripesPerBlock;          // 1024

LLMRR_HD inline uint64_t read64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
LLMRR_HD inline uint32_t read32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
// A little-endian 64-bit word of 4-byte aligned input (rows of floats).
LLMRR_HD inline uint64_t read64_a4(const uint8_t* p) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
  return static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
}
LLMRR_HD inline uint32_t swap32(uint32_t x) {
  return ((x << 24) & 0xff000000u) | ((x << 8) & 0x00ff0000u) | ((x >> 8) & 0x0000ff00u) |
         ((x >> 24) & 0x000000ffu);
}
LLMRR_HD inline uint64_t swap64(uint64_t x) {
  return (static_cast<uint64_t>(swap32(static_cast<uint32_t>(x))) << 32) |
         swap32(static_cast<uint32_t>(x >> 32));
}
LLMRR_HD inline uint64_t rotl64(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
LLMRR_HD inline uint64_t mul128_fold64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ __umul64hi(a, b);
#else
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}
LLMRR_HD inline uint64_t xxh64_avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP64_2;
  h ^= h >> 29;
  h *= kP64_3;
  h ^= h >> 32;
  return h;
}
LLMRR_HD inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  h ^= h >> 32;
  return h;
}
LLMRR_HD inline uint64_t rrmxmx(uint64_t h, uint64_t len) {
  h ^= rotl64(h, 49) ^ rotl64(h, 24);
  h *= 0x9FB21C651E98DF25ULL;
  h ^= (h >> 35) + len;
  h *= 0x9FB21C651E98DF25ULL;
  return h ^ (h >> 28);
}
LLMRR_HD inline uint64_t mix16(const uint8_t* in, const uint8_t* sec) {
  return mul128_fold64(read64(in) ^ read64(sec), read64(in + 8) ^ read64(sec + 8));
}

// XXH3_64bits for len ≤ 240 (seed 0).
LLMRR_HD inline uint64_t xxh3_short(const uint8_t* in, size_t len, const uint8_t* sec) {
  if (len <= 16) {
    if (len > 8) {
      const uint64_t lo = read64(in) ^ (read64(sec + 24) ^ read64(sec + 32));
      const uint64_t hi = read64(in + len - 8) ^ (read64(sec + 40) ^ read64(sec + 48));
      return avalanche(len + swap64(lo) + hi + mul128_fold64(lo, hi));
    }
    if (len >= 4) {
      const uint32_t in1 = read32(in), in2 = read32(in + len - 4);
      const uint64_t bitflip = read64(sec + 8) ^ read64(sec + 16);
      const uint64_t in64 = in2 + (static_cast<uint64_t>(in1) << 32);
      return rrmxmx(in64 ^ bitflip, len);
    }
    if (len > 0) {
      const uint32_t combined = (static_cast<uint32_t>(in[0]) << 16) |
                                (static_cast<uint32_t>(in[len >> 1]) << 24) |
                                static_cast<uint32_t>(in[len - 1]) |
                                (static_cast<uint32_t>(len) << 8);
      const uint64_t bitflip = static_cast<uint64_t>(read32(sec) ^ read32(sec + 4));
      return xxh64_avalanche(static_cast<uint64_t>(combined) ^ bitflip);
    }
    return xxh64_avalanche(read64(sec + 56) ^ read64(sec + 64));
  }
  uint64_t acc = len * kP64_1;
  if (len <= 128) {
    if (len > 32) {
      if (len > 64) {
        if (len > 96) {
          acc += mix16(in + 48, sec + 96);
          acc += mix16(in + len - 64, sec + 112);
        }
        acc += mix16(in + 32, sec + 64);
        acc += mix16(in + len - 48, sec + 80);
      }
      acc += mix16(in + 16, sec + 32);
      acc += mix16(in + len - 32, sec + 48);
    }
    acc += mix16(in, sec);
    acc += mix16(in + len - 16, sec + 16);
    return avalanche(acc);
  }
  const int rounds = static_cast<int>(len) / 16;
  for (int i = 0; i < 8; ++i) acc += mix16(in + 16 * i, sec + 16 * i);
  acc = avalanche(acc);
  for (int i = 8; i < rounds; ++i) acc += mix16(in + 16 * i, sec + 16 * (i - 8) + 3);
  acc += mix16(in + len - 16, sec + 136 - 17);
  return avalanche(acc);
}

LLMRR_HD inline uint64_t init_acc(int lane) {
  switch (lane) {
    case 0: return kP32_3;
    case 1: return kP64_1;
    case 2: return kP64_2;
    case 3: return kP64_3;
    case 4: return kP64_4;
    case 5: return kP32_2;
    case 6: return kP64_5;
    default: return kP32_1;
  }
}

// Accumulator `lane` (0..7) of XXH3's long path over len > 240 bytes of 4-byte aligned
// input whose length is a multiple of 4.
LLMRR_HD inline uint64_t xxh3_long_lane(const uint8_t* in, size_t len, const uint8_t* sec,
                                        int lane) {
  uint64_t key[kStripesPerBlock];
  for (size_t s = 0; s < kStripesPerBlock; ++s) key[s] = read64(sec + 8 * s + 8 * lane);
  const uint64_t scramble_key = read64(sec + kSecretSize - kStripe + 8 * lane);
  const uint64_t last_key = read64(sec + kSecretSize - kStripe - 7 + 8 * lane);
  uint64_t acc = init_acc(lane);
  auto stripe = [&](const uint8_t* p, uint64_t k) {
    const uint64_t data = read64_a4(p + 8 * lane);
    const uint64_t dk = data ^ k;
    acc += read64_a4(p + 8 * (lane ^ 1));
    acc += (dk & 0xFFFFFFFFull) * (dk >> 32);
  };
  const size_t nb_blocks = (len - 1) / kBlockLen;
  for (size_t n = 0; n < nb_blocks; ++n) {
    for (size_t s = 0; s < kStripesPerBlock; ++s) stripe(in + n * kBlockLen + s * kStripe, key[s]);
    acc ^= acc >> 47;
    acc ^= scramble_key;
    acc *= kP32_1;
  }
  const size_t nb_stripes = ((len - 1) - kBlockLen * nb_blocks) / kStripe;
  for (size_t s = 0; s < nb_stripes; ++s) stripe(in + nb_blocks * kBlockLen + s * kStripe, key[s]);
  stripe(in + len - kStripe, last_key);
  return acc;
}

LLMRR_HD inline uint64_t xxh3_long_merge(const uint64_t acc[8], size_t len, const uint8_t* sec) {
  uint64_t r = len * kP64_1;
  for (int i = 0; i < 4; ++i) {
    r += mul128_fold64(acc[2 * i] ^ read64(sec + 11 + 16 * i),
                       acc[2 * i + 1] ^ read64(sec + 11 + 16 * i + 8));
  }
  return avalanche(r);
}

}  // namespace llmrr::xxh3
