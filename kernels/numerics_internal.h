// Constants of llmrr's exp, shared by the scalar definition (numerics.cc) and the SIMD
// versions in kernels/cpu/. They live in the host/device header numerics_hd.h so the CUDA
// kernels read the very same values. Changing any of them changes results.
#pragma once

#include "llmrr/kernels/numerics_hd.h"
