// Helpers for loader tests: temporary directories and crafted files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_common.h"

namespace llmrr {

using test::TempDir;

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Little-endian appenders for crafting binary files.
inline void put_u8(std::string& s, uint8_t v) { s.push_back(static_cast<char>(v)); }
inline void put_u16(std::string& s, uint16_t v) {
  for (int i = 0; i < 2; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
inline void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
inline void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
inline void put_f32(std::string& s, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  put_u32(s, u);
}

}  // namespace llmrr

namespace llmrr {

// Crafts GGUF files byte by byte, including lying ones (counts, offsets, sizes).
struct GgufBuilder {
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    std::string data;
    uint64_t offset = UINT64_MAX;  // UINT64_MAX: laid out by build()
  };
  uint32_t version = 3;
  uint64_t alignment = 32;
  uint64_t n_kv = 0;
  std::string kv;
  std::vector<Tensor> tensors;
  uint64_t tensor_count_override = UINT64_MAX;
  uint64_t kv_count_override = UINT64_MAX;

  static void str(std::string& s, const std::string& v) {
    put_u64(s, v.size());
    s += v;
  }
  void key(const std::string& k, uint32_t type) {
    str(kv, k);
    put_u32(kv, type);
    ++n_kv;
  }
  void kv_str(const std::string& k, const std::string& v) { key(k, 8); str(kv, v); }
  void kv_u32(const std::string& k, uint32_t v) { key(k, 4); put_u32(kv, v); }
  void kv_f32(const std::string& k, float v) { key(k, 6); put_f32(kv, v); }
  void kv_bool(const std::string& k, bool v) { key(k, 7); put_u8(kv, v); }
  void kv_str_array(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    put_u32(kv, 8);
    put_u64(kv, v.size());
    for (const auto& x : v) str(kv, x);
  }
  void kv_i32_array(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9);
    put_u32(kv, 5);
    put_u64(kv, v.size());
    for (int32_t x : v) put_u32(kv, static_cast<uint32_t>(x));
  }
  // An F32 tensor with ne (ggml order) filled by f(i).
  template <typename F>
  void f32(const std::string& name, std::vector<uint64_t> ne, F f) {
    Tensor t{name, ne, 0, {}};
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    for (uint64_t i = 0; i < n; ++i) put_f32(t.data, f(i));
    tensors.push_back(std::move(t));
  }

  std::string build() const {
    std::string s;
    put_u32(s, 0x46554747);
    put_u32(s, version);
    put_u64(s, tensor_count_override != UINT64_MAX ? tensor_count_override : tensors.size());
    put_u64(s, kv_count_override != UINT64_MAX ? kv_count_override : n_kv);
    s += kv;
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (const auto& t : tensors) {
      offs.push_back(t.offset != UINT64_MAX ? t.offset : off);
      off += t.data.size();
      off = (off + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      str(s, t.name);
      put_u32(s, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) put_u64(s, d);
      put_u32(s, t.type);
      put_u64(s, offs[i]);
    }
    while (s.size() % alignment) s.push_back('\0');
    const size_t base = s.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].offset != UINT64_MAX) continue;
      if (s.size() < base + offs[i]) s.resize(base + offs[i], '\0');
      s += tensors[i].data;
    }
    return s;
  }
};

// The llama.* metadata of a Llama GGUF (context 64, alignment 32).
struct LlamaDims {
  uint32_t hidden, layers, ffn, heads, kv_heads, vocab;
  float rope_base, eps;
};
inline void put_llama_kv(GgufBuilder& b, const LlamaDims& d) {
  b.kv_str("general.architecture", "llama");
  b.kv_u32("general.alignment", 32);
  b.kv_u32("llama.context_length", 64);
  b.kv_u32("llama.embedding_length", d.hidden);
  b.kv_u32("llama.block_count", d.layers);
  b.kv_u32("llama.feed_forward_length", d.ffn);
  b.kv_u32("llama.attention.head_count", d.heads);
  b.kv_u32("llama.attention.head_count_kv", d.kv_heads);
  b.kv_f32("llama.rope.freq_base", d.rope_base);
  b.kv_f32("llama.attention.layer_norm_rms_epsilon", d.eps);
  b.kv_u32("llama.vocab_size", d.vocab);
}

}  // namespace llmrr
