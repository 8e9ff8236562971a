// The CUDA forward's glue between ops (runtime/src/cuda/engine_kernels.cu): bias, residual,
// bf16 rounding, KV writes and row gathers — each the CPU engine's loop, element for
// element (one rounding per op, no FMA), so the exact family stays bit-identical.
#pragma once

#include <cstdint>

#include "llmrr/format/status.h"
#include "llmrr/kernels/cuda_ops.h"

namespace llmrr::cuda_engine {

using kernels::cuda::Stream;

// y[r, j] = y[r, j] + bias[j].
Status add_bias(float* y, int64_t ldy, int64_t rows, int64_t n, const float* bias, Stream s);
// x[i] = x[i] + d[i], i < n.
Status add_inplace(float* x, const float* d, int64_t n, Stream s);
// Every value rounded to bf16 (nearest even), kept as fp32.
Status round_bf16(float* p, int64_t ld, int64_t rows, int64_t cols, Stream s);
// dst[r][0..cols) = src[r * ld ..] for r < rows; dst: device array of device pointers.
Status write_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, float* const* dst,
                  Stream s);
// dst[i, :] = src[idx[i], :] for i < n (idx device).
Status gather_rows(const float* src, int64_t ld, const int32_t* idx, int64_t n, int64_t cols,
                   float* dst, Stream s);

}  // namespace llmrr::cuda_engine
