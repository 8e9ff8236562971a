// cuBLASLt as the production GEMM on CUDA, with the algorithm recorded as the plan
// (kernels/include/llmrr/kernels/cublaslt_gemm.h, cublaslt_plan.h). Read top to bottom:
// constants checked against cuBLASLt's headers, the bf16 conversion kernel, descriptors,
// attribute reading (algo -> CublasLtAlgo), re-creation (CublasLtAlgo -> algo), the entries.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "llmrr/kernels/cublaslt_gemm.h"
#include "llmrr/kernels/cublaslt_plan.h"

namespace llmrr::kernels::cuda {
namespace {

// cublaslt_plan.h carries cuBLASLt's values without including its headers.
static_assert(cublaslt::kCompute32F == CUBLAS_COMPUTE_32F);
static_assert(cublaslt::kCompute32FFastTF32 == CUBLAS_COMPUTE_32F_FAST_TF32);
static_assert(cublaslt::kR32F == CUDA_R_32F && cublaslt::kR16F == CUDA_R_16F &&
              cublaslt::kR16BF == CUDA_R_16BF);
static_assert(cublaslt::kReductionNone == CUBLASLT_REDUCTION_SCHEME_NONE &&
              cublaslt::kReductionInplace == CUBLASLT_REDUCTION_SCHEME_INPLACE &&
              cublaslt::kReductionComputeType == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE &&
              cublaslt::kReductionOutputType == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE);
// The plan's field types are the attributes' (cublasLtMatmulAlgoConfigAttributes_t).
static_assert(sizeof(CublasLtAlgo::algo_id) == sizeof(int32_t) &&
              sizeof(CublasLtAlgo::tile) == sizeof(uint32_t) &&
              sizeof(CublasLtAlgo::splitk) == sizeof(int32_t) &&
              sizeof(CublasLtAlgo::inner_shape) == sizeof(uint16_t) &&
              sizeof(CublasLtAlgo::cluster_shape) == sizeof(uint16_t));

Status lt_error(cublasStatus_t st, const std::string& what) {
  return make_error(ErrorCode::kInternal, "cuBLASLt: " + what + ": status " +
                                              std::to_string(static_cast<int>(st)) + " (" +
                                              cublasLtGetStatusString(st) + ")");
}
Status cuda_error(cudaError_t e, const std::string& what) {
  return make_error(ErrorCode::kInternal, "CUDA: " + what + ": " + cudaGetErrorString(e));
}
#define LT_CHECK(expr, what)                                      \
  do {                                                            \
    cublasStatus_t st_ = (expr);                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS) return lt_error(st_, what); \
  } while (0)

// fp32 -> bf16, round to nearest even (the engine's bf16 activations convert exactly).
__global__ void to_bf16_kernel(const float* x, int64_t ldx, int64_t rows, int64_t cols,
                               __nv_bfloat16* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = __float2bfloat16_rn(x[r * ldx + c]);
}

// The descriptors of one (m, n, k, types) product, in the layout the header spells out.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~Descs() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Status make_descs(const CublasLtAlgo& t, int64_t m, int64_t n, int64_t k, int64_t ldb, int64_t ldy,
                  Descs* d) {
  LT_CHECK(cublasLtMatmulDescCreate(&d->op, static_cast<cublasComputeType_t>(t.compute_type),
                                    static_cast<cudaDataType_t>(t.scale_type)),
           "matmul descriptor");
  const cublasOperation_t no = CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &no, sizeof no),
           "transa");
  LT_CHECK(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &no, sizeof no),
           "transb");
  // Column-major: A = W [n×k] (ld n), B = xᵀ [k×m] (ld ldb), C = D = yᵀ [n×m] (ld ldy).
  LT_CHECK(cublasLtMatrixLayoutCreate(&d->a, static_cast<cudaDataType_t>(t.a_type), n, k, n),
           "A layout");
  LT_CHECK(cublasLtMatrixLayoutCreate(&d->b, static_cast<cudaDataType_t>(t.b_type), k, m, ldb),
           "B layout");
  LT_CHECK(cublasLtMatrixLayoutCreate(&d->c, static_cast<cudaDataType_t>(t.c_type), n, m, ldy),
           "C layout");
  return Status::Ok();
}

template <typename T>
Status get_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T* out,
                const char* name) {
  size_t written = 0;
  LT_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, out, sizeof(T), &written),
           std::string("reading ") + name);
  if (written != sizeof(T)) {
    return make_error(ErrorCode::kInternal, std::string("cuBLASLt: attribute ") + name + " has " +
                                                std::to_string(written) + " bytes, expected " +
                                                std::to_string(sizeof(T)));
  }
  return Status::Ok();
}

