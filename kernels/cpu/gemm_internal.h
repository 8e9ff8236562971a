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
// shift (low) or one mask (high) per vector, with no shuffles.
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

struct PackedWeight::Storage {
  int64_t panels = 0;
  void* data = nullptr;  // 64-byte aligned; float or uint16_t (bf16) elements
  size_t bytes = 0;
  ~Storage();
  const float* f32_panel(int64_t p, int64_t k) const {
    return static_cast<const float*>(data) + p * k * kPanel;
  }
  const uint16_t* bf16_panel(int64_t p, int64_t k) const {
    return static_cast<const uint16_t*>(data) + p * k * kPanel;
  }
};

const PackedWeight::Storage& packed_storage(const PackedWeight& w);

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
  // Several panels at once for few rows (GEMV-like shapes): more independent accumulators
  // per k than one 32-column panel offers. wide_panels = 0 when there is none.
  int wide_panels = 0;
  int wide_max_rows = 0;
  TileFn f32_wide[kMaxTileRows + 1] = {};
  TileFn bf16_wide[kMaxTileRows + 1] = {};
};

const GemmKernels& gemm_kernels_scalar();
const GemmKernels& gemm_kernels_avx2();
const GemmKernels& gemm_kernels_avx512();

}  // namespace llmrr::kernels
