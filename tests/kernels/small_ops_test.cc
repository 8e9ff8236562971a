// The ops without a plan (RoPE, SwiGLU, embedding, router scoring, argmax, top-k) and the
// MoE combine (rank or arrival order).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "test_util.h"

namespace llmrr::kernels::testing {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Rope, MatchesFp64AndIsIdentityAtPositionZero) {
  const int64_t hd = 64, heads = 3, rows = 4;
  const RopeTable table(hd, 10000.0, 512);
  EXPECT_EQ(table.head_dim(), hd);
  EXPECT_EQ(table.max_positions(), 512);
  std::mt19937 rng(1);
  auto x = random_vec(rng, rows * heads * hd);
  const std::vector<int32_t> pos = {0, 1, 17, 511};
  auto y = x;
  rope(y.data(), heads * hd, rows, pos.data(), heads, table);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const float* in = x.data() + r * heads * hd + h * hd;
        const float* out = y.data() + r * heads * hd + h * hd;
        const double inv = 1.0 / std::pow(10000.0, (2.0 * i) / hd);
        const double a = pos[r] * inv;
        const double x1 = in[i], x2 = in[i + hd / 2];
        const double want1 = x1 * std::cos(a) - x2 * std::sin(a);
        const double want2 = x2 * std::cos(a) + x1 * std::sin(a);
        // angle is computed in fp32 (as Hugging Face does): allow its rounding too.
        const double scale = (std::fabs(x1) + std::fabs(x2)) * (1.0 + std::fabs(a) * 4);
        ASSERT_LE(std::fabs(out[i] - want1), tolerance("rope", 0, scale));
        ASSERT_LE(std::fabs(out[i + hd / 2] - want2), tolerance("rope", 0, scale));
        if (pos[r] == 0) {
          ASSERT_EQ(out[i], in[i]);
          ASSERT_EQ(out[i + hd / 2], in[i + hd / 2]);
        }
      }
}

TEST(Rope, LiteralFormulaWithTableValues) {
  const int64_t hd = 8;
  const RopeTable table(hd, 500000.0, 40);
  std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  const int32_t p = 33;
  auto out = v;
  rope(out.data(), hd, 1, &p, 1, table);
  for (int i = 0; i < 4; ++i) {
    const float c = table.cos_row(p)[i], s = table.sin_row(p)[i];
    EXPECT_EQ(bits(out[i]), bits(v[i] * c - v[i + 4] * s));
    EXPECT_EQ(bits(out[i + 4]), bits(v[i + 4] * c + v[i] * s));
  }
}

TEST(SwiGlu, MatchesScalarDefinitionEveryIsaAndFp64) {
  IsaGuard guard;
  std::mt19937 rng(3);
  for (int64_t cols : {1, 7, 8, 9, 100, 1000}) {
    const int64_t rows = 5, ld = cols + 3;
    auto g = random_vec(rng, rows * ld, 4.0f), u = random_vec(rng, rows * ld);
    g[0] = 90.0f;                 // exp(−g) tiny
    if (cols > 1) g[1] = -95.0f;  // exp(−g) = inf → silu = −0
    std::vector<float> want(rows * ld, 1.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        want[r * ld + c] = numerics::silu_f32(g[r * ld + c]) * u[r * ld + c];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const double gg = g[r * ld + c];
        const double w64 = gg / (1.0 + std::exp(-gg)) * u[r * ld + c];
        // Results below the normal range may flush to 0 (exp overflows to inf there).
        ASSERT_LE(std::fabs(want[r * ld + c] - w64),
                  tolerance("silu", 0, std::fabs(w64)) + 0x1p-126 * std::fabs(u[r * ld + c]));
      }
    for (Isa isa : all_isas()) {
      set_isa(isa);
      for (ThreadPool* pool : pools()) {
        std::vector<float> got(rows * ld, 1.0f);
        swiglu(g.data(), ld, u.data(), ld, rows, cols, got.data(), ld, *pool);
        ASSERT_TRUE(same_bits(got.data(), want.data(), got.size())) << isa_name(isa) << " " << cols;
      }
    }
  }
}

Plan combine_plan(std::vector<uint16_t> arrival = {}) {
  Plan p;
  p.op = OpKind::kCombine;
  if (!arrival.empty()) {
    p.order = CombineOrder::kArrival;
    p.arrival = std::move(arrival);
  }
  return p;
}

