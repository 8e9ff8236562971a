// Row fingerprints: the one function the recorder and the replayer both use, so that a
// fingerprint recorded on one machine compares bit for bit with one computed on another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "llmrr/format/status.h"

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

// A model's weights as a run header's weight_hash: "xxh3-64:<16 hex>" of the files' bytes
// read in the order given, as one stream (a single GGUF hashes as llama.cpp's recorder
// hashes it). Errors name the file that cannot be read.
Result<std::string> hash_files(const std::vector<std::string>& paths);

// The kinds of row hash a trace can hold (EngineConfig::fingerprint); "" means kXxh3.
inline constexpr const char* kFingerprintXxh3 = "xxh3-64";
inline constexpr const char* kFingerprintMixsum = "mixsum64";

// "mixsum64": a row hash that any device computes exactly, in whatever order it reduces,
// with integer operations on the raw bits (llmrr.torch and llmrr.vllm compute it with torch
// ops where the tensor lives and copy only the hashes to the host). For an fp32 row
// x[0..n) (bf16 / f16 widened exactly to fp32 first), u_i = the 32 bits of x[i], and for
// lane j = 0, 1 (every operation mod 2^32 except the sum):
//   a = u_i ^ (i * P_j + S_j);  a ^= a >> 16;  a *= M1;  a ^= a >> 15;  a *= M2;  a ^= a >> 16
//   T_j = sum_i a                                  (exact in 64 bits for n < 2^32)
//   hash = splitmix64(T_0 ^ splitmix64(T_1 ^ n))
// with P = {0x61C88647, 0x2545F491}, S = {0x1B873593, 0x27D4EB2F}, M1 = 0x7FEB352D,
// M2 = 0x68E31DA5 (all below 2^31, so a device can do it in int64 without overflow). An
// integer sum is associative, so the hash does not depend on the reduction order; the
// position term makes it depend on where each value sits. Equal bits give equal hashes;
// unlike xxh3 it is not a cryptographic-grade mix, but a one-bit change in any element
// changes T_0 and T_1.
uint64_t mixsum64(const float* row, int64_t n);

// fingerprint_row with mixsum64 as the hash (l2 and max_abs as there).
Fingerprint fingerprint_row_mixsum64(const float* row, int64_t n);

}  // namespace llmrr::trace
