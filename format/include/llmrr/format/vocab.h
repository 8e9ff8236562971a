// The trace's vocabulary: one definition of every enum a trace stores. The engine
// (kernels/plan.h, runtime/observer.h) uses these same types under its own names
// (`llmrr::OpKind` is `trace::OpKind`), the C ABI's LLMRR_* macros (llmrr/recorder.h) are
// checked against them at compile time (recorder/src/abi_vocab.cc), the schema
// (format/llmrr.fbs) by the writer's and reader's conversions, and Python's constants
// (python/llmrr/core/_lib.py) by tests/python/test_abi_constants.py. Values are stored in traces:
// append only, never renumber. Site ids and names are in llmrr/format/site.h.
//
// Plain enums only: kernels/cuda includes this through plan.h, so it must build under nvcc.
#pragma once

#include <cstdint>

namespace llmrr::trace {

// The op whose reduction a Plan describes (kernels/plan.h spells out each one's order).
enum class OpKind : uint8_t {
  kGemm = 0,       // y = x·Wᵀ (every linear layer, router, lm_head)
  kRmsNorm = 1,    // y = w ⊙ (x · rsqrt(mean(x²) + eps))
  kAttention = 2,  // softmax(q·Kᵀ·scale)·V over a paged KV cache
  kCombine = 3,    // MoE: out = Σ_i gate_i · expert_i(x)
};

// How attention splits the KV axis.
enum class SplitMode : uint8_t {
  kCount = 0,  // `splits` equal parts per row (FlashAttention num_splits)
  kSize = 1,   // parts of `split_size` positions, last one shorter (FlashInfer, batch-invariant)
};

// How the partials of a split reduction are combined.
enum class CombineOrder : uint8_t {
  kFixed = 0,    // partial 0, then 1, then 2, ... (or rank order for kCombine)
  kArrival = 1,  // the order in the plan's `arrival`, as an atomicAdd-based kernel produces it
};

// A batch segment's kind: a prompt chunk, or one generated token.
enum class SegmentKind : uint8_t { kPrefill = 0, kDecode = 1 };

// What capacity did to one routed slot of a token at an MoE layer.
enum class RouteOutcome : uint8_t { kKept = 0, kRerouted = 1, kDropped = 2 };

// Why a request ended.
enum class FinishReason : uint8_t { kEos = 0, kMaxTokens = 1, kAborted = 2 };

// The run header's MoE overflow policy (the engine's moe_router.h Overflow adds "none",
// dropless, which the header writes as capacity 0).
enum class OverflowPolicy : uint8_t { kDrop = 0, kNextBest = 1 };

// Which sites' rows a recorder fingerprints: none, layer outputs and logits, or every site.
enum class CaptureLevel : uint8_t { kNone = 0, kLayers = 1, kAll = 2 };

// How much of a sampled row's logits a trace keeps.
enum class LogitsMode : uint8_t { kTopK = 0, kFull = 1 };

enum class DType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kF64 = 3,
  kI8 = 4,
  kU8 = 5,
  kI16 = 6,
  kI32 = 7,
  kI64 = 8
};

// Names (records.cc): what dumps, JSON and the reader ABI print.
int dtype_size(DType dtype);                              // bytes per element; 0 if unknown
const char* dtype_name(DType dtype);                      // "f32", "bf16", ...
const char* op_kind_name(OpKind op);                      // "gemm", "rmsnorm", "attention", "combine"
const char* segment_kind_name(SegmentKind kind);          // "prefill", "decode"
const char* route_outcome_name(RouteOutcome outcome);     // "kept", "rerouted", "dropped"
const char* finish_reason_name(FinishReason reason);      // "eos", "max_tokens", "aborted"
const char* overflow_policy_name(OverflowPolicy policy);  // "drop", "next_best"
const char* capture_level_name(CaptureLevel level);       // "none", "layers", "all"
const char* logits_mode_name(LogitsMode mode);            // "topk", "full"

}  // namespace llmrr::trace
