#include "llmrr/format/fingerprint.h"

#include <cmath>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <xxhash.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "codec.h"

namespace llmrr::trace {

uint64_t hash_bytes(const void* data, size_t bytes) {
  return detail::xxh3(data, bytes);
}

Result<std::string> hash_files(const std::vector<std::string>& paths) {
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) return make_error(ErrorCode::kResourceLimit, "hash_files: out of memory");
  XXH3_64bits_reset(st);
  std::vector<char> buf(size_t{1} << 20);
  for (const std::string& p : paths) {
    std::FILE* f = std::fopen(p.c_str(), "rb");
    if (f == nullptr) {
      const int e = errno;
      XXH3_freeState(st);
      return make_error(ErrorCode::kIo, p + ": cannot read it to hash the weights: " +
                                            std::strerror(e));
    }
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) XXH3_64bits_update(st, buf.data(), n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) {
      XXH3_freeState(st);
      return make_error(ErrorCode::kIo, p + ": read error while hashing the weights");
    }
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  char out[32];
  std::snprintf(out, sizeof out, "xxh3-64:%016" PRIx64, h);
  return std::string(out);
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

namespace {

constexpr uint32_t kMixP[2] = {0x61C88647u, 0x2545F491u};
constexpr uint32_t kMixS[2] = {0x1B873593u, 0x27D4EB2Fu};

// What a scan of a row keeps between its vector loop and its scalar tail: mixsum64's two
// lane sums, and summarize's eight double lanes of squares, eight running max |x| and
// whether a NaN was seen (lane j takes the elements i = j mod 8).
struct Scan {
  uint64_t t[2] = {0, 0};
  double sq[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float mx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  bool nan = false;
};

#if defined(__AVX2__)
// The elements [0, n - n % 8) of a row, eight at a time: mixsum64's terms (Hash) and
// summarize's lanes (Stats), in one pass when both are asked for. One pass is the point:
// the stats' double adds are one dependent chain per four lanes (their latency bounds a
// loop of stats alone), and the hash's integer multiplies fill that wait. Every lane is
// the scalar definition's exact result (integer sums in any order; each double lane a
// sequential sum, mul then add as the scalar loop rounds, no FMA; max_ps(a, m) is
// a > m ? a : m, the scalar rule, NaN included: it keeps m). Returns where it stopped.
template <bool Hash, bool Stats>
int64_t scan_avx2(const float* row, int64_t n, Scan* st) {
  int64_t i = 0;
  if (n < 8) return 0;
  const __m256i m1 = _mm256_set1_epi32(0x7FEB352D), m2 = _mm256_set1_epi32(0x68E31DA5);
  const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFFll);
  // i * P_j + S_j for the eight positions, advanced by 8 * P_j a step (mod 2^32).
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i pos[2], adv[2];
  __m256i acc[2][2] = {{_mm256_setzero_si256(), _mm256_setzero_si256()},
                       {_mm256_setzero_si256(), _mm256_setzero_si256()}};
  for (int j = 0; j < 2; ++j) {
    pos[j] = _mm256_add_epi32(_mm256_mullo_epi32(idx, _mm256_set1_epi32(static_cast<int>(kMixP[j]))),
                              _mm256_set1_epi32(static_cast<int>(kMixS[j])));
    adv[j] = _mm256_set1_epi32(static_cast<int>(8u * kMixP[j]));
  }
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  __m256 vmx = _mm256_setzero_ps(), vnan = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(row + i);
    if constexpr (Hash) {
      const __m256i u = _mm256_castps_si256(x);
      for (int j = 0; j < 2; ++j) {
        __m256i a = _mm256_xor_si256(u, pos[j]);
        a = _mm256_xor_si256(a, _mm256_srli_epi32(a, 16));
        a = _mm256_mullo_epi32(a, m1);
        a = _mm256_xor_si256(a, _mm256_srli_epi32(a, 15));
        a = _mm256_mullo_epi32(a, m2);
        a = _mm256_xor_si256(a, _mm256_srli_epi32(a, 16));
        // The even and odd 32-bit terms as 64-bit lanes (no cross-lane shuffle).
        acc[j][0] = _mm256_add_epi64(acc[j][0], _mm256_and_si256(a, lo32));
        acc[j][1] = _mm256_add_epi64(acc[j][1], _mm256_srli_epi64(a, 32));
        pos[j] = _mm256_add_epi32(pos[j], adv[j]);
      }
    }
    if constexpr (Stats) {
      const __m256d dl = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
      const __m256d dh = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
      lo = _mm256_add_pd(lo, _mm256_mul_pd(dl, dl));
      hi = _mm256_add_pd(hi, _mm256_mul_pd(dh, dh));
      vmx = _mm256_max_ps(_mm256_and_ps(x, abs_mask), vmx);
      vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
  }
  if constexpr (Hash) {
    for (int j = 0; j < 2; ++j) {
      alignas(32) uint64_t lane[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lane), _mm256_add_epi64(acc[j][0], acc[j][1]));
      st->t[j] = lane[0] + lane[1] + lane[2] + lane[3];
    }
  }
  if constexpr (Stats) {
    _mm256_storeu_pd(st->sq, lo);
    _mm256_storeu_pd(st->sq + 4, hi);
    _mm256_storeu_ps(st->mx, vmx);
    st->nan = _mm256_movemask_ps(vnan) != 0;
  }
  return i;
}
#endif

// The scalar definitions, from element i on (i a multiple of 8, so lane j is i + j's).
void hash_tail(const float* row, int64_t i, int64_t n, Scan* st) {
  for (; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, row + i, sizeof u);
    for (int j = 0; j < 2; ++j) {
      uint32_t a = u ^ (static_cast<uint32_t>(i) * kMixP[j] + kMixS[j]);
      a ^= a >> 16;
      a *= 0x7FEB352Du;
      a ^= a >> 15;
      a *= 0x68E31DA5u;
      a ^= a >> 16;
      st->t[j] += a;
    }
  }
}

