// Paged KV cache: fixed-size blocks of positions, one block table per sequence shared by
// every layer (as vLLM's PagedAttention). A block holds, for each layer, K then V laid out
// [position][kv_head][head_dim] — the layout kernels::KvSeqView reads. Where a block lives
// never changes a result: attention reads positions, not addresses.
// A latent cache (MLA, shared_values) holds one row per position that keys and values both
// read: v_block is k_block and no separate V storage exists.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace llmrr {

class KvCache {
 public:
  KvCache(int32_t layers, int32_t kv_heads, int32_t head_dim, int32_t block_size,
          bool shared_values = false)
      : layers_(layers),
        planes_(shared_values ? 1 : 2),
        block_size_(block_size),
        row_(static_cast<int64_t>(kv_heads) * head_dim),
        per_layer_(static_cast<int64_t>(block_size) * kv_heads * head_dim) {}

  int32_t block_size() const { return block_size_; }
  // false: allocate block ids only (a device forward keeps the blocks in device memory).
  void set_host_storage(bool on) { host_storage_ = on; }
  int64_t row_floats() const { return row_; }

  // Grows `table` so that it covers `positions` positions.
  void reserve(std::vector<int32_t>& table, int64_t positions) {
    while (static_cast<int64_t>(table.size()) * block_size_ < positions) table.push_back(alloc());
  }
  void release(std::vector<int32_t>& table) {
    for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
    table.clear();
  }

  float* k_block(int32_t layer, int32_t block) {
    return slabs_[block].get() + (planes_ * static_cast<int64_t>(layer)) * per_layer_;
  }
  float* v_block(int32_t layer, int32_t block) {
    return k_block(layer, block) + (planes_ - 1) * per_layer_;
  }
  float* k_at(int32_t layer, const std::vector<int32_t>& table, int64_t pos) {
    return k_block(layer, table[pos / block_size_]) + (pos % block_size_) * row_;
  }
  float* v_at(int32_t layer, const std::vector<int32_t>& table, int64_t pos) {
    return v_block(layer, table[pos / block_size_]) + (pos % block_size_) * row_;
  }

  size_t blocks_allocated() const { return slabs_.size(); }
  size_t blocks_free() const { return free_.size(); }

 private:
  int32_t alloc() {
    if (!free_.empty()) {
      int32_t b = free_.back();
      free_.pop_back();
      return b;
    }
    slabs_.push_back(host_storage_ ? std::make_unique<float[]>(
                                         static_cast<size_t>(planes_ * layers_ * per_layer_))
                                   : nullptr);
    return static_cast<int32_t>(slabs_.size() - 1);
  }

  int32_t layers_, planes_, block_size_;
  int64_t row_, per_layer_;
  bool host_storage_ = true;
  std::vector<std::unique_ptr<float[]>> slabs_;
  std::vector<int32_t> free_;
};

}  // namespace llmrr
