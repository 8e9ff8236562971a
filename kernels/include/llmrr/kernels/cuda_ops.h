// The exact CUDA ops (kernels/cuda/, one .cu per op), one public entry each, mirroring
// ops.h: the same arguments with device pointers, plus the stream to run on. Every entry
// follows the Plan it is given exactly as plan.h spells it (CUDA cores, fmaf in the plan's
// order, built with -fmad=false), so its output is bit-identical to kernels/cpu/reference.cc
// and to the CPU ops for every plan, arrival order included (DESIGN, invariants 1 and 4).
//
// Conventions:
// - Pointers named x, y, out, ids, ... are device pointers unless a comment says "host".
// - Every entry enqueues work on `stream` and returns without waiting; a Status that is not
//   ok means nothing (or not all) was enqueued: a bad argument (kInvalidArgument), a plan
//   past a kernel's limits (kUnsupported, the message names the limit), or a CUDA error
//   (kInternal, with cudaGetErrorString). Kernel faults surface at the next sync, as usual.
// - A malformed plan never reads out of bounds: splits 0 runs as 1, a malformed arrival
//   list as fixed / rank order (as the CPU ops do).
// - This header compiles without the CUDA headers: Stream is cudaStream_t's own type.
// - Built only with LLMRR_CUDA=ON (target llmrr_kernels_cuda); without a device
//   available() is false and every entry with work to enqueue returns kInternal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "llmrr/format/status.h"
#include "llmrr/kernels/ops.h"
#include "llmrr/kernels/plan.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace llmrr::kernels::cuda {

using Stream = CUstream_st*;  // nullptr = the legacy default stream

// ---- devices -------------------------------------------------------------------------

// True when the CUDA runtime reports at least one device (cudaGetDeviceCount > 0).
bool available();

struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // cudaDeviceProp::name, e.g. "NVIDIA H200"
  int sm_count = 0;  // multiProcessorCount
  int cc_major = 0, cc_minor = 0;
  int driver_version = 0;   // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;  // cudaRuntimeGetVersion
  size_t global_mem_bytes = 0;
};
Result<DeviceInfo> device_info(int ordinal = 0);

// ---- device memory -------------------------------------------------------------------

