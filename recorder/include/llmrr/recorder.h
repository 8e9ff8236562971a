/*
 * llmrr recorder C ABI: record the run of any inference runtime into an llmrr trace, so that
 * `llmrr inspect | dump | verify | diff` work on it (DESIGN, "C ABI for other runtimes").
 *
 * Library: libllmrr_recorder_c.so (exports only the llmrr_* symbols below; load it with
 * dlopen or Python ctypes). Pure C99 header; all pointers are host pointers.
 *
 *   llmrr_recorder_config cfg;
 *   llmrr_recorder_config_init(&cfg);      (a macro: passes sizeof cfg)
 *   cfg.model_name = "toy"; cfg.vocab = 64; cfg.layers = 2; cfg.hidden = 32;
 *   llmrr_recorder* rec = NULL;
 *   if (llmrr_recorder_open("run.trace", &cfg, &rec) != LLMRR_OK)
 *     fprintf(stderr, "%s\n", llmrr_recorder_last_error());
 *   llmrr_recorder_add_request(rec, &request);          // arrives with the next step
 *   for (step = 0; ...; ++step) {
 *     llmrr_recorder_begin_step(rec, step, segments, n_segments);   // the batch
 *     llmrr_recorder_record_plan(rec, "L0.mlp.down", &plan);        // per op
 *     llmrr_recorder_record_rows(rec, "L0.out", h, LLMRR_DTYPE_F32, rows, cols, 0, NULL);
 *     llmrr_recorder_record_routing(rec, &routing);                  // MoE layers
 *     llmrr_recorder_record_logits(rec, req, pos, row, logits, LLMRR_DTYPE_F32, vocab);
 *     llmrr_recorder_record_token(rec, req, pos + 1, token, -1.0);
 *     llmrr_recorder_record_finish(rec, req, LLMRR_FINISH_MAX_TOKENS, generated);
 *     llmrr_recorder_record_op(rec, 0, 30, 0, 0, 0, "kq", "MUL_MAT", "src0=f16:64x256"); // optional
 *     llmrr_recorder_end_step(rec);
 *   }
 *   llmrr_recorder_close(rec);                            // footer; frees the handle
 *
 * Sites are named as llmrr names them (runtime/include/llmrr/format/site.h): "embed",
 * "L3.attn_norm", "L3.attn.q" / .k / .v / .core / .o, "L3.attn.resid", "L3.mlp_norm",
 * "L3.mlp.gate" / .up / .act / .down, "L3.moe.router", "L3.moe.e5.gate" / .up / .act /
 * .down, "L3.moe.shared.gate" / .up / .down / .scale, "L3.moe.combine", "L3.out",
 * "final_norm", "logits". A runtime records the sites it has; `diff` compares the sites
 * both traces hold (and says what it cannot tell from fewer).
 *
 * Errors. No function throws or aborts. Every function returns LLMRR_OK (0) or an error
 * code; the codes are the stable numbers of llmrr's ErrorCode (format/.../status.h) and never
 * change meaning. llmrr_recorder_last_error() gives the message of the last failed call on
 * the calling thread. Two kinds of failure:
 *   - a bad call (null pointer, unknown site, a record outside begin/end_step, a site
 *     recorded twice in a step, a value out of range): that call records nothing and
 *     returns LLMRR_E_INVALID_ARGUMENT; the trace is marked lossy (records the caller meant
 *     to write are missing) and recording goes on;
 *   - an I/O error (disk full, ...) or an internal one: recording stops for good, the trace
 *     is marked lossy with the reason and keeps every frame written before; every later
 *     call returns that error at once (llmrr_recorder_status() too). A step is completed
 *     and appended on the recorder's own thread after its end_step returns, so an error
 *     met while appending step N is returned no later than by the end_step of the next
 *     step or by close. The runtime being recorded is never disturbed: ignore the codes if
 *     you like.
 *
 * Thread-safety: each handle holds a mutex, so calls on one handle from several threads
 * are safe (they are serialized; records keep the order of the calls, so in practice one
 * producer thread per handle). Distinct handles are independent. The last-error message
 * is per thread.
 */