TEST(MoeCombine, MatchesReferenceAndFp64WithDropsAndArrivalOrder) {
  IsaGuard guard;
  std::mt19937 rng(4);
  const int64_t rows = 37, dim = 300;
  const int k = 3;
  const int64_t n_expert_rows = rows * k;
  auto ex = random_vec(rng, n_expert_rows * (dim + 1));
  std::vector<int32_t> src(rows * k);
  std::vector<float> gates(rows * k);
  std::vector<uint16_t> arrival;
  std::uniform_int_distribution<int> pick(0, static_cast<int>(n_expert_rows) - 1);
  for (int64_t i = 0; i < rows * k; ++i) {
    src[i] = (i % 7 == 3) ? -1 : pick(rng);  // some dropped slots
    gates[i] = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint16_t> perm = {0, 1, 2};
    std::shuffle(perm.begin(), perm.end(), rng);
    arrival.insert(arrival.end(), perm.begin(), perm.end());
  }
  for (const Plan& plan : {combine_plan(), combine_plan(arrival)}) {
    ASSERT_EQ(plan_check(plan, rows, k), "");
    std::vector<float> want(rows * dim);
    ref::moe_combine(ex.data(), dim + 1, src.data(), gates.data(), rows, k, dim, want.data(), dim,
                     plan);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) {
        double w64 = 0, mag = 0;
        for (int i = 0; i < k; ++i) {
          if (src[r * k + i] < 0) continue;
          const double t =
              static_cast<double>(gates[r * k + i]) * ex[src[r * k + i] * (dim + 1) + d];
          w64 += t;
          mag += std::fabs(t);
        }
        ASSERT_LE(std::fabs(want[r * dim + d] - w64), tolerance("combine", k, mag));
      }
    for (Isa isa : all_isas()) {
      set_isa(isa);
      for (ThreadPool* pool : pools()) {
        std::vector<float> got(rows * dim, 3.0f);
        moe_combine(ex.data(), dim + 1, src.data(), gates.data(), rows, k, dim, got.data(), dim,
                    plan, *pool);
        ASSERT_TRUE(same_bits(got.data(), want.data(), got.size())) << isa_name(isa);
      }
    }
  }
}

TEST(MoeCombine, ArrivalOrderPermutesSlotsExactly) {
  // Slots: gate·row = 1e8, −1e8, 1 (rank order 0, 1, 2).
  const int k = 3;
  std::vector<float> ex = {1e8f, -1e8f, 1.0f};
  std::vector<int32_t> src = {0, 1, 2};
  std::vector<float> gates = {1.0f, 1.0f, 1.0f};
  auto run = [&](const Plan& p) {
    float out = -7.0f;
    moe_combine(ex.data(), 1, src.data(), gates.data(), 1, k, 1, &out, 1, p, ThreadPool::serial());
    return out;
  };
  EXPECT_EQ(run(combine_plan()), 1.0f);  // fma(1,1,fma(−1e8,1,fma(1e8,1,0)))
  EXPECT_EQ(run(combine_plan({0, 1, 2})), 1.0f);
  EXPECT_EQ(run(combine_plan({2, 0, 1})), 0.0f);  // 1 absorbed into 1e8
  EXPECT_EQ(run(combine_plan({1, 2, 0})), 0.0f);
  EXPECT_EQ(run(combine_plan({1, 0, 2})), 1.0f);
  // A dropped slot is skipped, whatever its gate.
  src[0] = -1;
  gates[0] = kNaN;
  EXPECT_EQ(run(combine_plan({2, 0, 1})), -1e8f);  // 1 + −1e8 rounds to −1e8
  EXPECT_EQ(run(combine_plan({0, 1, 2})), -1e8f);
  // Every slot dropped: +0.
  src = {-1, -1, -1};
  EXPECT_EQ(bits(run(combine_plan())), bits(0.0f));
}

TEST(Embedding, CopiesOrWidensRowsAndZeroesBadIds) {
  const int64_t vocab = 5, dim = 6;
  std::mt19937 rng(2);
  auto table = random_vec(rng, vocab * dim);
  std::vector<uint16_t> bf(vocab * dim);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = numerics::f32_to_bf16(table[i]);
  const std::vector<int32_t> ids = {4, 0, 4, -1, 5};
  std::vector<float> out(ids.size() * (dim + 1), 8.0f), outb(ids.size() * (dim + 1), 8.0f);
  embedding(table.data(), WeightType::kF32, vocab, dim, ids.data(), 5, out.data(), dim + 1);
  embedding(bf.data(), WeightType::kBF16, vocab, dim, ids.data(), 5, outb.data(), dim + 1);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t d = 0; d < dim; ++d) {
      const bool ok = ids[r] >= 0 && ids[r] < vocab;
      EXPECT_EQ(out[r * (dim + 1) + d], ok ? table[ids[r] * dim + d] : 0.0f);
      EXPECT_EQ(outb[r * (dim + 1) + d], ok ? numerics::bf16_to_f32(bf[ids[r] * dim + d]) : 0.0f);
    }
    EXPECT_EQ(out[r * (dim + 1) + dim], 8.0f) << "stride gap untouched";
  }
}

