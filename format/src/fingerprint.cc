#include "llmrr/format/fingerprint.h"

#include <cmath>

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

Fingerprint fingerprint_row(const float* row, int64_t n) {
  Fingerprint f;
  if (n <= 0) {
    f.hash = hash_bytes(row, 0);
    return f;
  }
  f.hash = hash_bytes(row, static_cast<size_t>(n) * sizeof(float));
  // Fixed lane order (see the header): the result never depends on how the compiler
  // vectorizes, because every lane is its own sequential sum.
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float mx[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  bool nan = false;
  int64_t i = 0;
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
  return f;
}

}  // namespace llmrr::trace
