// The exact CUDA kernels on a real GPU (label gpu): every op under several plans and shapes,
// device result against the CPU reference bit for bit. Skips when no device is present; the
// device code itself is also checked without a GPU by the grid tests (*_grid_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "llmrr/format/fingerprint.h"
#include "llmrr/kernels/cuda_ops.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/reference.h"
#include "plan_tables.h"
#include "test_util.h"

namespace llmrr::kernels::cuda {
namespace {

using kernels::testing::first_diff;
using kernels::testing::random_vec;

class CudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!available()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or returned 0)";
  }
};

template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  auto b = DeviceBuffer::alloc(v.size() * sizeof(T));
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  DeviceBuffer d = std::move(b).value();
  EXPECT_TRUE(d.upload(v.data(), v.size() * sizeof(T), nullptr).ok());
  return d;
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer& d, size_t n) {
  std::vector<T> v(n);
  const Status st = d.download(v.data(), n * sizeof(T), nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return v;
}

#define ASSERT_OK(expr)                       \
  do {                                        \
    const ::llmrr::Status _st = (expr);       \
    ASSERT_TRUE(_st.ok()) << _st.to_string(); \
  } while (0)

using kernels::testing::gemm_plan;

TEST_F(CudaGpuTest, DeviceInfoNamesTheGpu) {
  auto info = device_info(0);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_FALSE(info->name.empty());
  EXPECT_GT(info->sm_count, 0);
  EXPECT_GE(info->cc_major, 8);
}

TEST_F(CudaGpuTest, GemmMatchesReferenceBitsEveryPlan) {
  std::mt19937 rng(1);
  const Plan plans[] = {
      gemm_plan(1, 0),  gemm_plan(1, 16), gemm_plan(2, 0),  gemm_plan(3, 0, {2, 0, 1}),
      gemm_plan(4, 32), gemm_plan(7, 16), gemm_plan(40, 0), gemm_plan(5, 16, {4, 3, 2, 1, 0})};
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s :
       {Shape{1, 576, 576}, Shape{7, 65, 33}, Shape{16, 1536, 576}, Shape{3, 33, 1}}) {
    for (WeightType wt : {WeightType::kF32, WeightType::kBF16}) {
      auto x = random_vec(rng, s.m * s.k);
      auto wv = random_vec(rng, s.n * s.k);
      const PackedWeight pw = PackedWeight::pack(wv.data(), s.n, s.k, wt);
      auto dw = DeviceWeight::upload(pw, nullptr);
      ASSERT_TRUE(dw.ok()) << dw.status().to_string();
      DeviceBuffer dx = to_device(x);
      auto dy = DeviceBuffer::alloc(s.m * s.n * sizeof(float));
      ASSERT_TRUE(dy.ok());
      for (const Plan& plan : plans) {
        std::vector<float> want(s.m * s.n);
        ref::gemm(x.data(), s.k, s.m, pw, want.data(), s.n, plan);
        ASSERT_OK(gemm(dx.as<float>(), s.k, s.m, *dw, dy->as<float>(), s.n, plan, nullptr));
        const auto got = to_host<float>(*dy, want.size());
        ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1)
            << "m=" << s.m << " n=" << s.n << " k=" << s.k << " " << plan_to_string(plan);
      }
    }
  }
}

TEST_F(CudaGpuTest, RmsNormMatchesReferenceBits) {
  std::mt19937 rng(2);
  for (int64_t dim : {17, 576, 4096}) {
    for (uint32_t splits : {1u, 3u, 16u, 300u}) {
      const int64_t rows = 9;
      auto x = random_vec(rng, rows * dim, 3.0f), w = random_vec(rng, dim);
      Plan plan;
      plan.op = OpKind::kRmsNorm;
      plan.splits = splits;
      std::vector<float> want(rows * dim);
      ref::rmsnorm(x.data(), dim, rows, dim, w.data(), 1e-5f, want.data(), dim, plan);
      DeviceBuffer dx = to_device(x), dw = to_device(w);
      ASSERT_OK(rmsnorm(dx.as<float>(), dim, rows, dim, dw.as<float>(), 1e-5f, dx.as<float>(), dim,
                        plan, nullptr));
      const auto got = to_host<float>(dx, want.size());
      ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1) << dim << " " << splits;
    }
  }
}

