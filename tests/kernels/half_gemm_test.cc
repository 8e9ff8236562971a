// 16-bit weights kept as stored (PackedWeight::pack_rows16: GGUF F16 and BF16 tensors): gemm
// widens each value exactly inside its micro-kernels, so it gives the bits of the fp32 weight
// of the same values (the convert-at-load path) for every plan, shape, ISA and thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "test_util.h"

namespace llmrr::kernels::testing {
namespace {

Plan plan_of(uint32_t splits, uint32_t k_tile) {
  Plan p;
  p.op = OpKind::kGemm;
  p.splits = splits;
  p.k_tile = k_tile;
  return p;
}

// Random 16-bit patterns of finite values (every exponent, subnormals and zeros included).
std::vector<uint16_t> random_halves(std::mt19937& rng, size_t n, bool bf16) {
  std::vector<uint16_t> v(n);
  for (auto& h : v) {
    do {
      h = static_cast<uint16_t>(rng());
    } while (bf16 ? (h & 0x7f80) == 0x7f80 : (h & 0x7c00) == 0x7c00);
    if (bf16 && (h & 0x7f80) > 0x4f00) h &= 0xc7ff;  // keep sums far from overflow
  }
  return v;
}

TEST(HalfGemm, StoredF16AndBf16EqualTheirFp32Weights) {
  IsaGuard guard;
  std::mt19937 rng(1616);
  const struct {
    int64_t m, n, k;
  } shapes[] = {{1, 32, 16}, {1, 33, 40}, {2, 70, 64}, {3, 5, 7}, {4, 130, 48}, {9, 64, 33},
                {13, 47, 96}};
  const Plan plans[] = {plan_of(1, 0), plan_of(1, 16), plan_of(3, 0), plan_of(4, 32)};
  for (WeightType type : {WeightType::kF16, WeightType::kBF16}) {
    const bool bf16 = type == WeightType::kBF16;
    for (const auto& s : shapes) {
      const auto raw = random_halves(rng, static_cast<size_t>(s.n * s.k), bf16);
      std::vector<const uint16_t*> rows(static_cast<size_t>(s.n));
      for (int64_t r = 0; r < s.n; ++r) rows[r] = raw.data() + r * s.k;
      const PackedWeight w = PackedWeight::pack_rows16(rows.data(), s.n, s.k, type);
      ASSERT_EQ(w.type(), type);
      std::vector<float> wide(raw.size());
      for (size_t i = 0; i < raw.size(); ++i)
        wide[i] = bf16 ? numerics::bf16_to_f32(raw[i]) : numerics::f16_to_f32(raw[i]);
      const PackedWeight f32 = PackedWeight::pack(wide.data(), s.n, s.k, WeightType::kF32);
      for (int64_t r = 0; r < s.n; ++r)
        for (int64_t c = 0; c < s.k; ++c)
          ASSERT_EQ(bits(w.at(r, c)), bits(wide[r * s.k + c])) << r << "," << c;
      const auto x = random_vec(rng, static_cast<size_t>(s.m * s.k));
      for (const Plan& plan : plans) {
        SCOPED_TRACE(::testing::Message() << (bf16 ? "bf16" : "f16") << " m=" << s.m
                                          << " n=" << s.n << " k=" << s.k << " "
                                          << plan_to_string(plan));
        std::vector<float> want(s.m * s.n);
        ref::gemm(x.data(), s.k, s.m, w, want.data(), s.n, plan);
        for (Isa isa : all_isas()) {
          set_isa(isa);
          for (ThreadPool* pool : pools()) {
            std::vector<float> got(want.size()), base(want.size());
            gemm(x.data(), s.k, s.m, w, got.data(), s.n, plan, *pool);
            gemm(x.data(), s.k, s.m, f32, base.data(), s.n, plan, *pool);
            ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1)
                << isa_name(isa) << " threads=" << pool->size();
            ASSERT_EQ(first_diff(got.data(), base.data(), got.size()), -1)
                << isa_name(isa) << " threads=" << pool->size();
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace llmrr::kernels::testing