// Owns one cudaMalloc allocation (moves, no copies). Copies are stream-ordered.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&&) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static Result<DeviceBuffer> alloc(size_t bytes);
  // Host → device, `bytes` from host_src to offset `offset`.
  Status upload(const void* host_src, size_t bytes, Stream stream, size_t offset = 0);
  // Device → host; with a pageable host_dst the copy has finished when this returns.
  Status download(void* host_dst, size_t bytes, Stream stream, size_t offset = 0) const;

  void* data() { return p_; }
  const void* data() const { return p_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(p_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// ---- weights -------------------------------------------------------------------------

// A linear layer's weight on the device, logically W[N, K] like PackedWeight, stored
// K-major (Wᵀ: element (n, k) at k·N + n, fp32 or bf16) so that the threads of a warp,
// one output column each, read consecutive addresses at every k.
class DeviceWeight {
 public:
  // w: host, row-major [n, k] fp32; kBF16 rounds each value to bf16 (nearest even), as
  // PackedWeight::pack does, so both hold the same logical values.
  static Result<DeviceWeight> upload(const float* w, int64_t n, int64_t k, WeightType type,
                                     Stream stream);
  // The logical values of a packed CPU weight (same type, same bits).
  static Result<DeviceWeight> upload(const PackedWeight& w, Stream stream);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  WeightType type() const { return type_; }
  const void* data() const { return buf_.data(); }  // K-major, see above
  size_t bytes() const { return buf_.bytes(); }

 private:
  int64_t n_ = 0, k_ = 0;
  WeightType type_ = WeightType::kF32;
  DeviceBuffer buf_;
};

// ---- ops -----------------------------------------------------------------------------

// y[i, :] = x[i, :] · Wᵀ for i < m (plan.op kGemm: split-K ranges, k-tiles, sequential fmaf
// per output, partials combined in plan order or `arrival`). m ≤ 65535; splits ≤ 256.
Status gemm(const float* x, int64_t ldx, int64_t m, const DeviceWeight& w, float* y, int64_t ldy,
            const Plan& plan, Stream stream);

// y[i, :] = weight ⊙ x[i, :] · rsqrt(mean(x[i, :]²) + eps) (plan.op kRmsNorm: 16 lanes per
// chunk, halving tree, chunks in order). weight: device [dim]. y may alias x. splits ≤ 512.
Status rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* weight,
               float eps, float* y, int64_t ldy, const Plan& plan, Stream stream);

// RopeTable's cos/sin rows on the device (the very values the CPU reads).
class DeviceRopeTable {
 public:
  static Result<DeviceRopeTable> upload(const RopeTable& table, Stream stream);
  int64_t head_dim() const { return head_dim_; }
  int64_t max_positions() const { return max_pos_; }
  const float* cos() const { return buf_.as<float>(); }  // [max_positions][head_dim/2]
  const float* sin() const { return buf_.as<float>() + max_pos_ * (head_dim_ / 2); }

 private:
  int64_t head_dim_ = 0, max_pos_ = 0;
  DeviceBuffer buf_;
};

// In place on n_heads heads of each row; positions: device [rows], each in
// [0, max_positions) (a position outside leaves its row unchanged).
Status rope(float* x, int64_t ldx, int64_t rows, const int32_t* positions, int64_t n_heads,
            const DeviceRopeTable& table, Stream stream);

// One sequence's paged KV on the device: k_blocks / v_blocks are device arrays of device
// pointers; block b holds positions [b·block_size, (b+1)·block_size) as
// [position][kv_head][head_dim] (ops.h's KvSeqView, on the device).
struct KvSeqView {
  const float* const* k_blocks = nullptr;
  const float* const* v_blocks = nullptr;
  int32_t block_size = 0;
};

// One query row. The AttnRow array itself is host memory (the entry copies it to the
// device, and sizes the launch from pos / cached); q, out and kv's arrays are device memory.
struct AttnRow {
  const float* q = nullptr;  // device [heads][head_dim]
  float* out = nullptr;      // device [heads][head_dim]
  KvSeqView kv;
  int32_t pos = 0;     // attends to KV positions [0, pos]; pos < 0 → zeros
  int32_t cached = 0;  // positions < cached were cached before this step
};

// plan.op kAttention: parts (kCount / kSize), two-pass softmax with llmrr's exp, parts
// merged in order, separate_new_kv. head_dim ≤ 256; the KV each row reads must be written.
Status attention(std::span<const AttnRow> rows, const AttnShape& shape, const Plan& plan,
                 Stream stream);

// out[i, j] = silu(gate[i, j]) * up[i, j] with llmrr's exp.
Status swiglu(const float* gate, int64_t ldg, const float* up, int64_t ldu, int64_t rows,
              int64_t cols, float* out, int64_t ldo, Stream stream);

// out[r, :] = Σ_i gates[r·k + i] · expert_rows[src[r·k + i], :] in plan order (plan.op
// kCombine; src < 0 = dropped). src, gates: device [rows·k]; plan.arrival is host memory
// (copied by the entry). out is overwritten.
Status moe_combine(const float* expert_rows, int64_t ld_expert, const int32_t* src,
                   const float* gates, int64_t rows, int k, int64_t dim, float* out, int64_t ldo,
                   const Plan& plan, Stream stream);

// out[i, :] = table[ids[i], :] (device table [vocab, dim], fp32 or bf16 as uint16 bits);
// an id outside [0, vocab) gives a row of zeros. ids: device [rows].
Status embedding(const void* table, WeightType type, int64_t vocab, int64_t dim, const int32_t* ids,
                 int64_t rows, float* out, int64_t ldo, Stream stream);

// Router scoring in place on rows × n (ld between rows), as softmax_inplace / sigmoid_inplace.
Status softmax_rows(float* x, int64_t ldx, int64_t rows, int64_t n, Stream stream);
Status sigmoid_rows(float* x, int64_t ldx, int64_t rows, int64_t n, Stream stream);

// A row's fingerprint with trace::Fingerprint's layout and exact definition
// (format/fingerprint.h): xxh3-64 (seed 0) of the row's bytes, l2 from 8 interleaved double
// lanes, max |x|; NaN anywhere → l2 = max_abs = NaN. The engine copies these 16 bytes into
// trace::Fingerprint as they are.
struct RowFingerprint {
  uint64_t hash = 0;
  float l2 = 0.0f;
  float max_abs = 0.0f;
};
static_assert(sizeof(RowFingerprint) == 16);

// The largest-k of each of `rows` rows of n values (topk's ranking: descending, ties to the
// lower id, NaN last; k > n pads with id −1, value −inf): ids / values device [rows·k].
// k ≤ 128 (kUnsupported above). And/or each row's fingerprint: fps device [rows].
// Pass k = 0 (ids / values unused) for fingerprints only, fps = nullptr for top-k only.
inline constexpr int kMaxTopK = 128;
Status select_rows(const float* x, int64_t ldx, int64_t rows, int64_t n, int k, int32_t* ids,
                   float* values, RowFingerprint* fps, Stream stream);

}  // namespace llmrr::kernels::cuda
