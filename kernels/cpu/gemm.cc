// GEMM y = x·Wᵀ following a kGemm plan (plan.h). The driver cuts the output into
// (row tile × 32-column panel) blocks, hands blocks to threads, and for each block runs the
// plan's splits in combine order and each split's k-tiles in order; a micro-kernel computes
// one tile's sums t from +0 with sequential fma in k. Blocks are independent, so neither the
// thread count, nor the row tile a row lands in, nor the ISA can change a bit.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu/gemm_internal.h"
#include "llmrr/kernels/numerics.h"

namespace llmrr::kernels {

PackedWeight::Storage::~Storage() {
  ::operator delete(data, std::align_val_t(64));
}

PackedWeight::PackedWeight() = default;
PackedWeight::~PackedWeight() = default;
PackedWeight::PackedWeight(PackedWeight&&) noexcept = default;
PackedWeight& PackedWeight::operator=(PackedWeight&&) noexcept = default;

const PackedWeight::Storage& packed_storage(const PackedWeight& w) {
  return *w.s_;
}

// Zeroed, 64-byte aligned panels for n × k weights of esize bytes each.
PackedWeight::PackedWeight(int64_t n, int64_t k, WeightType type, size_t esize)
    : n_(n), k_(k), type_(type), s_(std::make_unique<Storage>()) {
  Storage& s = *s_;
  s.panels = (n + kPanel - 1) / kPanel;
  s.bytes = static_cast<size_t>(s.panels) * static_cast<size_t>(k) * kPanel * esize;
  s.data = ::operator new(std::max<size_t>(s.bytes, 64), std::align_val_t(64));
  std::memset(s.data, 0, std::max<size_t>(s.bytes, 64));
}

PackedWeight PackedWeight::pack(const float* w, int64_t n, int64_t k, WeightType type) {
  PackedWeight out(n, k, type, type == WeightType::kF32 ? 4 : 2);
  Storage& s = *out.s_;
  for (int64_t p = 0; p < s.panels; ++p) {
    const int64_t cols = std::min<int64_t>(kPanel, n - p * kPanel);
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = w + (p * kPanel + j) * k;
      if (type == WeightType::kF32) {
        float* dst = static_cast<float*>(s.data) + p * k * kPanel + j;
        for (int64_t kk = 0; kk < k; ++kk) dst[kk * kPanel] = src[kk];
      } else {
        uint16_t* dst = static_cast<uint16_t*>(s.data) + p * k * kPanel;
        for (int64_t kk = 0; kk < k; ++kk) {
          dst[bf16_panel_index(kk, static_cast<int>(j))] = numerics::f32_to_bf16(src[kk]);
        }
      }
    }
  }
  return out;
}

PackedWeight PackedWeight::pack_rows16(const uint16_t* const* rows, int64_t n, int64_t k,
                                       WeightType type) {
  PackedWeight out(n, k, type, 2);
  Storage& s = *out.s_;
  for (int64_t p = 0; p < s.panels; ++p) {
    uint16_t* dst = static_cast<uint16_t*>(s.data) + p * k * kPanel;
    const int64_t cols = std::min<int64_t>(kPanel, n - p * kPanel);
    for (int64_t j = 0; j < cols; ++j) {
      const uint16_t* src = rows[p * kPanel + j];
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t at = type == WeightType::kBF16 ? bf16_panel_index(kk, static_cast<int>(j))
                                                     : kk * kPanel + j;
        std::memcpy(dst + at, src + kk, 2);  // rows may be unaligned (file mappings)
      }
    }
  }
  return out;
}

size_t PackedWeight::bytes() const {
  return s_ ? s_->bytes : 0;
}

float PackedWeight::at(int64_t n, int64_t k) const {
  if (type_ == WeightType::kQuant) return quant_value(*s_, k_, n, k);
  const int64_t p = n / kPanel, j = n % kPanel;
  if (type_ == WeightType::kF32) {
    return static_cast<const float*>(s_->data)[(p * k_ + k) * kPanel + j];
  }
  const uint16_t* panel = static_cast<const uint16_t*>(s_->data) + p * k_ * kPanel;
  if (type_ == WeightType::kF16) return numerics::f16_to_f32(panel[k * kPanel + j]);
  return numerics::bf16_to_f32(panel[bf16_panel_index(k, static_cast<int>(j))]);
}

