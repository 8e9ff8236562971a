// "mixsum64" (format/include/llmrr/format/fingerprint.h): the definition pinned by values
// computed from it step by step here, and the properties the diff relies on: any one-bit
// change of any element changes the hash, so does moving a value to another position, and
// the hash is the same however the per-element terms are summed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "llmrr/format/fingerprint.h"

namespace llmrr::trace {
namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// The per-element term of lane j, written out as the header states it.
uint32_t term(uint32_t u, uint64_t i, int j) {
  const uint64_t P[2] = {0x61C88647u, 0x2545F491u}, S[2] = {0x1B873593u, 0x27D4EB2Fu};
  uint64_t a = (u ^ ((i * P[j] + S[j]) & 0xFFFFFFFFu)) & 0xFFFFFFFFu;
  a ^= a >> 16;
  a = (a * 0x7FEB352Du) & 0xFFFFFFFFu;
  a ^= a >> 15;
  a = (a * 0x68E31DA5u) & 0xFFFFFFFFu;
  a ^= a >> 16;
  return static_cast<uint32_t>(a);
}

uint64_t splitmix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<float> random_row(int n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

TEST(Mixsum64, MatchesTheDefinitionSummedInAnyOrder) {
  std::vector<float> row = random_row(1000, 1);
  row[3] = -0.0f;
  row[4] = std::numeric_limits<float>::quiet_NaN();
  row[5] = std::numeric_limits<float>::infinity();
  row[6] = std::numeric_limits<float>::denorm_min();
  // Sum the terms backwards and in two interleaved halves: a device's order.
  uint64_t t[2] = {0, 0};
  for (int j = 0; j < 2; ++j) {
    uint64_t even = 0, odd = 0;
    for (int64_t i = static_cast<int64_t>(row.size()) - 1; i >= 0; --i) {
      (i % 2 ? odd : even) += term(bits(row[static_cast<size_t>(i)]), static_cast<uint64_t>(i), j);
    }
    t[j] = odd + even;
  }
  const uint64_t want = splitmix(t[0] ^ splitmix(t[1] ^ row.size()));
  EXPECT_EQ(mixsum64(row.data(), static_cast<int64_t>(row.size())), want);
  // Pinned: a change to the definition breaks every trace recorded with it.
  const float pinned[4] = {1.0f, -2.5f, 0.0f, 3.0e-5f};
  EXPECT_EQ(mixsum64(pinned, 4), splitmix([&] {
              uint64_t a = 0, b = 0;
              for (int i = 0; i < 4; ++i) {
                a += term(bits(pinned[i]), static_cast<uint64_t>(i), 0);
                b += term(bits(pinned[i]), static_cast<uint64_t>(i), 1);
              }
              return a ^ splitmix(b ^ 4);
            }()));
  EXPECT_EQ(mixsum64(pinned, 4), 0x58bf9a47e6948ba8ull);  // also pinned in tests/python
}

// The definition, one element at a time (what every vector path must reproduce).
uint64_t reference_mixsum64(const float* row, int64_t n) {
  uint64_t t[2] = {0, 0};
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 2; ++j) t[j] += term(bits(row[i]), static_cast<uint64_t>(i), j);
  }
  return splitmix(t[0] ^ splitmix(t[1] ^ static_cast<uint64_t>(n)));
}

// Every length around the vector width and its tails, rows that start at any float offset
// (unaligned loads), and a long row: the vectorized hash equals the definition.
TEST(Mixsum64, EveryLengthAndOffsetMatchesTheDefinition) {
  std::vector<float> buf = random_row(4096 + 64, 3);
  buf[17] = std::numeric_limits<float>::quiet_NaN();
  buf[18] = -0.0f;
  for (int64_t off = 0; off < 8; ++off) {
    for (int64_t n = 0; n <= 70; ++n) {
      EXPECT_EQ(mixsum64(buf.data() + off, n), reference_mixsum64(buf.data() + off, n))
          << "offset " << off << " n " << n;
    }
  }
  for (int64_t n : {576, 1536, 4095, 4096}) {
    EXPECT_EQ(mixsum64(buf.data() + 1, n), reference_mixsum64(buf.data() + 1, n)) << "n " << n;
  }
}

