// The .trace container: byte layout, limits and frame kinds (DESIGN, "Trace format").
//
// All integers are little-endian.
//
//   file    = file header · frame* · footer frame · trailer
//   header  = magic "\x89LLMRR\r\n" (8) · u16 major · u16 minor · u32 zero           16 bytes
//   frame   = frame header (32 bytes) · stored payload (stored_size bytes)
//   frame header:
//     0  u32 magic "LRFM"
//     4  u8  kind        (FrameKind)
//     5  u8  codec       (Codec)
//     6  u16 zero
//     8  u32 raw_size    bytes the payload decodes to; <= kMaxFrameRawBytes
//    12  u32 stored_size bytes that follow the header; <= kMaxFrameStoredBytes
//    16  u64 checksum    xxh3-64 of the stored payload
//    24  u32 index       the frame's position in the file (0 = run header)
//    28  u32 header_check low 32 bits of xxh3-64 of bytes 0..27
//   trailer = u64 footer offset · u32 low 32 bits of xxh3-64 of those 8 bytes · "LREN"   16 bytes
//
// A writer killed at any point leaves a prefix of this: the reader scans the frames,
// drops a torn last frame with a warning and reports complete = false.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llmrr::trace {

// Bump kFormatMajor for any change an older reader would misread; a minor bump only adds
// fields or frame kinds that an older reader may ignore (TRACE_VERSION discipline, as rr).
inline constexpr uint16_t kFormatMajor = 1;
// 1.1: KernelRecord gained kind, shared memory, bytes, copy_kind, device; Footer gained
// kernel_records and dropped_records (CUPTI capture, recorder/cupti/); Plan gained cublaslt (the cuBLASLt algorithm
// as the plan) and the run header's device its runtime and cuBLASLt versions.
// 1.2: EngineConfig gained fingerprint, the kind of the SiteRows hashes ("mixsum64" from
// llmrr.torch / llmrr.vllm, computed on the tensor's device).
// 1.3: codec kColumnZstd for step chunks: fingerprints and top-K logits moved into byte-plane
// columns after the FlatBuffer (format/src/columns.h); the FlatBuffer schema is unchanged.
// 1.4: Request.carried / history and RequestSummary.carried: requests carried into a trace cut
// from a longer run (the flight recorder's ring, llmrr cut).
// 1.5: Logits.logsumexp: ln Σ exp over the whole row, so a token's log-prob is exact (the
// rollout-versus-trainer comparison, llmrr mismatch).
// 1.6: Step.ops: what each op of a runtime's graph ran with (llama.cpp's nodes), so a diff names
// the op-level change at the first differing site.
inline constexpr uint16_t kFormatMinor = 6;

inline constexpr unsigned char kFileMagic[8] = {0x89, 'L', 'L', 'M', 'R', 'R', '\r', '\n'};
inline constexpr unsigned char kFrameMagic[4] = {'L', 'R', 'F', 'M'};
inline constexpr unsigned char kTrailerMagic[4] = {'L', 'R', 'E', 'N'};

inline constexpr size_t kFileHeaderBytes = 16;
inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr size_t kTrailerBytes = 16;

// Every frame decodes to at most 16 MiB, far below FlatBuffers' 2 GiB limit, so a reader's
// allocations are bounded by this and by the file size whatever the file claims.
inline constexpr uint32_t kMaxFrameRawBytes = 16u << 20;
// Stored bytes may exceed raw bytes slightly (incompressible data + codec overhead).
inline constexpr uint32_t kMaxFrameStoredBytes = kMaxFrameRawBytes + (1u << 20);

enum class FrameKind : uint8_t {
  kRunHeader = 1,
  kStepChunk = 2,
  kTensorBlob = 3,
  kKernelRecords = 4,
  kFooter = 5,
};

enum class Codec : uint8_t {
  kNone = 0,         // payload stored as is
  kZstd = 1,         // zstd: one or more concatenated zstd frames, decoding to the raw bytes
  kShuffleZstd = 2,  // tensor blobs only: byte-plane shuffle by element size, then zstd
  kColumnZstd = 3,   // step chunks only (format 1.3): zstd of the FlatBuffer with its
                     // fingerprints and top-K logits moved into columns (columns.h)
};

// "run header", "step chunk", "tensor blob", "kernel records", "footer", or "kind 7".
const char* frame_kind_name(FrameKind kind);
const char* codec_name(Codec codec);

// One frame as the reader's index knows it.
struct FrameInfo {
  uint64_t offset = 0;  // of the frame header
  FrameKind kind = FrameKind::kStepChunk;
  Codec codec = Codec::kZstd;
  uint32_t raw_size = 0;
  uint32_t stored_size = 0;
  int64_t first = -1;  // step chunk: first step; tensor blob: blob id; else -1
  int64_t last = -1;   // step chunk: last step; tensor blob: blob id; else -1
  uint64_t end() const { return offset + kFrameHeaderBytes + stored_size; }
};

}  // namespace llmrr::trace
