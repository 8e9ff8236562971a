// splitmix64 as a stream: a small, well-mixed, portable generator — the same draws on every
// host and compiler — for the seeded choices that must reproduce from a seed alone (the
// synthetic load of --load, the fuzz campaign's compositions).
#pragma once

#include <cstdint>

namespace llmrr {

struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    if (hi <= lo) return lo;
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
};

}  // namespace llmrr
