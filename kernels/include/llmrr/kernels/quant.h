// Block-quantized linear weights kept quantized: the ggml formats of GGUF files, packed so
// that gemm dequantizes them inside its micro-kernels and nothing ever holds an fp32 copy.
//
// The value of a stored weight (the contract; PackedWeight::at, the reference GEMM and every
// micro-kernel use exactly this): each format is re-expressed, per output column n and per
// group of G consecutive k (G = 16 or 32, a sub-block of the ggml block), as
//     W[n, k] = A[n, g] * float(c[n, k])              (formats without a minimum)
//     W[n, k] = A[n, g] * float(c[n, k]) + B[n, g]    (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K)
// with c a small integer, "*" and "+" single IEEE binary32 operations (never fused), and
// A, B the scale and minimum that ggml's dequantize_row_* computes for that sub-block, in the
// same operation order (Q6_K: A = d * float(scale); Q4_K: A = d * float(sc), B = -(dmin *
// float(m))). That is term for term what the loader's ggml_dequantize writes, so a quantized
// PackedWeight holds the same fp32 values as one packed from the dequantized tensor, and
// gemm gives the same bits either way: quantization changes memory and speed, never a result.
// The GEMM order itself is unchanged (plan.h: per output, sequential fma in k).
#pragma once

#include <cstdint>

#include "llmrr/kernels/ops.h"

namespace llmrr::kernels {

// ggml type numbers (ggml.h) that pack_ggml accepts.
enum class GgmlQuant : uint32_t {
  kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
};

// Elements per ggml block (32 or 256) and bytes per block of a type pack_ggml accepts;
// false for every other type (F32, F16, BF16 and the IQ formats are not packed this way).
bool ggml_quant_block(uint32_t ggml_type, int64_t* block_elems, int64_t* block_bytes);

// Packs W[n, k] from ggml blocks: logical row i (output i) is the k / block_elems blocks at
// rows[i] (each row its own pointer, so callers can permute rows or slice stacked experts
// without copying). Preconditions (the caller checks them): ggml_quant_block(type) holds and
// k % block_elems == 0. The packed weight's type() is WeightType::kQuant.
PackedWeight pack_ggml(uint32_t ggml_type, const uint8_t* const* rows, int64_t n, int64_t k);

}  // namespace llmrr::kernels
