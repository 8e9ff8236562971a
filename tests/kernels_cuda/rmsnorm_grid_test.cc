// The exact CUDA RMSNorm's device code (kernels/cuda/rmsnorm_phases.h) on the CPU grid
// runner: chunk plans × shapes, bit for bit against ref::rmsnorm, also in place.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cuda/rmsnorm_phases.h"
#include "grid_runner.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "llmrr/kernels/threadpool.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr::kernels::cuda::testing {
namespace {

using kernels::testing::first_diff;
using kernels::testing::random_vec;

using kernels::testing::norm_plan;

void grid_rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* w, float eps,
                  float* y, int64_t ldy, const Plan& plan, ThreadOrder order) {
  detail::RmsNormParams p{};
  detail::Launch l;
  ASSERT_EQ(detail::rmsnorm_prepare(plan, rows, dim, p, l), "");
  p.x = x;
  p.ldx = ldx;
  p.w = w;
  p.eps = eps;
  p.y = y;
  p.ldy = ldy;
  run_grid(l, order, [&](HostBlock& b) { detail::rmsnorm_block(b, p); });
}

TEST(RmsNormGrid, DeviceCodeMatchesReferenceBits) {
  std::mt19937 rng(31);
  for (int64_t dim : {1, 7, 15, 16, 17, 33, 64, 100, 576, 4096}) {
    for (int64_t rows : {1, 3, 8}) {
      for (uint32_t splits : {0u, 1u, 2u, 3u, 4u, 7u, 16u, 300u}) {
        SCOPED_TRACE(::testing::Message()
                     << "dim=" << dim << " rows=" << rows << " splits=" << splits);
        const Plan plan = norm_plan(splits);
        const int64_t ldx = dim + 2, ldy = dim + 3;
        auto x = random_vec(rng, rows * ldx, 3.0f);
        auto w = random_vec(rng, dim);
        const float eps = 1e-5f;
        std::vector<float> want(rows * ldy, 9.0f);
        ref::rmsnorm(x.data(), ldx, rows, dim, w.data(), eps, want.data(), ldy,
                     norm_plan(splits == 0 ? 1 : splits));
        for (ThreadOrder order : kOrders) {
          std::vector<float> got(rows * ldy, 9.0f);
          grid_rmsnorm(x.data(), ldx, rows, dim, w.data(), eps, got.data(), ldy, plan, order);
          ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1);
          // In place (y aliases x).
          auto xin = x;
          grid_rmsnorm(xin.data(), ldx, rows, dim, w.data(), eps, xin.data(), ldx, plan, order);
          for (int64_t i = 0; i < rows; ++i) {
            ASSERT_EQ(first_diff(xin.data() + i * ldx, want.data() + i * ldy, dim), -1);
          }
        }
      }
    }
  }
}

// Qwen3's q/k norm as both engines run it: a [tokens, heads × head_dim] q (or k) buffer
// normalized in place as tokens × heads rows of head_dim, one weight for all heads — the CPU
// reference, the CPU kernel and the CUDA device code give the same bits.
TEST(RmsNormGrid, QkNormLayoutInPlaceMatchesCpu) {
  std::mt19937 rng(47);
  for (int64_t head_dim : {16, 32, 64, 128}) {
    for (int64_t heads : {1, 2, 4, 8}) {
      for (int64_t tokens : {1, 5, 17}) {
        for (uint32_t splits : {1u, 2u, 4u}) {
          SCOPED_TRACE(::testing::Message() << "head_dim=" << head_dim << " heads=" << heads
                                            << " tokens=" << tokens << " splits=" << splits);
          const Plan plan = norm_plan(splits);
          const int64_t rows = tokens * heads;
          auto q = random_vec(rng, rows * head_dim, 4.0f);
          auto w = random_vec(rng, head_dim);
          const float eps = 1e-6f;
          std::vector<float> want = q;
          ref::rmsnorm(want.data(), head_dim, rows, head_dim, w.data(), eps, want.data(),
                       head_dim, plan);
          std::vector<float> cpu = q;
          ThreadPool pool(2);
          kernels::rmsnorm(cpu.data(), head_dim, rows, head_dim, w.data(), eps, cpu.data(),
                           head_dim, plan, pool);
          ASSERT_EQ(first_diff(cpu.data(), want.data(), cpu.size()), -1);
          for (ThreadOrder order : kOrders) {
            std::vector<float> got = q;
            grid_rmsnorm(got.data(), head_dim, rows, head_dim, w.data(), eps, got.data(),
                         head_dim, plan, order);
            ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1);
          }
        }
      }
    }
  }
}

TEST(RmsNormGrid, ChunkingChangesBitsAsTheReferenceDoes) {
  std::mt19937 rng(3);
  const int64_t dim = 4096, rows = 16;
  auto x = random_vec(rng, rows * dim, 5.0f);
  auto w = random_vec(rng, dim);
  std::vector<float> y1(rows * dim), y4(rows * dim);
  grid_rmsnorm(x.data(), dim, rows, dim, w.data(), 1e-6f, y1.data(), dim, norm_plan(1),
               ThreadOrder::kForward);
  grid_rmsnorm(x.data(), dim, rows, dim, w.data(), 1e-6f, y4.data(), dim, norm_plan(4),
               ThreadOrder::kForward);
  EXPECT_NE(first_diff(y1.data(), y4.data(), y1.size()), -1);
}

TEST(RmsNormGrid, RefusesMoreChunksThanTheKernelTakes) {
  detail::RmsNormParams p{};
  detail::Launch l;
  EXPECT_NE(detail::rmsnorm_prepare(norm_plan(513), 1, 8, p, l), "");
  EXPECT_EQ(detail::rmsnorm_prepare(norm_plan(512), 1, 8, p, l), "");
}

}  // namespace
}  // namespace llmrr::kernels::cuda::testing