TEST_F(CudaGpuTest, AttentionMatchesReferenceBitsEveryPlan) {
  std::mt19937 rng(3);
  const AttnShape shape{9, 3, 64, 0.125f};
  const int32_t bs = 16, len = 300;
  const int64_t nblocks = (len + bs - 1) / bs,
                block = int64_t{bs} * shape.kv_heads * shape.head_dim;
  auto k = random_vec(rng, nblocks * block), v = random_vec(rng, nblocks * block);
  std::vector<int64_t> perm(nblocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  DeviceBuffer dk = to_device(k), dv = to_device(v);
  std::vector<const float*> hk, hv, dkp, dvp;
  for (int64_t b = 0; b < nblocks; ++b) {
    hk.push_back(k.data() + perm[b] * block);
    hv.push_back(v.data() + perm[b] * block);
    dkp.push_back(dk.as<float>() + perm[b] * block);
    dvp.push_back(dv.as<float>() + perm[b] * block);
  }
  DeviceBuffer dkt = to_device(dkp), dvt = to_device(dvp);
  const kernels::KvSeqView cpu_kv{hk.data(), hv.data(), bs};
  const KvSeqView dev_kv{dkt.as<const float*>(), dvt.as<const float*>(), bs};
  struct Spec {
    int32_t pos, cached;
  };
  const Spec specs[] = {{299, 299}, {150, 140}, {0, 0}, {40, 10}, {-1, 0}};
  const int64_t per = int64_t{shape.heads} * shape.head_dim, n = std::size(specs);
  auto q = random_vec(rng, n * per);
  DeviceBuffer dq = to_device(q);
  auto dout = DeviceBuffer::alloc(n * per * sizeof(float));
  ASSERT_TRUE(dout.ok());
  for (bool sep : {false, true}) {
    for (int mode = 0; mode < 2; ++mode) {
      for (uint32_t s : {1u, 3u, 16u, 256u}) {
        Plan plan;
        plan.op = OpKind::kAttention;
        plan.separate_new_kv = sep;
        plan.mode = mode == 0 ? SplitMode::kCount : SplitMode::kSize;
        if (mode == 0)
          plan.splits = s;
        else
          plan.split_size = s;
        std::vector<float> want(n * per, 1.0f);
        std::vector<kernels::AttnRow> crow;
        std::vector<AttnRow> drow;
        for (int64_t i = 0; i < n; ++i) {
          crow.push_back(
              {q.data() + i * per, want.data() + i * per, &cpu_kv, specs[i].pos, specs[i].cached});
          drow.push_back({dq.as<float>() + i * per, dout->as<float>() + i * per, dev_kv,
                          specs[i].pos, specs[i].cached});
        }
        ref::attention(crow, shape, plan);
        ASSERT_OK(attention(drow, shape, plan, nullptr));
        const auto got = to_host<float>(*dout, want.size());
        ASSERT_EQ(first_diff(got.data(), want.data(), got.size()), -1) << plan_to_string(plan);
      }
    }
  }
}

TEST_F(CudaGpuTest, ElementwiseAndCombineMatchCpuBits) {
  std::mt19937 rng(4);
  // swiglu
  const int64_t rows = 6, cols = 1536;
  auto g = random_vec(rng, rows * cols, 4.0f), u = random_vec(rng, rows * cols);
  std::vector<float> want(rows * cols);
  swiglu(g.data(), cols, u.data(), cols, rows, cols, want.data(), cols, ThreadPool::serial());
  DeviceBuffer dg = to_device(g), du = to_device(u),
               dout = to_device(std::vector<float>(rows * cols));
  ASSERT_OK(swiglu(dg.as<float>(), cols, du.as<float>(), cols, rows, cols, dout.as<float>(), cols,
                   nullptr));
  auto got = to_host<float>(dout, want.size());
  EXPECT_EQ(first_diff(got.data(), want.data(), got.size()), -1) << "swiglu";
  // rope
  const RopeTable table(64, 10000.0, 512);
  auto dt = DeviceRopeTable::upload(table, nullptr);
  ASSERT_TRUE(dt.ok());
  const int64_t heads = 9, ld = heads * 64;
  auto x = random_vec(rng, rows * ld);
  const std::vector<int32_t> pos = {0, 1, 100, 511, 7, 300};
  auto rx = x;
  rope(rx.data(), ld, rows, pos.data(), heads, table);
  DeviceBuffer dx = to_device(x), dpos = to_device(pos);
  ASSERT_OK(rope(dx.as<float>(), ld, rows, dpos.as<int32_t>(), heads, *dt, nullptr));
  got = to_host<float>(dx, rx.size());
  EXPECT_EQ(first_diff(got.data(), rx.data(), got.size()), -1) << "rope";
  // embedding (bf16)
  const int64_t vocab = 100, dim = 576;
  auto tab = random_vec(rng, vocab * dim);
  std::vector<uint16_t> tab16(tab.size());
  for (size_t i = 0; i < tab.size(); ++i) tab16[i] = numerics::f32_to_bf16(tab[i]);
  const std::vector<int32_t> ids = {3, 99, -1, 100, 0, 42};
  std::vector<float> emb(rows * dim);
  embedding(tab16.data(), WeightType::kBF16, vocab, dim, ids.data(), rows, emb.data(), dim);
  DeviceBuffer dtab = to_device(tab16), dids = to_device(ids),
               demb = to_device(std::vector<float>(rows * dim, 5.0f));
  ASSERT_OK(embedding(dtab.data(), WeightType::kBF16, vocab, dim, dids.as<int32_t>(), rows,
                      demb.as<float>(), dim, nullptr));
  got = to_host<float>(demb, emb.size());
  EXPECT_EQ(first_diff(got.data(), emb.data(), got.size()), -1) << "embedding";
  // moe_combine, arrival order
  const int k = 4;
  auto experts = random_vec(rng, rows * k * dim), gates = random_vec(rng, rows * k);
  std::vector<int32_t> src(rows * k);
  for (int64_t i = 0; i < rows * k; ++i)
    src[i] = i % 7 == 2 ? -1 : static_cast<int32_t>((i * 5) % (rows * k));
  Plan plan;
  plan.op = OpKind::kCombine;
  plan.order = CombineOrder::kArrival;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint16_t> p = {0, 1, 2, 3};
    std::shuffle(p.begin(), p.end(), rng);
    plan.arrival.insert(plan.arrival.end(), p.begin(), p.end());
  }
  std::vector<float> comb(rows * dim);
  ref::moe_combine(experts.data(), dim, src.data(), gates.data(), rows, k, dim, comb.data(), dim,
                   plan);
  DeviceBuffer de = to_device(experts), dsrc = to_device(src), dgt = to_device(gates),
               dc = to_device(std::vector<float>(rows * dim));
  ASSERT_OK(moe_combine(de.as<float>(), dim, dsrc.as<int32_t>(), dgt.as<float>(), rows, k, dim,
                        dc.as<float>(), dim, plan, nullptr));
  got = to_host<float>(dc, comb.size());
  EXPECT_EQ(first_diff(got.data(), comb.data(), got.size()), -1) << "moe_combine";
  // softmax / sigmoid
  auto sc = random_vec(rng, rows * 64, 5.0f);
  for (bool soft : {true, false}) {
    auto ws = sc;
    for (int64_t r = 0; r < rows; ++r) {
      if (soft)
        softmax_inplace(ws.data() + r * 64, 64);
      else
        sigmoid_inplace(ws.data() + r * 64, 64);
    }
    DeviceBuffer ds = to_device(sc);
    ASSERT_OK(soft ? softmax_rows(ds.as<float>(), 64, rows, 64, nullptr)
                   : sigmoid_rows(ds.as<float>(), 64, rows, 64, nullptr));
    got = to_host<float>(ds, ws.size());
    EXPECT_EQ(first_diff(got.data(), ws.data(), got.size()), -1) << (soft ? "softmax" : "sigmoid");
  }
}