// --- scalar micro-kernels (the portable path, and the definition the SIMD ones mirror) ---

namespace {

// Panel element kinds of the fp32-valued weights.
enum Elem { kElemF32 = 0, kElemBf16 = 1, kElemF16 = 2 };

template <int R, int kElem>
void tile_scalar(const float* x, int64_t ldx, const void* panel, int64_t /*pstride*/, int64_t k0,
                 int64_t k1, float* t) {
  float acc[R][kPanel];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kPanel; ++j) acc[r][j] = 0.0f;
  const float* wf = static_cast<const float*>(panel);
  const uint16_t* wh = static_cast<const uint16_t*>(panel);
  for (int64_t k = k0; k < k1; ++k) {
    float wk[kPanel];
    for (int j = 0; j < kPanel; ++j) {
      if constexpr (kElem == kElemF32) {
        wk[j] = wf[k * kPanel + j];
      } else if constexpr (kElem == kElemBf16) {
        wk[j] = numerics::bf16_to_f32(wh[bf16_panel_index(k, j)]);
      } else {
        wk[j] = numerics::f16_to_f32(wh[k * kPanel + j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float xv = x[r * ldx + k];
      for (int j = 0; j < kPanel; ++j) acc[r][j] = std::fma(xv, wk[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kPanel; ++j) t[r * kPanel + j] = acc[r][j];
}

template <int... Rs>
GemmKernels make_scalar(std::integer_sequence<int, Rs...>) {
  GemmKernels g;
  g.max_rows = 4;
  ((g.f32[Rs + 1] = &tile_scalar<Rs + 1, kElemF32>), ...);
  ((g.bf16[Rs + 1] = &tile_scalar<Rs + 1, kElemBf16>), ...);
  ((g.f16[Rs + 1] = &tile_scalar<Rs + 1, kElemF16>), ...);
  return g;
}

}  // namespace

const GemmKernels& gemm_kernels_scalar() {
  static const GemmKernels k = make_scalar(std::make_integer_sequence<int, 4>());
  return k;
}

// --- AVX2 micro-kernels -----------------------------------------------------------------

namespace {

// fp32, R ≤ 3 rows × one 32-column panel: 4R accumulators plus the panel row and a
// broadcast fit the 16 ymm registers. (Two 16-column passes to fit more rows were measured
// slower: each pass streams the panel again.) kF16: binary16 panels, widened exactly.
template <int R, bool kF16>
void tile_avx2(const float* x, int64_t ldx, const void* panel, int64_t /*pstride*/, int64_t k0,
               int64_t k1, float* t) {
  __m256 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t k = k0; k < k1; ++k) {
    __m256 wv[4];
    if constexpr (kF16) {
      const uint16_t* wk = static_cast<const uint16_t*>(panel) + k * kPanel;
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v)
        wv[v] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(wk + 8 * v)));
    } else {
      const float* wk = static_cast<const float*>(panel) + k * kPanel;
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) wv[v] = _mm256_load_ps(wk + 8 * v);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(x + r * ldx + k);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_fmadd_ps(b, wv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(t + r * kPanel + 8 * v, acc[r][v]);
}

// bf16, R ≤ 6 rows: two passes of 16 columns (2R accumulators each). Widening bf16 takes
// registers a full 32-column tile of fp32 does not need, so the f32 layout above would
// spill; every output still sees its own k sequence unchanged.
template <int R>
void tile_avx2_bf16_halves(const float* x, int64_t ldx, const void* panel, int64_t /*pstride*/,
                           int64_t k0, int64_t k1, float* t) {
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int half = 0; half < 2; ++half) {
    __m256 acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const uint16_t* wk = static_cast<const uint16_t*>(panel) + k0 * kPanel;
    for (int64_t k = k0; k < k1; ++k, wk += kPanel) {
      const __m256i l0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wk));
      const __m256i l1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wk + 16));
      __m256 w0, w1;
      if (half == 0) {
        w0 = _mm256_castsi256_ps(_mm256_slli_epi32(l0, 16));
        w1 = _mm256_castsi256_ps(_mm256_slli_epi32(l1, 16));
      } else {
        w0 = _mm256_castsi256_ps(_mm256_and_si256(l0, hi_mask));
        w1 = _mm256_castsi256_ps(_mm256_and_si256(l1, hi_mask));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 b = _mm256_broadcast_ss(x + r * ldx + k);
        acc[r][0] = _mm256_fmadd_ps(b, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(b, w1, acc[r][1]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(t + r * kPanel + 16 * half, acc[r][0]);
      _mm256_storeu_ps(t + r * kPanel + 16 * half + 8, acc[r][1]);
    }
  }
}

// One row × two panels (64 columns, 8 accumulators): enough independent fma chains to
// cover the fma latency when there is a single row.
template <int kElem>
void tile_avx2_wide(const float* x, int64_t ldx, const void* panel, int64_t pstride, int64_t k0,
                    int64_t k1, float* t) {
  __m256 acc[8];
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) acc[v] = _mm256_setzero_ps();
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t k = k0; k < k1; ++k) {
    const __m256 b = _mm256_broadcast_ss(x + k);
#pragma GCC unroll 2
    for (int q = 0; q < 2; ++q) {
      __m256 w[4];
      if constexpr (kElem == kElemF16) {
        const uint16_t* wk = static_cast<const uint16_t*>(panel) + q * pstride + k * kPanel;
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v)
          w[v] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(wk + 8 * v)));
      } else if constexpr (kElem == kElemBf16) {
        const uint16_t* wk = static_cast<const uint16_t*>(panel) + q * pstride + k * kPanel;
        const __m256i l0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wk));
        const __m256i l1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wk + 16));
        w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(l0, 16));
        w[1] = _mm256_castsi256_ps(_mm256_slli_epi32(l1, 16));
        w[2] = _mm256_castsi256_ps(_mm256_and_si256(l0, hi_mask));
        w[3] = _mm256_castsi256_ps(_mm256_and_si256(l1, hi_mask));
      } else {
        const float* wk = static_cast<const float*>(panel) + q * pstride + k * kPanel;
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) w[v] = _mm256_load_ps(wk + 8 * v);
      }
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[q * 4 + v] = _mm256_fmadd_ps(b, w[v], acc[q * 4 + v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) _mm256_storeu_ps(t + 8 * v, acc[v]);
}

