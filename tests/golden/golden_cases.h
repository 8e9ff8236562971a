// The committed golden traces: how each was written (make_golden) and what it must decode
// to (golden_test). Records come from tests/format/sample_records.h, which is deterministic
// on every platform, so the expectations can be regenerated while the files stay fixed.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "llmrr/format/trace_writer.h"
#include "raw_trace.h"
#include "sample_records.h"
#include "test_util.h"

namespace llmrr::trace::golden {

using testing::logit_like;
using testing::sample_header;
using testing::SampleRun;

struct Expected {
  RunHeader header;
  std::vector<StepRecord> steps;            // plans sorted by site
  std::vector<std::vector<uint8_t>> blobs;  // decoded bytes (XOR blobs: after decoding)
  std::vector<KernelRecord> kernels;
  bool complete = true;
  bool lossy = false;
  std::string lossy_reason;
};

inline std::vector<uint8_t> as_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    out[i] = static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);  // round to nearest even
  }
  return out;
}

// --- minimal: one step, every record kind once -------------------------------------------
inline Expected minimal() {
  Expected e;
  e.header = sample_header("golden-minimal");
  StepRecord s;
  s.step = 0;
  RequestRecord r;
  r.id = 1;
  r.prompt = {10, 20, 30};
  r.max_tokens = 1;
  r.label = "only";
  s.arrivals = {r};
  s.segments = {{1, 0, 3, 0, SegmentKind::kPrefill, true}};
  s.plans = {{testing::site(2, 0), testing::gemm_plan(2, 32)},
             {testing::site(25), testing::gemm_plan(1)}};
  std::vector<float> row = {1.0f, -2.0f, 3.5f, 0.25f};
  s.rows = {{testing::site(23, 0),
             4,
             {},
             {fingerprint_row(row.data(), 4), fingerprint_row(row.data(), 3),
              fingerprint_row(row.data(), 2)}}};
  s.routing = {{0,
                3,
                1,
                2,
                0,
                {0, 1, 1},
                {0, 1, -1},
                {1.0f, 1.0f, 0.0f},
                {RouteOutcome::kKept, RouteOutcome::kKept, RouteOutcome::kDropped}}};
  LogitsRecord l;
  l.request = 1;
  l.position = 2;
  l.batch_row = 2;
  l.vocab = 4;
  l.top_ids = {2, 0};
  l.top_values = {3.5f, 1.0f};
  l.full = fingerprint_row(row.data(), 4);
  l.margin = 2.5f;
  s.logits = {l};
  s.tokens = {{1, 3, 2, -1.0}};
  s.finishes = {{1, FinishReason::kMaxTokens, 1}};
  e.steps = {s};
  return e;
}

// --- moe_run: a multi-request MoE run, several chunks, logits blobs, kernel records -------
inline Expected moe_run() {
  Expected e;
  e.header = sample_header("golden-moe");
  e.steps = SampleRun(1, 4, 6).all();
  int64_t blob = 0;
  for (StepRecord& s : e.steps)
    for (LogitsRecord& l : s.logits)
      if (l.request == 100) {
        e.blobs.push_back(as_bytes(logit_like(512, static_cast<uint64_t>(s.step))));
        l.blob = blob++;
      }
  std::vector<uint16_t> bf = to_bf16(logit_like(512, 999));
  std::vector<uint8_t> bb(bf.size() * 2);
  std::memcpy(bb.data(), bf.data(), bb.size());
  e.blobs.push_back(bb);
  for (int i = 0; i < 3; ++i) {
    KernelRecord k;
    k.name = "llmrr_gemm_splitk<" + std::to_string(i + 1) + ">";
    k.step = i;
    k.grid = {132, 1, 1};
    k.block = {128, 1, 1};
    k.stream = 1;
    k.correlation = 50 + static_cast<uint64_t>(i);
    k.start_ns = 1000 * i;
    k.end_ns = 1000 * i + 400;
    e.kernels.push_back(k);
  }
  return e;
}

// --- xor_reference: blobs stored as XOR against moe_run's blob 0 --------------------------
inline std::vector<float> xor_variant() {
  std::vector<float> v = logit_like(512, 0);
  for (size_t i = 0; i < v.size(); i += 50) v[i] = v[i] * 1.001f;  // 2 % of values differ
  return v;
}

