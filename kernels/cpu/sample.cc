// Sampling as sample.h defines it: a pure function of (logits, params, request, position).
#include "llmrr/kernels/sample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/select_internal.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"

namespace llmrr::kernels {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

double sampling_uniform(uint64_t seed, uint64_t request, int64_t position) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ request);
  h = splitmix64(h ^ static_cast<uint64_t>(position));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

SampleResult sample(const float* logits, int64_t vocab, const SamplingParams& params,
                    uint64_t request, int64_t position) {
  SampleResult res;
  if (vocab <= 0) return res;
  if (!(params.temperature > 0.0f)) {
    res.token = argmax(logits, vocab);
    return res;
  }
  // Candidates: every non-NaN id, scaled, in rank order (descending, ties: lower id first).
  thread_local std::vector<internal::Ranked> c, tmp;
  thread_local std::vector<float> scaled;
  const bool filter_k = params.top_k > 0 && params.top_k < vocab;
  if (filter_k) {
    scaled.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) scaled[i] = logits[i] / params.temperature;
    internal::select_top(scaled.data(), vocab, params.top_k, c);
    // NaN ranks last; a NaN in the kept set means fewer than k numbers exist.
    while (!c.empty() && c.back().v != c.back().v) c.pop_back();
  } else {
    c.clear();
    c.reserve(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) {
      // + 0.0f turns −0 into +0 so that ±0 tie (by id) as they compare equal; exp(s − max)
      // is the same for both.
      const float s = logits[i] / params.temperature + 0.0f;
      if (s == s) c.push_back({s, static_cast<int32_t>(i)});
    }
    internal::radix_rank(c, tmp);
  }
  if (c.empty()) {
    res.token = argmax(logits, vocab);
    return res;
  }
  const size_t keep = c.size();
  const float mx = c[0].v;
  thread_local std::vector<float> cum;
  cum.resize(keep);
  float total = 0.0f;
  for (size_t i = 0; i < keep; ++i) {
    total = total + numerics::exp_f32(c[i].v - mx);
    cum[i] = total;
  }
  size_t kept = keep;
  if (params.top_p < 1.0f) {
    const float threshold = params.top_p * total;
    for (size_t i = 0; i < keep; ++i) {
      if (cum[i] >= threshold) {
        kept = i + 1;
        break;
      }
    }
  }
  const double u = sampling_uniform(params.seed, request, position);
  const double target = u * static_cast<double>(cum[kept - 1]);
  res.uniform = u;
  res.token = c[0].id;  // reached only if the sums are not finite
  for (size_t i = 0; i < kept; ++i) {
    if (static_cast<double>(cum[i]) > target) {
      res.token = c[i].id;
      break;
    }
  }
  return res;
}

}  // namespace llmrr::kernels
