#include "llmrr/format/site.h"

#include <charconv>
#include <iterator>
#include <string>

namespace llmrr {
namespace {

struct KindName {
  SiteKind kind;
  const char* suffix;  // after "L<layer>." (or after "L<layer>.moe.e<E>." for experts)
};

// Per-layer site kinds and their names; order irrelevant (forward order is the enum's).
constexpr KindName kLayerKinds[] = {
    {SiteKind::kAttnNorm, "attn_norm"},     {SiteKind::kQ, "attn.q"},
    {SiteKind::kK, "attn.k"},               {SiteKind::kV, "attn.v"},
    {SiteKind::kAttn, "attn.core"},         {SiteKind::kO, "attn.o"},
    {SiteKind::kAttnResid, "attn.resid"},   {SiteKind::kMlpNorm, "mlp_norm"},
    {SiteKind::kGate, "mlp.gate"},          {SiteKind::kUp, "mlp.up"},
    {SiteKind::kAct, "mlp.act"},            {SiteKind::kDown, "mlp.down"},
    {SiteKind::kRouter, "moe.router"},      {SiteKind::kSharedGate, "moe.shared.gate"},
    {SiteKind::kSharedUp, "moe.shared.up"}, {SiteKind::kSharedDown, "moe.shared.down"},
    {SiteKind::kSharedScale, "moe.shared.scale"}, {SiteKind::kCombine, "moe.combine"},
    {SiteKind::kLayerOut, "out"},           {SiteKind::kQNorm, "attn.q_norm"},
    {SiteKind::kKNorm, "attn.k_norm"},     {SiteKind::kQA, "attn.q_a"},
    {SiteKind::kQANorm, "attn.q_a_norm"},   {SiteKind::kKvA, "attn.kv_a"},
    {SiteKind::kKvANorm, "attn.kv_a_norm"}, {SiteKind::kQAbsorb, "attn.q_absorb"},
    {SiteKind::kVUp, "attn.v_up"},
};

// Position of each kind in a layer's forward order, indexed by the kind's value.
constexpr uint8_t kForwardRank[kSiteKinds] = {
    0,   // kEmbed
    1,   // kAttnNorm
    4,   // kQ
    5,   // kK
    6,   // kV
    12,  // kAttn
    14,  // kO
    15,  // kAttnResid
    16,  // kMlpNorm
    17,  // kGate
    18,  // kUp
    19,  // kAct
    20,  // kDown
    21,  // kRouter
    22,  // kExpertGate
    23,  // kExpertUp
    24,  // kExpertAct
    25,  // kExpertDown
    26,  // kSharedGate
    27,  // kSharedUp
    28,  // kSharedDown
    29,  // kSharedScale
    30,  // kCombine
    31,  // kLayerOut
    32,  // kFinalNorm
    33,  // kLogits
    9,   // kQNorm
    10,  // kKNorm
    2,   // kQA
    3,   // kQANorm
    7,   // kKvA
    8,   // kKvANorm
    11,  // kQAbsorb
    13,  // kVUp
};

constexpr KindName kExpertKinds[] = {
    {SiteKind::kExpertGate, "gate"},
    {SiteKind::kExpertUp, "up"},
    {SiteKind::kExpertAct, "act"},
    {SiteKind::kExpertDown, "down"},
};

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out >= 0 && out < 32000;
}

}  // namespace

uint64_t SiteId::forward_key() const {
  // embed first, then layers in order, then final_norm, then logits.
  uint64_t layer_rank;
  if (kind == SiteKind::kEmbed) {
    layer_rank = 0;
  } else if (kind == SiteKind::kFinalNorm || kind == SiteKind::kLogits) {
    layer_rank = 0xFFFFu;
  } else {
    layer_rank = static_cast<uint64_t>(layer + 1);
  }
  const auto k = static_cast<size_t>(kind);
  const uint64_t rank = k < std::size(kForwardRank) ? kForwardRank[k] : 0xFFu;
  return (layer_rank << 32) | (rank << 16) |
         static_cast<uint64_t>(static_cast<uint16_t>(expert + 1));
}

uint64_t SiteId::packed() const {
  return static_cast<uint64_t>(kind) | (static_cast<uint64_t>(static_cast<uint16_t>(layer + 1)) << 8) |
         (static_cast<uint64_t>(static_cast<uint16_t>(expert + 1)) << 24);
}

SiteId SiteId::unpack(uint64_t p) {
  SiteId s;
  s.kind = static_cast<SiteKind>(p & 0xFF);
  s.layer = static_cast<int16_t>(static_cast<int32_t>((p >> 8) & 0xFFFF) - 1);
  s.expert = static_cast<int16_t>(static_cast<int32_t>((p >> 24) & 0xFFFF) - 1);
  return s;
}

std::string site_name(SiteId s) {
  switch (s.kind) {
    case SiteKind::kEmbed: return "embed";
    case SiteKind::kFinalNorm: return "final_norm";
    case SiteKind::kLogits: return "logits";
    default: break;
  }
  std::string prefix = "L";
  prefix += std::to_string(s.layer);
  prefix += '.';
  for (const KindName& k : kExpertKinds) {
    if (k.kind == s.kind) return prefix + "moe.e" + std::to_string(s.expert) + "." + k.suffix;
  }
  for (const KindName& k : kLayerKinds) {
    if (k.kind == s.kind) return prefix + k.suffix;
  }
  return prefix + "unknown" + std::to_string(static_cast<int>(s.kind));
}

std::optional<SiteId> parse_site(std::string_view name) {
  if (name == "embed") return SiteId{SiteKind::kEmbed, -1, -1};
  if (name == "final_norm") return SiteId{SiteKind::kFinalNorm, -1, -1};
  if (name == "logits") return SiteId{SiteKind::kLogits, -1, -1};
  if (name.size() < 3 || name[0] != 'L') return std::nullopt;
  size_t dot = name.find('.');
  int layer = 0;
  if (dot == std::string_view::npos || !parse_int(name.substr(1, dot - 1), layer)) {
    return std::nullopt;
  }
  std::string_view rest = name.substr(dot + 1);
  for (const KindName& k : kLayerKinds) {
    if (rest == k.suffix) return SiteId{k.kind, static_cast<int16_t>(layer), -1};
  }
  constexpr std::string_view kMoeE = "moe.e";
  if (rest.substr(0, kMoeE.size()) == kMoeE) {
    std::string_view r = rest.substr(kMoeE.size());
    size_t d = r.find('.');
    int expert = 0;
    if (d == std::string_view::npos || !parse_int(r.substr(0, d), expert)) return std::nullopt;
    std::string_view op = r.substr(d + 1);
    for (const KindName& k : kExpertKinds) {
      if (op == k.suffix) {
        return SiteId{k.kind, static_cast<int16_t>(layer), static_cast<int16_t>(expert)};
      }
    }
  }
  return std::nullopt;
}

bool is_layer_output(SiteId s) {
  return s.kind == SiteKind::kLayerOut || s.kind == SiteKind::kLogits;
}

}  // namespace llmrr