TEST_F(CudaGpuTest, SelectRowsMatchesTopkAndFingerprintRow) {
  std::mt19937 rng(5);
  for (int64_t n : {3, 60, 61, 577, 49152}) {
    const int64_t rows = 17;
    const int k = 32;
    auto x = random_vec(rng, rows * n, 4.0f);
    DeviceBuffer dx = to_device(x);
    auto dids = DeviceBuffer::alloc(rows * k * sizeof(int32_t));
    auto dv = DeviceBuffer::alloc(rows * k * sizeof(float));
    auto dfp = DeviceBuffer::alloc(rows * sizeof(RowFingerprint));
    ASSERT_TRUE(dids.ok() && dv.ok() && dfp.ok());
    ASSERT_OK(select_rows(dx.as<float>(), n, rows, n, k, dids->as<int32_t>(), dv->as<float>(),
                          dfp->as<RowFingerprint>(), nullptr));
    const auto ids = to_host<int32_t>(*dids, rows * k);
    const auto vals = to_host<float>(*dv, rows * k);
    const auto fps = to_host<RowFingerprint>(*dfp, rows);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int32_t> wi(k);
      std::vector<float> wv(k);
      topk(x.data() + r * n, n, k, wi.data(), wv.data());
      ASSERT_TRUE(std::equal(wi.begin(), wi.end(), ids.begin() + r * k))
          << "n=" << n << " row " << r;
      ASSERT_EQ(std::memcmp(wv.data(), vals.data() + r * k, k * sizeof(float)), 0);
      const trace::Fingerprint want = trace::fingerprint_row(x.data() + r * n, n);
      ASSERT_EQ(fps[r].hash, want.hash) << "n=" << n;
      ASSERT_EQ(std::memcmp(&fps[r].l2, &want.l2, 4), 0);
      ASSERT_EQ(std::memcmp(&fps[r].max_abs, &want.max_abs, 4), 0);
    }
  }
}

TEST_F(CudaGpuTest, PlansPastTheKernelLimitsAreRefusedNotRun) {
  auto dw = DeviceWeight::upload(std::vector<float>(64).data(), 8, 8, WeightType::kF32, nullptr);
  ASSERT_TRUE(dw.ok());
  const Status st = gemm(nullptr, 8, 1, *dw, nullptr, 8, gemm_plan(300, 0), nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << st.to_string();
}

}  // namespace
}  // namespace llmrr::kernels::cuda
