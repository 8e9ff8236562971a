// Devices, device memory, weights and RoPE tables for the exact CUDA ops (cuda_ops.h).
#include <cuda_runtime.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_internal.h"
#include "cuda/gemm_phases.h"
#include "llmrr/kernels/cuda_ops.h"

namespace llmrr::kernels::cuda {

using detail::bad_arg;
using detail::cuda_status;

bool available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Result<DeviceInfo> device_info(int ordinal) {
  int n = 0;
  RETURN_IF_ERROR(cuda_status(cudaGetDeviceCount(&n), "cudaGetDeviceCount"));
  if (ordinal < 0 || ordinal >= n) {
    return bad_arg("CUDA device " + std::to_string(ordinal) + " requested, " + std::to_string(n) +
                   " present");
  }
  cudaDeviceProp prop{};
  RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.global_mem_bytes = prop.totalGlobalMem;
  RETURN_IF_ERROR(cuda_status(cudaDriverGetVersion(&d.driver_version), "cudaDriverGetVersion"));
  RETURN_IF_ERROR(cuda_status(cudaRuntimeGetVersion(&d.runtime_version), "cudaRuntimeGetVersion"));
  return d;
}

DeviceBuffer::~DeviceBuffer() {
  if (p_ != nullptr) cudaFree(p_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::alloc(size_t bytes) {
  DeviceBuffer b;
  RETURN_IF_ERROR(cuda_status(cudaMalloc(&b.p_, bytes == 0 ? 1 : bytes),
                              ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str()));
  b.bytes_ = bytes;
  return Result<DeviceBuffer>(std::move(b));
}

Status DeviceBuffer::upload(const void* host_src, size_t bytes, Stream stream, size_t offset) {
  if (offset + bytes > bytes_) {
    return bad_arg("DeviceBuffer::upload: " + std::to_string(bytes) + " bytes at offset " +
                   std::to_string(offset) + " past a buffer of " + std::to_string(bytes_));
  }
  if (bytes == 0) return Status::Ok();
  return cuda_status(cudaMemcpyAsync(static_cast<unsigned char*>(p_) + offset, host_src, bytes,
                                     cudaMemcpyHostToDevice, stream),
                     "DeviceBuffer::upload");
}

Status DeviceBuffer::download(void* host_dst, size_t bytes, Stream stream, size_t offset) const {
  if (offset + bytes > bytes_) {
    return bad_arg("DeviceBuffer::download: " + std::to_string(bytes) + " bytes at offset " +
                   std::to_string(offset) + " past a buffer of " + std::to_string(bytes_));
  }
  if (bytes == 0) return Status::Ok();
  RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(host_dst, static_cast<const unsigned char*>(p_) + offset, bytes,
                                  cudaMemcpyDeviceToHost, stream),
                  "DeviceBuffer::download"));
  // A pageable destination is only safe to read once the copy is done.
  return cuda_status(cudaStreamSynchronize(stream), "DeviceBuffer::download");
}

Result<DeviceWeight> DeviceWeight::upload(const float* w, int64_t n, int64_t k, WeightType type,
                                          Stream stream) {
  if (n < 0 || k < 0 || (n * k > 0 && w == nullptr)) {
    return bad_arg("DeviceWeight::upload: bad shape " + std::to_string(n) + " x " +
                   std::to_string(k));
  }
  DeviceWeight out;
  out.n_ = n;
  out.k_ = k;
  out.type_ = type;
  if (type == WeightType::kF32) {
    const std::vector<float> packed = detail::gemm_pack_f32(w, n, k);
    auto buf = DeviceBuffer::alloc(packed.size() * sizeof(float));
    if (!buf.ok()) return buf.status();
    out.buf_ = std::move(buf).value();
    RETURN_IF_ERROR(out.buf_.upload(packed.data(), packed.size() * sizeof(float), stream));
  } else {
    const std::vector<uint16_t> packed = detail::gemm_pack_bf16(w, n, k);
    auto buf = DeviceBuffer::alloc(packed.size() * sizeof(uint16_t));
    if (!buf.ok()) return buf.status();
    out.buf_ = std::move(buf).value();
    RETURN_IF_ERROR(out.buf_.upload(packed.data(), packed.size() * sizeof(uint16_t), stream));
  }
  // The staging vectors die here; pageable copies are staged before cudaMemcpyAsync returns.
  return Result<DeviceWeight>(std::move(out));
}

Result<DeviceWeight> DeviceWeight::upload(const PackedWeight& w, Stream stream) {
  std::vector<float> dense(static_cast<size_t>(w.n() * w.k()));
  for (int64_t j = 0; j < w.n(); ++j) {
    for (int64_t kk = 0; kk < w.k(); ++kk) dense[j * w.k() + kk] = w.at(j, kk);
  }
  // bf16 values round to themselves, so the device holds PackedWeight's exact values;
  // quantized and binary16 weights are fp32 values (widened exactly) and go up as fp32.
  const WeightType type = w.type() == WeightType::kBF16 ? WeightType::kBF16 : WeightType::kF32;
  return upload(dense.data(), w.n(), w.k(), type, stream);
}

Result<DeviceRopeTable> DeviceRopeTable::upload(const RopeTable& table, Stream stream) {
  DeviceRopeTable t;
  t.head_dim_ = table.head_dim();
  t.max_pos_ = table.max_positions();
  const size_t half_elems = static_cast<size_t>(t.max_pos_ * (t.head_dim_ / 2));
  auto buf = DeviceBuffer::alloc(2 * half_elems * sizeof(float));
  if (!buf.ok()) return buf.status();
  t.buf_ = std::move(buf).value();
  if (half_elems > 0) {
    RETURN_IF_ERROR(t.buf_.upload(table.cos_row(0), half_elems * sizeof(float), stream));
    RETURN_IF_ERROR(t.buf_.upload(table.sin_row(0), half_elems * sizeof(float), stream,
                                  half_elems * sizeof(float)));
  }
  return Result<DeviceRopeTable>(std::move(t));
}

}  // namespace llmrr::kernels::cuda
