// Runtime choice of the SIMD path. Every path computes the same bits (invariant 1), so the
// choice only changes speed; LLMRR_ISA forces one so tests and replays can prove it.
#include "llmrr/kernels/isa.h"

#include "cpu/internal.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace llmrr::kernels {
namespace {

uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// The best path the CPU and the OS both support (the OS must save the wider registers).
Isa detect() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::kScalar;
  bool osxsave = c & (1u << 27), fma = c & (1u << 12), avx = c & (1u << 28);
  if (!osxsave || !avx || !fma) return Isa::kScalar;
  uint64_t xcr0 = xgetbv0();
  if ((xcr0 & 0x6) != 0x6) return Isa::kScalar;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return Isa::kScalar;
  bool avx2 = b & (1u << 5);
  if (!avx2) return Isa::kScalar;
  bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
  if (avx512 && (xcr0 & 0xe6) == 0xe6) return Isa::kAvx512;  // F DQ BW VL, ZMM state on
  return Isa::kAvx2;
}

Isa hardware() {
  static const Isa best = detect();
  return best;
}

Isa clamp(Isa want) {
  return static_cast<int>(want) <= static_cast<int>(hardware()) ? want : hardware();
}

Isa from_env() {
  return clamp(internal::parse_isa_env(std::getenv("LLMRR_ISA")));
}

std::atomic<int> g_isa{-1};

}  // namespace

Isa internal::parse_isa_env(const char* e) {
  if (e == nullptr || *e == '\0') return hardware();
  if (std::strcmp(e, "scalar") == 0) return Isa::kScalar;
  if (std::strcmp(e, "avx2") == 0) return Isa::kAvx2;
  if (std::strcmp(e, "avx512") == 0) return Isa::kAvx512;
  return hardware();
}

Isa active_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    int want = static_cast<int>(from_env());
    int expected = -1;
    g_isa.compare_exchange_strong(expected, want, std::memory_order_relaxed);
    v = g_isa.load(std::memory_order_relaxed);
  }
  return static_cast<Isa>(v);
}

Isa set_isa(Isa isa) {
  Isa got = clamp(isa);
  g_isa.store(static_cast<int>(got), std::memory_order_relaxed);
  return got;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace llmrr::kernels