#ifndef LLMRR_RECORDER_H_
#define LLMRR_RECORDER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLMRR_RECORDER_ABI_VERSION 4 /* 2: mark_lossy, discard_step; 3: config_init_sized; 4: ring, snapshots */

#if defined(__GNUC__)
#define LLMRR_API __attribute__((visibility("default")))
#else
#define LLMRR_API
#endif

/* Error codes (llmrr::ErrorCode numbers). */
#define LLMRR_OK 0
#define LLMRR_E_SEMANTIC 109
#define LLMRR_E_INVALID_ARGUMENT 120
#define LLMRR_E_UNSUPPORTED 124
#define LLMRR_E_IO 200
#define LLMRR_E_NOT_FOUND 201
#define LLMRR_E_IS_DIRECTORY 202
#define LLMRR_E_RESOURCE_LIMIT 203
#define LLMRR_E_INTERNAL 900

/* Element types of rows and logits. bf16 / f16 values are widened exactly to f32 before
 * they are fingerprinted, so the same values give the same fingerprint whatever the
 * storage type. */
#define LLMRR_DTYPE_F32 0
#define LLMRR_DTYPE_BF16 1
#define LLMRR_DTYPE_F16 2

/* Which record_rows calls are kept (rows of other sites are accepted and dropped). */
#define LLMRR_CAPTURE_NONE 0
#define LLMRR_CAPTURE_LAYERS 1 /* "L<i>.out" and "logits" */
#define LLMRR_CAPTURE_ALL 2

#define LLMRR_LOGITS_TOPK 0 /* top-K ids and values, fingerprint, top1 - top2 margin */
#define LLMRR_LOGITS_FULL 1 /* ... plus the whole row as a tensor blob */

/* Plans (kernels/plan.h spells out the exact order each field implies). */
#define LLMRR_OP_GEMM 0
#define LLMRR_OP_RMSNORM 1
#define LLMRR_OP_ATTENTION 2
#define LLMRR_OP_COMBINE 3
#define LLMRR_SPLIT_COUNT 0
#define LLMRR_SPLIT_SIZE 1
#define LLMRR_ORDER_FIXED 0
#define LLMRR_ORDER_ARRIVAL 1

#define LLMRR_SEGMENT_PREFILL 0
#define LLMRR_SEGMENT_DECODE 1

#define LLMRR_ROUTE_KEPT 0
#define LLMRR_ROUTE_REROUTED 1
#define LLMRR_ROUTE_DROPPED 2

#define LLMRR_FINISH_EOS 0
#define LLMRR_FINISH_MAX_TOKENS 1
#define LLMRR_FINISH_ABORTED 2

typedef struct llmrr_recorder llmrr_recorder; /* opaque */

/* What the run header says about the run. Strings may be NULL (= empty); they are copied.
 * Initialize with llmrr_recorder_config_init(), then set what you know. */
