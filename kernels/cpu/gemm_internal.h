// Private to the GEMM files: the packed weight layout and the micro-kernel table.
//
// Layout: W[N, K] is stored as panels of kPanel = 32 output columns; panel p holds
// W[32p + j, k] at element (p·K + k)·32 + j. Every micro-kernel (any ISA, any row count)
// walks k upward inside a panel and keeps one accumulator per output, updated with one fma
// per k — the order plan.h prescribes — so results never depend on which kernel ran.
// Columns past N in the last panel are zero and are never stored.
//
// bf16 panels interleave the two halves of a 32-column row inside 32-bit words: word i holds
// column i in its low half and column 16 + i in its high half, so widening to fp32 is one
// shift (low) or one mask (high) per vector, with no shuffles. f16 (binary16) panels keep
// the fp32 order with 16-bit elements: one vcvtph2ps widens 8 or 16 columns exactly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "llmrr/kernels/isa.h"
#include "llmrr/kernels/ops.h"

namespace llmrr::kernels {

inline constexpr int kPanel = 32;
inline constexpr int kMaxTileRows = 12;

// Index of W[., k] column j (0..31) inside a bf16 panel.
inline int64_t bf16_panel_index(int64_t k, int j) {
  return k * kPanel + (j % 16) * 2 + j / 16;
}

// Quantized panels (WeightType::kQuant, quant.h): panel p is K / group groups of
// group_bytes at data + p·panel_bytes. A group holds the 32 columns' A (then B, when the
// format has a minimum) as binary16 (legacy formats, whose d and m are binary16: exact) or
// binary32 (k-quants, whose sub-block scales are products), then the codes of its `group`
// k in quads of 4 consecutive k:
//   4-bit codes: 16 words per quad; word j byte i = c(k = 4q+i, col j) | c(.., col 16+j) << 4
//                (a nibble, value = nibble − offset);
//   8-bit codes: 32 words per quad; word j byte i = c(k = 4q+i, col j) (signed).
// So one 64-byte load serves 4 k of 16 (8-bit) or 32 (4-bit) columns, and extracting a k is
// a shift and a mask per vector, the same on every ISA.
struct QuantLayout {
  uint32_t ggml_type = 0;
  int group = 32;          // k per group: 16 or 32
  int bits = 4;            // 4 or 8
  int offset = 0;          // 4-bit only: value = nibble − offset
  bool has_min = false;
  bool f16_scales = true;
  int64_t hdr_bytes = 0;   // A (and B)
  int64_t quad_bytes = 0;  // 64 (4-bit) or 128 (8-bit)
  int64_t group_bytes = 0;
  int64_t panel_bytes = 0;
};

struct PackedWeight::Storage {
  int64_t panels = 0;
  void* data = nullptr;  // 64-byte aligned; fp32, bf16 or f16 elements, or quant groups
  size_t bytes = 0;
  QuantLayout q;         // kQuant only
  ~Storage();
  const float* f32_panel(int64_t p, int64_t k) const {
    return static_cast<const float*>(data) + p * k * kPanel;
  }
  // bf16 and f16 panels alike (16-bit elements).
  const uint16_t* bf16_panel(int64_t p, int64_t k) const {
    return static_cast<const uint16_t*>(data) + p * k * kPanel;
  }
};

const PackedWeight::Storage& packed_storage(const PackedWeight& w);

// The value quant.h defines for W[32p + j, k], read from the packed groups.
float quant_value(const PackedWeight::Storage& s, int64_t k_total, int64_t n, int64_t k);

// Quantized micro-kernel: t as TileFn for rows × one 32-column panel (`panel` = its first
// group), dequantizing each weight as quant.h defines before its fma.
using QuantTileFn = void (*)(const float* x, int64_t ldx, const uint8_t* panel,
                             const QuantLayout& q, int64_t k0, int64_t k1, float* t);
struct QuantKernels {
  int max_rows = 1;
  // [has_min][kind: 0 4-bit, 1 4-bit with offset, 2 8-bit][rows]
  QuantTileFn fn[2][3][kMaxTileRows + 1] = {};
};
const QuantKernels& quant_kernels_scalar();
const QuantKernels& quant_kernels_avx2();
const QuantKernels& quant_kernels_avx512();

// t[r·ldt + 32q + j] = Σ_k x[r·ldx + k]·W_q[k][j] over k in [k0, k1) for r < rows and the
// `np` panels q < np starting at `panel` (consecutive panels are `pstride` elements apart),
// ldt = 32·np; t starts at +0 with one fma per k in increasing k. `panel` points at the
// first panel's k = 0 row.
using TileFn = void (*)(const float* x, int64_t ldx, const void* panel, int64_t pstride, int64_t k0,
                        int64_t k1, float* t);

struct GemmKernels {
  int max_rows = 1;                   // largest row count with a one-panel kernel
  int max_rows_bf16 = 0;              // the same for bf16 weights when it differs (0: same)
  TileFn f32[kMaxTileRows + 1] = {};  // one panel, index = rows
  TileFn bf16[kMaxTileRows + 1] = {};
  TileFn f16[kMaxTileRows + 1] = {};  // binary16 panels: the f32 layout with 16-bit elements
  // Several panels at once for few rows (GEMV-like shapes): more independent accumulators
  // per k than one 32-column panel offers. wide_panels = 0 when there is none.
  int wide_panels = 0;
  int wide_max_rows = 0;
  TileFn f32_wide[kMaxTileRows + 1] = {};
  TileFn bf16_wide[kMaxTileRows + 1] = {};
  TileFn f16_wide[kMaxTileRows + 1] = {};
};

const GemmKernels& gemm_kernels_scalar();
const GemmKernels& gemm_kernels_avx2();
const GemmKernels& gemm_kernels_avx512();

}  // namespace llmrr::kernels
