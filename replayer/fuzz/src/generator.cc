// The composition generator of `llmrr fuzz` and the requests a composition submits.
#include <algorithm>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "llmrr/replayer/fuzz.h"
#include "llmrr/runtime/splitmix.h"

namespace llmrr::replay {
namespace {

constexpr int32_t kChunks[] = {0, 8, 16, 32, 64};
constexpr double kFactors[] = {1.0, 1.25, 1.5, 2.0};

}  // namespace

int64_t Composition::prompt_tokens() const {
  int64_t n = 0;
  for (const CoRequest& r : others) n += static_cast<int64_t>(r.prompt.size());
  return n;
}

bool Composition::smaller_than(const Composition& o) const {
  auto key = [](const Composition& c) {
    int64_t gen = 0;
    for (const CoRequest& r : c.others) gen += r.max_tokens;
    return std::tuple(c.others.size(), c.prompt_tokens(), gen);
  };
  return key(*this) < key(o);
}

FuzzSpace default_fuzz_space(const ModelConfig& model) {
  FuzzSpace s;
  s.moe = model.is_moe();
  s.vocab = model.vocab;
  s.max_positions = model.max_positions;
  if (model.vocab <= 258) {  // the builtin byte-level vocabularies: printable ASCII
    s.token_lo = 32;
    s.token_hi = 127;
  }
  return s;
}

Composition generate_composition(const FuzzSpace& sp, uint64_t seed, int64_t index) {
  // One stream per run index, independent of every other index: shards need no state.
  SplitMix rng{seed ^ 0x66757a7a636f6d70ull};  // "fuzzcomp"
  rng.s ^= SplitMix{static_cast<uint64_t>(index) * 0x2545F4914F6CDD1Dull}.next();
  Composition c;
  const int64_t n = rng.uniform(0, std::max(sp.max_co_requests, 0));
  c.target_arrival = rng.uniform(0, std::max<int64_t>(sp.max_target_arrival, 0));
  const int64_t chunk_draw = rng.uniform(0, std::size(kChunks) - 1);
  c.prefill_chunk = sp.prefill_chunk ? *sp.prefill_chunk : kChunks[chunk_draw];
  // Always draw, so that pinning one knob leaves the others' draws unchanged.
  const int64_t cap_draw = rng.uniform(0, std::size(kFactors));  // == size: dropless
  const bool reroute = rng.uniform(0, 1) == 1;
  if (sp.capacity_factor) {
    c.capacity_factor = *sp.capacity_factor;
  } else if (sp.moe && cap_draw < static_cast<int64_t>(std::size(kFactors))) {
    c.capacity_factor = kFactors[cap_draw];
  }
  if (c.capacity_factor > 0) {
    c.overflow = sp.overflow ? *sp.overflow : (reroute ? Overflow::kReroute : Overflow::kDrop);
  }
  const int32_t hi = sp.token_hi > 0 ? std::min(sp.token_hi, sp.vocab) : sp.vocab;
  const int32_t lo = std::clamp(sp.token_lo, 0, std::max(hi - 1, 0));
  for (int64_t i = 0; i < n; ++i) {
    CoRequest r;
    int64_t plen = rng.uniform(std::max(sp.min_prompt, 1), std::max(sp.max_prompt, 1));
    int64_t mt = rng.uniform(1, std::max(sp.max_new, 1));
    plen = std::min<int64_t>(plen, sp.max_positions / 2);
    mt = std::max<int64_t>(1, std::min<int64_t>(mt, sp.max_positions - plen));
    r.max_tokens = static_cast<int32_t>(mt);
    r.arrival_step = rng.uniform(0, std::max<int64_t>(sp.max_arrival, 0));
    r.prompt.resize(static_cast<size_t>(plen));
    for (int32_t& t : r.prompt) t = static_cast<int32_t>(rng.uniform(lo, hi - 1));
    c.others.push_back(std::move(r));
  }
  return c;
}

std::vector<RequestSpec> composition_requests(const FuzzTarget& target, const Composition& c,
                                              bool solo) {
  std::vector<RequestSpec> out;
  RequestSpec t;
  t.id = 0;
  t.label = "target";
  t.prompt = target.prompt;
  t.max_tokens = target.max_tokens;
  t.arrival_step = solo ? 0 : c.target_arrival;
  out.push_back(std::move(t));
  if (solo) return out;
  for (size_t i = 0; i < c.others.size(); ++i) {
    RequestSpec r;
    r.id = static_cast<RequestId>(i + 1);
    r.label = "co-" + std::to_string(i);
    r.prompt = c.others[i].prompt;
    r.max_tokens = c.others[i].max_tokens;
    r.arrival_step = c.others[i].arrival_step;
    out.push_back(std::move(r));
  }
  return out;
}

std::shared_ptr<Policy> FuzzEngine::make_policy() const {
  return llmrr::make_policy(  // qualified: this member's name hides it
      policy, {.device = device,
               .attn_split_size =
                   attn_split > 0 ? attn_split : default_invariant_split_size(model->config.hidden),
               .gemm_split_size = gemm_split});
}

EngineConfig FuzzEngine::config_for(const Composition& c) const {
  EngineConfig cfg = config;
  cfg.scheduler.prefill_chunk = c.prefill_chunk;
  cfg.capacity.factor = c.capacity_factor;
  cfg.capacity.overflow = c.overflow;
  return cfg;
}

}  // namespace llmrr::replay