typedef struct llmrr_recorder_config {
  uint32_t struct_size;     /* sizeof(llmrr_recorder_config); set by config_init */
  const char* tool_version; /* the recording runtime, e.g. "toy_decode 1.0" */
  const char* model_name;   /* model identity, e.g. "my-org/tiny-7b" */
  const char* model_path;
  const char* architecture; /* e.g. "llama" */
  const char* weight_hash;  /* "<algorithm>:<hex>", e.g. "xxh3-64:1f2e..." (optional) */
  const char* weight_dtype; /* "f32", "bf16", ... */
  const char* compute_dtype;
  int32_t layers, hidden, vocab, heads, kv_heads, experts, experts_per_token;
  const char* policy; /* the runtime's name for how it chose its reduction orders */
  int32_t threads;
  uint64_t seed;
  int32_t capture;               /* LLMRR_CAPTURE_*, default LAYERS */
  int32_t logits_mode;           /* LLMRR_LOGITS_*, default TOPK */
  int32_t top_k;                 /* logit entries kept per sampled row, default 32 */
  int32_t zstd_level;            /* 0..19, default 1 */
  const char* extra_config_json; /* a JSON object with anything else (optional) */
  const char* command_line;
  const char* device_name; /* e.g. "NVIDIA H100" (optional; default: the host CPU) */
  const char* device_kind; /* "cpu" (default) or "cuda" */
  /* 1: fsync the trace in llmrr_recorder_close(), so a device that reports a failure only at
   * write-back (EIO, ENOSPC on a full or failing disk) makes close return an error and the
   * trace's footer say lossy, instead of the loss going unnoticed. Default 0. */
  int32_t sync_on_close;
  /* The kind of row hash (the run header says it, and diff compares only like with like):
   * NULL or "xxh3-64" (default): xxh3-64 of the rows given to llmrr_recorder_record_rows;
   * "mixsum64": an order-free hash a device computes exactly (llmrr_fingerprint_mixsum64),
   * of host rows given to llmrr_recorder_record_rows (the library hashes them) or made by
   * the caller where the tensor lives and given to llmrr_recorder_record_fingerprints
   * (without copying the rows). One kind per trace. */
  const char* fingerprint;
  /* 1: complete each step (fingerprint the rows given to llmrr_recorder_record_rows, pick
   * the logits' top-K, append the step) on the calling thread, in llmrr_recorder_end_step.
   * 0 (default): on the library's own thread, while the caller goes on. Inline is for a
   * runtime whose threads already fill the cores (a CPU engine with one thread per core):
   * there a background thread takes a core from one of them at every step, and a parallel
   * region waits for its slowest thread. */
  int32_t inline_steps;
  /* ABI 4, the flight recorder (the library reads $LLMRR_RING, $LLMRR_SNAPSHOT_TRIGGER and
   * $LLMRR_SNAPSHOT_OUTPUT for any left NULL, so every runtime's recorder takes them):
   * ring: keep only the last steps, a size ("64M") or a duration ("10min"): the trace is
   * written as segments in <path>.ring/ and joined into <path> at close, the requests alive
   * carried into each segment. NULL or "": the whole run.
   * snapshot_trigger: a file; whenever it appears or changes (touch it), a closed snapshot
   * of what is kept goes to <snapshot_output or path>.snapshot-N, recording goes on. */
  const char* ring;
  const char* snapshot_trigger;
  const char* snapshot_output;
} llmrr_recorder_config;

/* One request (a prompt and its sampling parameters). */
typedef struct llmrr_request {
  uint64_t id;
  const int32_t* prompt;
  size_t prompt_len;
  float temperature; /* 0 = greedy */
  int32_t top_k;     /* 0 = off */
  float top_p;       /* 1 = off */
  uint64_t seed;
  int32_t max_tokens;
  int64_t arrival_step;
  int32_t stop_at_eos; /* 0 or 1 */
  const char* label;   /* may be NULL */
} llmrr_request;

/* Consecutive rows of one request in a step's batch: positions [start, start + count). */
typedef struct llmrr_segment {
  uint64_t request;
  int32_t start;
  int32_t count;
  int32_t cached; /* positions already in the KV cache before this step */
  int32_t kind;   /* LLMRR_SEGMENT_* */
  int32_t sample; /* 1: the segment's last row produces logits and a token */
} llmrr_segment;

typedef struct llmrr_plan {
  int32_t op;    /* LLMRR_OP_* */
  int32_t mode;  /* LLMRR_SPLIT_* (attention) */
  int32_t order; /* LLMRR_ORDER_* */
  int32_t separate_new_kv;
  uint32_t splits; /* >= 1 */
  uint32_t split_size;
  uint32_t k_tile;         /* multiple of 16; 0 = one tile */
  const uint16_t* arrival; /* LLMRR_ORDER_ARRIVAL only, else NULL */
  size_t arrival_len;
} llmrr_plan;

/* Routing of every token of the step at one MoE layer; arrays are rows x k, rank order. */
typedef struct llmrr_routing {
  int32_t layer;
  int64_t rows; /* tokens: the step's batch rows */
  int32_t k;
  int32_t experts_total;
  int32_t capacity;       /* per expert; 0 = unbounded */
  const int32_t* chosen;  /* the router's top-k before capacity; NULL = experts */
  const int32_t* experts; /* used after overflow handling, -1 = dropped */
  const float* gates;     /* may be NULL (recorded as 0) */
  const uint8_t* outcome; /* LLMRR_ROUTE_*; NULL = kept, or dropped where experts is -1 */
} llmrr_routing;

