#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/engine_kernels.h"

namespace llmrr::cuda_engine {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

Status launched(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::Ok();
  return make_error(ErrorCode::kInternal,
                    std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

__global__ void add_bias_k(float* y, int64_t ldy, int64_t rows, int64_t n, const float* bias) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n) return;
  const int64_t r = i / n, j = i % n;
  y[r * ldy + j] = __fadd_rn(y[r * ldy + j], bias[j]);
}

__global__ void add_inplace_k(float* x, const float* d, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fadd_rn(x[i], d[i]);
}

__global__ void round_bf16_k(float* p, int64_t ld, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  float* v = p + (i / cols) * ld + i % cols;
  *v = __bfloat162float(__float2bfloat16_rn(*v));
}

__global__ void write_rows_k(const float* src, int64_t ld, int64_t rows, int64_t cols,
                             float* const* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[r][c] = src[r * ld + c];
}

__global__ void gather_rows_k(const float* src, int64_t ld, const int32_t* idx, int64_t n,
                              int64_t cols, float* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[r * cols + c] = src[static_cast<int64_t>(idx[r]) * ld + c];
}

}  // namespace

Status add_bias(float* y, int64_t ldy, int64_t rows, int64_t n, const float* bias, Stream s) {
  if (rows * n == 0) return Status::Ok();
  add_bias_k<<<blocks_for(rows * n), kThreads, 0, s>>>(y, ldy, rows, n, bias);
  return launched("add_bias");
}

Status add_inplace(float* x, const float* d, int64_t n, Stream s) {
  if (n == 0) return Status::Ok();
  add_inplace_k<<<blocks_for(n), kThreads, 0, s>>>(x, d, n);
  return launched("add_inplace");
}

Status round_bf16(float* p, int64_t ld, int64_t rows, int64_t cols, Stream s) {
  if (rows * cols == 0) return Status::Ok();
  round_bf16_k<<<blocks_for(rows * cols), kThreads, 0, s>>>(p, ld, rows, cols);
  return launched("round_bf16");
}

Status write_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, float* const* dst,
                  Stream s) {
  if (rows * cols == 0) return Status::Ok();
  write_rows_k<<<blocks_for(rows * cols), kThreads, 0, s>>>(src, ld, rows, cols, dst);
  return launched("write_rows");
}

Status gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t cols,
                   float* dst, Stream s) {
  if (n * cols == 0) return Status::Ok();
  gather_rows_k<<<blocks_for(n * cols), kThreads, 0, s>>>(src, ld, idx, n, cols, dst);
  return launched("gather_rows");
}

}  // namespace llmrr::cuda_engine
