#include "llmrr/runtime/load.h"

#include <algorithm>
#include <string>

#include "llmrr/runtime/splitmix.h"

namespace llmrr {

std::vector<RequestSpec> make_load_requests(const LoadOptions& o) {
  std::vector<RequestSpec> out;
  SplitMix rng{o.seed ^ 0x6C6F61646C6F6164ull};  // "loadload"
  const int32_t hi = o.token_hi > 0 ? std::min(o.token_hi, o.vocab) : o.vocab;
  const int32_t lo = std::clamp(o.token_lo, 0, std::max(hi - 1, 0));
  for (int32_t i = 0; i < o.count; ++i) {
    RequestSpec r;
    r.id = o.first_id + static_cast<RequestId>(i);
    r.label = "load-" + std::to_string(i);
    int64_t plen = rng.uniform(o.min_prompt, o.max_prompt);
    int64_t mt = rng.uniform(o.min_new, o.max_new);
    // Keep prompt + new tokens within the model's positions.
    plen = std::max<int64_t>(1, std::min<int64_t>(plen, o.max_positions / 2));
    mt = std::max<int64_t>(1, std::min<int64_t>(mt, o.max_positions - plen));
    r.max_tokens = static_cast<int32_t>(mt);
    r.arrival_step = rng.uniform(0, o.max_arrival);
    r.prompt.resize(static_cast<size_t>(plen));
    for (int32_t& t : r.prompt) t = static_cast<int32_t>(rng.uniform(lo, hi - 1));
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<RequestSpec> make_load_for_model(const ModelConfig& model, int32_t count,
                                             uint64_t seed, RequestId first_id) {
  LoadOptions lo;
  lo.count = count;
  lo.seed = seed;
  lo.vocab = model.vocab;
  lo.max_positions = model.max_positions;
  lo.first_id = first_id;
  if (model.vocab <= 258) {
    lo.token_lo = 32;
    lo.token_hi = 127;
  }
  return make_load_requests(lo);
}

}  // namespace llmrr