inline Expected xor_reference() {
  Expected e;
  e.header = sample_header("golden-xor");
  e.blobs.push_back(as_bytes(xor_variant()));
  return e;
}

// --- lossy: the recorder stopped early and said so ----------------------------------------
inline Expected lossy() {
  Expected e;
  e.header = sample_header("golden-lossy");
  e.steps = SampleRun(2, 2, 3).all();
  e.steps.resize(3);
  e.lossy = true;
  e.lossy_reason = "recorder stopped after an I/O error: No space left on device";
  return e;
}

// --- uncompressed: zstd level 0 -------------------------------------------------------------
inline Expected uncompressed() {
  Expected e;
  e.header = sample_header("golden-raw");
  e.steps = SampleRun(3, 2, 2).all();
  return e;
}

// --- deep_config: minimal, with a run header whose extra_config_json nests 100,000 deep ---
// The format does not parse that JSON, so the trace decodes; every reader that does parse it
// (the CLI, the C reader ABI, llmrr.open) must refuse it under safeio's 64-level cap
// (tests/hostile, tests/python/test_reader.py), not recurse into it.
inline Expected deep_config() {
  Expected e = minimal();
  e.header.run_id = "golden-deep-config";
  e.header.extra_config_json =
      "{\"note\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  return e;
}

inline Status write_expected(const std::string& path, const Expected& e, WriterOptions opt,
                             const std::vector<float>* xor_ref = nullptr) {
  ASSIGN_OR_RETURN(auto w, TraceWriter::open(path, opt));
  RETURN_IF_ERROR(w->append_run_header(e.header));
  size_t next_blob = 0;
  auto append_blob = [&](size_t i) -> Status {
    BlobSpec b;
    const std::vector<uint8_t>& bytes = e.blobs[i];
    const bool bf16 = bytes.size() == 1024;
    b.dtype = bf16 ? DType::kBF16 : DType::kF32;
    b.shape = {static_cast<int64_t>(bytes.size() / (bf16 ? 2 : 4))};
    b.data = bytes.data();
    b.bytes = bytes.size();
    b.name = "logits";
    if (xor_ref) {
      b.xor_reference = xor_ref->data();
      b.reference_trace = "golden-moe";
      b.reference_blob = 0;
    }
    ASSIGN_OR_RETURN(int64_t id, w->append_blob(b));
    if (id != static_cast<int64_t>(i))
      return make_error(ErrorCode::kInternal, "blob ids out of order");
    return Status::Ok();
  };
  for (const StepRecord& s : e.steps) {
    for (const LogitsRecord& l : s.logits)
      while (l.blob >= 0 && next_blob <= static_cast<size_t>(l.blob))
        RETURN_IF_ERROR(append_blob(next_blob++));
    RETURN_IF_ERROR(w->append_step(s));
  }
  while (next_blob < e.blobs.size()) RETURN_IF_ERROR(append_blob(next_blob++));
  if (!e.kernels.empty()) RETURN_IF_ERROR(w->append_kernels(e.kernels));
  if (e.lossy) w->mark_lossy(e.lossy_reason);
  return w->close();
}

// --- columns: moe_run's records in column-coded step chunks (format 1.3) --------------------
// The other files keep format 1.2's plain step chunks (make_golden writes them so), which
// a 1.3 reader must go on reading.
inline Expected columns() {
  Expected e = moe_run();
  e.header = sample_header("golden-columns");
  return e;
}

struct Case {
  const char* file;
  Expected (*expected)();
};

inline const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"minimal.trace", &minimal},
      {"moe_run.trace", &moe_run},
      {"xor_reference.trace", &xor_reference},
      {"lossy.trace", &lossy},
      {"uncompressed.trace", &uncompressed},
      {"deep_config.trace", &deep_config},
      {"columns.trace", &columns},
  };
  return c;
}

// crashed.trace is moe_run.trace cut in the middle of its third (last) step chunk (as if the
// recorder was killed): it must still decode its whole frames, with complete = false.
inline constexpr int kCrashedChunk = 2;

}  // namespace llmrr::trace::golden