template <typename T>
Status set_attr(cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, const T& v,
                const char* name) {
  LT_CHECK(cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &v, sizeof(T)),
           std::string("setting ") + name + " = " + std::to_string(v));
  return Status::Ok();
}

// The heuristic's algorithm -> the plan's fields.
Status read_algo(const cublasLtMatmulAlgo_t& algo, CublasLtAlgo* a) {
  RETURN_IF_ERROR(get_attr(algo, CUBLASLT_ALGO_CONFIG_ID, &a->algo_id, "ID"));
  RETURN_IF_ERROR(get_attr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &a->tile, "TILE_ID"));
  RETURN_IF_ERROR(get_attr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &a->stages, "STAGES_ID"));
  RETURN_IF_ERROR(get_attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &a->splitk, "SPLITK_NUM"));
  RETURN_IF_ERROR(
      get_attr(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &a->reduction, "REDUCTION_SCHEME"));
  RETURN_IF_ERROR(get_attr(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &a->swizzle, "CTA_SWIZZLING"));
  RETURN_IF_ERROR(get_attr(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &a->custom, "CUSTOM_OPTION"));
  RETURN_IF_ERROR(
      get_attr(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &a->inner_shape, "INNER_SHAPE_ID"));
  RETURN_IF_ERROR(
      get_attr(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &a->cluster_shape, "CLUSTER_SHAPE_ID"));
  // cuBLASLt reports split-K 1 with whatever reduction scheme it defaults to; without a
  // split there is nothing to reduce, and the plan says "none".
  if (a->splitk <= 1) {
    a->splitk = 1;
    a->reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  }
  return Status::Ok();
}

// The plan's fields -> an algorithm (cublasLtMatmulAlgoInit + ConfigSetAttribute).
Status make_algo(cublasLtHandle_t h, const CublasLtAlgo& a, cublasLtMatmulAlgo_t* algo) {
  LT_CHECK(cublasLtMatmulAlgoInit(
               h, static_cast<cublasComputeType_t>(a.compute_type),
               static_cast<cudaDataType_t>(a.scale_type), static_cast<cudaDataType_t>(a.a_type),
               static_cast<cudaDataType_t>(a.b_type), static_cast<cudaDataType_t>(a.c_type),
               static_cast<cudaDataType_t>(a.c_type), a.algo_id, algo),
           "AlgoInit of algo " + std::to_string(a.algo_id) +
               " (not available with this GPU and cuBLASLt?)");
  RETURN_IF_ERROR(set_attr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, a.tile, "TILE_ID"));
  RETURN_IF_ERROR(set_attr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, a.stages, "STAGES_ID"));
  RETURN_IF_ERROR(set_attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, a.splitk, "SPLITK_NUM"));
  RETURN_IF_ERROR(
      set_attr(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, a.reduction, "REDUCTION_SCHEME"));
  RETURN_IF_ERROR(set_attr(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, a.swizzle, "CTA_SWIZZLING"));
  RETURN_IF_ERROR(set_attr(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, a.custom, "CUSTOM_OPTION"));
  RETURN_IF_ERROR(
      set_attr(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, a.inner_shape, "INNER_SHAPE_ID"));
  RETURN_IF_ERROR(
      set_attr(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, a.cluster_shape, "CLUSTER_SHAPE_ID"));
  return Status::Ok();
}

}  // namespace

struct CublasLtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  DeviceBuffer bf16_x;  // activations converted for bf16 weights
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, CublasLtAlgo> chosen;
  ~Impl() {
    if (handle) cublasLtDestroy(handle);
  }
};

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CublasLtGemm::~CublasLtGemm() = default;

Result<std::unique_ptr<CublasLtGemm>> CublasLtGemm::create(Stream stream, size_t workspace_bytes) {
  if (!available()) return make_error(ErrorCode::kNotFound, "cuBLASLt: no CUDA device");
  auto impl = std::make_unique<Impl>();
  LT_CHECK(cublasLtCreate(&impl->handle), "creating a handle");
  if (workspace_bytes > 0) {
    ASSIGN_OR_RETURN(impl->workspace, DeviceBuffer::alloc(workspace_bytes));
  }
  (void)stream;
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(impl)));
}