/* Fills the defaults and struct_size of a config the caller has `size` bytes of, and writes
 * no byte past them: a runtime built against an older, shorter llmrr_recorder_config is safe
 * with a newer library (llmrr_recorder_open gives the fields it lacks their defaults). Call
 * it through the macro below, which passes sizeof the caller's struct; from ctypes, pass
 * ctypes.sizeof(the Structure). A size below the first field's end writes nothing. */
LLMRR_API void llmrr_recorder_config_init_sized(llmrr_recorder_config* config, size_t size);

/* ABI 2's entry point, kept for programs linked against it: writes ABI 2's struct (192
 * bytes) and no more. New code gets the sized form through the macro. */
LLMRR_API void llmrr_recorder_config_init(llmrr_recorder_config* config);
#define llmrr_recorder_config_init(config) \
  llmrr_recorder_config_init_sized((config), sizeof *(config))

/* Creates (truncates) `path` and writes the run header. On failure *out is NULL. */
LLMRR_API int llmrr_recorder_open(const char* path, const llmrr_recorder_config* config,
                                  llmrr_recorder** out);

/* Writes the footer and frees the handle (also after errors). Returns the first error seen
 * while recording, else the close result. NULL is a no-op returning LLMRR_OK. */
LLMRR_API int llmrr_recorder_close(llmrr_recorder* recorder);

/* A request that arrives: recorded with the current step when called between begin_step
 * and end_step, else with the next begin_step. Record it no later than the first step that
 * holds one of its rows. */
LLMRR_API int llmrr_recorder_add_request(llmrr_recorder* recorder, const llmrr_request* request);

/* Starts step `step` (strictly increasing) with its batch. */
LLMRR_API int llmrr_recorder_begin_step(llmrr_recorder* recorder, int64_t step,
                                        const llmrr_segment* segments, size_t n_segments);

/* The plan of the op at `site` in this step (each site once per step). */
LLMRR_API int llmrr_recorder_record_plan(llmrr_recorder* recorder, const char* site,
                                         const llmrr_plan* plan);

/* 1 when rows of `site` are kept at the capture level (so the caller can skip the copy),
 * 0 when not or when recording stopped, a negative error code for an unknown site. */
LLMRR_API int llmrr_recorder_wants_rows(llmrr_recorder* recorder, const char* site);

/* Fingerprints `rows` rows of `cols` elements at `site`: row r starts at element r * ld
 * (ld 0 = cols). batch_rows (may be NULL = 0, 1, 2, ...) gives each row's place in the
 * step's batch. Each site once per step. */
LLMRR_API int llmrr_recorder_record_rows(llmrr_recorder* recorder, const char* site,
                                         const void* data, int32_t dtype, int64_t rows,
                                         int64_t cols, int64_t ld, const int32_t* batch_rows);

/* Rows at `site` whose fingerprints the caller computed (a recorder opened with
 * config.fingerprint = "mixsum64"): hashes[r] is llmrr_fingerprint_mixsum64 of row r (of
 * `cols` elements), l2[r] and max_abs[r] its sqrt(sum x^2) and max |x| (may be NULL: 0).
 * batch_rows as for llmrr_recorder_record_rows. Each site once per step. */
LLMRR_API int llmrr_recorder_record_fingerprints(llmrr_recorder* recorder, const char* site,
                                                 const uint64_t* hashes, const float* l2,
                                                 const float* max_abs, int64_t rows, int64_t cols,
                                                 const int32_t* batch_rows);

/* The "mixsum64" hash of an fp32 row of n elements (format/include/llmrr/format/
 * fingerprint.h defines it): what a caller hashing on its own device must match bit for bit.
 * NULL row with n > 0 returns 0. */
LLMRR_API uint64_t llmrr_fingerprint_mixsum64(const float* row, int64_t n);

/* ABI 4: a model's weights as config.weight_hash: "xxh3-64:<16 hex>" of the n files' bytes,
 * read in the order given as one stream, written NUL-terminated to out (out_size >= 25).
 * LLMRR_OK, or an error (llmrr_recorder_last_error names the file). */
