// The elementwise and combine kernels' device code (rope, swiglu, embedding, moe_combine,
// softmax / sigmoid) on the CPU grid runner, bit for bit against the CPU ops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cuda/embedding_phases.h"
#include "cuda/moe_combine_phases.h"
#include "cuda/rope_phases.h"
#include "cuda/select_phases.h"
#include "cuda/swiglu_phases.h"
#include "grid_runner.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "test_util.h"

namespace llmrr::kernels::cuda::testing {
namespace {

using kernels::testing::first_diff;
using kernels::testing::random_vec;

TEST(RopeGrid, DeviceCodeMatchesCpuBits) {
  std::mt19937 rng(11);
  for (int64_t hd : {2, 16, 64, 96}) {
    const RopeTable table(hd, 10000.0, 300);
    for (int64_t heads : {1, 3, 9}) {
      const int64_t rows = 7, ldx = heads * hd + 5;
      auto x = random_vec(rng, rows * ldx, 2.0f);
      std::vector<int32_t> pos = {0, 1, 2, 17, 299, 150, 3};
      auto want = x;
      rope(want.data(), ldx, rows, pos.data(), heads, table);
      for (ThreadOrder order : kOrders) {
        auto got = x;
        detail::RopeParams p{got.data(), ldx, rows, pos.data(), heads, hd, table.max_positions(),
                             table.cos_row(0), table.sin_row(0)};
        run_grid(detail::rope_launch(p), order, [&](HostBlock& b) { detail::rope_block(b, p); });
        ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1) << "hd=" << hd;
      }
    }
  }
}

TEST(SwigluGrid, DeviceCodeMatchesCpuBits) {
  std::mt19937 rng(12);
  for (int64_t cols : {1, 7, 64, 1536}) {
    const int64_t rows = 5, ld = cols + 3;
    auto g = random_vec(rng, rows * ld, 4.0f), u = random_vec(rng, rows * ld);
    // Extremes through llmrr's exp: overflow, underflow, NaN, ±0, ±inf.
    const float specials[] = {0.0f, -0.0f, 100.0f, -100.0f, 88.0f, -88.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), 1e-30f};
    for (size_t i = 0; i < std::size(specials) && i < g.size(); ++i) g[i * 3 % g.size()] = specials[i];
    std::vector<float> want(rows * ld, 3.0f);
    swiglu(g.data(), ld, u.data(), ld, rows, cols, want.data(), ld, ThreadPool::serial());
    for (ThreadOrder order : kOrders) {
      std::vector<float> got(rows * ld, 3.0f);
      detail::SwigluParams p{g.data(), ld, u.data(), ld, rows, cols, got.data(), ld};
      run_grid(detail::swiglu_launch(p), order, [&](HostBlock& b) { detail::swiglu_block(b, p); });
      ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1) << "cols=" << cols;
    }
  }
}

TEST(EmbeddingGrid, DeviceCodeMatchesCpuBitsF32AndBf16) {
  std::mt19937 rng(13);
  const int64_t vocab = 50, dim = 37, rows = 6, ldo = dim + 2;
  auto table = random_vec(rng, vocab * dim);
  std::vector<uint16_t> table16(table.size());
  for (size_t i = 0; i < table.size(); ++i) table16[i] = numerics::f32_to_bf16(table[i]);
  const std::vector<int32_t> ids = {0, 49, 7, -1, 50, 7};  // two out of range → zeros
  for (WeightType type : {WeightType::kF32, WeightType::kBF16}) {
    const void* t = type == WeightType::kF32 ? static_cast<const void*>(table.data())
                                             : static_cast<const void*>(table16.data());
    std::vector<float> want(rows * ldo, 4.0f);
    embedding(t, type, vocab, dim, ids.data(), rows, want.data(), ldo);
    for (ThreadOrder order : kOrders) {
      std::vector<float> got(rows * ldo, 4.0f);
      detail::EmbeddingParams p{t, type == WeightType::kBF16, vocab, dim, ids.data(), rows,
                                got.data(), ldo};
      run_grid(detail::embedding_launch(p), order,
               [&](HostBlock& b) { detail::embedding_block(b, p); });
      ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1);
    }
  }
}

TEST(MoeCombineGrid, DeviceCodeMatchesReferenceBitsRankAndArrivalOrder) {
  std::mt19937 rng(14);
  for (int k : {1, 2, 8}) {
    const int64_t rows = 9, dim = 70, ld_expert = dim + 1, ldo = dim + 4;
    const int64_t n_expert_rows = rows * k;
    auto experts = random_vec(rng, n_expert_rows * ld_expert);
    auto gates = random_vec(rng, rows * k);
    std::vector<int32_t> src(rows * k);
    for (int64_t i = 0; i < rows * k; ++i) src[i] = (i % 5 == 3) ? -1 : static_cast<int32_t>((i * 7) % n_expert_rows);
    Plan rank;
    rank.op = OpKind::kCombine;
    Plan arrival = rank;
    arrival.order = CombineOrder::kArrival;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<uint16_t> perm(k);
      for (int i = 0; i < k; ++i) perm[i] = static_cast<uint16_t>(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      arrival.arrival.insert(arrival.arrival.end(), perm.begin(), perm.end());
    }
    Plan malformed = arrival;
    malformed.arrival.pop_back();  // wrong size → rank order
    for (const Plan* plan : {&rank, &arrival, &malformed}) {
      std::vector<float> want(rows * ldo, 2.0f);
      ref::moe_combine(experts.data(), ld_expert, src.data(), gates.data(), rows, k, dim,
                       want.data(), ldo, plan == &malformed ? rank : *plan);
      const std::vector<uint16_t> order = detail::combine_order(*plan, rows, k);
      EXPECT_EQ(order.empty(), plan != &arrival);
      for (ThreadOrder to : kOrders) {
        std::vector<float> got(rows * ldo, 2.0f);
        detail::CombineParams p{experts.data(), ld_expert, src.data(), gates.data(), rows, k, dim,
                                got.data(), ldo, order.empty() ? nullptr : order.data()};
        run_grid(detail::combine_launch(p), to,
                 [&](HostBlock& b) { detail::moe_combine_block(b, p); });
        ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1) << "k=" << k;
      }
    }
  }
}

TEST(RouterScoresGrid, SoftmaxAndSigmoidMatchCpuBits) {
  std::mt19937 rng(15);
  for (int64_t n : {1, 8, 64, 129}) {
    const int64_t rows = 5, ld = n + 2;
    auto x = random_vec(rng, rows * ld, 6.0f);
    for (bool softmax : {true, false}) {
      auto want = x;
      for (int64_t r = 0; r < rows; ++r) {
        if (softmax) {
          softmax_inplace(want.data() + r * ld, n);
        } else {
          sigmoid_inplace(want.data() + r * ld, n);
        }
      }
      for (ThreadOrder order : kOrders) {
        auto got = x;
        detail::ScoreParams p{got.data(), ld, rows, n, softmax};
        run_grid(detail::score_launch(p), order, [&](HostBlock& b) { detail::score_block(b, p); });
        ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1)
            << (softmax ? "softmax" : "sigmoid") << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace llmrr::kernels::cuda::testing
