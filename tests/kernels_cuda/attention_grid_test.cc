// The exact CUDA attention's device code (kernels/cuda/attention_phases.h) on the CPU grid
// runner: plans (split by count or size, new KV separate or not) × shapes × rows of several
// sequences in one call, bit for bit against ref::attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/attention_phases.h"
#include "grid_runner.h"
#include "llmrr/kernels/reference.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr::kernels::cuda::testing {
namespace {

using kernels::testing::first_diff;
using kernels::testing::random_vec;

using kernels::testing::all_attention_plans;
using kernels::testing::attn_count;
using kernels::testing::attn_size;

// A paged cache for several sequences, blocks drawn from one shuffled pool; the same cache
// serves the CPU reference (kernels::KvSeqView) and the device code (cuda::KvSeqView).
class PagedKv {
 public:
  PagedKv(std::mt19937& rng, const AttnShape& shape, int32_t bs, const std::vector<int32_t>& lens) {
    int64_t total = 0;
    for (int32_t l : lens) total += (l + bs - 1) / bs;
    const int64_t block = static_cast<int64_t>(bs) * shape.kv_heads * shape.head_dim;
    k_ = random_vec(rng, total * block);
    v_ = random_vec(rng, total * block);
    std::vector<int64_t> order(total);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    int64_t next = 0;
    for (int32_t l : lens) {
      auto kb = std::make_unique<std::vector<const float*>>();
      auto vb = std::make_unique<std::vector<const float*>>();
      for (int32_t b = 0; b < (l + bs - 1) / bs; ++b, ++next) {
        kb->push_back(k_.data() + order[next] * block);
        vb->push_back(v_.data() + order[next] * block);
      }
      cpu_.push_back(kernels::KvSeqView{kb->data(), vb->data(), bs});
      dev_.push_back(cuda::KvSeqView{kb->data(), vb->data(), bs});
      tables_.push_back(std::move(kb));
      tables_.push_back(std::move(vb));
    }
  }
  const kernels::KvSeqView* cpu(size_t s) const { return &cpu_[s]; }
  const cuda::KvSeqView& dev(size_t s) const { return dev_[s]; }

 private:
  std::vector<float> k_, v_;
  std::vector<std::unique_ptr<std::vector<const float*>>> tables_;
  std::vector<kernels::KvSeqView> cpu_;
  std::vector<cuda::KvSeqView> dev_;
};

struct RowSpec {
  size_t seq;
  int32_t pos, cached;
};

void grid_attention(std::span<const cuda::AttnRow> rows, const AttnShape& shape, const Plan& plan,
                    ThreadOrder order) {
  detail::AttnParams p{};
  detail::Launch l;
  ASSERT_EQ(detail::attention_prepare(rows, shape, plan, p, l), "");
  std::vector<float> scratch(detail::attention_scratch_floats(p));
  p.rows = rows.data();
  p.scratch = scratch.data();
  run_grid(l, order, [&](HostBlock& b) { detail::attention_block(b, p); });
}

struct Case {
  AttnShape shape;
  int32_t block_size;
  std::vector<int32_t> lens;
  std::vector<RowSpec> rows;
};

std::vector<Case> cases() {
  return {
      // One decode row.
      {{2, 1, 16, 0.25f}, 4, {9}, {{0, 8, 8}}},
      // GQA, a prefill chunk with a cached prefix and a decode row of another sequence.
      {{4, 2, 64, 0.125f}, 16, {37, 70}, {{0, 30, 28}, {0, 31, 28}, {0, 36, 28}, {1, 69, 69}}},
      // head_dim not a multiple of 16, a fresh prefill (cached 0), a row with pos < 0.
      {{3, 3, 24, 0.2f}, 5, {12}, {{0, 0, 0}, {0, 5, 0}, {0, 11, 0}, {0, -1, 0}}},
      // Long enough that parts span several chunks of threads (128), head_dim 128.
      {{2, 1, 128, 0.08f}, 32, {300}, {{0, 299, 260}, {0, 150, 100}}},
      // head_dim > 128 (256 threads per block), cached past pos (clamped).
      {{2, 2, 160, 0.07f}, 8, {40}, {{0, 39, 45}, {0, 20, 3}}},
  };
}

class AttentionGridTest : public ::testing::TestWithParam<Plan> {};

TEST_P(AttentionGridTest, DeviceCodeMatchesReferenceBits) {
  const Plan plan = GetParam();
  std::mt19937 rng(77);
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message() << "heads=" << c.shape.heads << " kv=" << c.shape.kv_heads
                                      << " hd=" << c.shape.head_dim << " " << plan_to_string(plan));
    PagedKv kv(rng, c.shape, c.block_size, c.lens);
    const int64_t per = static_cast<int64_t>(c.shape.heads) * c.shape.head_dim;
    auto q = random_vec(rng, c.rows.size() * per);
    std::vector<float> want(c.rows.size() * per, 5.0f);
    std::vector<kernels::AttnRow> cpu_rows;
    for (size_t i = 0; i < c.rows.size(); ++i) {
      kernels::AttnRow r;
      r.q = q.data() + i * per;
      r.out = want.data() + i * per;
      r.kv = kv.cpu(c.rows[i].seq);
      r.pos = c.rows[i].pos;
      r.cached = c.rows[i].cached;
      cpu_rows.push_back(r);
    }
    ref::attention(cpu_rows, c.shape, plan);
    for (ThreadOrder order : kOrders) {
      std::vector<float> got(want.size(), 5.0f);
      std::vector<cuda::AttnRow> rows;
      for (size_t i = 0; i < c.rows.size(); ++i) {
        cuda::AttnRow r;
        r.q = q.data() + i * per;
        r.out = got.data() + i * per;
        r.kv = kv.dev(c.rows[i].seq);
        r.pos = c.rows[i].pos;
        r.cached = c.rows[i].cached;
        rows.push_back(r);
      }
      grid_attention(rows, c.shape, plan, order);
      const int64_t d = first_diff(got.data(), want.data(), got.size());
      ASSERT_EQ(d, -1) << "first diff at " << d << ": " << (d >= 0 ? got[d] : 0) << " vs "
                       << (d >= 0 ? want[d] : 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, AttentionGridTest, ::testing::ValuesIn(all_attention_plans()),
                         [](const ::testing::TestParamInfo<Plan>& info) {
                           const Plan& p = info.param;
                           std::string s = p.mode == SplitMode::kCount
                                               ? "count" + std::to_string(p.splits)
                                               : "size" + std::to_string(p.split_size);
                           if (p.separate_new_kv) s += "_separate";
                           return s;
                         });

TEST(AttentionGrid, RefusesShapesPastTheKernelLimits) {
  detail::AttnParams p{};
  detail::Launch l;
  std::vector<cuda::AttnRow> rows(1);
  EXPECT_NE(detail::attention_prepare(rows, {2, 1, 300, 0.1f}, attn_count(1, false), p, l), "");
  EXPECT_NE(detail::attention_prepare(rows, {3, 2, 64, 0.1f}, attn_count(1, false), p, l), "");
  EXPECT_EQ(detail::attention_prepare(rows, {4, 2, 256, 0.1f}, attn_count(1, false), p, l), "");
}

}  // namespace
}  // namespace llmrr::kernels::cuda::testing
