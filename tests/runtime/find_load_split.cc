// Searches prompts for the --load demo: a prompt whose generated text changes when
// `llmrr run --load N` adds synthetic requests under the production policy, and never under
// the invariant policy. Mirrors exactly what `llmrr run` builds (target id 0, greedy, default
// scheduler, make_load_for_model). Prints the hits; load_split_test.cc pins one.
//
//   find_load_split [model=tiny-moe] [prompts=200] [max_tokens=32] [capacity_factor=0] [dtype=bf16]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llmrr/runtime/engine.h"
#include "llmrr/runtime/load.h"
#include "llmrr/runtime/model.h"

using namespace llmrr;

namespace {

bool g_bf16 = true;

std::vector<int32_t> generate(const LoadedModel& m, std::shared_ptr<Policy> policy,
                              const std::vector<int32_t>& prompt, int32_t max_tokens, int load,
                              uint64_t seed, double capacity) {
  EngineConfig cfg;
  if (g_bf16) {
    cfg.weight_type = kernels::WeightType::kBF16;
    cfg.bf16_activations = true;
  }
  if (capacity > 0) cfg.capacity = CapacityConfig{capacity, Overflow::kDrop};
  auto e = Engine::create(m, cfg, std::move(policy));
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", e.status().to_string().c_str());
    std::exit(3);
  }
  RequestSpec t;
  t.id = 0;
  t.prompt = prompt;
  t.max_tokens = max_tokens;
  t.sampling.seed = seed;
  (void)(*e)->add_request(t);
  for (const RequestSpec& r : make_load_for_model(m.config, load, seed)) (void)(*e)->add_request(r);
  Status st = (*e)->run();
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    std::exit(3);
  }
  return (*e)->request(0)->generated;
}

std::string text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t t : ids) s += (t >= 32 && t < 127) ? static_cast<char>(t) : '.';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string name = argc > 1 ? argv[1] : "tiny-moe";
  int n_prompts = argc > 2 ? std::atoi(argv[2]) : 200;
  int max_tokens = argc > 3 ? std::atoi(argv[3]) : 32;
  double capacity = argc > 4 ? std::atof(argv[4]) : 0.0;
  g_bf16 = argc > 5 ? std::string(argv[5]) == "bf16" : true;
  auto m = load_model("builtin:" + name);
  if (!m.ok()) return 3;
  const std::vector<std::string> words = {
      "The", "capital", "of", "France", "is", "Once", "upon", "a", "time", "there", "was",
      "cat", "dog", "model", "batch", "split", "token", "Hello", "world", "llm", "replay",
      "record", "why", "how", "what", "answer", "question", "tiny", "expert", "router"};
  uint64_t rng = 12345;
  auto next = [&]() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  int hits = 0;
  for (int p = 0; p < n_prompts; ++p) {
    std::string prompt;
    int n = 2 + static_cast<int>(next() % 5);
    for (int i = 0; i < n; ++i) prompt += (i ? " " : "") + words[next() % words.size()];
    std::vector<int32_t> ids(prompt.begin(), prompt.end());
    auto prod_solo = generate(*m, make_production_policy(), ids, max_tokens, 0, 0, capacity);
    auto inv_solo = generate(*m, make_invariant_policy(64), ids, max_tokens, 0, 0, capacity);
    for (int load : {1, 2, 4, 8}) {
      auto prod = generate(*m, make_production_policy(), ids, max_tokens, load, 0, capacity);
      if (prod == prod_solo) continue;
      auto inv = generate(*m, make_invariant_policy(64), ids, max_tokens, load, 0, capacity);
      std::printf("%s %s prompt \"%s\" --load %d: production solo \"%s\" vs loaded \"%s\"; "
                  "invariant %s\n",
                  name.c_str(), g_bf16 ? "bf16" : "fp32", prompt.c_str(), load, text(prod_solo).c_str(),
                  text(prod).c_str(), inv == inv_solo ? "unchanged" : "CHANGED");
      std::fflush(stdout);
      ++hits;
      break;
    }
  }
  std::printf("%d of %d prompts split under production load\n", hits, n_prompts);
  return 0;
}
