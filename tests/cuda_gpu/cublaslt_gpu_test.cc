// cuBLASLt on a GPU: the heuristic's algorithm, recorded as a plan (through the trace
// record), forced back, computes the same bits; a fresh handle re-creates it the same; an
// algorithm the GPU cannot run is refused with a reason. Skips without a device.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "llmrr/kernels/cublaslt_gemm.h"
#include "llmrr/kernels/cublaslt_plan.h"
#include "llmrr/kernels/cuda_ops.h"
#include "llmrr/kernels/numerics.h"
#include "llmrr/recorder/convert.h"

namespace llmrr {
namespace {

namespace kc = kernels::cuda;

#define SKIP_WITHOUT_GPU() \
  if (!kc::available()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none)"

std::vector<float> random_bf16_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = numerics::round_to_bf16(u(rng));
  return v;
}

std::vector<float> run(kc::CublasLtGemm& lt, const kc::DeviceBuffer& x, int64_t m, int64_t k,
                       const kc::DeviceWeight& w, const CublasLtAlgo& algo) {
  auto y = kc::DeviceBuffer::alloc(static_cast<size_t>(m * w.n()) * sizeof(float));
  EXPECT_TRUE(y.ok());
  Status st = lt.gemm(x.as<float>(), k, m, w, y->as<float>(), w.n(), algo, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<float> out(static_cast<size_t>(m * w.n()));
  EXPECT_TRUE(y->download(out.data(), out.size() * sizeof(float), nullptr).ok());
  return out;
}

TEST(CublasLtGpu, RecordedAlgorithmForcedBackIsBitExact) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1536, k = 576;  // SmolLM2's gate/up shape
  for (kernels::WeightType type : {kernels::WeightType::kBF16, kernels::WeightType::kF32}) {
    const std::vector<float> wv = random_bf16_values(static_cast<size_t>(n * k), 1);
    auto w = kc::DeviceWeight::upload(wv.data(), n, k, type, nullptr);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    auto lt = kc::CublasLtGemm::create(nullptr);
    ASSERT_TRUE(lt.ok()) << lt.status().to_string();
    for (int64_t m : {1, 7, 16, 64, 256}) {
      const std::vector<float> xv = random_bf16_values(static_cast<size_t>(m * k), 2 + m);
      auto x = kc::DeviceBuffer::alloc(xv.size() * sizeof(float));
      ASSERT_TRUE(x.ok());
      ASSERT_TRUE(x->upload(xv.data(), xv.size() * sizeof(float), nullptr).ok());
      Result<CublasLtAlgo> algo = (*lt)->choose(m, *w);
      ASSERT_TRUE(algo.ok()) << algo.status().to_string();
      EXPECT_EQ(cublaslt::check(*algo), "") << cublaslt::describe(*algo);
      const std::vector<float> first = run(**lt, *x, m, k, *w, *algo);
      // Through the plan and the trace record, as a replay gets it.
      const Plan plan = cublaslt::to_plan(*algo);
      const Plan replayed = to_plan(to_plan_record(plan));
      CublasLtAlgo forced;
      ASSERT_EQ(cublaslt::from_plan(replayed, &forced), "");
      auto fresh = kc::CublasLtGemm::create(nullptr);
      ASSERT_TRUE(fresh.ok());
      const std::vector<float> again = run(**fresh, *x, m, k, *w, forced);
      ASSERT_EQ(first.size(), again.size());
      EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
          << "m " << m << ", " << cublaslt::describe(forced);
      // And close to the fp64 product (tensor cores, bf16/TF32 inputs: loose).
      double worst = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; j += 97) {
          double ref = 0;
          for (int64_t t = 0; t < k; ++t) ref += double(xv[i * k + t]) * double(wv[j * k + t]);
          worst = std::max(worst, std::abs(ref - double(first[i * n + j])));
        }
      }
      EXPECT_LT(worst, 0.05) << "m " << m;
    }
  }
}

TEST(CublasLtGpu, AnAlgorithmThisGpuCannotRunIsRefused) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 256, k = 128, m = 4;
  const std::vector<float> wv = random_bf16_values(static_cast<size_t>(n * k), 3);
  auto w = kc::DeviceWeight::upload(wv.data(), n, k, kernels::WeightType::kBF16, nullptr);
  ASSERT_TRUE(w.ok());
  auto lt = kc::CublasLtGemm::create(nullptr);
  ASSERT_TRUE(lt.ok());
  auto x = kc::DeviceBuffer::alloc(static_cast<size_t>(m * k) * sizeof(float));
  auto y = kc::DeviceBuffer::alloc(static_cast<size_t>(m * n) * sizeof(float));
  ASSERT_TRUE(x.ok() && y.ok());
  Result<CublasLtAlgo> algo = (*lt)->choose(m, *w);
  ASSERT_TRUE(algo.ok());
  CublasLtAlgo bad = *algo;
  bad.algo_id = 100000;
  Status st = (*lt)->gemm(x->as<float>(), k, m, *w, y->as<float>(), n, bad, nullptr);
  EXPECT_FALSE(st.ok());
  bad = *algo;
  bad.workspace = uint64_t{1} << 31;  // more than the engine's workspace
  st = (*lt)->gemm(x->as<float>(), k, m, *w, y->as<float>(), n, bad, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << st.to_string();
  bad = cublaslt::matmul_types(kernels::WeightType::kF32);  // types of other weights
  st = (*lt)->gemm(x->as<float>(), k, m, *w, y->as<float>(), n, bad, nullptr);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
}

TEST(CublasLtGpu, VersionIsReported) {
  SKIP_WITHOUT_GPU();
  const std::string v = kc::CublasLtGemm::version();
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
}

}  // namespace
}  // namespace llmrr
