#include "llmrr/format/fingerprint.h"

#include <cmath>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "codec.h"

namespace llmrr::trace {

uint64_t hash_bytes(const void* data, size_t bytes) {
  return detail::xxh3(data, bytes);
}

Fingerprint fingerprint_bytes(const void* data, size_t bytes) {
  Fingerprint f;
  f.hash = hash_bytes(data, bytes);
  return f;
}

namespace {

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t mixsum64(const float* row, int64_t n) {
  static constexpr uint32_t P[2] = {0x61C88647u, 0x2545F491u};
  static constexpr uint32_t S[2] = {0x1B873593u, 0x27D4EB2Fu};
  uint64_t t[2] = {0, 0};
  int64_t i = 0;
#if defined(__AVX2__)
  // Eight elements at a time, the same terms in 32-bit lanes (mullo is the mod-2^32
  // product), each lane's terms widened and summed into 64-bit accumulators. Integer sums
  // do not depend on their order, so this is the scalar loop's result exactly.
  if (n >= 8) {
    const __m256i step = _mm256_set1_epi32(8);
    const __m256i m1 = _mm256_set1_epi32(0x7FEB352D), m2 = _mm256_set1_epi32(0x68E31DA5);
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i acc[2][2] = {{_mm256_setzero_si256(), _mm256_setzero_si256()},
                         {_mm256_setzero_si256(), _mm256_setzero_si256()}};
    __m256i p[2], s[2];
    for (int j = 0; j < 2; ++j) {
      p[j] = _mm256_set1_epi32(static_cast<int>(P[j]));
      s[j] = _mm256_set1_epi32(static_cast<int>(S[j]));
    }
    for (; i + 8 <= n; i += 8) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i));
      for (int j = 0; j < 2; ++j) {
        __m256i a = _mm256_xor_si256(u, _mm256_add_epi32(_mm256_mullo_epi32(idx, p[j]), s[j]));
        a = _mm256_xor_si256(a, _mm256_srli_epi32(a, 16));
        a = _mm256_mullo_epi32(a, m1);
        a = _mm256_xor_si256(a, _mm256_srli_epi32(a, 15));
        a = _mm256_mullo_epi32(a, m2);
        a = _mm256_xor_si256(a, _mm256_srli_epi32(a, 16));
        acc[j][0] = _mm256_add_epi64(acc[j][0], _mm256_cvtepu32_epi64(_mm256_castsi256_si128(a)));
        acc[j][1] =
            _mm256_add_epi64(acc[j][1], _mm256_cvtepu32_epi64(_mm256_extracti128_si256(a, 1)));
      }
      idx = _mm256_add_epi32(idx, step);  // i mod 2^32, as static_cast<uint32_t>(i)
    }
    for (int j = 0; j < 2; ++j) {
      alignas(32) uint64_t lane[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lane),
                         _mm256_add_epi64(acc[j][0], acc[j][1]));
      t[j] = lane[0] + lane[1] + lane[2] + lane[3];
    }
  }
#endif
  for (; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, row + i, sizeof u);
    for (int j = 0; j < 2; ++j) {
      uint32_t a = u ^ (static_cast<uint32_t>(i) * P[j] + S[j]);
      a ^= a >> 16;
      a *= 0x7FEB352Du;
      a ^= a >> 15;
      a *= 0x68E31DA5u;
      a ^= a >> 16;
      t[j] += a;
    }
  }
  return splitmix64(t[0] ^ splitmix64(t[1] ^ static_cast<uint64_t>(n)));
}

namespace {

// l2 and max_abs of a row (the hash is the caller's).
void summarize(const float* row, int64_t n, Fingerprint* out);

}  // namespace

Fingerprint fingerprint_row(const float* row, int64_t n) {
  Fingerprint f;
  f.hash = hash_bytes(row, n > 0 ? static_cast<size_t>(n) * sizeof(float) : 0);
  summarize(row, n, &f);
  return f;
}

Fingerprint fingerprint_row_mixsum64(const float* row, int64_t n) {
  Fingerprint f;
  f.hash = mixsum64(row, n > 0 ? n : 0);
  summarize(row, n, &f);
  return f;
}

namespace {

void summarize(const float* row, int64_t n, Fingerprint* out) {
  Fingerprint& f = *out;
  if (n <= 0) return;
  // Fixed lane order (see the header): the result never depends on how the code is
  // vectorized, because every lane is its own sequential sum.
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float mx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  bool nan = false;
  int64_t i = 0;
#if defined(__AVX2__)
  {
    // Lanes 0-3 and 4-7 as two vectors of doubles; mul then add, as the scalar loop rounds
    // (no FMA). max_ps(a, m) is a > m ? a : m, the scalar rule, NaN included (it keeps m).
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    __m256 vmx = _mm256_setzero_ps(), vnan = _mm256_setzero_ps();
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(row + i);
      const __m256d dl = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
      const __m256d dh = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
      lo = _mm256_add_pd(lo, _mm256_mul_pd(dl, dl));
      hi = _mm256_add_pd(hi, _mm256_mul_pd(dh, dh));
      vmx = _mm256_max_ps(_mm256_and_ps(x, abs_mask), vmx);
      vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
    _mm256_storeu_pd(lane, lo);
    _mm256_storeu_pd(lane + 4, hi);
    _mm256_storeu_ps(mx, vmx);
    nan = _mm256_movemask_ps(vnan) != 0;
  }
#endif
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float x = row[i + j];
      const double d = static_cast<double>(x);
      lane[j] = lane[j] + d * d;
      const float a = std::fabs(x);
      mx[j] = a > mx[j] ? a : mx[j];
      nan |= (x != x);
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const float x = row[i];
    const double d = static_cast<double>(x);
    lane[j] = lane[j] + d * d;
    const float a = std::fabs(x);
    mx[j] = a > mx[j] ? a : mx[j];
    nan |= (x != x);
  }
  const double sum =
      ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  float m = mx[0];
  for (int j = 1; j < 8; ++j) m = mx[j] > m ? mx[j] : m;
  if (nan) {
    f.l2 = std::nanf("");
    f.max_abs = std::nanf("");
  } else {
    f.l2 = static_cast<float>(std::sqrt(sum));
    f.max_abs = m;
  }
}

}  // namespace

}  // namespace llmrr::trace
