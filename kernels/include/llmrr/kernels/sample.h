// Token sampling. Greedy at temperature 0; otherwise temperature, top-k and top-p with a
// counter-based random draw keyed by (seed, request, position), so the token a request
// samples never depends on what else shares its batch.
#pragma once

#include <cstdint>

namespace llmrr::kernels {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id wins ties)
  int32_t top_k = 0;         // 0 = no top-k filter
  float top_p = 1.0f;        // 1 = no nucleus filter
  uint64_t seed = 0;
};

struct SampleResult {
  int32_t token = -1;
  double uniform = -1.0;  // the draw in [0, 1) that picked the token; -1 when greedy
};

// The draw for (seed, request, position): a pure function, splitmix64-style mixing of the
// three keys, 53 bits → [0, 1).
double sampling_uniform(uint64_t seed, uint64_t request, int64_t position);

// Order: scaled = logit / temperature (fp32 division); keep the top_k largest (ties to the
// lower id) in descending order; p_i = exp(scaled_i − max) (llmrr's exp) in that order;
// cumulative sum sequentially; keep the shortest prefix whose sum ≥ top_p · total; pick the
// first i with cumsum_i > u · kept_total (that product and comparison in double). NaN logits
// are never candidates; if every logit is NaN, or the sums are not finite, the result is the
// first candidate (or argmax).
SampleResult sample(const float* logits, int64_t vocab, const SamplingParams& params,
                    uint64_t request, int64_t position);

}  // namespace llmrr::kernels
