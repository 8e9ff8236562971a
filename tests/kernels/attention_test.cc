// Attention over a paged KV cache: plans (split by count or size, new KV separate or not)
// × shapes against fp64 and bit for bit against ref::attention across ISAs and thread
// counts; rows of different sequences, lengths and cached prefixes in one call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr::kernels::testing {
namespace {

// A paged cache for several sequences: blocks drawn from one shuffled pool, so consecutive
// blocks of a sequence are not adjacent in memory.
class PagedKv {
 public:
  PagedKv(std::mt19937& rng, const AttnShape& shape, int32_t block_size,
          const std::vector<int32_t>& lengths)
      : shape_(shape), bs_(block_size) {
    int64_t total_blocks = 0;
    for (int32_t l : lengths) total_blocks += (l + bs_ - 1) / bs_;
    const int64_t block_elems = static_cast<int64_t>(bs_) * shape.kv_heads * shape.head_dim;
    k_pool_ = random_vec(rng, total_blocks * block_elems);
    v_pool_ = random_vec(rng, total_blocks * block_elems);
    std::vector<int64_t> order(total_blocks);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    int64_t next = 0;
    for (int32_t l : lengths) {
      auto kb = std::make_unique<std::vector<const float*>>();
      auto vb = std::make_unique<std::vector<const float*>>();
      for (int32_t b = 0; b < (l + bs_ - 1) / bs_; ++b) {
        kb->push_back(k_pool_.data() + order[next] * block_elems);
        vb->push_back(v_pool_.data() + order[next] * block_elems);
        ++next;
      }
      KvSeqView view;
      view.k_blocks = kb->data();
      view.v_blocks = vb->data();
      view.block_size = bs_;
      k_tables_.push_back(std::move(kb));
      v_tables_.push_back(std::move(vb));
      views_.push_back(view);
    }
  }
  const KvSeqView* view(size_t seq) const { return &views_[seq]; }
  const float* k(size_t seq, int64_t pos, int32_t g) const {
    return (*k_tables_[seq])[pos / bs_] + ((pos % bs_) * shape_.kv_heads + g) * shape_.head_dim;
  }
  const float* v(size_t seq, int64_t pos, int32_t g) const {
    return (*v_tables_[seq])[pos / bs_] + ((pos % bs_) * shape_.kv_heads + g) * shape_.head_dim;
  }