GemmKernels make_avx2() {
  GemmKernels g;
  g.max_rows = 3;
  g.max_rows_bf16 = 6;
  g.f32[1] = &tile_avx2<1, false>;
  g.f32[2] = &tile_avx2<2, false>;
  g.f32[3] = &tile_avx2<3, false>;
  g.f16[1] = &tile_avx2<1, true>;
  g.f16[2] = &tile_avx2<2, true>;
  g.f16[3] = &tile_avx2<3, true>;
  g.bf16[1] = &tile_avx2_bf16_halves<1>;
  g.bf16[2] = &tile_avx2_bf16_halves<2>;
  g.bf16[3] = &tile_avx2_bf16_halves<3>;
  g.bf16[4] = &tile_avx2_bf16_halves<4>;
  g.bf16[5] = &tile_avx2_bf16_halves<5>;
  g.bf16[6] = &tile_avx2_bf16_halves<6>;
  g.wide_panels = 2;
  g.wide_max_rows = 1;
  g.f32_wide[1] = &tile_avx2_wide<kElemF32>;
  g.bf16_wide[1] = &tile_avx2_wide<kElemBf16>;
  g.f16_wide[1] = &tile_avx2_wide<kElemF16>;
  return g;
}

}  // namespace

const GemmKernels& gemm_kernels_avx2() {
  static const GemmKernels k = make_avx2();
  return k;
}

// --- driver -----------------------------------------------------------------------------

