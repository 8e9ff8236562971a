// The CPU ops, one public entry each (one file per op in kernels/cpu/). Activations are
// fp32; weights are fp32 or bf16 (widened exactly to fp32 before use, fp32 accumulation).
//
// Every entry follows the Plan it is given (plan.h spells out the order) and is a pure
// function of (inputs, weights, plan): the same bits for any thread count, for the scalar,
// AVX2 and AVX-512 paths, and for any position of a row inside the batch. Plans should pass
// plan_check; a malformed one never reads out of bounds (splits 0 runs as 1, a malformed
// arrival list as fixed / rank order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "llmrr/kernels/plan.h"
#include "llmrr/kernels/threadpool.h"

namespace llmrr::kernels {

// kQuant: ggml block formats kept quantized (quant.h); kF16: IEEE binary16 weights (GGUF
// F16) kept as stored. Both are only ever the storage of one PackedWeight, never a
// model-wide weight type: their values widen exactly to fp32, so they compute as kF32.
enum class WeightType : uint8_t { kF32 = 0, kBF16 = 1, kQuant = 2, kF16 = 3 };

// A linear layer's weight, logically W[N, K] (out × in, the PyTorch Linear layout), stored
// K-major (Wᵀ, N contiguous, padded as the micro-kernels like) so that the GEMV and the GEMM
// micro-kernels walk k in the same order for every output.
class PackedWeight {
 public:
  PackedWeight();
  ~PackedWeight();
  PackedWeight(PackedWeight&&) noexcept;
  PackedWeight& operator=(PackedWeight&&) noexcept;

  // w: row-major [n, k] fp32. kBF16 rounds each value to bf16 (round to nearest even), so a
  // bf16 checkpoint widened to fp32 and packed as kBF16 keeps its exact values.
  static PackedWeight pack(const float* w, int64_t n, int64_t k, WeightType type);
  // 16-bit weights kept as stored: row i (output i) is the k values at rows[i], binary16
  // bits for kF16, bfloat16 bits for kBF16. Each value widens exactly to fp32, so gemm gives
  // the bits of pack() on the widened rows (with kF32 or kBF16: the same values).
  static PackedWeight pack_rows16(const uint16_t* const* rows, int64_t n, int64_t k,
                                  WeightType type);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  WeightType type() const { return type_; }
  size_t bytes() const;
  // The logical value W[n, k] (fp32), for tests and references.
  float at(int64_t n, int64_t k) const;

  struct Storage;  // layout is private to kernels/cpu/gemm*.cc

 private:
  PackedWeight(int64_t n, int64_t k, WeightType type, size_t esize);  // zeroed panels
  int64_t n_ = 0, k_ = 0;
  WeightType type_ = WeightType::kF32;
  std::unique_ptr<Storage> s_;
  friend const Storage& packed_storage(const PackedWeight&);
  friend PackedWeight pack_ggml(uint32_t, const uint8_t* const*, int64_t, int64_t);
};

// y[i, :] = x[i, :] · Wᵀ for i < m. plan.op must be kGemm.
void gemm(const float* x, int64_t ldx, int64_t m, const PackedWeight& w, float* y, int64_t ldy,
          const Plan& plan, ThreadPool& pool);

// y[i, :] = weight ⊙ x[i, :] · rsqrt(mean(x[i, :]²) + eps). plan.op must be kRmsNorm.
// y may alias x.
void rmsnorm(const float* x, int64_t ldx, int64_t rows, int64_t dim, const float* weight,
             float eps, float* y, int64_t ldy, const Plan& plan, ThreadPool& pool);

// Rotary embedding in the Hugging Face "rotate_half" layout (pairs i and i + head_dim/2),
// in place on `n_heads` heads of `head_dim` per row; row i is at position positions[i].
// cos/sin come from a RopeTable, computed once on the host in double precision and rounded,
// so every backend reads the same values.
class RopeTable {
 public:
  RopeTable() = default;
  // inv_freq[i] = 1 / theta^(2i / head_dim) computed as Hugging Face does (fp32), angle =
  // fp32(pos) * inv_freq[i] in fp32, cos/sin of that angle in double rounded to fp32.
  RopeTable(int64_t head_dim, double theta, int64_t max_positions);
  int64_t head_dim() const { return head_dim_; }
  int64_t max_positions() const { return max_pos_; }
  const float* cos_row(int64_t pos) const { return cos_.get() + pos * (head_dim_ / 2); }
  const float* sin_row(int64_t pos) const { return sin_.get() + pos * (head_dim_ / 2); }

