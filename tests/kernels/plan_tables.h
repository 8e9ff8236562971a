// The plans the kernel tests run, shared by the CPU suites (tests/kernels/) and the CUDA ones
// (tests/kernels_cuda/: grid runner and GPU), so both check the same plans bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "llmrr/kernels/plan.h"

namespace llmrr::kernels::testing {

// Not checked: callers check (EXPECT plan_check) where the plan must be a valid one.
inline Plan gemm_plan(uint32_t splits, uint32_t k_tile, std::vector<uint16_t> arrival = {}) {
  Plan p;
  p.op = OpKind::kGemm;
  p.splits = splits;
  p.k_tile = k_tile;
  if (!arrival.empty()) {
    p.order = CombineOrder::kArrival;
    p.arrival = std::move(arrival);
  }
  return p;
}

// Not checked: the CUDA RMSNorm also takes splits 0 (one chunk per lane group).
inline Plan norm_plan(uint32_t splits) {
  Plan p;
  p.op = OpKind::kRmsNorm;
  p.splits = splits;
  return p;
}

// Each plan must pass plan_check (a test of a table that plan_check rejects tests nothing).
inline std::vector<Plan> checked(std::vector<Plan> plans) {
  for (const Plan& p : plans) EXPECT_EQ(plan_check(p), "") << plan_to_string(p);
  return plans;
}

inline Plan attn_count(uint32_t splits, bool separate = false) {
  Plan p;
  p.op = OpKind::kAttention;
  p.mode = SplitMode::kCount;
  p.splits = splits;
  p.separate_new_kv = separate;
  EXPECT_EQ(plan_check(p), "");
  return p;
}

inline Plan attn_size(uint32_t size, bool separate = false) {
  Plan p;
  p.op = OpKind::kAttention;
  p.mode = SplitMode::kSize;
  p.split_size = size;
  p.separate_new_kv = separate;
  EXPECT_EQ(plan_check(p), "");
  return p;
}

// Split by count and by size, new KV separate or not.
inline std::vector<Plan> all_attention_plans() {
  std::vector<Plan> out;
  for (bool sep : {false, true}) {
    for (uint32_t s : {1u, 2u, 3u, 5u, 100u}) out.push_back(attn_count(s, sep));
    for (uint32_t s : {1u, 7u, 16u, 256u}) out.push_back(attn_size(s, sep));
  }
  return out;
}

}  // namespace llmrr::kernels::testing
