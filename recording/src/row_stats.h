// StepRecorder's top-K (run wherever a step is completed), made cheap without changing a bit
// of what is recorded: it skips most of a large vocabulary with a block-maximum threshold,
// ranks the few candidates of a short row above a pair-maximum threshold by counting (else
// scans it with insertion), and returns exactly what kernels::topk returns
// (tests/recorder/row_stats_test.cc). Fingerprints are trace::fingerprint_row itself.
#pragma once

#include <cstdint>
#include <optional>

namespace llmrr::recording::internal {

// Identical to kernels::topk(x, n, k, ids, values): the k entries that rank first (larger
// value, then lower id; NaN after every number), in rank order.
void top_k(const float* x, int64_t n, int k, int32_t* ids, float* values);

// ln Σ exp(x[i]) in fp64, given max = the row's largest value (top_k's first), with llmrr's
// own exp (no libm, whose ifunc variants may differ by CPU) and a serial sum: the same bits on
// every machine. Relative error ~1e-15. nullopt when max is not finite (a NaN, +inf or an
// all -inf row): no log-prob is defined then.
std::optional<double> logsumexp(const float* x, int64_t n, float max);

}  // namespace llmrr::recording::internal
