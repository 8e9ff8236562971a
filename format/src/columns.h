// Column coding of step chunks (codec kColumnZstd, format 1.3). Private to llmrr_format.
//
// A step chunk's FlatBuffer stores its fingerprints as arrays of structs (hash, l2, max_abs)
// and each logits record's top-K as two vectors: zstd sees 8 random hash bytes interleaved
// with float bytes whose high bytes repeat, and compresses neither well. A column-coded
// chunk moves those values out of the FlatBuffer into columns after it, leaving zeros in
// their place (which zstd stores for almost nothing):
//
//   raw payload = StepChunk FlatBuffer (fb bytes, moved values zeroed)
//               · hashes   u64 × F         (F fingerprints: every SiteRows.rows entry, then
//                                           each Logits.full, in walk order)
//               · l2       4 byte planes × F   (byte p of every value, then byte p+1, ...)
//               · max_abs  4 byte planes × F
//               · top_ids  4 byte planes × I   (I: Σ top_ids lengths)
//               · top_values, as u32 bits minus the previous value's bits in the same
//                 record (the first minus 0), 4 byte planes × V
//               · trailer: u32 fb bytes · u32 column layout version (1)
//
// Walk order: steps in order; in each step its SiteRows in order, each SiteRows' rows in
// order; then its Logits in order: `full` (when present), then top_ids, then top_values.
// The reader verifies the FlatBuffer part, walks it to find where each value goes, and
// requires the column bytes to match the walk exactly; the result is the StepChunk the
// writer built, byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codec.h"

namespace llmrr::trace::detail {

inline constexpr uint32_t kColumnLayoutVersion = 1;
inline constexpr size_t kColumnTrailerBytes = 8;

// Writer: *out = the column-coded payload of the finished StepChunk FlatBuffer [fb, fb+n)
// (built by this library, so trusted); *noisy = its near-random spans (the hashes, and the
// byte planes whose sampled entropy is high), ascending. False when the coded payload would
// exceed kMaxFrameRawBytes: the caller then codes the chunk as plain zstd. `summary_bits` < 23
// rounds the l2 and max_abs of SiteRows fingerprints to that many mantissa bits (to nearest,
// ties to even; inf and NaN kept) before coding them (WriterOptions::summary_bits).
bool split_columns(const uint8_t* fb, size_t n, Buffer* out, std::vector<NoisySpan>* noisy,
                   int summary_bits = 23);

// `bits` (an fp32's) rounded to `keep` mantissa bits as split_columns rounds summaries.
uint32_t round_mantissa(uint32_t bits, int keep);

// Reader: the FlatBuffer size a column-coded payload [p, p+n) declares in its trailer, or
// an empty string's worth of explanation in *why (too short, unknown layout version, a
// FlatBuffer size past the columns).
bool column_fb_size(const uint8_t* p, size_t n, size_t* fb_size, std::string* why);

// Reader: restores the values into the FlatBuffer at the front of *raw, which the caller
// has verified as a StepChunk of `fb_size` bytes, and shrinks *raw to it. Returns "" or what
// is wrong (column bytes that do not match the walk). The work is bounded by the payload's
// size, shared FlatBuffers offsets included.
std::string join_columns(Buffer* raw, size_t fb_size);

}  // namespace llmrr::trace::detail
