// Sampling as sample.h defines it: a pure function of (logits, params, request, position).
#include "llmrr/kernels/sample.h"

#include <algorithm>
#include <cmath>
#include <vector>

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
  // Candidates: every non-NaN id, scaled, in descending order (ties: lower id first).
  struct Cand {
    float v;
    int32_t id;
  };
  std::vector<Cand> c;
  c.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    const float s = logits[i] / params.temperature;
    if (s == s) c.push_back({s, static_cast<int32_t>(i)});
  }
  if (c.empty()) {
    res.token = argmax(logits, vocab);
    return res;
  }
  auto desc = [](const Cand& a, const Cand& b) { return a.v != b.v ? a.v > b.v : a.id < b.id; };
  size_t keep = c.size();
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < keep) {
    keep = static_cast<size_t>(params.top_k);
    std::partial_sort(c.begin(), c.begin() + keep, c.end(), desc);
    c.resize(keep);
  } else {
    std::sort(c.begin(), c.end(), desc);
  }
  const float mx = c[0].v;
  std::vector<float> cum(keep);
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