// The l2 and max |x| of the header's definition, one element at a time: lane j sums the
// squares of the elements i = j mod 8 in increasing i, in double.
void reference_stats(const float* row, int64_t n, float* l2, float* max_abs) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float mx = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const double d = row[i];
    lane[i % 8] = lane[i % 8] + d * d;
    mx = std::fabs(row[i]) > mx ? std::fabs(row[i]) : mx;
    nan |= std::isnan(row[i]);
  }
  const double sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                     ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  *l2 = nan ? std::nanf("") : static_cast<float>(std::sqrt(sum));
  *max_abs = nan ? std::nanf("") : mx;
}

// fingerprint_row_mixsum64 makes the hash and the stats in one pass: each equals its
// definition, and fingerprint_row's stats, bit for bit, at every length, offset and tail,
// with and without a NaN or an infinity in the row.
TEST(Mixsum64, OnePassFingerprintMatchesTheDefinitions) {
  std::vector<float> buf = random_row(4096 + 64, 5);
  std::vector<float> odd = buf;
  odd[21] = std::numeric_limits<float>::infinity();
  odd[40] = -0.0f;
  std::vector<float> nan = buf;
  nan[33] = std::numeric_limits<float>::quiet_NaN();
  auto same_bits = [](float a, float b) { return bits(a) == bits(b) || (a != a && b != b); };
  for (const std::vector<float>* v : {&buf, &odd, &nan}) {
    for (int64_t off = 0; off < 8; ++off) {
      for (int64_t n = 0; n <= 70; ++n) {
        const float* row = v->data() + off;
        const Fingerprint f = fingerprint_row_mixsum64(row, n);
        const Fingerprint g = fingerprint_row(row, n);
        float l2 = 0, mx = 0;
        reference_stats(row, n, &l2, &mx);
        EXPECT_EQ(f.hash, reference_mixsum64(row, n)) << "offset " << off << " n " << n;
        EXPECT_TRUE(same_bits(f.l2, l2) && same_bits(f.l2, g.l2))
            << "offset " << off << " n " << n << ": " << f.l2 << " " << l2 << " " << g.l2;
        EXPECT_TRUE(same_bits(f.max_abs, mx) && same_bits(f.max_abs, g.max_abs))
            << "offset " << off << " n " << n;
      }
    }
  }
  for (int64_t n : {576, 1536, 4095, 4096}) {
    const Fingerprint f = fingerprint_row_mixsum64(buf.data() + 3, n);
    float l2 = 0, mx = 0;
    reference_stats(buf.data() + 3, n, &l2, &mx);
    EXPECT_EQ(f.hash, reference_mixsum64(buf.data() + 3, n)) << "n " << n;
    EXPECT_EQ(bits(f.l2), bits(l2)) << "n " << n;
    EXPECT_EQ(bits(f.max_abs), bits(mx)) << "n " << n;
  }
}

TEST(Mixsum64, EveryBitOfEveryElementAndEveryPositionCounts) {
  std::vector<float> row = random_row(64, 2);
  const uint64_t base = mixsum64(row.data(), 64);
  std::set<uint64_t> seen{base};
  for (int i = 0; i < 64; ++i) {
    for (int b = 0; b < 32; ++b) {
      std::vector<float> r = row;
      uint32_t u = bits(r[static_cast<size_t>(i)]) ^ (1u << b);
      std::memcpy(&r[static_cast<size_t>(i)], &u, sizeof u);
      const uint64_t h = mixsum64(r.data(), 64);
      EXPECT_NE(h, base) << "element " << i << " bit " << b;
      seen.insert(h);
    }
  }
  EXPECT_EQ(seen.size(), 64u * 32u + 1u);  // no two flips collide either
  for (int i = 0; i + 1 < 64; ++i) {
    std::vector<float> r = row;
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(i) + 1]);
    EXPECT_NE(mixsum64(r.data(), 64), base) << "swap " << i;
  }
  // Signed zeros differ, like the bits; a row and its prefix differ (n is mixed in).
  const float pz = 0.0f, nz = -0.0f;
  EXPECT_NE(mixsum64(&pz, 1), mixsum64(&nz, 1));
  const float zeros[2] = {0.0f, 0.0f};
  EXPECT_NE(mixsum64(zeros, 1), mixsum64(zeros, 2));
  EXPECT_NE(mixsum64(zeros, 0), mixsum64(zeros, 1));
}

}  // namespace
}  // namespace llmrr::trace
