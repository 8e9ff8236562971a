// Row fingerprints: the one function the recorder and the replayer both use, so that a
// fingerprint recorded on one machine compares bit for bit with one computed on another.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmrr::trace {

// xxh3-64 of a row's raw bytes (equal hash ⇔ bit-identical row, up to hash collisions),
// plus a float summary so a diff can say how far apart two rows are without the rows.
// Layout matches the schema's Fingerprint struct (16 bytes).
struct Fingerprint {
  uint64_t hash = 0;
  float l2 = 0.0f;       // sqrt(Σ x²)
  float max_abs = 0.0f;  // max |x|
  bool operator==(const Fingerprint&) const = default;
};

// Fingerprint of an fp32 row of n elements. Deterministic on every x86-64 machine: the
// sum of squares runs in double over 8 interleaved lanes (lane j takes i ≡ j mod 8, in
// increasing i) that are then added ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); l2 is the float
// of its square root. A NaN anywhere makes l2 and max_abs NaN; ±inf gives +inf.
Fingerprint fingerprint_row(const float* row, int64_t n);

// Fingerprint of a row of other element types: hash of the raw bytes, l2 = max_abs = 0.
Fingerprint fingerprint_bytes(const void* data, size_t bytes);

// xxh3-64 of raw bytes (seed 0): the hash used everywhere in traces.
uint64_t hash_bytes(const void* data, size_t bytes);

}  // namespace llmrr::trace