namespace {

const QuantKernels& quant_kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return quant_kernels_avx512();
    case Isa::kAvx2:
      return quant_kernels_avx2();
    default:
      return quant_kernels_scalar();
  }
}

const GemmKernels& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return gemm_kernels_avx512();
    case Isa::kAvx2:
      return gemm_kernels_avx2();
    default:
      return gemm_kernels_scalar();
  }
}

struct GemmJob {
  const float* x;
  int64_t ldx, m;
  const PackedWeight::Storage* s;
  bool bf16;
  bool f16;
  int64_t n, k;
  float* y;
  int64_t ldy;
  const Plan* plan;
  int64_t splits;  // ≥ 1
  bool arrival;    // combine in plan.arrival order
  int64_t chunk;   // split length c
  int64_t rows_per_tile;
  const GemmKernels* kern;
  const QuantKernels* qkern;  // kQuant weights
  int qkind;                  // QuantKernels::fn index: 0 4-bit, 1 4-bit + offset, 2 8-bit
};

// One block: rows [r0, r0 + rows) × panels [p, p + np), np = 1 or the wide kernel's count.
void run_block(const GemmJob& j, int64_t r0, int rows, int64_t p, int np) {
  alignas(64) float t[kMaxTileRows * kPanel];
  alignas(64) float part[kMaxTileRows * kPanel];
  alignas(64) float acc[kMaxTileRows * kPanel];
  const int ldt = np * kPanel;
  const int cnt = rows * ldt;
  const float* x = j.x + r0 * j.ldx;
  const void* panel = j.qkern             ? nullptr
                     : j.bf16 || j.f16 ? static_cast<const void*>(j.s->bf16_panel(p, j.k))
                                       : static_cast<const void*>(j.s->f32_panel(p, j.k));
  const int64_t pstride = j.k * kPanel;
  TileFn fn = nullptr;
  QuantTileFn qfn = nullptr;
  const uint8_t* qpanel = nullptr;
  if (j.qkern) {
    qfn = j.qkern->fn[j.s->q.has_min][j.qkind][rows];
    qpanel = static_cast<const uint8_t*>(j.s->data) + p * j.s->q.panel_bytes;
  } else {
    const GemmKernels& g = *j.kern;
    fn = np == 1 ? (j.bf16 ? g.bf16[rows] : j.f16 ? g.f16[rows] : g.f32[rows])
                 : (j.bf16 ? g.bf16_wide[rows] : j.f16 ? g.f16_wide[rows] : g.f32_wide[rows]);
  }
  // One tile's sums over [k0, k1) into out, by whichever micro-kernel the weight needs.
  auto tile = [&](int64_t k0, int64_t k1, float* out) {
    if (qfn) {
      qfn(x, j.ldx, qpanel, j.s->q, k0, k1, out);
    } else {
      fn(x, j.ldx, panel, pstride, k0, k1, out);
    }
  };
  const Plan& plan = *j.plan;
  const int64_t splits = j.splits;
  const int64_t kt = plan.k_tile;
  for (int64_t si = 0; si < splits; ++si) {
    const int64_t s = j.arrival ? plan.arrival[si] : si;
    const int64_t a = std::min(s * j.chunk, j.k), b = std::min(a + j.chunk, j.k);
    float* pp = (si == 0) ? acc : part;
    if (kt == 0) {
      tile(a, b, pp);
    } else {
      for (int e = 0; e < cnt; ++e) pp[e] = 0.0f;
      for (int64_t t0 = a; t0 < b; t0 += kt) {
        tile(t0, std::min(t0 + kt, b), t);
        for (int e = 0; e < cnt; ++e) pp[e] = pp[e] + t[e];
      }
    }
    if (si > 0) {
      for (int e = 0; e < cnt; ++e) acc[e] = acc[e] + part[e];
    }
  }
  for (int q = 0; q < np; ++q) {
    const int64_t cols = std::min<int64_t>(kPanel, j.n - (p + q) * kPanel);
    for (int r = 0; r < rows; ++r) {
      std::memcpy(j.y + (r0 + r) * j.ldy + (p + q) * kPanel, acc + r * ldt + q * kPanel,
                  cols * sizeof(float));
    }
  }
}

}  // namespace

