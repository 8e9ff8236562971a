// Selection on the device: top-k and fingerprints of rows (select_phases.h, xxh3_hd.h) and the
// router's softmax / sigmoid; __global__ wrappers and the entries.
#include "cuda/cuda_internal.h"
#include "cuda/select_phases.h"

namespace llmrr::kernels::cuda {
namespace {

__device__ const uint8_t kXxh3Secret[xxh3::kSecretSize] = {LLMRR_XXH3_SECRET_BYTES};

__global__ void topk_kernel(const detail::TopkParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  detail::DeviceBlock b = detail::make_device_block(smem);
  detail::topk_block(b, p);
}

__global__ void fingerprint_kernel(const detail::FingerprintParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  detail::DeviceBlock b = detail::make_device_block(smem);
  detail::fingerprint_block(b, p);
}

__global__ void score_kernel(const detail::ScoreParams p) {
  detail::DeviceBlock b = detail::make_device_block(nullptr);
  detail::score_block(b, p);
}

Status scores(float* x, int64_t ldx, int64_t rows, int64_t n, bool softmax, Stream stream) {
  if (rows < 0 || n < 0 || ldx < n) {
    return detail::bad_arg(std::string(softmax ? "cuda::softmax_rows" : "cuda::sigmoid_rows") +
                           ": rows " + std::to_string(rows) + ", n " + std::to_string(n) +
                           ", ldx " + std::to_string(ldx));
  }
  const detail::ScoreParams p{x, ldx, rows, n, softmax};
  return detail::launch(score_kernel, detail::score_launch(p), p, stream,
                        softmax ? "cuda::softmax_rows" : "cuda::sigmoid_rows");
}

}  // namespace

Status softmax_rows(float* x, int64_t ldx, int64_t rows, int64_t n, Stream stream) {
  return scores(x, ldx, rows, n, true, stream);
}

Status sigmoid_rows(float* x, int64_t ldx, int64_t rows, int64_t n, Stream stream) {
  return scores(x, ldx, rows, n, false, stream);
}

Status select_rows(const float* x, int64_t ldx, int64_t rows, int64_t n, int k, int32_t* ids,
                   float* values, RowFingerprint* fps, Stream stream) {
  if (rows < 0 || n < 0 || ldx < n || k < 0) {
    return detail::bad_arg("cuda::select_rows: rows " + std::to_string(rows) + ", n " +
                           std::to_string(n) + ", ldx " + std::to_string(ldx) + ", k " +
                           std::to_string(k));
  }
  if (k > 0) {
    detail::TopkParams p{x, ldx, rows, n, k, ids, values};
    detail::Launch l;
    const std::string why = detail::topk_prepare(p, l);
    if (!why.empty()) return detail::unsupported(why);
    RETURN_IF_ERROR(detail::launch(topk_kernel, l, p, stream, "cuda::select_rows (top-k)"));
  }
  if (fps != nullptr) {
    void* secret = nullptr;
    RETURN_IF_ERROR(detail::cuda_status(cudaGetSymbolAddress(&secret, kXxh3Secret),
                                        "cuda::select_rows (xxh3 secret)"));
    const detail::FingerprintParams p{x, ldx, rows, n, fps, static_cast<const uint8_t*>(secret)};
    RETURN_IF_ERROR(detail::launch(fingerprint_kernel, detail::fingerprint_launch(p), p, stream,
                                   "cuda::select_rows (fingerprints)"));
  }
  return Status::Ok();
}

}  // namespace llmrr::kernels::cuda