 private:
  AttnShape shape_;
  int32_t bs_;
  std::vector<float> k_pool_, v_pool_;
  std::vector<std::unique_ptr<std::vector<const float*>>> k_tables_, v_tables_;
  std::vector<KvSeqView> views_;
};

struct RowSpec {
  size_t seq;
  int32_t pos, cached;
};

struct Batch {
  std::vector<float> q, out;
  std::vector<AttnRow> rows;
};

Batch make_batch(std::mt19937& rng, const PagedKv& kv, const AttnShape& shape,
                 const std::vector<RowSpec>& specs) {
  Batch b;
  const int64_t per = static_cast<int64_t>(shape.heads) * shape.head_dim;
  b.q = random_vec(rng, specs.size() * per);
  b.out.assign(specs.size() * per, 0.0f);
  for (size_t i = 0; i < specs.size(); ++i) {
    AttnRow r;
    r.q = b.q.data() + i * per;
    r.out = b.out.data() + i * per;
    r.kv = kv.view(specs[i].seq);
    r.pos = specs[i].pos;
    r.cached = specs[i].cached;
    b.rows.push_back(r);
  }
  return b;
}

void fp64_check(const PagedKv& kv, const AttnShape& shape, const std::vector<RowSpec>& specs,
                const Batch& b) {
  const int32_t hd = shape.head_dim, group = shape.heads / shape.kv_heads;
  for (size_t i = 0; i < specs.size(); ++i) {
    for (int32_t h = 0; h < shape.heads; ++h) {
      const float* q = b.rows[i].q + h * hd;
      const int32_t g = h / group;
      std::vector<double> s(specs[i].pos + 1);
      double mx = -1e300;
      for (int32_t j = 0; j <= specs[i].pos; ++j) {
        double d = 0;
        const float* kj = kv.k(specs[i].seq, j, g);
        for (int32_t e = 0; e < hd; ++e) d += static_cast<double>(q[e]) * kj[e];
        s[j] = d * shape.scale;
        mx = std::max(mx, s[j]);
      }
      double l = 0, vmax = 0;
      std::vector<double> o(hd, 0.0);
      for (int32_t j = 0; j <= specs[i].pos; ++j) {
        const double e = std::exp(s[j] - mx);
        l += e;
        const float* vj = kv.v(specs[i].seq, j, g);
        for (int32_t d = 0; d < hd; ++d) {
          o[d] += e * vj[d];
          vmax = std::max(vmax, std::fabs(static_cast<double>(vj[d])));
        }
      }
      for (int32_t d = 0; d < hd; ++d) {
        const double want = o[d] / l;
        ASSERT_LE(std::fabs(b.rows[i].out[h * hd + d] - want),
                  tolerance("attention", specs[i].pos + 1.0 + hd, vmax))
            << "row " << i << " head " << h << " d " << d;
      }
    }
  }
}

struct AttnCase {
  AttnShape shape;
  int32_t block_size;
};

TEST(Attention, MatchesReferenceBitsAndFp64EveryPlanIsaThreadCount) {
  IsaGuard guard;
  std::mt19937 rng(77);
  const AttnCase cases[] = {
      {{4, 4, 16, 0.25f}, 4},
      {{8, 2, 64, 0.125f}, 16},
      {{6, 3, 100, 0.1f}, 5},
      {{2, 1, 128, 0.088388f}, 32},
  };
  // Three sequences; rows at many positions, some with a cached prefix, one at pos 0.
  const std::vector<int32_t> lengths = {131, 40, 9};
  const std::vector<RowSpec> specs = {
      {0, 0, 0},   {0, 130, 120}, {1, 39, 39}, {2, 8, 0}, {1, 17, 5},
      {0, 64, 64}, {2, 3, 4},     {0, 129, 0}, {1, 1, 1}, {0, 100, 37},
  };
  for (const AttnCase& c : cases) {
    PagedKv kv(rng, c.shape, c.block_size, lengths);
    Batch base = make_batch(rng, kv, c.shape, specs);
    for (const Plan& plan : all_attention_plans()) {
      SCOPED_TRACE(::testing::Message()
                   << "heads " << c.shape.heads << "/" << c.shape.kv_heads << " hd "
                   << c.shape.head_dim << " " << plan_to_string(plan));
      Batch want = base;
      for (size_t i = 0; i < specs.size(); ++i) {
        want.rows[i].q = want.q.data() + (base.rows[i].q - base.q.data());
        want.rows[i].out = want.out.data() + (base.rows[i].out - base.out.data());
      }
      ref::attention(want.rows, c.shape, plan);
      fp64_check(kv, c.shape, specs, want);
      for (Isa isa : all_isas()) {
        set_isa(isa);
        for (ThreadPool* pool : pools()) {
          Batch got = want;
          for (size_t i = 0; i < specs.size(); ++i) {
            got.rows[i].q = got.q.data() + (want.rows[i].q - want.q.data());
            got.rows[i].out = got.out.data() + (want.rows[i].out - want.out.data());
          }
          std::fill(got.out.begin(), got.out.end(), -5.0f);
          attention(got.rows, c.shape, plan, *pool);
          const int64_t d = first_diff(got.out.data(), want.out.data(), got.out.size());
          ASSERT_EQ(d, -1) << isa_name(isa) << " threads " << pool->size() << " at " << d;
        }
      }
    }
  }
}

// Random shapes, plans and batches (rows of several sequences at random positions with
// random cached prefixes), every ISA against the reference.
TEST(Attention, RandomBatchesAndPlansMatchReference) {
  IsaGuard guard;
  std::mt19937 rng(4242);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int c = 0; c < 60; ++c) {
    const int32_t kvh = uni(1, 3), group = uni(1, 6), hd = 2 * uni(1, 72);
    const AttnShape shape{kvh * group, kvh, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
    std::vector<int32_t> lengths(uni(1, 3));
    for (auto& l : lengths) l = uni(1, 90);
    PagedKv kv(rng, shape, uni(1, 20), lengths);
    std::vector<RowSpec> specs(uni(1, 6));
    for (auto& s : specs) {
      s.seq = static_cast<size_t>(uni(0, static_cast<int>(lengths.size()) - 1));
      s.pos = uni(0, lengths[s.seq] - 1);
      s.cached = uni(0, s.pos + 1);
    }
    Plan plan = uni(0, 1) ? attn_count(static_cast<uint32_t>(uni(1, 9)), uni(0, 1))
                          : attn_size(static_cast<uint32_t>(uni(1, 40)), uni(0, 1));
    Batch want = make_batch(rng, kv, shape, specs);
    ref::attention(want.rows, shape, plan);
    for (Isa isa : all_isas()) {
      set_isa(isa);
      Batch got = want;
      for (size_t i = 0; i < specs.size(); ++i) {
        got.rows[i].q = got.q.data() + (want.rows[i].q - want.q.data());
        got.rows[i].out = got.out.data() + (want.rows[i].out - want.out.data());
      }
      std::fill(got.out.begin(), got.out.end(), -1.0f);
      attention(got.rows, shape, plan, *pools()[c % 4]);
      ASSERT_TRUE(same_bits(got.out.data(), want.out.data(), got.out.size()))
          << "case " << c << " " << plan_to_string(plan) << " " << isa_name(isa) << " hd " << hd;
    }
  }
}

TEST(Attention, PositionZeroReturnsV0Exactly) {
  IsaGuard guard;
  std::mt19937 rng(5);
  const AttnShape shape{4, 2, 48, 0.3f};
  PagedKv kv(rng, shape, 8, {1});
  Batch b = make_batch(rng, kv, shape, {{0, 0, 0}});
  for (Isa isa : all_isas()) {
    set_isa(isa);
    for (const Plan& plan : all_attention_plans()) {
      attention(b.rows, shape, plan, ThreadPool::serial());
      for (int32_t h = 0; h < shape.heads; ++h) {
        ASSERT_TRUE(same_bits(b.out.data() + h * shape.head_dim, kv.v(0, 0, h / 2), shape.head_dim))
            << isa_name(isa) << " " << plan_to_string(plan);
      }
    }
  }
}

TEST(Attention, RowIndependentOfOtherRowsInTheCall) {
  IsaGuard guard;
  std::mt19937 rng(6);
  const AttnShape shape{4, 2, 64, 0.125f};
  PagedKv kv(rng, shape, 16, {300, 50});
  const RowSpec target{0, 250, 200};
  for (Isa isa : all_isas()) {
    set_isa(isa);
    for (const Plan& plan : {attn_count(3, true), attn_size(64), attn_count(1)}) {
      Batch alone = make_batch(rng, kv, shape, {target});
      attention(alone.rows, shape, plan, ThreadPool::serial());
      for (size_t n : {2u, 5u, 12u}) {
        for (size_t at : {size_t{0}, n - 1}) {
          std::vector<RowSpec> specs;
          for (size_t i = 0; i < n; ++i) {
            specs.push_back(i == at ? target
                                    : RowSpec{i % 2, static_cast<int32_t>(i * 7 % 50),
                                              static_cast<int32_t>(i % 3)});
          }
          Batch b = make_batch(rng, kv, shape, specs);
          std::copy(alone.q.begin(), alone.q.end(), b.q.begin() + at * alone.q.size());
          attention(b.rows, shape, plan, *pools()[n % 4]);
          ASSERT_TRUE(
              same_bits(b.out.data() + at * alone.out.size(), alone.out.data(), alone.out.size()))
              << isa_name(isa) << " n=" << n << " at=" << at << " " << plan_to_string(plan);
        }
      }
    }
  }
}

TEST(Attention, PlansChangeBits) {
  std::mt19937 rng(9);
  const AttnShape shape{8, 8, 64, 0.125f};
  PagedKv kv(rng, shape, 16, {1000});
  Batch b = make_batch(rng, kv, shape, {{0, 999, 600}});
  auto run = [&](const Plan& p) {
    attention(b.rows, shape, p, ThreadPool::serial());
    return b.out;
  };
  const auto one = run(attn_count(1));
  const auto four = run(attn_count(4));
  const auto size256 = run(attn_size(256));
  const auto size256_sep = run(attn_size(256, true));
  EXPECT_NE(first_diff(one.data(), four.data(), one.size()), -1);
  EXPECT_NE(first_diff(four.data(), size256.data(), one.size()), -1);
  EXPECT_NE(first_diff(size256.data(), size256_sep.data(), one.size()), -1);
  // kCount 4 over 1000 positions is 4 parts of 250; kSize 250 is the very same split.
  const auto size250 = run(attn_size(250));
  EXPECT_TRUE(same_bits(four.data(), size250.data(), four.size()));
}

TEST(Attention, NegativePositionGivesZeros) {
  IsaGuard guard;
  std::mt19937 rng(12);
  const AttnShape shape{4, 2, 24, 0.2f};
  PagedKv kv(rng, shape, 4, {8});
  for (Isa isa : all_isas()) {
    set_isa(isa);
    for (const Plan& plan : all_attention_plans()) {
      Batch b = make_batch(rng, kv, shape, {{0, -1, 0}, {0, 5, 2}});
      std::fill(b.out.begin(), b.out.end(), 3.0f);
      attention(b.rows, shape, plan, ThreadPool::serial());
      for (int i = 0; i < 4 * 24; ++i) ASSERT_EQ(bits(b.out[i]), bits(0.0f)) << isa_name(isa);
      Batch r = b;
      for (size_t i = 0; i < 2; ++i) {
        r.rows[i].q = r.q.data() + i * 96;
        r.rows[i].out = r.out.data() + i * 96;
      }
      ref::attention(r.rows, shape, plan);
      ASSERT_TRUE(same_bits(r.out.data(), b.out.data(), b.out.size())) << plan_to_string(plan);
    }
  }
}

TEST(Attention, SeparateNewKvWithNothingCachedIsOneSequence) {
  std::mt19937 rng(10);
  const AttnShape shape{2, 1, 32, 0.2f};
  PagedKv kv(rng, shape, 4, {77});
  Batch b = make_batch(rng, kv, shape, {{0, 76, 0}, {0, 40, 0}});
  for (const Plan& p : {attn_count(3), attn_size(10)}) {
    Plan sep = p;
    sep.separate_new_kv = true;
    attention(b.rows, shape, p, ThreadPool::serial());
    const auto joint = b.out;
    attention(b.rows, shape, sep, ThreadPool::serial());
    EXPECT_TRUE(same_bits(joint.data(), b.out.data(), joint.size())) << plan_to_string(p);
  }
}

}  // namespace
}  // namespace llmrr::kernels::testing
