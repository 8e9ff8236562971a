// Batch invariance: bytes → a batch composition around a target request (co-requests with
// their prompts, generation lengths and arrival steps, the target's arrival, the prefill
// chunk, the dtype, a builtin model). Under the invariant policy without expert capacity
// the target's logits must be bit-identical to its solo run at every sampled position
// (DESIGN, "Invariance tests"); a difference prints the composition and aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "fuzz_util.h"
#include "llmrr/replayer/fuzz.h"
#include "llmrr/runtime/model.h"

namespace {

using namespace llmrr;

const LoadedModel& model(int which) {
  static std::map<int, std::unique_ptr<LoadedModel>> cache;
  auto& m = cache[which];
  if (!m) {
    Result<LoadedModel> r = load_model(which == 0 ? "builtin:tiny-moe" : "builtin:tiny-dense");
    if (!r.ok()) {
      std::fprintf(stderr, "batch_invariance: %s\n", r.status().to_string().c_str());
      std::abort();
    }
    m = std::make_unique<LoadedModel>(std::move(*r));
  }
  return *m;
}

std::vector<int32_t> printable(fuzz::Bytes& in, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& t : p) t = 32 + in.u8() % 95;
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Bytes in(data, size);
  const int which = in.u8() & 1;
  const bool bf16 = in.flag();
  static constexpr int32_t kChunks[] = {0, 8, 16, 32, 64};
  replay::Composition c;
  c.prefill_chunk = kChunks[in.u8() % 5];
  c.target_arrival = in.range(0, 4);
  replay::FuzzTarget target;
  target.max_tokens = static_cast<int32_t>(in.range(1, 8));
  target.prompt = printable(in, in.range(1, 16));
  const int64_t n = in.range(0, 4);
  for (int64_t i = 0; i < n; ++i) {
    replay::CoRequest r;
    r.max_tokens = static_cast<int32_t>(in.range(1, 8));
    r.arrival_step = in.range(0, 6);
    r.prompt = printable(in, in.range(1, 16));
    c.others.push_back(std::move(r));
  }

  replay::FuzzEngine e;
  e.model = &model(which);
  e.policy = PolicyKind::kInvariant;
  e.config.threads = 1;
  e.config.weight_type = bf16 ? kernels::WeightType::kBF16 : kernels::WeightType::kF32;
  e.config.bf16_activations = bf16;

  // The solo run depends only on (model, dtype, chunk, prompt, max tokens): cache it, so
  // that most inputs cost one engine run.
  static std::map<std::tuple<int, bool, int32_t, std::vector<int32_t>, int32_t>,
                  replay::TargetObservation>
      solos;
  auto key = std::make_tuple(which, bf16, c.prefill_chunk, target.prompt, target.max_tokens);
  auto it = solos.find(key);
  if (it == solos.end()) {
    Result<replay::TargetObservation> solo = replay::run_composition(e, target, c, true);
    if (!solo.ok()) {
      std::fprintf(stderr, "batch_invariance: solo run: %s\n", solo.status().to_string().c_str());
      std::abort();
    }
    if (solos.size() > 4096) solos.clear();
    it = solos.emplace(key, std::move(*solo)).first;
  }
  Result<replay::TargetObservation> run = replay::run_composition(e, target, c, false);
  if (!run.ok()) {
    std::fprintf(stderr, "batch_invariance: run: %s\n", run.status().to_string().c_str());
    std::abort();
  }
  const replay::FuzzComparison cmp = replay::compare_with_baseline(it->second, *run);
  if (cmp.verdict != replay::FuzzVerdict::kIdentical) {
    std::string prompt;
    for (int32_t t : target.prompt) prompt += static_cast<char>(t);
    std::fprintf(stderr,
                 "batch_invariance: the invariant policy split the target (%s split, logits "
                 "first differ at token %d, cause %s at position %d layer %d)\n  model %s, "
                 "dtype %s, target prompt '%s', max tokens %d\n  composition %s\n",
                 replay::fuzz_verdict_name(cmp.verdict), cmp.numerical_token, cmp.cause.c_str(),
                 cmp.cause_position, cmp.cause_layer, which == 0 ? "tiny-moe" : "tiny-dense",
                 bf16 ? "bf16" : "fp32", prompt.c_str(), target.max_tokens,
                 replay::composition_json(c).c_str());
    std::abort();
  }
  return 0;
}
