// The recorder's per-row work on the engine's thread, made cheap without changing a bit of
// what is recorded: fingerprint_row with the same lane order in AVX2 registers, and a top-K
// that skips most of a large vocabulary with a block-maximum threshold. Both return exactly
// what trace::fingerprint_row and kernels::topk return (tests/recorder/row_stats_test.cc).
#pragma once

#include <cstdint>

#include "llmrr/format/fingerprint.h"

namespace llmrr::recorder_internal {

// Bit-identical to trace::fingerprint_row(row, n).
trace::Fingerprint fingerprint_row(const float* row, int64_t n);

// Identical to kernels::topk(x, n, k, ids, values): the k entries that rank first (larger
// value, then lower id; NaN after every number), in rank order.
void top_k(const float* x, int64_t n, int k, int32_t* ids, float* values);

}  // namespace llmrr::recorder_internal
