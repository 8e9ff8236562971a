// Plain structs for everything a trace holds. They mirror format/llmrr.fbs field for field
// (the schema's comments state what a valid trace must satisfy); TraceWriter takes them and
// TraceReader returns them, so no caller ever touches a FlatBuffers builder.
//
// The enums are the trace's vocabulary (llmrr/format/vocab.h), the same types the engine
// uses. Sites are the packed uint64 of llmrr/format/site.h (SiteId::packed()); request ids
// are the runtime's RequestId.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/vocab.h"

namespace llmrr::trace {

// ---------------------------------------------------------------------------------------
// Run header.

struct HostInfo {
  std::string hostname;
  std::string os;
  std::string cpu;
  int32_t cores = 0;
  std::string isa;  // kernel path the engine dispatched to ("avx512", "avx2")
  bool operator==(const HostInfo&) const = default;
};

struct DeviceInfo {
  std::string kind = "cpu";  // "cpu" or "cuda"
  std::string name;
  std::string compute_capability;
  std::string driver;
  int64_t memory_bytes = 0;
  int32_t sm_count = 0;  // physical; the virtual device is in EngineConfig
  std::string runtime;   // CUDA runtime version ("" on the CPU)
  std::string cublaslt;  // cuBLASLt version ("" on the CPU)
  bool operator==(const DeviceInfo&) const = default;
};

struct ModelInfo {
  std::string name;
  std::string path;
  std::string architecture;
  std::string weight_hash;  // algorithm-prefixed hex, e.g. "xxh3-64:1f2e3d4c5b6a7988"
  std::string weight_dtype;
  std::string compute_dtype;
  int32_t layers = 0;
  int32_t hidden = 0;
  int32_t vocab = 0;
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int32_t experts = 0;
  int32_t experts_per_token = 0;
  bool operator==(const ModelInfo&) const = default;
};

struct EngineConfig {
  std::string policy;  // "production", "invariant", "forced"
  int32_t virtual_sms = 0;
  int32_t blocks_per_sm = 0;
  int32_t threads = 0;
  int32_t max_batch_tokens = 0;
  int32_t max_seqs = 0;
  int32_t prefill_chunk = 0;
  int32_t kv_block_size = 0;
  float capacity_factor = 0.0f;  // 0 = dropless
  OverflowPolicy overflow = OverflowPolicy::kDrop;
  bool atomics = false;
  uint64_t seed = 0;
  int32_t load = 0;
  CaptureLevel capture = CaptureLevel::kLayers;
  LogitsMode logits_mode = LogitsMode::kTopK;
  int32_t top_k = 32;
  // How SiteRows hashes were made: "" (= "xxh3-64") or "mixsum64" (fingerprint.h).
  std::string fingerprint;
  bool operator==(const EngineConfig&) const = default;
};

// The kind of an EngineConfig's row hashes, "" read as "xxh3-64" (fingerprint.h).
inline std::string fingerprint_kind(const EngineConfig& e) {
  return e.fingerprint.empty() ? std::string("xxh3-64") : e.fingerprint;
}

struct RunHeader {
  // Written by TraceWriter (any value the caller sets is ignored); TraceReader reports the
  // version the file was written with.
  uint16_t format_major = 0;
  uint16_t format_minor = 0;
  std::string tool_version;  // required, non-empty
  int64_t created_unix_ns = 0;
  std::string run_id;  // unique; XOR-coded blobs in other traces refer to it
  HostInfo host;
  DeviceInfo device;
  ModelInfo model;
  EngineConfig engine;
  std::string extra_config_json;  // free-form JSON ("" or an object)
  std::string command_line;
  bool operator==(const RunHeader&) const = default;
};

// ---------------------------------------------------------------------------------------
// Step records.

// kernels/plan.h's CublasLtAlgo, field for field (cuBLASLt's enum values).
struct CublasLtAlgoRecord {
  int32_t algo_id = 0;
  uint32_t tile = 0;
  uint32_t stages = 0;
  int32_t splitk = 1;
  uint32_t reduction = 0;
  uint32_t swizzle = 0;
  uint32_t custom = 0;
  uint16_t inner_shape = 0;
  uint16_t cluster_shape = 0;
  uint64_t workspace = 0;
  int32_t compute_type = 0;
  int32_t scale_type = 0;
  int32_t a_type = 0;
  int32_t b_type = 0;
  int32_t c_type = 0;
  bool operator==(const CublasLtAlgoRecord&) const = default;
};

// kernels/plan.h's Plan, field for field.
struct PlanRecord {
  OpKind op = OpKind::kGemm;
  SplitMode mode = SplitMode::kCount;
  CombineOrder order = CombineOrder::kFixed;
  bool separate_new_kv = false;
  uint32_t splits = 1;
  uint32_t split_size = 0;
  uint32_t k_tile = 0;
  std::vector<uint16_t> arrival;
  std::optional<CublasLtAlgoRecord> cublaslt;  // a tensor-core GEMM run by cuBLASLt
  bool operator==(const PlanRecord&) const = default;
};

// Empty when the writer accepts `plan` on its own (op, mode and order in range, splits,
// k-tile, arrival order, a cuBLASLt algorithm's bounds), otherwise what is wrong
// ("k_tile: expected a multiple of 16, found 20"). A producer checks a plan before
// recording it; the writer checks every step with it.
std::string check_plan(const PlanRecord& plan);

struct SitePlan {
  uint64_t site = 0;  // packed SiteId
  PlanRecord plan;
  bool operator==(const SitePlan&) const = default;
};

// runtime's BatchSegment: consecutive rows of one request, positions [start, start+count).
struct Segment {
  uint64_t request = 0;
  int32_t start = 0;
  int32_t count = 0;
  int32_t cached = 0;
  SegmentKind kind = SegmentKind::kPrefill;
  bool sample = false;
  bool operator==(const Segment&) const = default;
};

// Fingerprints of the rows of one site.
struct SiteRows {
  uint64_t site = 0;
  int32_t cols = 0;
  std::vector<int32_t> batch_rows;  // batch row of each fingerprint; empty = 0..n-1
  std::vector<Fingerprint> rows;
  bool operator==(const SiteRows&) const = default;
};

// Routing of every token of a step at one MoE layer; arrays are rows × k, rank order.
struct Routing {
  int32_t layer = 0;
  int32_t rows = 0;
  int32_t k = 0;
  int32_t experts_total = 0;  // <= 32767 (stored as int16)
  int32_t capacity = 0;       // 0 = unbounded
  std::vector<int32_t> chosen;
  std::vector<int32_t> experts;  // -1 = dropped
  std::vector<float> gates;
  std::vector<RouteOutcome> outcome;
  bool operator==(const Routing&) const = default;
};

struct LogitsRecord {
  uint64_t request = 0;
  int32_t position = 0;
  int32_t batch_row = 0;
  int32_t vocab = 0;
  std::vector<int32_t> top_ids;  // descending by value, ties to the lower id
  std::vector<float> top_values;
  Fingerprint full;     // fingerprint_row of the whole vocab row
  float margin = 0.0f;  // top1 − top2
  int64_t blob = -1;    // full logits as a tensor blob id, or -1
  // ln Σ exp(logit) over the whole row in fp64 (format 1.5; absent in older traces and when
  // a row holds NaN): a token's log-prob is its logit minus this (logprob_of below).
  std::optional<double> logsumexp;
  bool operator==(const LogitsRecord&) const = default;
};

struct TokenRecord {
  uint64_t request = 0;
  int32_t position = 0;
  int32_t token = 0;
  double uniform = -1.0;  // sampler draw; -1 when greedy
  bool operator==(const TokenRecord&) const = default;
};

struct RequestRecord {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int32_t max_tokens = 0;
  int64_t arrival_step = 0;
  bool stop_at_eos = true;
  std::string label;
  // Carried into a trace cut from a longer run (a flight recorder's ring, `llmrr cut`): the
  // request arrived before the trace's first step; `history` holds the tokens it had
  // generated by then (its sequence at this step is prompt + history). Format 1.4.
  bool carried = false;
  std::vector<int32_t> history;
  bool operator==(const RequestRecord&) const = default;
};

// What one op of a runtime's graph ran with (format 1.6), recorded by runtimes whose reduction
// orders llmrr does not set (llama.cpp's graph nodes, vLLM's planned metadata), so that a diff
// names what changed at the first differing site: a shape, a KV view, a weight layout, a
// kernel choice. `attrs` is the runtime's own description, checked for its grammar only:
// space-separated key=value pairs, keys of [a-z0-9_.], values of printable ASCII without
// spaces, no key twice (op_attrs below splits it).
struct OpRecord {
  int32_t layer = -1;     // -1: outside the layers (embedding, output head, the whole graph)
  int32_t layers = 1;     // consecutive layers from `layer` that ran the op the same way
  int32_t first_row = 0;  // the batch rows the op's graph computed: [first_row,
  int32_t rows = 0;       // first_row + rows); rows 0: the whole step
  int32_t graph = 0;      // which of the step's graphs (llama.cpp: the ubatch), from 0
  std::string name;       // the runtime's name of the op, e.g. "kq" (llama.cpp node kq-0)
  std::string op;         // e.g. "MUL_MAT"
  std::string attrs;      // e.g. "src0=f16:64x256x3 src1=f32:64x1x3"
  bool operator==(const OpRecord&) const = default;
};

// What is wrong with an op record, as "field: ..." ("" when nothing is), in a step of
// `step_rows` batch rows (< 0: not known): the name 1..128 and the kind at most 64 bytes of
// printable ASCII without spaces, layer >= -1, layers >= 1 (1 outside the layers) and layer +
// layers <= 2^20, graph >= 0, the rows within the step's, attrs at most 4096 bytes of the
// grammar above. The writer's check and the C ABI both ask this.
std::string op_record_problem(const OpRecord& op, int64_t step_rows);
// attrs split into (key, value) pairs in order (they are assumed well formed).
std::vector<std::pair<std::string, std::string>> op_attrs(const std::string& attrs);

struct FinishRecord {
  uint64_t request = 0;
  FinishReason reason = FinishReason::kMaxTokens;
  int32_t generated = 0;
  bool operator==(const FinishRecord&) const = default;
};

// Everything recorded about one engine step. The writer stores `plans` deduplicated (a
// step whose plans equal the previous step's costs no plan bytes); the reader always
// returns the step's full assignment. Lists keep the order the caller gave, except
// `plans`, which comes back sorted by site.
//
// What the writer checks (and verify() checks again), so a recorder knows what it may
// send: sites unique within `plans` and within `rows`; plans well formed (splits >= 1,
// k_tile a multiple of 16, arrival only for gemm/combine and a permutation for gemm);
// segments, logits, tokens and finishes name requests that arrived (in this step or
// before) and have not finished in an earlier step; when `segments` is non-empty, batch
// rows are in range, routing covers every row, and logits/tokens belong to a segment
// with `sample` set; routing arrays hold rows x k entries with experts in range and
// 'dropped' exactly where the used expert is -1; logits' top values descend and their
// blob, if any, was appended before; uniform draws are -1 or in [0, 1).
struct StepRecord {
  int64_t step = 0;  // >= 0, strictly increasing through a trace (gaps allowed)
  std::vector<RequestRecord> arrivals;
  std::vector<Segment> segments;
  std::vector<SitePlan> plans;  // sites unique
  std::vector<SiteRows> rows;   // sites unique
  std::vector<Routing> routing;
  std::vector<LogitsRecord> logits;
  std::vector<TokenRecord> tokens;
  std::vector<FinishRecord> finishes;
  std::vector<OpRecord> ops;  // format 1.6; in the runtime's order