uint64_t hash_finish(const Scan& st, int64_t n) {
  return splitmix64(st.t[0] ^ splitmix64(st.t[1] ^ static_cast<uint64_t>(n)));
}

void stats_tail(const float* row, int64_t i, int64_t n, Scan* st) {
  for (int j = 0; i < n; ++i, j = (j + 1) & 7) {
    const float x = row[i];
    const double d = static_cast<double>(x);
    st->sq[j] = st->sq[j] + d * d;
    const float a = std::fabs(x);
    st->mx[j] = a > st->mx[j] ? a : st->mx[j];
    st->nan |= (x != x);
  }
}

// l2 and max_abs from the lanes (the header's fixed order).
void stats_finish(const Scan& st, Fingerprint* f) {
  const double* l = st.sq;
  const double sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  float m = st.mx[0];
  for (int j = 1; j < 8; ++j) m = st.mx[j] > m ? st.mx[j] : m;
  if (st.nan) {
    f->l2 = std::nanf("");
    f->max_abs = std::nanf("");
  } else {
    f->l2 = static_cast<float>(std::sqrt(sum));
    f->max_abs = m;
  }
}

template <bool Hash, bool Stats>
int64_t scan(const float* row, int64_t n, Scan* st) {
#if defined(__AVX2__)
  return scan_avx2<Hash, Stats>(row, n, st);
#else
  (void)row, (void)n, (void)st;
  return 0;
#endif
}

// l2 and max_abs of a row (the hash is the caller's).
void summarize(const float* row, int64_t n, Fingerprint* f) {
  if (n <= 0) return;
  Scan st;
  stats_tail(row, scan<false, true>(row, n, &st), n, &st);
  stats_finish(st, f);
}

}  // namespace

uint64_t mixsum64(const float* row, int64_t n) {
  Scan st;
  hash_tail(row, scan<true, false>(row, n, &st), n, &st);
  return hash_finish(st, n);
}

Fingerprint fingerprint_row(const float* row, int64_t n) {
  Fingerprint f;
  f.hash = hash_bytes(row, n > 0 ? static_cast<size_t>(n) * sizeof(float) : 0);
  summarize(row, n, &f);
  return f;
}

Fingerprint fingerprint_row_mixsum64(const float* row, int64_t n) {
  Fingerprint f;
  if (n <= 0) {
    f.hash = mixsum64(row, 0);
    return f;
  }
  Scan st;
  const int64_t i = scan<true, true>(row, n, &st);
  hash_tail(row, i, n, &st);
  stats_tail(row, i, n, &st);
  f.hash = hash_finish(st, n);
  stats_finish(st, &f);
  return f;
}

}  // namespace llmrr::trace