TEST(Router, SoftmaxFollowsTheDefinitionAndFp64) {
  std::mt19937 rng(6);
  for (int64_t n : {1, 2, 8, 60, 128}) {
    auto x = random_vec(rng, n, 3.0f);
    auto y = x;
    softmax_inplace(y.data(), n);
    float mx = x[0];
    for (float v : x) mx = v > mx ? v : mx;
    std::vector<float> e(n);
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      e[i] = numerics::exp_f32(x[i] - mx);
      s = s + e[i];
    }
    double s64 = 0;
    for (int64_t i = 0; i < n; ++i) s64 += std::exp(static_cast<double>(x[i]) - mx);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(bits(y[i]), bits(e[i] / s));
      const double w = std::exp(static_cast<double>(x[i]) - mx) / s64;
      EXPECT_LE(std::fabs(y[i] - w), tolerance("softmax", static_cast<double>(n), w));
    }
  }
  std::vector<float> big = {1000.0f, 1000.0f, -kInf};
  softmax_inplace(big.data(), 3);
  EXPECT_EQ(big[0], 0.5f);
  EXPECT_EQ(big[1], 0.5f);
  EXPECT_EQ(big[2], 0.0f);
}

TEST(Router, SigmoidFollowsTheDefinition) {
  std::vector<float> x = {0.0f, 1.0f, -1.0f, 50.0f, -100.0f, kInf, -kInf};
  auto y = x;
  sigmoid_inplace(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(bits(y[i]), bits(1.0f / (1.0f + numerics::exp_f32(-x[i]))));
  }
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[6], 0.0f);
}

TEST(Argmax, LowestIdWinsTiesAndNanNeverWins) {
  std::vector<float> a = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(argmax(a.data(), 4), 1);
  std::vector<float> b = {kNaN, -1.0f, kNaN, 5.0f, 5.0f, kNaN};
  EXPECT_EQ(argmax(b.data(), 6), 3);
  std::vector<float> c = {-kInf, -kInf};
  EXPECT_EQ(argmax(c.data(), 2), 0);
  std::vector<float> d = {kNaN, kNaN};
  EXPECT_EQ(argmax(d.data(), 2), 0);
  EXPECT_EQ(argmax(d.data(), 0), -1);
  std::vector<float> z = {-0.0f, 0.0f};  // equal values: the lower id
  EXPECT_EQ(argmax(z.data(), 2), 0);
  std::vector<float> e = {1.0f, kInf, kInf};
  EXPECT_EQ(argmax(e.data(), 3), 1);
}

TEST(TopK, DescendingWithTiesToLowerIdAndNanLast) {
  std::vector<float> x = {2.0f, 5.0f, kNaN, 5.0f, 1.0f, 2.0f, -kInf};
  int32_t ids[5];
  float vals[5];
  topk(x.data(), 7, 5, ids, vals);
  const int32_t want_ids[5] = {1, 3, 0, 5, 4};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ids[i], want_ids[i]) << i;
    EXPECT_EQ(vals[i], x[want_ids[i]]);
  }
  int32_t ids9[9];
  float vals9[9];
  topk(x.data(), 7, 9, ids9, vals9);
  EXPECT_EQ(ids9[5], 6);  // −inf ranks above NaN
  EXPECT_EQ(ids9[6], 2);  // NaN last
  EXPECT_EQ(ids9[7], -1);
  EXPECT_EQ(vals9[8], -kInf);
  // Agrees with argmax and with a full sort on random data.
  std::mt19937 rng(3);
  auto r = random_vec(rng, 5000);
  for (int i = 0; i < 5000; i += 10) r[i] = 0.5f;  // many ties
  std::vector<int32_t> tid(20);
  std::vector<float> tv(20);
  topk(r.data(), 5000, 20, tid.data(), tv.data());
  EXPECT_EQ(tid[0], argmax(r.data(), 5000));
  for (int i = 1; i < 20; ++i) {
    EXPECT_TRUE(tv[i - 1] > tv[i] || (tv[i - 1] == tv[i] && tid[i - 1] < tid[i])) << i;
  }
  int larger = 0;
  for (float v : r) larger += v > tv[19];
  EXPECT_LT(larger, 20);
}

}  // namespace
}  // namespace llmrr::kernels::testing
