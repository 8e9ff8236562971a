// Pieces every kernels/cuda/*.cu shares: CUDA errors as Status, argument checks, a launch
// of a block body with its Launch, and stream-ordered scratch for what a launch needs on the
// device besides its arguments (arrival lists, attention rows and part states).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "block_exec.h"
#include "llmrr/format/status.h"
#include "llmrr/kernels/cuda_ops.h"

namespace llmrr::kernels::cuda::detail {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return make_error(ErrorCode::kInternal,
                    std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline Status bad_arg(const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, what);
}

inline Status unsupported(const std::string& what) {
  return make_error(ErrorCode::kUnsupported, what);
}

// Launches kernel<<<l>>>(params) on the stream; an empty grid launches nothing.
template <class Params>
Status launch(void (*kernel)(Params), const Launch& l, const Params& p, Stream stream,
              const char* what) {
  if (l.gx <= 0 || l.gy <= 0) return Status::Ok();
  if (l.gx > 0x7fffffffLL || l.gy > 65535) {
    return unsupported(std::string(what) + ": grid " + std::to_string(l.gx) + " x " +
                       std::to_string(l.gy) + " is past the CUDA limits");
  }
  kernel<<<dim3(static_cast<unsigned>(l.gx), static_cast<unsigned>(l.gy)), l.threads, l.smem,
           stream>>>(p);
  return cuda_status(cudaGetLastError(), what);
}

// Device memory that lives until the work enqueued on `stream` before its destruction is
// done (cudaMallocAsync / cudaFreeAsync are stream-ordered).
class StreamScratch {
 public:
  explicit StreamScratch(Stream stream) : stream_(stream) {}
  ~StreamScratch() {
    if (p_ != nullptr) cudaFreeAsync(p_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;

  Status alloc(size_t bytes, const char* what) {
    return cuda_status(cudaMallocAsync(&p_, bytes == 0 ? 1 : bytes, stream_), what);
  }
  // alloc + a host → device copy (from pageable memory the copy has been staged when this
  // returns, so `host` may go away).
  Status upload(const void* host, size_t bytes, const char* what) {
    RETURN_IF_ERROR(alloc(bytes, what));
    return cuda_status(cudaMemcpyAsync(p_, host, bytes, cudaMemcpyHostToDevice, stream_), what);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  Stream stream_;
  void* p_ = nullptr;
};

}  // namespace llmrr::kernels::cuda::detail