 private:
  int64_t head_dim_ = 0, max_pos_ = 0;
  std::shared_ptr<float[]> cos_, sin_;
};
void rope(float* x, int64_t ldx, int64_t rows, const int32_t* positions, int64_t n_heads,
          const RopeTable& table);

// One sequence's keys and values in a paged cache. Block b holds positions
// [b*block_size, (b+1)*block_size), laid out [position][kv_head][head_dim].
struct KvSeqView {
  const float* const* k_blocks = nullptr;
  const float* const* v_blocks = nullptr;
  int32_t block_size = 0;
};

struct AttnRow {
  const float* q = nullptr;   // [heads][head_dim]
  float* out = nullptr;       // [heads][head_dim]
  const KvSeqView* kv = nullptr;
  int32_t pos = 0;            // query position: attends to KV positions [0, pos]
  int32_t cached = 0;         // positions < cached were cached before this step
};

struct AttnShape {
  int32_t heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0.0f;         // usually 1/sqrt(head_dim)
};

// plan.op must be kAttention. KV for every position a row reads must already be written.
// A row with pos < 0 attends to nothing and gets zeros.
void attention(std::span<const AttnRow> rows, const AttnShape& shape, const Plan& plan,
               ThreadPool& pool);

// out[i, j] = silu(gate[i, j]) * up[i, j], silu(g) = g / (1 + exp(-g)) with llmrr's exp.
void swiglu(const float* gate, int64_t ldg, const float* up, int64_t ldu, int64_t rows,
            int64_t cols, float* out, int64_t ldo, ThreadPool& pool);

// out[r, :] = Σ_i gates[r*k + i] · expert_rows[src[r*k + i], :] in the plan's order
// (plan.op must be kCombine; src < 0 marks a dropped slot). out is overwritten.
void moe_combine(const float* expert_rows, int64_t ld_expert, const int32_t* src,
                 const float* gates, int64_t rows, int k, int64_t dim, float* out, int64_t ldo,
                 const Plan& plan, ThreadPool& pool);

// Embedding lookup: out[i, :] = table[ids[i], :] (fp32 or bf16 table, [vocab, dim]).
// An id outside [0, vocab) yields a row of zeros.
void embedding(const void* table, WeightType type, int64_t vocab, int64_t dim,
               const int32_t* ids, int64_t rows, float* out, int64_t ldo);

// The same from the rows of a PackedWeight [vocab, dim] (tied embeddings, quantized tables):
// out[i, :] = W[ids[i], :] as at() defines it.
void embedding_packed(const PackedWeight& table, const int32_t* ids, int64_t rows, float* out,
                      int64_t ldo);

// Router scoring, in place on one row of n scores:
// softmax: e_i = exp(x_i − max) with llmrr's exp, s = Σ e_i sequentially, x_i = e_i / s.
void softmax_inplace(float* x, int64_t n);
// sigmoid: x_i = 1 / (1 + exp(−x_i)).
void sigmoid_inplace(float* x, int64_t n);

// Index of the largest value; the lowest index wins ties. NaN never wins (all NaN → 0;
// n ≤ 0 → −1).
int32_t argmax(const float* x, int64_t n);

// The k largest values in descending order, ties broken by lower index; NaN ranks below
// every number. With k > n the extra entries are id −1, value −inf.
void topk(const float* x, int64_t n, int k, int32_t* ids, float* values);

}  // namespace llmrr::kernels