std::string CublasLtGemm::version() {
  const size_t v = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

Result<CublasLtAlgo> CublasLtGemm::choose(int64_t m, const DeviceWeight& w) {
  const int type = static_cast<int>(w.type());
  auto key = std::make_tuple(m, w.n(), w.k(), type);
  if (auto it = impl_->chosen.find(key); it != impl_->chosen.end()) return it->second;
  CublasLtAlgo a = cublaslt::matmul_types(w.type());
  Descs d;
  RETURN_IF_ERROR(make_descs(a, m, w.n(), w.k(), w.k(), w.n(), &d));
  cublasLtMatmulPreference_t pref = nullptr;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const uint64_t ws = impl_->workspace.bytes();
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(impl_->handle, d.op, d.a, d.b, d.c, d.c, pref, 1, &result,
                                        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_error(st, "heuristic");
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
    return make_error(ErrorCode::kUnsupported, "cuBLASLt: no algorithm for m " + std::to_string(m) +
                                                   ", n " + std::to_string(w.n()) + ", k " +
                                                   std::to_string(w.k()));
  }
  RETURN_IF_ERROR(read_algo(result.algo, &a));
  a.workspace = result.workspaceSize;
  if (std::string why = cublaslt::check(a); !why.empty()) {
    return make_error(ErrorCode::kInternal,
                      "cuBLASLt's heuristic returned an algorithm llmrr "
                      "cannot record: " +
                          why);
  }
  impl_->chosen.emplace(key, a);
  return a;
}

Status CublasLtGemm::gemm(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y,
                          int64_t ldy, const CublasLtAlgo& algo, Stream stream) {
  if (std::string why = cublaslt::check(algo); !why.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "cuBLASLt algorithm: " + why);
  }
  const CublasLtAlgo want = cublaslt::matmul_types(w.type());
  if (algo.a_type != want.a_type || algo.b_type != want.b_type || algo.c_type != want.c_type ||
      algo.compute_type != want.compute_type) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuBLASLt algorithm for " + cublaslt::data_type_name(algo.a_type) +
                          " weights given " + cublaslt::data_type_name(want.a_type) + " weights");
  }
  if (algo.workspace > impl_->workspace.bytes()) {
    return make_error(ErrorCode::kUnsupported, "cuBLASLt algorithm needs " +
                                                   std::to_string(algo.workspace) +
                                                   " bytes of workspace, the engine has " +
                                                   std::to_string(impl_->workspace.bytes()));
  }
  if (m == 0) return Status::Ok();
  const int64_t n = w.n(), k = w.k();
  const void* b = x;
  int64_t ldb = ldx;
  if (w.type() == WeightType::kBF16) {
    const size_t need = static_cast<size_t>(m * k) * sizeof(__nv_bfloat16);
    if (impl_->bf16_x.bytes() < need) {
      ASSIGN_OR_RETURN(impl_->bf16_x, DeviceBuffer::alloc(need));
    }
    const int64_t total = m * k;
    const int threads = 256;
    to_bf16_kernel<<<static_cast<unsigned>((total + threads - 1) / threads), threads, 0, stream>>>(
        x, ldx, m, k, impl_->bf16_x.as<__nv_bfloat16>());
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_error(e, "to_bf16");
    b = impl_->bf16_x.data();
    ldb = k;
  }
  Descs d;
  RETURN_IF_ERROR(make_descs(algo, m, n, k, ldb, ldy, &d));
  cublasLtMatmulAlgo_t a;
  RETURN_IF_ERROR(make_algo(impl_->handle, algo, &a));
  cublasLtMatmulHeuristicResult_t check = {};
  cublasStatus_t st = cublasLtMatmulAlgoCheck(impl_->handle, d.op, d.a, d.b, d.c, d.c, &a, &check);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return make_error(ErrorCode::kUnsupported, "cuBLASLt refuses " + cublaslt::describe(algo) +
                                                   " for m " + std::to_string(m) + ", n " +
                                                   std::to_string(n) + ", k " + std::to_string(k) +
                                                   " on this GPU (status " +
                                                   cublasLtGetStatusString(st) + ")");
  }
  const float alpha = 1.0f, beta = 0.0f;
  LT_CHECK(cublasLtMatmul(impl_->handle, d.op, &alpha, w.data(), d.a, b, d.b, &beta, y, d.c, y, d.c,
                          &a, impl_->workspace.data(), impl_->workspace.bytes(), stream),
           "matmul");
  return Status::Ok();
}

}  // namespace llmrr::kernels::cuda
