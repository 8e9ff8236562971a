// Device top-k and row fingerprints (kernels/cuda/select_phases.h, xxh3_hd.h) on the CPU grid
// runner: top-k against kernels::topk (ties, NaN, ±0, k > n, every thread count the launch
// picks), fingerprints against format's fingerprint_row for every XXH3 length class.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/select_phases.h"
#include "grid_runner.h"
#include "llmrr/format/fingerprint.h"
#include "llmrr/kernels/ops.h"
#include "test_util.h"

namespace llmrr::kernels::cuda::testing {
namespace {

using kernels::testing::random_vec;

const uint8_t kSecret[] = {LLMRR_XXH3_SECRET_BYTES};
static_assert(sizeof(kSecret) == xxh3::kSecretSize);

void grid_topk(const float* x, int64_t ldx, int64_t rows, int64_t n, int k, int32_t* ids,
               float* values, ThreadOrder order) {
  detail::TopkParams p{x, ldx, rows, n, k, ids, values};
  detail::Launch l;
  ASSERT_EQ(detail::topk_prepare(p, l), "");
  run_grid(l, order, [&](HostBlock& b) { detail::topk_block(b, p); });
}

TEST(TopkGrid, DeviceCodeMatchesCpuTopk) {
  std::mt19937 rng(21);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {1, 5, 31, 32, 100, 1000, 49152}) {
    for (int k : {1, 2, 8, 32, 100, 128}) {
      const int64_t rows = 3, ldx = n + 1;
      auto x = random_vec(rng, rows * ldx);
      // Row 1: heavy ties (a few distinct values) with ±0; row 2: NaNs and infinities too.
      for (int64_t i = 0; i < n; ++i) {
        x[ldx + i] = static_cast<float>(static_cast<int>(rng() % 4)) - 1.0f;
        if (i % 7 == 0) x[ldx + i] = -0.0f;
        if (i % 11 == 0) x[2 * ldx + i] = nan;
        if (i % 13 == 5) x[2 * ldx + i] = -std::numeric_limits<float>::infinity();
      }
      std::vector<int32_t> want_ids(rows * k);
      std::vector<float> want_v(rows * k);
      for (int64_t r = 0; r < rows; ++r) {
        topk(x.data() + r * ldx, n, k, want_ids.data() + r * k, want_v.data() + r * k);
      }
      for (ThreadOrder order : kOrders) {
        std::vector<int32_t> ids(rows * k, 99);
        std::vector<float> v(rows * k, 99.0f);
        grid_topk(x.data(), ldx, rows, n, k, ids.data(), v.data(), order);
        ASSERT_EQ(ids, want_ids) << "n=" << n << " k=" << k;
        ASSERT_EQ(std::memcmp(v.data(), want_v.data(), v.size() * sizeof(float)), 0)
            << "n=" << n << " k=" << k;
      }
    }
  }
}

TEST(TopkGrid, RefusesKPastTheKernelLimit) {
  std::vector<float> x(4);
  detail::TopkParams p{x.data(), 4, 1, 4, kMaxTopK + 1, nullptr, nullptr};
  detail::Launch l;
  EXPECT_NE(detail::topk_prepare(p, l), "");
}

std::vector<RowFingerprint> grid_fingerprints(const float* x, int64_t ldx, int64_t rows,
                                              int64_t n, ThreadOrder order) {
  std::vector<RowFingerprint> out(rows);
  detail::FingerprintParams p{x, ldx, rows, n, out.data(), kSecret};
  run_grid(detail::fingerprint_launch(p), order,
           [&](HostBlock& b) { detail::fingerprint_block(b, p); });
  return out;
}

void expect_same(const RowFingerprint& got, const trace::Fingerprint& want, int64_t n) {
  EXPECT_EQ(got.hash, want.hash) << "n=" << n;
  uint32_t a, b;
  std::memcpy(&a, &got.l2, 4);
  std::memcpy(&b, &want.l2, 4);
  EXPECT_EQ(a, b) << "l2, n=" << n;
  std::memcpy(&a, &got.max_abs, 4);
  std::memcpy(&b, &want.max_abs, 4);
  EXPECT_EQ(a, b) << "max_abs, n=" << n;
}

// Every length class of XXH3 (0, 4-8, 9-16, 17-128, 129-240, long with 0..16 stripes in the
// last block, several 1 KiB blocks) and the vocabulary sizes of real models.
TEST(FingerprintGrid, DeviceCodeMatchesFingerprintRowEveryLength) {
  std::mt19937 rng(22);
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 700; ++n) lengths.push_back(n);
  for (int64_t n : {1023, 1024, 1025, 4096, 32000, 49152}) lengths.push_back(n);
  for (int64_t n : lengths) {
    const int64_t rows = 5, ldx = n + 3;  // 5 rows: a block with one row, odd strides
    auto x = random_vec(rng, rows * ldx + 1, 3.0f);
    for (ThreadOrder order : {ThreadOrder::kForward, ThreadOrder::kReverse}) {
      const auto got = grid_fingerprints(x.data(), ldx, rows, n, order);
      for (int64_t r = 0; r < rows; ++r) {
        expect_same(got[r], trace::fingerprint_row(x.data() + r * ldx, n), n);
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(FingerprintGrid, NanAndInfinityAsFingerprintRow) {
  std::mt19937 rng(23);
  const int64_t n = 600;
  auto x = random_vec(rng, 3 * n);
  x[17] = std::numeric_limits<float>::quiet_NaN();
  x[n + 400] = std::numeric_limits<float>::infinity();
  x[2 * n + 3] = -std::numeric_limits<float>::infinity();
  const auto got = grid_fingerprints(x.data(), n, 3, n, ThreadOrder::kForward);
  for (int64_t r = 0; r < 3; ++r) expect_same(got[r], trace::fingerprint_row(x.data() + r * n, n), n);
  EXPECT_TRUE(std::isnan(got[0].l2));
  EXPECT_TRUE(std::isinf(got[1].l2));
}

}  // namespace
}  // namespace llmrr::kernels::cuda::testing
