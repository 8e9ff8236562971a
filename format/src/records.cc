#include <algorithm>

#include "codec.h"
#include "llmrr/format/container.h"
#include "llmrr/format/records.h"

namespace llmrr::trace {

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kF64:
      return 8;
    case DType::kI8:
      return 1;
    case DType::kU8:
      return 1;
    case DType::kI16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kF64:
      return "f64";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kI16:
      return "i16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
  }
  return "unknown";
}

const char* op_kind_name(OpKind op) {
  switch (op) {
    case OpKind::kGemm:
      return "gemm";
    case OpKind::kRmsNorm:
      return "rmsnorm";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kCombine:
      return "combine";
  }
  return "unknown";
}

const char* segment_kind_name(SegmentKind kind) {
  switch (kind) {
    case SegmentKind::kPrefill:
      return "prefill";
    case SegmentKind::kDecode:
      return "decode";
  }
  return "unknown";
}

const char* route_outcome_name(RouteOutcome outcome) {
  switch (outcome) {
    case RouteOutcome::kKept:
      return "kept";
    case RouteOutcome::kRerouted:
      return "rerouted";
    case RouteOutcome::kDropped:
      return "dropped";
  }
  return "unknown";
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kMaxTokens:
      return "max_tokens";
    case FinishReason::kAborted:
      return "aborted";
  }
  return "unknown";
}

const char* overflow_policy_name(OverflowPolicy policy) {
  switch (policy) {
    case OverflowPolicy::kDrop:
      return "drop";
    case OverflowPolicy::kNextBest:
      return "next_best";
  }
  return "unknown";
}

const char* capture_level_name(CaptureLevel level) {
  switch (level) {
    case CaptureLevel::kNone:
      return "none";
    case CaptureLevel::kLayers:
      return "layers";
    case CaptureLevel::kAll:
      return "all";
  }
  return "unknown";
}

const char* logits_mode_name(LogitsMode mode) {
  switch (mode) {
    case LogitsMode::kTopK:
      return "topk";
    case LogitsMode::kFull:
      return "full";
  }
  return "unknown";
}

const char* frame_kind_name(FrameKind kind) {
  switch (kind) {
    case FrameKind::kRunHeader:
      return "run header";
    case FrameKind::kStepChunk:
      return "step chunk";
    case FrameKind::kTensorBlob:
      return "tensor blob";
    case FrameKind::kKernelRecords:
      return "kernel records";
    case FrameKind::kFooter:
      return "footer";
  }
  return "unknown kind";
}

const char* codec_name(Codec codec) {
  switch (codec) {
    case Codec::kNone:
      return "none";
    case Codec::kZstd:
      return "zstd";
    case Codec::kShuffleZstd:
      return "shuffle+zstd";
    case Codec::kColumnZstd:
      return "columns+zstd";
  }
  return "unknown codec";
}

int64_t StepRecord::row_count() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.count;
  return n;
}

const PlanRecord* StepRecord::find_plan(uint64_t site) const {
  auto it = std::lower_bound(plans.begin(), plans.end(), site,
                             [](const SitePlan& p, uint64_t s) { return p.site < s; });
  if (it == plans.end() || it->site != site) return nullptr;
  return &it->plan;
}

const SiteRows* StepRecord::find_rows(uint64_t site) const {
  for (const SiteRows& r : rows)
    if (r.site == site) return &r;
  return nullptr;
}

void StepRecord::clear() {
  step = 0;
  arrivals.clear();
  segments.clear();
  plans.clear();
  rows.clear();
  routing.clear();
  logits.clear();
  tokens.clear();
  finishes.clear();
  ops.clear();
}