  int64_t row_count() const;  // Σ segments[i].count
  // Binary search in `plans` (which must be sorted by site, as the reader returns it).
  const PlanRecord* find_plan(uint64_t site) const;
  const SiteRows* find_rows(uint64_t site) const;  // linear search
  void clear();                                    // empties every list, keeping capacity
  bool operator==(const StepRecord&) const = default;
};

// ---------------------------------------------------------------------------------------
// Tensor blobs.

// What append_blob stores. The bytes are copied before append_blob returns.
struct BlobSpec {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // Π shape × dtype_size(dtype) must equal `bytes`
  const void* data = nullptr;
  size_t bytes = 0;  // <= kMaxFrameRawBytes minus a little metadata
  std::string name;  // e.g. "logits"
  int64_t step = -1;
  uint64_t site = 0;
  uint64_t request = 0;
  // Optional XOR coding: when `xor_reference` is set, the bytes are stored as
  // data XOR reference (same size required), which a near-identical tensor turns into
  // mostly zeros. The frame records the reference's trace run_id, blob id and hash; a
  // reader needs the same reference bytes to decode it.
  const void* xor_reference = nullptr;
  std::string reference_trace;  // run_id of the trace holding the reference
  int64_t reference_blob = -1;
};

struct BlobInfo {
  int64_t id = -1;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
  std::string name;
  int64_t step = -1;
  uint64_t site = 0;
  uint64_t request = 0;
  bool shuffled = false;
  bool xor_coded = false;
  std::string reference_trace;
  int64_t reference_blob = -1;
  uint64_t reference_hash = 0;
  int64_t frame = -1;  // frame index in the file
};

// ---------------------------------------------------------------------------------------
// Kernel records (CUPTI activity written by recorder/cupti/, e.g. under llmrr record-cuda).

enum class ActivityKind : uint8_t { kKernel = 0, kMemcpy = 1, kRange = 2 };
const char* activity_kind_name(ActivityKind kind);  // "kernel", "memcpy", "range"
// "HtoD", "DtoH", "DtoD", ... for CUpti_ActivityMemcpyKind values; "kind 9" otherwise.
const char* memcpy_kind_name(uint8_t copy_kind);

// One GPU activity: a kernel launch, a memory copy, or an NVTX range. What the writer
// checks (and verify() checks again): kind known, step >= -1, grid and block empty or
// three non-negative entries, shared memory sizes >= 0, end_ns >= start_ns.
struct KernelRecord {
  std::string name;   // kernel: demangled name; range: NVTX message; memcpy: ""
  int64_t step = -1;  // -1: outside every step
  std::vector<int32_t> grid;
  std::vector<int32_t> block;
  uint64_t stream = 0;
  uint64_t correlation = 0;  // CUPTI correlation id
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  ActivityKind kind = ActivityKind::kKernel;
  int32_t static_shared = 0;   // bytes per block
  int32_t dynamic_shared = 0;  // bytes per block
  uint64_t bytes = 0;          // memcpy
  uint8_t copy_kind = 0;       // memcpy: CUpti_ActivityMemcpyKind
  int32_t device = 0;
  bool operator==(const KernelRecord&) const = default;
};

// Empty when `k` is well formed, otherwise what is wrong ("grid: expected 0 or 3 entries,
// found 2").
std::string check_kernel_record(const KernelRecord& k);

// ---------------------------------------------------------------------------------------
// Footer-level summaries.

struct RequestSummary {
  uint64_t id = 0;
  int64_t arrival_step = 0;  // step whose record carried the arrival
  int32_t prompt_len = 0;
  uint64_t prompt_hash = 0;  // hash_bytes of the prompt ids (int32 little-endian)
  int64_t finish_step = -1;  // -1: unfinished when the trace ended
  int32_t generated = 0;
  FinishReason reason = FinishReason::kMaxTokens;
  std::string label;
  bool carried = false;  // its arrival was carried (RequestRecord::carried)
  bool operator==(const RequestSummary&) const = default;
};

struct KindBytes {
  std::string kind;  // "segments", "plans", "fingerprints", "routing", "logits", ...
  uint64_t raw_bytes = 0;
  bool operator==(const KindBytes&) const = default;
};

// Hash of a prompt as RequestSummary::prompt_hash has it.
uint64_t prompt_hash(const std::vector<int32_t>& prompt);

// The summary of request `r`, whose arrival record is in step `step` (not finished yet).
RequestSummary arrival_summary(const RequestRecord& r, int64_t step);
// Records in `sum` the finish `f` found in step `step`.
void apply_finish(RequestSummary& sum, const FinishRecord& f, int64_t step);

}  // namespace llmrr::trace
