// Bundles for bug reports: `llmrr pack` / `llmrr unpack` (and the redaction that makes a
// bundle shareable: DESIGN invariant 3).
//
//   ASSIGN_OR_RETURN(PackSummary s, write_pack("bug.llmrr", {.traces = {"a.trace"}}));
//   ASSIGN_OR_RETURN(PackContents c, unpack("bug.llmrr", "out/"));   // c.traces: paths
//
// The bundle file (all integers little-endian):
//
//   header  = magic "\x89LLMRRB\n" (8) · u16 major · u16 minor · u32 zero            16 bytes
//   body    = one zstd stream (any number of concatenated zstd frames) that decodes to
//             entry* · end
//   entry   = "LRPE" · u16 name length · u16 zero · u64 size · u64 xxh3-64 of the content
//             · name (UTF-8, relative: [A-Za-z0-9._+-] parts separated by '/', no '..')
//             · content (size bytes)
//   end     = "LRPZ" · u32 entry count · u64 xxh3-64 of every entry header and name
//
// The first entry is `manifest.json` (what the bundle holds, who wrote it, which model,
// the recorded command lines, what was redacted); then `traces/<name>.trace`, one per
// trace, byte for byte the input files unless redacted; then, with --with-model, the model
// under `model/` (a .gguf file, or a safetensors directory's files). A reader checks every
// entry's hash, the end record, and that nothing follows it; a truncated or damaged
// bundle is an error naming the entry.
//
// Redaction (redact_trace): every request outside `keep` is reduced to its shape: its
// arrival record keeps the prompt's length, sampling params and arrival step but its token
// ids become -1 and its label is emptied; its segments (batch positions) and finish stay;
// its row fingerprints, logits, tokens and blobs are removed; its routing rows are blanked
// (experts -1 'dropped', router choice 0..k-1, gates 0) because the routing array must
// still cover every batch row. Plans are per step, not per request, and stay. The run
// header loses its command line and the paths in extra_config_json that could name user
// files, and gains extra_config_json["redaction"] = {"kept": [...]}. What stays is exactly
// what a request-alone replay (replay --request R) of a kept request reads: the schedule,
// every plan, the kept request's routing, rows, logits and tokens — so it replays bit for
// bit from the bundle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmrr/format/status.h"
#include "llmrr/runtime/observer.h"

namespace llmrr::replay {

inline constexpr uint16_t kPackMajor = 1;
inline constexpr uint16_t kPackMinor = 0;
inline constexpr unsigned char kPackMagic[8] = {0x89, 'L', 'L', 'M', 'R', 'R', 'B', '\n'};

struct RedactReport {
  std::vector<RequestId> kept;
  std::vector<RequestId> redacted;
  int64_t prompt_tokens_removed = 0;
  int64_t labels_removed = 0;
  int64_t row_fingerprints_removed = 0;
  int64_t logits_removed = 0;
  int64_t tokens_removed = 0;
  int64_t blobs_removed = 0;
  int64_t routing_rows_blanked = 0;
  bool command_line_removed = false;
};

// Rewrites trace `in` into `out` (through TraceReader / TraceWriter) keeping only the
// requests in `keep` whole (see above). Every id in `keep` must be a request of the trace.
// An XOR-coded blob of a kept request cannot be decoded without its reference trace and
// is refused (kUnsupported).
Result<RedactReport> redact_trace(const std::string& in, const std::string& out,
                                  const std::vector<RequestId>& keep);

struct PackOptions {
  std::vector<std::string> traces;  // 1 or more
  bool redact = false;
  std::vector<RequestId> keep;  // with redact: the requests that stay whole
  bool with_model = false;      // add the model files (the first trace's model)
  std::string model;            // model spec overriding the recorded one ("" = as recorded)
  uint64_t max_model_bytes = uint64_t{1} << 30;  // --with-model refuses larger models
  int zstd_level = 6;
};

struct PackEntry {
  std::string name;
  uint64_t size = 0;
  uint64_t hash = 0;  // xxh3-64 of the content
};

struct PackSummary {
  std::string path;
  uint64_t file_bytes = 0;
  std::vector<PackEntry> entries;
  std::string manifest_json;
  std::vector<RedactReport> redactions;  // one per trace when redacting
};

// Writes the bundle `out`. Inputs are opened (and must read as traces) before anything is
// written; a failure leaves no partial bundle behind.
Result<PackSummary> write_pack(const std::string& out, const PackOptions& options);

struct PackContents {
  std::string manifest_json;
  std::vector<PackEntry> entries;
  std::vector<std::string> traces;  // extracted paths, in bundle order (dir given)
  std::string model;                // the extracted model's spec (file or directory), or ""
  bool redacted = false;
  std::vector<RequestId> kept;  // with redacted
};

// True when the file starts with the bundle magic (false for traces and unreadable files).
bool is_pack_file(const std::string& path);

// Reads and checks the whole bundle; extracts its entries under `dir` (created if absent)
// when `dir` is non-empty, else only checks it. Errors: kBadMagic (not a bundle),
// kVersionTooNew, kTruncated, kCorruptPayload (zstd), kChecksumMismatch, kSemantic (bad
// entry name, missing manifest), each naming the bundle and the entry.
Result<PackContents> unpack(const std::string& pack, const std::string& dir);

}  // namespace llmrr::replay