void gemm(const float* x, int64_t ldx, int64_t m, const PackedWeight& w, float* y, int64_t ldy,
          const Plan& plan, ThreadPool& pool) {
  const int64_t n = w.n(), k = w.k();
  if (m <= 0 || n <= 0) return;
  GemmJob j;
  j.x = x;
  j.ldx = ldx;
  j.m = m;
  j.s = &packed_storage(w);
  j.bf16 = w.type() == WeightType::kBF16;
  j.f16 = w.type() == WeightType::kF16;
  j.n = n;
  j.k = k;
  j.y = y;
  j.ldy = ldy;
  j.plan = &plan;
  // Plans are expected to pass plan_check; a malformed one must still not read out of
  // bounds: splits 0 runs as 1, an arrival list of the wrong size as fixed order.
  const int64_t splits = std::max<int64_t>(plan.splits, 1);
  j.splits = splits;
  j.arrival =
      plan.order == CombineOrder::kArrival && plan.arrival.size() == static_cast<size_t>(splits);
  if (j.arrival) {
    for (uint16_t a : plan.arrival) j.arrival = j.arrival && a < splits;
  }
  j.chunk = ((k + splits - 1) / splits + 15) / 16 * 16;
  j.kern = &kernels_for(active_isa());
  j.rows_per_tile = j.bf16 && j.kern->max_rows_bf16 ? j.kern->max_rows_bf16 : j.kern->max_rows;
  j.qkern = nullptr;
  j.qkind = 0;
  if (w.type() == WeightType::kQuant) {
    j.qkern = &quant_kernels_for(active_isa());
    j.rows_per_tile = j.qkern->max_rows;
    j.qkind = j.s->q.bits == 8 ? 2 : (j.s->q.offset != 0 ? 1 : 0);
  }
  const int64_t panels = j.s->panels;
  const int64_t tiles = (m + j.rows_per_tile - 1) / j.rows_per_tile;
  // Few rows: the wide kernel, several panels per call (same per-output sequence).
  const int wide = (!j.qkern && m <= j.kern->wide_max_rows) ? j.kern->wide_panels : 0;
  // Tasks: groups of panels × groups of row tiles. Any grouping gives the same bits.
  const int64_t threads = pool.size();
  int64_t panel_group = std::max<int64_t>(1, panels / (threads * 4));
  // Equal shares: a group count that is no multiple of the thread count leaves threads idle
  // at the end of every call (9 groups of 2 panels on 2 threads: 5 against 4), which the
  // small GEMVs of a decode step feel. So smaller groups until the count divides (or 1).
  while (panel_group > 1 && ((panels + panel_group - 1) / panel_group) % threads != 0)
    --panel_group;
  if (wide > 1) panel_group = (panel_group + wide - 1) / wide * wide;
  const int64_t ngroups = (panels + panel_group - 1) / panel_group;
  int64_t tile_group = tiles;
  if (ngroups < threads * 4) {
    tile_group = std::max<int64_t>(1, tiles / std::max<int64_t>(1, (threads * 4) / ngroups));
  }
  const int64_t ntg = (tiles + tile_group - 1) / tile_group;
  pool.parallel_for(ngroups * ntg, [&](int64_t task) {
    const int64_t pg = task / ntg, tg = task % ntg;
    const int64_t p0 = pg * panel_group, p1 = std::min(panels, p0 + panel_group);
    const int64_t t0 = tg * tile_group, t1 = std::min(tiles, t0 + tile_group);
    for (int64_t p = p0; p < p1;) {
      const int np = (wide > 1 && p + wide <= p1) ? wide : 1;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t r0 = t * j.rows_per_tile;
        const int rows = static_cast<int>(std::min<int64_t>(j.rows_per_tile, m - r0));
        run_block(j, r0, rows, p, np);
      }
      p += np;
    }
  });
}

}  // namespace llmrr::kernels
