// Human-readable names for trace records (sites, plans, fingerprints), shared by the
// commands that print traces.
#pragma once

#include <cstdint>
#include <string>

#include "llmrr/format/records.h"

namespace llmrr::cli {

// "L3.mlp.down", "L3.moe.e5.up", "logits" (format/site.h naming) for a packed SiteId.
std::string site_text(uint64_t packed_site);

// Sort key putting sites in forward order (embed, L0.*, L1.*, ..., final_norm, logits).
uint64_t site_order(uint64_t packed_site);

// "1f2e3d4c5b6a7988" — 16 hex digits.
std::string hash_text(uint64_t hash);

// "1f2e3d4c5b6a7988 l2 7.91 max 2.30".
std::string fingerprint_text(const trace::Fingerprint& fp);

// "2024-12-02 13:00:00 UTC" from Unix nanoseconds ("-" when 0).
std::string time_text(int64_t unix_ns);

}  // namespace llmrr::cli
