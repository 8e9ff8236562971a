// MoE routing with expert capacity (Switch Transformer / GShard style).
//
// capacity = ceil(tokens_in_batch × k / experts × capacity_factor), per expert per layer.
// Tokens claim capacity in batch row order, and within a token in rank order (its best
// expert first). A slot whose expert is full:
//   drop    → the slot is skipped (the token keeps the residual and its other slots);
//   reroute → the slot goes to the token's next-best expert (by score, lower id on ties)
//             that has room and that the token does not already use; dropped if none has.
// Gates: with norm_topk_prob, gate_i = score[e_i] / Σ_{j<k} score[chosen_j] (the sum in
// rank order over the router's top-k), else gate_i = score[e_i], where e_i is the expert
// the slot finally uses (so a rerouted slot weighs its new expert's score). Dropped slots
// have gate 0 and expert -1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmrr/runtime/observer.h"

namespace llmrr {

enum class Overflow : uint8_t { kNone = 0, kDrop = 1, kReroute = 2 };
const char* overflow_name(Overflow overflow);

struct CapacityConfig {
  double factor = 0.0;                // 0: no capacity limit (dropless)
  Overflow overflow = Overflow::kNone;
  bool enabled() const { return overflow != Overflow::kNone && factor > 0.0; }
};

int32_t expert_capacity(int64_t tokens, int32_t k, int32_t experts, double factor);

// Routing of one MoE layer at one step; arrays are rows × k in rank order.
struct Routing {
  int64_t rows = 0;
  int32_t k = 0;
  int32_t capacity = 0;               // 0 = unbounded
  std::vector<int32_t> chosen;        // router top-k before capacity
  std::vector<int32_t> experts;       // expert used per slot (-1 dropped)
  std::vector<float> gates;
  std::vector<RouteOutcome> outcome;
  void resize(int64_t rows, int32_t k);
};

// How gates follow from the scores of the chosen experts: with norm_topk_prob,
// gate_i = score[e_i] / (Σ_{j<k} score[chosen_j] + denom_eps), else score[e_i]; then × scale
// (DeepSeek-V3: denom_eps 1e-20 and scale routed_scaling_factor, as transformers computes).
struct GateRule {
  bool norm_topk_prob = true;
  float scale = 1.0f;
  float denom_eps = 0.0f;
};

// DeepSeek-V3's selection scores (noaux_tc): out[t, e] = scores[t, e] + bias[e] (bias may be
// null: 0) for the experts of the topk_group groups (n_group equal, consecutive groups) with
// the largest sum of their two best biased scores (ties: the lower group), −inf for the
// others. The bias and the groups only select; gates use the unbiased scores.
void group_limited_choice(const float* scores, int64_t rows, int32_t experts, const float* bias,
                          int32_t n_group, int32_t topk_group, float* out);

// As route_tokens below, with the top-k and the reroute order taken from `select` (rows ×
// experts) and the gates from `scores` by `rule`.
void route_tokens(const float* select, const float* scores, int64_t rows, int32_t experts,
                  int32_t k, const GateRule& rule, const CapacityConfig& capacity,
                  int64_t tokens_for_capacity, Routing* r);
void compute_gates(const float* scores, int64_t rows, int32_t experts, const GateRule& rule,
                   Routing* r);

// Top-k of every row of `scores` (rows × experts, already softmaxed / sigmoided) into
// r->chosen, then capacity and overflow into r->experts / r->outcome, then gates.
// `tokens_for_capacity` is the batch size the capacity is computed from.
void route_tokens(const float* scores, int64_t rows, int32_t experts, int32_t k,
                  bool norm_topk_prob, const CapacityConfig& capacity,
                  int64_t tokens_for_capacity, Routing* r);

// Recomputes r->gates from scores, r->chosen and r->experts (used when the experts are
// forced from a trace).
void compute_gates(const float* scores, int64_t rows, int32_t experts, bool norm_topk_prob,
                   Routing* r);

}  // namespace llmrr