LLMRR_API int llmrr_fingerprint_files(const char* const* paths, size_t n, char* out,
                                      size_t out_size);

/* The routing of one MoE layer for every row of the step (routing->rows must equal the
 * step's rows; each layer once per step). */
LLMRR_API int llmrr_recorder_record_routing(llmrr_recorder* recorder, const llmrr_routing* routing);

/* The logits of the row at `position` of `request` (batch row `batch_row`), predicting
 * position + 1. */
LLMRR_API int llmrr_recorder_record_logits(llmrr_recorder* recorder, uint64_t request,
                                           int32_t position, int64_t batch_row, const void* logits,
                                           int32_t dtype, int64_t vocab);

/* The token chosen for `position` (the position it will occupy); `uniform` is the sampler's
 * draw in [0, 1), or -1 when greedy. */
LLMRR_API int llmrr_recorder_record_token(llmrr_recorder* recorder, uint64_t request,
                                          int32_t position, int32_t token, double uniform);

/* A request finished at this step (LLMRR_FINISH_*), having generated `generated` tokens. */
LLMRR_API int llmrr_recorder_record_finish(llmrr_recorder* recorder, uint64_t request,
                                           int32_t reason, int32_t generated);

/* What one op of the runtime's graph ran with (format 1.6), for runtimes whose reduction
 * orders llmrr does not set: `diff` compares these at the first differing site and names what
 * changed. `name` is the runtime's name of the op (1..128 printable bytes, no spaces), `op`
 * its kind (may be NULL), `attrs` space-separated key=value pairs (keys [a-z0-9_.], values
 * printable without spaces, at most 4096 bytes; may be NULL). `layer` -1 is outside the
 * layers; `layers` >= 1 consecutive layers ran it the same way. The op's graph computed
 * batch rows [first_row, first_row + rows) (rows 0: the whole step); `graph` numbers the
 * step's graphs (llama.cpp's ubatches) from 0. A bad record is dropped (the trace lossy). */
LLMRR_API int llmrr_recorder_record_op(llmrr_recorder* recorder, int32_t layer, int32_t layers,
                                       int32_t graph, int32_t first_row, int32_t rows,
                                       const char* name, const char* op, const char* attrs);

/* Ends the step and hands it to the recorder's thread, which fingerprints the rows, takes
 * the logits' top-K and appends the step (compression runs on the writer's thread); the
 * calling thread only copied the rows and logits it was given. Returns an error of the
 * previous step's append, if one stopped recording. */
LLMRR_API int llmrr_recorder_end_step(llmrr_recorder* recorder);

/* Marks the trace lossy with `reason` (the footer says so; `llmrr verify` and `inspect` print
 * it): the producer knows records it meant to write are missing or wrong (its own hooks
 * failed, it stopped recording early). Recording goes on; the first reason wins. */
LLMRR_API int llmrr_recorder_mark_lossy(llmrr_recorder* recorder, const char* reason);

/* Drops the open step (nothing of it is written: rows, plans, routing, logits, tokens,
 * finishes) and marks the trace lossy with `reason`: for a producer that finds, at the
 * step's end, that what it recorded cannot be trusted (rows credited to the wrong request).
 * Requests added in that step arrive with the next one; requests it finished stay running.
 * Recording goes on with the next begin_step. */
LLMRR_API int llmrr_recorder_discard_step(llmrr_recorder* recorder, const char* reason);

/* The sticky error that stopped recording (LLMRR_OK while recording). */
LLMRR_API int llmrr_recorder_status(const llmrr_recorder* recorder);

/* Message of the last failed call on this thread ("" when none). Valid until the next call
 * on this thread. */
LLMRR_API const char* llmrr_recorder_last_error(void);

/* Stable name of an error code, e.g. "invalid_argument"; "unknown" for others. */
LLMRR_API const char* llmrr_error_name(int code);

/* LLMRR_RECORDER_ABI_VERSION of the library (compare with the header's). */
LLMRR_API int llmrr_recorder_abi_version(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LLMRR_RECORDER_H_ */
