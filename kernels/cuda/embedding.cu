// Embedding lookup: __global__ wrapper of embedding_block (embedding_phases.h) and the entry.
#include "cuda/cuda_internal.h"
#include "cuda/embedding_phases.h"

namespace llmrr::kernels::cuda {
namespace {

__global__ void embedding_kernel(const detail::EmbeddingParams p) {
  detail::DeviceBlock b = detail::make_device_block(nullptr);
  detail::embedding_block(b, p);
}

}  // namespace

Status embedding(const void* table, WeightType type, int64_t vocab, int64_t dim,
                 const int32_t* ids, int64_t rows, float* out, int64_t ldo, Stream stream) {
  if (vocab < 0 || dim < 0 || rows < 0 || ldo < dim) {
    return detail::bad_arg("cuda::embedding: vocab " + std::to_string(vocab) + ", dim " +
                           std::to_string(dim) + ", rows " + std::to_string(rows) + ", ldo " +
                           std::to_string(ldo));
  }
  const detail::EmbeddingParams p{table, type == WeightType::kBF16, vocab, dim, ids, rows, out, ldo};
  return detail::launch(embedding_kernel, detail::embedding_launch(p), p, stream,
                        "cuda::embedding");
}

}  // namespace llmrr::kernels::cuda