namespace {

// An op record's name or kind: printable ASCII without spaces, min..max bytes.
std::string op_word_problem(const std::string& w, size_t min, size_t max) {
  if (w.size() < min || w.size() > max)
    return "expected " + std::to_string(min) + ".." + std::to_string(max) + " bytes, found " +
           std::to_string(w.size());
  for (char c : w)
    if (c < 0x21 || c > 0x7e) return "expected printable ASCII without spaces";
  return {};
}

std::string op_attrs_problem(const std::string& attrs) {
  std::vector<std::string> keys;
  size_t i = 0;
  while (i < attrs.size()) {
    const size_t end = std::min(attrs.find(' ', i), attrs.size());
    const std::string pair = attrs.substr(i, end - i);
    const size_t eq = pair.find('=');
    if (pair.empty()) return "expected one space between pairs, found two at byte " + std::to_string(i);
    if (eq == std::string::npos || eq == 0)
      return "expected key=value, found '" + pair.substr(0, 40) + "'";
    for (size_t k = 0; k < eq; ++k) {
      const char c = pair[k];
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
        return "key '" + pair.substr(0, std::min<size_t>(eq, 40)) +
               "': expected letters a-z, digits, '_' or '.'";
    }
    for (size_t k = eq + 1; k < pair.size(); ++k)
      if (pair[k] < 0x21 || pair[k] > 0x7e)
        return "value of '" + pair.substr(0, std::min<size_t>(eq, 40)) +
               "': expected printable ASCII without spaces";
    keys.push_back(pair.substr(0, eq));
    i = end + 1;
    if (end + 1 == attrs.size()) return "expected no trailing space";
  }
  std::sort(keys.begin(), keys.end());
  for (size_t k = 1; k < keys.size(); ++k)
    if (keys[k] == keys[k - 1]) return "key '" + keys[k] + "' twice";
  return {};
}

}  // namespace

std::string op_record_problem(const OpRecord& o, int64_t step_rows) {
  if (std::string e = op_word_problem(o.name, 1, 128); !e.empty()) return "name: " + e;
  if (std::string e = op_word_problem(o.op, 0, 64); !e.empty()) return "op: " + e;
  if (o.layer < -1) return "layer: expected -1 or >= 0, found " + std::to_string(o.layer);
  if (o.layers < 1 || (o.layer == -1 && o.layers != 1) ||
      int64_t{o.layer} + o.layers > (int64_t{1} << 20))
    return "layers: expected >= 1 (1 outside the layers) with layer + layers <= 2^20, found " +
           std::to_string(o.layers) + " from layer " + std::to_string(o.layer);
  if (o.graph < 0) return "graph: expected >= 0, found " + std::to_string(o.graph);
  if (o.first_row < 0 || o.rows < 0)
    return "rows: expected first_row >= 0 and rows >= 0, found " + std::to_string(o.first_row) +
           " and " + std::to_string(o.rows);
  const int64_t end = int64_t{o.first_row} + o.rows;
  if (step_rows >= 0 && end > step_rows)
    return "rows: [" + std::to_string(o.first_row) + ", " + std::to_string(end) +
           ") lies outside the step's " + std::to_string(step_rows) +
           " rows: expected [first_row, first_row + rows) within the step's rows";
  if (o.attrs.size() > 4096)
    return "attrs: expected at most 4096 bytes, found " + std::to_string(o.attrs.size());
  if (std::string e = op_attrs_problem(o.attrs); !e.empty()) return "attrs: " + e;
  return {};
}

std::vector<std::pair<std::string, std::string>> op_attrs(const std::string& attrs) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  while (i < attrs.size()) {
    const size_t end = std::min(attrs.find(' ', i), attrs.size());
    const std::string pair = attrs.substr(i, end - i);
    const size_t eq = pair.find('=');
    if (eq != std::string::npos) out.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
    i = end + 1;
  }
  return out;
}

uint64_t prompt_hash(const std::vector<int32_t>& prompt) {
  return detail::xxh3(prompt.data(), prompt.size() * sizeof(int32_t));
}

RequestSummary arrival_summary(const RequestRecord& r, int64_t step) {
  RequestSummary sum;
  sum.id = r.id;
  sum.arrival_step = step;
  sum.prompt_len = static_cast<int32_t>(r.prompt.size());
  sum.prompt_hash = prompt_hash(r.prompt);
  sum.label = r.label;
  sum.carried = r.carried;
  return sum;
}

void apply_finish(RequestSummary& sum, const FinishRecord& f, int64_t step) {
  sum.finish_step = step;
  sum.generated = f.generated;
  sum.reason = f.reason;
}

}  // namespace llmrr::trace
