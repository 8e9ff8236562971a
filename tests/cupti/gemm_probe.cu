// A CUDA program that knows nothing of llmrr, for the record-cuda GPU test: an SGEMM through
// cuBLAS with M rows (argv[1]), N = 1024, K = 16384. cuBLAS chooses the kernel from the
// shape: at M = 1 a GEMV-like kernel, at M = 64 a tiled GEMM that splits K (few output tiles
// for many SMs) and adds a reduction kernel. Steps, as record-cuda splits them:
//   step 0  fill A and B                         then cudaDeviceSynchronize
//   step 1  the GEMM (inside NVTX range "gemm")   then cudaDeviceSynchronize
//   step 2  scale C, copy a row to the host      then cudaStreamSynchronize
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>

namespace {

__global__ void fill(float* x, size_t n, float scale) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = scale * static_cast<float>((i * 2654435761u) % 1024u) / 1024.0f;
}

__global__ void scale(float* x, size_t n, float s) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= s;
}

int fail(const char* what, int code) {
  std::fprintf(stderr, "gemm_probe: %s failed (%d)\n", what, code);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int m = argc > 1 ? std::atoi(argv[1]) : 1;
  const int n = 1024, k = 16384;
  if (m < 1 || m > 4096) return fail("M in [1, 4096]", m);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  const size_t na = static_cast<size_t>(m) * k, nb = static_cast<size_t>(k) * n,
               nc = static_cast<size_t>(m) * n;
  if (cudaMalloc(&a, na * 4) || cudaMalloc(&b, nb * 4) || cudaMalloc(&c, nc * 4))
    return fail("cudaMalloc", 0);
  fill<<<static_cast<unsigned>((na + 255) / 256), 256>>>(a, na, 1.0f);
  fill<<<static_cast<unsigned>((nb + 255) / 256), 256>>>(b, nb, 0.5f);
  if (cudaDeviceSynchronize() != cudaSuccess) return fail("fill", 0);

  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return fail("cublasCreate", 0);
  const float one = 1.0f, zero = 0.0f;
  nvtxRangePushA("gemm");
  // Column-major C (m x n) = A (m x k) * B (k x n).
  cublasStatus_t st =
      cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k, &zero, c, m);
  nvtxRangePop();
  if (st != CUBLAS_STATUS_SUCCESS) return fail("cublasSgemm", static_cast<int>(st));
  if (cudaDeviceSynchronize() != cudaSuccess) return fail("gemm", 0);

  scale<<<static_cast<unsigned>((nc + 255) / 256), 256>>>(c, nc, 0.25f);
  float row[8];
  cudaMemcpyAsync(row, c, sizeof row, cudaMemcpyDeviceToHost, 0);
  if (cudaStreamSynchronize(0) != cudaSuccess) return fail("copy", 0);
  std::printf("M=%d C[0,0..3] = %g %g %g %g\n", m, row[0], row[1], row[2], row[3]);
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 0;
}
