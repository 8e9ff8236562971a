/*
 * llmrr reader C ABI, Arrow part: one table of a trace, over a step range, as Arrow C Data
 * Interface structs (https://arrow.apache.org/docs/format/CDataInterface.html and
 * CStreamInterface.html), which pyarrow, polars, DuckDB, nanoarrow, ... import without a
 * copy. No Arrow library is involved: the structs below are the ABI-stable ones of the spec.
 *
 *   llmrr_reader* r = NULL;
 *   llmrr_reader_open_lazy("run.trace", &r);           // header and frame index only
 *   llmrr_reader_table* t = NULL;
 *   llmrr_reader_read_table(r, "fingerprints", 100, 199, &t);  // reads only the chunks of steps 100..199
 *   struct ArrowArrayStream s;
 *   llmrr_reader_table_stream(t, &s);                   // hand `s` to any Arrow consumer
 *   llmrr_reader_table_free(t);                         // s keeps the columns alive
 *   llmrr_reader_close(r);                              // so does closing the reader
 *
 * A table is one struct array (format "+s"), one row per row of the table as
 * llmrr_reader_columns lists it, every field non-nullable:
 *   i32 i64 u64 f32 f64 u8 columns   primitive arrays ("i" "l" "L" "f" "g" "C") whose data
 *                                    buffer IS the table's column (llmrr_reader_table_column
 *                                    gives the same pointer): no copy
 *   str columns (label, kernel name)  utf8 ("u")
 *   plans, fingerprints: + site_name  dictionary-encoded utf8 (int32 indices into the table's
 *                                    distinct site names, in forward order: embed, L0.*, ...,
 *                                    final_norm, logits)
 *                      + site_order  u64: the site's forward-order key, comparable across
 *                                    traces (ORDER BY site_order is the forward pass)
 *   requests: + prompt               large_list<int32> ("+L"); the values buffer is the
 *                                    table's prompt tokens, requests.prompt_offset / prompt_len
 *   logits: + top_ids, top_values    fixed_size_list<int32 | float32>[K] ("+w:K"), K the
 *                                    largest top_count, padded with -1 / NaN
 * Buffers are owned by the table, which is reference counted: every exported schema, array
 * and stream holds a reference and drops it in its release callback, so they outlive
 * llmrr_reader_table_free and llmrr_reader_close. Release callbacks may run on any thread.
 */
#ifndef LLMRR_READER_ARROW_H_
#define LLMRR_READER_ARROW_H_

#include <stdint.h>

#include "llmrr/reader.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  const char* (*get_last_error)(struct ArrowArrayStream*);
  void (*release)(struct ArrowArrayStream*);
  void* private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

typedef struct llmrr_reader_table llmrr_reader_table; /* opaque */

/* Opens `path` reading only the file header, the run header and the frame index (the footer,
 * or a scan of the frames when there is none): tables are read when asked for. The eager
 * functions of llmrr/reader.h work on such a handle too and read every table at their
 * first call. */
LLMRR_API int llmrr_reader_open_lazy(const char* path, llmrr_reader** out);

/* Reads `table` (a name of llmrr_reader_tables) for the steps numbered in
 * [first_step, last_step] (INT64_MIN, INT64_MAX: all): only the step chunks whose index range
 * overlaps it are read. requests: those arriving in the range; kernels: records of a step in
 * it. *out is owned by the caller (llmrr_reader_table_free). */
LLMRR_API int llmrr_reader_read_table(llmrr_reader* reader, const char* table, int64_t first_step,
                                 int64_t last_step, llmrr_reader_table** out);

/* Drops the caller's reference. NULL is a no-op. */
LLMRR_API void llmrr_reader_table_free(llmrr_reader_table* table);

LLMRR_API int64_t llmrr_reader_table_rows(const llmrr_reader_table* table);

/* "name:format ..." of the exported fields, Arrow format strings ("site_name:dict<u>"). */
LLMRR_API const char* llmrr_reader_table_fields(const llmrr_reader_table* table);

/* A fixed-size column as llmrr_reader_column gives it: the same pointer the Arrow export's
 * data buffer holds. */
LLMRR_API int llmrr_reader_table_column(const llmrr_reader_table* table, const char* column,
                                        const void** data, int64_t* count);

/* The table as one struct array and its schema (both released by the caller). */
LLMRR_API int llmrr_reader_table_export(const llmrr_reader_table* table, struct ArrowSchema* schema,
                                        struct ArrowArray* array);

/* The table as a stream of one batch. */
LLMRR_API int llmrr_reader_table_stream(const llmrr_reader_table* table,
                                        struct ArrowArrayStream* out);

/* A zeroed ArrowArrayStream on the heap, and its free (which calls its release first when
 * set): for bindings that hand a stream over by pointer (Python's PyCapsule protocol). */
LLMRR_API struct ArrowArrayStream* llmrr_reader_stream_alloc(void);
LLMRR_API void llmrr_reader_stream_free(struct ArrowArrayStream* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LLMRR_READER_ARROW_H_ */
