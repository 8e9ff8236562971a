// Sites: named points in the forward pass ("L3.mlp.down", "L3.moe.e5.up", "logits").
// A site identifies where rows are fingerprinted and which op's plan applies there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llmrr {

// Values are stored in traces: append only. Forward order within a layer is the listed
// order, except that kinds appended later take their place in it (site.cc's kForwardRank):
// q_norm and k_norm come after v and before attn.core; MLA's q_a, q_a_norm before attn.q,
// kv_a, kv_a_norm, q_absorb after attn.v, v_up after attn.core.
enum class SiteKind : uint8_t {
  kEmbed = 0,        // "embed"            token embedding rows
  kAttnNorm = 1,     // "L3.attn_norm"     RMSNorm before attention          (plan: kRmsNorm)
  kQ = 2,            // "L3.attn.q"        q projection, before RoPE          (plan: kGemm)
  kK = 3,            // "L3.attn.k"        k projection, before RoPE          (plan: kGemm)
  kV = 4,            // "L3.attn.v"        v projection                       (plan: kGemm)
  kAttn = 5,         // "L3.attn.core"     attention output, before o_proj    (plan: kAttention)
  kO = 6,            // "L3.attn.o"        o projection                       (plan: kGemm)
  kAttnResid = 7,    // "L3.attn.resid"    hidden state after the attention residual
  kMlpNorm = 8,      // "L3.mlp_norm"      RMSNorm before the MLP / MoE        (plan: kRmsNorm)
  kGate = 9,         // "L3.mlp.gate"      dense MLP gate projection           (plan: kGemm)
  kUp = 10,          // "L3.mlp.up"                                            (plan: kGemm)
  kAct = 11,         // "L3.mlp.act"       silu(gate) * up
  kDown = 12,        // "L3.mlp.down"                                          (plan: kGemm)
  kRouter = 13,      // "L3.moe.router"    router logits                       (plan: kGemm)
  kExpertGate = 14,  // "L3.moe.e5.gate"   rows routed to expert 5 only        (plan: kGemm)
  kExpertUp = 15,    // "L3.moe.e5.up"                                         (plan: kGemm)
  kExpertAct = 16,   // "L3.moe.e5.act"
  kExpertDown = 17,  // "L3.moe.e5.down"                                       (plan: kGemm)
  kSharedGate = 18,  // "L3.moe.shared.gate"  shared expert (Qwen-MoE, DeepSeek)  (plan: kGemm)
  kSharedUp = 19,    // "L3.moe.shared.up"                                     (plan: kGemm)
  kSharedDown = 20,  // "L3.moe.shared.down"                                   (plan: kGemm)
  kSharedScale = 21, // "L3.moe.shared.scale" sigmoid gate of the shared expert (plan: kGemm)
  kCombine = 22,     // "L3.moe.combine"   weighted sum of expert outputs      (plan: kCombine)
  kLayerOut = 23,    // "L3.out"           hidden state leaving the layer
  kFinalNorm = 24,   // "final_norm"                                           (plan: kRmsNorm)
  kLogits = 25,      // "logits"           lm_head, sampled rows only          (plan: kGemm)
  kQNorm = 26,       // "L3.attn.q_norm"   per-head RMSNorm of q, before RoPE (Qwen3)  (plan: kRmsNorm)
  kKNorm = 27,       // "L3.attn.k_norm"   per-head RMSNorm of k, before RoPE (Qwen3)  (plan: kRmsNorm)
  // DeepSeek-V3 multi-head latent attention (absorbed form, DESIGN.md "Architectures"):
  kQA = 28,          // "L3.attn.q_a"      q_a_proj: x → q latent (q_lora_rank)      (plan: kGemm)
  kQANorm = 29,      // "L3.attn.q_a_norm" RMSNorm of the q latent                   (plan: kRmsNorm)
  kKvA = 30,         // "L3.attn.kv_a"     kv_a_proj_with_mqa: latent + rope key      (plan: kGemm)
  kKvANorm = 31,     // "L3.attn.kv_a_norm" RMSNorm of the KV latent (what the cache holds) (plan: kRmsNorm)
  kQAbsorb = 32,     // "L3.attn.q_absorb" q_nope × W_UK per head: the query in latent space (plan: kGemm)
  kVUp = 33,         // "L3.attn.v_up"     attention latent × W_UV per head: the values (plan: kGemm)
};
inline constexpr int kSiteKinds = 34;

struct SiteId {
  SiteKind kind = SiteKind::kEmbed;
  int16_t layer = -1;   // -1 for embed, final_norm, logits
  int16_t expert = -1;  // expert index for kExpert*, else -1

  bool operator==(const SiteId&) const = default;
  // Forward order: embed < L0.* (by kind, then expert) < L1.* < ... < final_norm < logits.
  bool operator<(const SiteId& o) const { return forward_key() < o.forward_key(); }
  uint64_t forward_key() const;
  // Packed form for traces and hashing: kind | layer << 8 | expert << 24 (both +1-biased).
  uint64_t packed() const;
  static SiteId unpack(uint64_t packed);
};

// "L3.mlp.down", "L3.moe.e5.up", "embed", "final_norm", "logits".
std::string site_name(SiteId site);
// Inverse of site_name; nullopt for anything else.
std::optional<SiteId> parse_site(std::string_view name);

// Sites that are one per layer output (capture level `layers`): L*.out, plus logits.
bool is_layer_output(SiteId site);

}  // namespace llmrr
