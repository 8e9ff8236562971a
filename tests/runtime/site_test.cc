// Site names, packing and forward order, including the kinds appended after the first ones
// (Qwen3's attn.q_norm / attn.k_norm), whose forward place is not their number's.
#include <gtest/gtest.h>

#include <string>

#include "llmrr/format/site.h"

namespace llmrr {
namespace {

SiteId layer_site(SiteKind k, int16_t layer = 3) {
  const bool expert = k == SiteKind::kExpertGate || k == SiteKind::kExpertUp ||
                      k == SiteKind::kExpertAct || k == SiteKind::kExpertDown;
  const bool global = k == SiteKind::kEmbed || k == SiteKind::kFinalNorm || k == SiteKind::kLogits;
  return SiteId{k, static_cast<int16_t>(global ? -1 : layer), static_cast<int16_t>(expert ? 5 : -1)};
}

TEST(Site, EveryKindHasANameThatParsesBack) {
  for (int k = 0; k < kSiteKinds; ++k) {
    const SiteId s = layer_site(static_cast<SiteKind>(k));
    const std::string name = site_name(s);
    EXPECT_EQ(name.find("unknown"), std::string::npos) << k;
    auto back = parse_site(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(*back, s) << name;
    EXPECT_EQ(SiteId::unpack(s.packed()), s) << name;
  }
  EXPECT_EQ(site_name(layer_site(SiteKind::kQNorm)), "L3.attn.q_norm");
  EXPECT_EQ(site_name(layer_site(SiteKind::kKNorm)), "L3.attn.k_norm");
  // Packed values are stored in traces: the new kinds keep their numbers.
  EXPECT_EQ((SiteId{SiteKind::kQNorm, -1, -1}.packed() & 0xFF), 26u);
  EXPECT_EQ((SiteId{SiteKind::kKNorm, -1, -1}.packed() & 0xFF), 27u);
}

TEST(Site, ForwardOrderPutsTheQkNormsBetweenVAndAttention) {
  const SiteKind order[] = {SiteKind::kAttnNorm, SiteKind::kQ,         SiteKind::kK,
                            SiteKind::kV,        SiteKind::kQNorm,     SiteKind::kKNorm,
                            SiteKind::kAttn,     SiteKind::kO,         SiteKind::kAttnResid,
                            SiteKind::kMlpNorm,  SiteKind::kRouter,    SiteKind::kExpertGate,
                            SiteKind::kCombine,  SiteKind::kLayerOut};
  for (size_t i = 1; i < std::size(order); ++i) {
    EXPECT_LT(layer_site(order[i - 1]), layer_site(order[i]))
        << site_name(layer_site(order[i - 1])) << " vs " << site_name(layer_site(order[i]));
  }
  // Layers still dominate: L3's last site comes before L4's q_norm; final_norm after all.
  EXPECT_LT(layer_site(SiteKind::kLayerOut, 3), layer_site(SiteKind::kQNorm, 4));
  EXPECT_LT(layer_site(SiteKind::kKNorm, 40), layer_site(SiteKind::kFinalNorm));
  EXPECT_LT(layer_site(SiteKind::kEmbed), layer_site(SiteKind::kQNorm, 0));
}

}  // namespace
}  // namespace llmrr
