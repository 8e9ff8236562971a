// Which SIMD path the CPU kernels take. All paths produce the same bits (invariant 1);
// choosing one only changes speed. The environment variable LLMRR_ISA=scalar|avx2|avx512
// forces a path (tests and replay use it to prove the paths agree).
#pragma once

namespace llmrr::kernels {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The best path this CPU supports, or LLMRR_ISA if set (clamped to what the CPU supports).
Isa active_isa();
// Overrides the choice for this process (clamped to what the CPU supports). Returns the
// path actually in force.
Isa set_isa(Isa isa);
const char* isa_name(Isa isa);

}  // namespace llmrr::kernels
