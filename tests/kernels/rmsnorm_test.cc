// RMSNorm: plans × shapes against fp64 and bit for bit against ref::rmsnorm across ISAs and
// thread counts; in place; rows independent of their neighbours; chunking changes bits.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr::kernels::testing {
namespace {

TEST(RmsNorm, MatchesReferenceBitsAndFp64EveryIsaEveryThreadCount) {
  IsaGuard guard;
  std::mt19937 rng(31);
  for (int64_t dim : {1, 7, 15, 16, 17, 33, 64, 100, 576, 4096}) {
    for (int64_t rows : {1, 3, 8, 70}) {
      for (uint32_t splits : {1u, 2u, 3u, 4u, 7u, 300u}) {
        SCOPED_TRACE(::testing::Message()
                     << "dim=" << dim << " rows=" << rows << " splits=" << splits);
        const Plan plan = norm_plan(splits);
        EXPECT_EQ(plan_check(plan), "");
        const int64_t ldx = dim + 2, ldy = dim + 3;
        auto x = random_vec(rng, rows * ldx, 3.0f);
        auto w = random_vec(rng, dim);
        const float eps = 1e-5f;
        std::vector<float> want(rows * ldy, 9.0f);
        ref::rmsnorm(x.data(), ldx, rows, dim, w.data(), eps, want.data(), ldy, plan);
        for (int64_t i = 0; i < rows; ++i) {
          double ss = 0.0;
          for (int64_t d = 0; d < dim; ++d)
            ss += static_cast<double>(x[i * ldx + d]) * x[i * ldx + d];
          const double r = 1.0 / std::sqrt(ss / dim + eps);
          for (int64_t d = 0; d < dim; ++d) {
            const double y64 = w[d] * (x[i * ldx + d] * r);
            ASSERT_LE(std::fabs(want[i * ldy + d] - y64),
                      tolerance("rmsnorm", static_cast<double>(dim), std::fabs(y64)) + 1e-30);
          }
        }
        for (Isa isa : all_isas()) {
          set_isa(isa);
          for (ThreadPool* pool : pools()) {
            std::vector<float> got(rows * ldy, 9.0f);
            rmsnorm(x.data(), ldx, rows, dim, w.data(), eps, got.data(), ldy, plan, *pool);
            ASSERT_TRUE(same_bits(got.data(), want.data(), got.size()))
                << isa_name(isa) << " threads=" << pool->size();
          }
          // In place (y aliases x).
          auto xin = x;
          rmsnorm(xin.data(), ldx, rows, dim, w.data(), eps, xin.data(), ldx, plan, *pools()[1]);
          for (int64_t i = 0; i < rows; ++i) {
            ASSERT_TRUE(same_bits(xin.data() + i * ldx, want.data() + i * ldy, dim));
          }
        }
      }
    }
  }
}

TEST(RmsNorm, ChunkCountChangesBitsForSomeRows) {
  std::mt19937 rng(2);
  const int64_t dim = 4096, rows = 32;
  auto x = random_vec(rng, rows * dim, 5.0f);
  std::vector<float> w(dim, 1.0f), y1(rows * dim), y4(rows * dim);
  rmsnorm(x.data(), dim, rows, dim, w.data(), 1e-6f, y1.data(), dim, norm_plan(1),
          ThreadPool::serial());
  rmsnorm(x.data(), dim, rows, dim, w.data(), 1e-6f, y4.data(), dim, norm_plan(4),
          ThreadPool::serial());
  EXPECT_NE(first_diff(y1.data(), y4.data(), y1.size()), -1);
}

TEST(RmsNorm, ChunksCombineInOrderAndFormulaIsLiteral) {
  // dim 48, three chunks of 16 with sums 2^26, 4, 4. In chunk order: (2^26 + 4) + 4 = 2^26
  // (each + 4 is a tie that rounds to even); any order adding the 4s first gives 2^26 + 8.
  std::vector<float> x(48, 0.0f), w(48, 1.5f), y(48);
  x[0] = 8192.0f;
  x[16] = 2.0f;
  x[32] = 2.0f;
  // A negative eps that nearly cancels sum/dim makes the last bits of the sum visible.
  const float eps = -1398101.0f;
  rmsnorm(x.data(), 48, 1, 48, w.data(), eps, y.data(), 48, norm_plan(3), ThreadPool::serial());
  const float sum = 67108864.0f;  // 2^26
  const float r = 1.0f / std::sqrt(sum / 48.0f + eps);
  EXPECT_EQ(bits(y[0]), bits(1.5f * (8192.0f * r)));
  EXPECT_EQ(bits(y[16]), bits(1.5f * (2.0f * r)));
  const float r_other = 1.0f / std::sqrt((sum + 8.0f) / 48.0f + eps);
  EXPECT_NE(bits(y[0]), bits(1.5f * (8192.0f * r_other))) << "the case must tell orders apart";
  Plan one;
  one.op = OpKind::kRmsNorm;
  std::vector<float> y1(48);
  rmsnorm(x.data(), 48, 1, 48, w.data(), eps, y1.data(), 48, one, ThreadPool::serial());
  // One chunk: lane 0 takes 2^26, then +4 (tie → 2^26), then +4 again: 2^26 too.
  EXPECT_EQ(bits(y1[0]), bits(y[0]));
}

TEST(RmsNorm, RowIndependentOfNeighbours) {
  IsaGuard guard;
  std::mt19937 rng(12);
  const int64_t dim = 300;
  auto row = random_vec(rng, dim);
  auto w = random_vec(rng, dim);
  for (Isa isa : all_isas()) {
    set_isa(isa);
    std::vector<float> alone(dim);
    rmsnorm(row.data(), dim, 1, dim, w.data(), 1e-5f, alone.data(), dim, norm_plan(3),
            ThreadPool::serial());
    for (int64_t rows : {2, 5, 33}) {
      auto x = random_vec(rng, rows * dim);
      std::copy(row.begin(), row.end(), x.begin() + (rows - 1) * dim);
      std::vector<float> y(rows * dim);
      rmsnorm(x.data(), dim, rows, dim, w.data(), 1e-5f, y.data(), dim, norm_plan(3), *pools()[2]);
      EXPECT_TRUE(same_bits(y.data() + (rows - 1) * dim, alone.data(), dim)) << rows;
    }
  }
}

}  // namespace
}  // namespace llmrr::kernels::testing
