// The exact CUDA GEMM's device code (kernels/cuda/gemm_phases.h) run by the CPU grid runner:
// every plan × shape × weight type, bit for bit against ref::gemm, threads forward and
// reversed.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cuda/gemm_phases.h"
#include "grid_runner.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr::kernels::cuda::testing {
namespace {

using kernels::testing::first_diff;
using kernels::testing::random_vec;

using kernels::testing::checked;
using kernels::testing::gemm_plan;

struct Shape {
  int64_t m, n, k;
};

const Shape kShapes[] = {
    {1, 1, 1},   {1, 32, 16},   {1, 33, 17},  {2, 5, 100},   {3, 64, 64}, {5, 31, 257},
    {6, 32, 48}, {7, 65, 33},   {8, 100, 31}, {13, 47, 128}, {0, 10, 10}, {4, 10, 0},
    {25, 40, 1}, {9, 130, 160}, {1, 300, 70}, {2, 257, 129},
};

std::vector<Plan> all_plans() {
  return checked({
      gemm_plan(1, 0),
      gemm_plan(1, 16),
      gemm_plan(1, 48),
      gemm_plan(2, 0),
      gemm_plan(3, 0, {2, 0, 1}),
      gemm_plan(4, 32),
      gemm_plan(4, 0, {3, 1, 0, 2}),
      gemm_plan(7, 16),
      gemm_plan(9, 0),   // more splits than thread groups: groups loop over splits
      gemm_plan(40, 0),  // more splits than 16-blocks of K: empty splits add +0
      gemm_plan(5, 16, {4, 3, 2, 1, 0}),
  });
}

// What the .cu entry does, with host memory: prepare, pack K-major, run every block.
void grid_gemm(const float* x, int64_t ldx, int64_t m, const std::vector<float>& w_nk, int64_t n,
               int64_t k, WeightType type, float* y, int64_t ldy, const Plan& plan,
               ThreadOrder order) {
  detail::GemmParams p{};
  detail::Launch l;
  std::vector<uint16_t> arrival;
  ASSERT_EQ(detail::gemm_prepare(plan, m, n, k, p, l, arrival), "");
  const std::vector<float> wf = detail::gemm_pack_f32(w_nk.data(), n, k);
  const std::vector<uint16_t> wb = detail::gemm_pack_bf16(w_nk.data(), n, k);
  p.x = x;
  p.ldx = ldx;
  p.bf16 = type == WeightType::kBF16;
  p.w = p.bf16 ? static_cast<const void*>(wb.data()) : static_cast<const void*>(wf.data());
  p.y = y;
  p.ldy = ldy;
  p.order = arrival.empty() ? nullptr : arrival.data();
  run_grid(l, order, [&](HostBlock& b) { detail::gemm_block(b, p); });
}

class GemmGridTest : public ::testing::TestWithParam<Plan> {};

TEST_P(GemmGridTest, DeviceCodeMatchesReferenceBits) {
  const Plan plan = GetParam();
  std::mt19937 rng(1234);
  for (const Shape& s : kShapes) {
    for (WeightType wt : {WeightType::kF32, WeightType::kBF16}) {
      SCOPED_TRACE(::testing::Message()
                   << "m=" << s.m << " n=" << s.n << " k=" << s.k
                   << (wt == WeightType::kBF16 ? " bf16 " : " f32 ") << plan_to_string(plan));
      const int64_t ldx = s.k + 3, ldy = s.n + 5;
      auto x = random_vec(rng, s.m * ldx + 1);
      auto wv = random_vec(rng, s.n * s.k + 1);
      const PackedWeight w = PackedWeight::pack(wv.data(), s.n, s.k, wt);
      std::vector<float> want(s.m * ldy + 1, 7.0f);
      ref::gemm(x.data(), ldx, s.m, w, want.data(), ldy, plan);
      for (ThreadOrder order : kOrders) {
        std::vector<float> got(want.size(), 7.0f);  // sentinels in the gaps must survive
        grid_gemm(x.data(), ldx, s.m, wv, s.n, s.k, wt, got.data(), ldy, plan, order);
        const int64_t d = first_diff(got.data(), want.data(), got.size());
        ASSERT_EQ(d, -1) << "first diff at " << d << ": " << (d >= 0 ? got[d] : 0) << " vs "
                         << (d >= 0 ? want[d] : 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, GemmGridTest, ::testing::ValuesIn(all_plans()),
                         [](const ::testing::TestParamInfo<Plan>& info) {
                           std::string s = "splits" + std::to_string(info.param.splits) + "_ktile" +
                                           std::to_string(info.param.k_tile);
                           if (info.param.order == CombineOrder::kArrival) s += "_arrival";
                           return s;
                         });

// The arrival order reaches the device code: reversing it changes bits for some inputs,
// and each result is still the reference's.
TEST(GemmGrid, ArrivalOrderChangesBitsAsTheReferenceDoes) {
  std::mt19937 rng(5);
  const int64_t m = 3, n = 64, k = 1024;
  auto x = random_vec(rng, m * k), wv = random_vec(rng, n * k);
  const Plan fixed = gemm_plan(4, 0), rev = gemm_plan(4, 0, {3, 2, 1, 0});
  std::vector<float> a(m * n), b(m * n), ra(m * n), rb(m * n);
  grid_gemm(x.data(), k, m, wv, n, k, WeightType::kF32, a.data(), n, fixed, ThreadOrder::kForward);
  grid_gemm(x.data(), k, m, wv, n, k, WeightType::kF32, b.data(), n, rev, ThreadOrder::kForward);
  ref::gemm(x.data(), k, m, wv.data(), n, k, ra.data(), n, fixed);
  ref::gemm(x.data(), k, m, wv.data(), n, k, rb.data(), n, rev);
  EXPECT_EQ(first_diff(a.data(), ra.data(), a.size()), -1);
  EXPECT_EQ(first_diff(b.data(), rb.data(), b.size()), -1);
  EXPECT_NE(first_diff(a.data(), b.data(), a.size()), -1);
}

// A malformed arrival list runs in fixed order, as the CPU op does, never out of bounds.
TEST(GemmGrid, MalformedArrivalRunsFixedOrder) {
  std::mt19937 rng(6);
  const int64_t m = 2, n = 40, k = 300;
  auto x = random_vec(rng, m * k), wv = random_vec(rng, n * k);
  Plan bad = gemm_plan(3, 0);
  bad.order = CombineOrder::kArrival;
  bad.arrival = {0, 7, 1};
  std::vector<float> got(m * n), want(m * n);
  grid_gemm(x.data(), k, m, wv, n, k, WeightType::kF32, got.data(), n, bad, ThreadOrder::kReverse);
  ref::gemm(x.data(), k, m, wv.data(), n, k, want.data(), n, gemm_plan(3, 0));
  EXPECT_EQ(first_diff(got.data(), want.data(), got.size()), -1);
}

TEST(GemmGrid, RefusesPlansPastTheKernelLimits) {
  detail::GemmParams p{};
  detail::Launch l;
  std::vector<uint16_t> arrival;
  EXPECT_NE(detail::gemm_prepare(gemm_plan(257, 0), 1, 8, 8, p, l, arrival), "");
  EXPECT_NE(detail::gemm_prepare(gemm_plan(1, 0), 70000, 8, 8, p, l, arrival), "");
  EXPECT_EQ(detail::gemm_prepare(gemm_plan(256, 0), 65535, 8, 8, p, l, arrival), "");
}

}  // namespace
}  // namespace llmrr::kernels::cuda::testing
