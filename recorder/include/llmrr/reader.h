/*
 * llmrr reader C ABI: the records of a trace as column tables, for languages that read
 * traces through ctypes / FFI (the `llmrr` Python package's llmrr.open()). Same library as
 * the recorder ABI (libllmrr_recorder_c.so), same error codes (llmrr/recorder.h).
 *
 *   llmrr_reader* r = NULL;
 *   if (llmrr_reader_open("run.trace", &r) != LLMRR_OK)
 *     fprintf(stderr, "%s\n", llmrr_reader_last_error());
 *   const void* data; int64_t n;
 *   llmrr_reader_column(r, "tokens", "token", &data, &n);   // n int32 values
 *   llmrr_reader_close(r);
 *
 * open() reads the whole trace through llmrr's TraceReader (every frame checked: header,
 * checksum, zstd, FlatBuffers Verifier; a trace without footer is scanned and a torn last
 * frame dropped) and keeps every step record in memory as columns; tensor blobs stay in the
 * file. Tables and their columns (llmrr_reader_columns lists them with their types):
 *   requests      one row per request, in arrival order (prompt ids in prompt_tokens)
 *   prompt_tokens the prompts' ids, request by request (requests.prompt_offset / prompt_len)
 *   steps         one row per step: rows (batch size), segment / logits / token counts
 *   segments      batch composition: request, positions [start, start+count), first batch row
 *   plans         every op's plan at every step (the resolved assignment, not the delta)
 *   fingerprints  one row per fingerprinted batch row: site, batch row, request, position
 *   routing       one row per (batch row, rank) of each MoE layer
 *   logits        one row per sampled row; its top-K entries in logits_topk
 *   logits_topk   logit (row of `logits`), rank, id, value
 *   tokens, finishes, kernels (CUPTI kernel records)
 * Column types: i32 i64 u64 f32 f64 u8 (fixed-size little-endian arrays) and str
 * (llmrr_reader_strings: NUL-terminated strings back to back, one per row).
 *
 * Pointers returned stay valid until llmrr_reader_close. A handle is not thread-safe.
 *
 * llmrr/reader_arrow.h adds a lazy open (header and index only), one table over a step range
 * (only the step chunks that hold it are read), and every table as Arrow C Data Interface
 * structs (the Python package's llmrr.open goes through it).
 */
#ifndef LLMRR_READER_H_
#define LLMRR_READER_H_

#include <stddef.h>
#include <stdint.h>

#include "llmrr/recorder.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llmrr_reader llmrr_reader; /* opaque */

/* Opens and reads `path`. On failure *out is NULL and llmrr_reader_last_error() says why. */
LLMRR_API int llmrr_reader_open(const char* path, llmrr_reader** out);

/* Frees the handle. NULL is a no-op. */
LLMRR_API void llmrr_reader_close(llmrr_reader* reader);

/* The run header and the trace's summary (format version, complete, lossy, warnings,
 * counts, bytes per record kind) as one JSON object. */
LLMRR_API const char* llmrr_reader_header_json(const llmrr_reader* reader);

/* The table names, separated by single spaces. */
LLMRR_API const char* llmrr_reader_tables(const llmrr_reader* reader);

/* "name:type name:type ..." for `table`; NULL (and last_error set) for an unknown table. */
LLMRR_API const char* llmrr_reader_columns(const llmrr_reader* reader, const char* table);

/* Rows of `table` (-1 for an unknown table). */
LLMRR_API int64_t llmrr_reader_rows(const llmrr_reader* reader, const char* table);

/* A fixed-size column: *data points at *count elements of the column's type. */
LLMRR_API int llmrr_reader_column(const llmrr_reader* reader, const char* table, const char* column,
                                  const void** data, int64_t* count);

/* A str column: *data points at `rows` NUL-terminated strings back to back, *bytes long. */
LLMRR_API int llmrr_reader_strings(const llmrr_reader* reader, const char* table,
                                   const char* column, const char** data, int64_t* bytes);

/* Decoded bytes of tensor blob `id` (e.g. logits.blob): copies at most `capacity` bytes
 * into `out` and sets *bytes to the blob's size (call with capacity 0 to ask the size). */
LLMRR_API int llmrr_reader_blob(llmrr_reader* reader, int64_t id, void* out, size_t capacity,
                                size_t* bytes);

/* Runs the full semantic verification (as `llmrr verify`). */
LLMRR_API int llmrr_reader_verify(const llmrr_reader* reader);

/* The name of a packed site ("L3.mlp.down"); "" for an invalid one. Thread-local buffer,
 * valid until the next call on this thread. */
LLMRR_API const char* llmrr_site_name(uint64_t packed);

/* The packed form of a site name, or 0 with *ok = 0 for a name llmrr does not know. */
LLMRR_API uint64_t llmrr_site_pack(const char* name, int* ok);

/* Message of the last failed reader call on this thread ("" when none). */
LLMRR_API const char* llmrr_reader_last_error(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LLMRR_READER_H_ */
