// Internal to the diff sources (diff.h is the public face): what the files of diff_traces
// share. scan.cc streams each trace into per-request summaries (pass 1), align.cc
// pairs the summaries of A and B, split.cc locates each pair's split points and first
// differing site (pass 2), causes.cc names the factors present there, text.cc
// decodes token text and render.cc writes the report as text and JSON; diff.cc runs
// the two passes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/runtime/tokenizers.h"

namespace llmrr::replay::diff_internal {

// The JSON objects diff_report_json (render.cc) and kernel_diff_json (kernels.cc) dump.
nlohmann::json diff_report_object(const DiffReport& report);
nlohmann::json kernel_diff_object(const KernelDiffReport& report);

// ---- pass 1: one streaming read per trace (scan.cc) -----------------------------------

struct RowInfo {
  int64_t step = -1;
  int32_t batch_row = -1;
  uint32_t sites = 0;
  uint64_t digest = 0;
};

struct SampleInfo {
  int64_t step = -1;
  int32_t batch_row = -1;
  trace::Fingerprint full;
  float margin = 0;
  int32_t top1 = -1, top2 = -1;
  float v1 = 0, v2 = 0;
};

using AlignKey = std::tuple<uint64_t, uint32_t, int32_t, uint32_t, uint64_t>;

// The key a request is aligned by (align.cc).
AlignKey align_key(const trace::RequestRecord& r, AlignBy by);

struct ReqSummary {
  trace::RequestRecord rec;
  bool have_rec = false;
  int64_t arrival_index = -1;       // arrival order in its trace
  AlignKey key{};                   // prompt hash and sampling params
  uint32_t occurrence = 0;          // earlier arrivals with the same key in its trace
  std::vector<RowInfo> rows;        // by position
  std::vector<SampleInfo> samples;  // by position of the sampled row
  std::vector<int32_t> tokens;      // by position the token occupies; -1 = none
  int32_t generated = 0;

  // prompt, then the tokens generated after it up to the first gap: the request's sequence.
  std::vector<int32_t> sequence() const;
};

// --align tokens: the length over which the two sequences agree when one extends the other
// and that length covers both prompts, else -1.
int32_t covering_length(const ReqSummary& a, const ReqSummary& b);

// Receives each request's summary once it is complete: at its finish record, or at the end of
// the trace for requests still running (truncated traces). Then the summary is gone from the
// scan: memory holds only the requests in flight.
using EmitFn = std::function<void(ReqSummary&&)>;

// Which sites go into the row digests: those both traces capture.
enum class DigestSites { kNone, kLayers, kAll };

// Streams one trace, one step per next(), emitting each request's summary when complete.
class Scanner {
 public:
  Scanner(const trace::TraceReader& reader, DigestSites which, AlignBy align, EmitFn emit)
      : cur_(reader.steps()), which_(which), align_(align), emit_(std::move(emit)) {}

  // Processes one step; false at the end (after emitting the requests still running).
  Result<bool> next();
  int64_t steps() const { return steps_; }

 private:
  void take_step();

  // Requests still running when the trace ends, in arrival order.
  void finish();

  trace::StepCursor cur_;
  DigestSites which_;
  AlignBy align_ = AlignBy::kPromptAndParams;
  EmitFn emit_;
  trace::StepRecord s_;
  bool done_ = false;
  int64_t steps_ = 0;
  std::unordered_map<RequestId, ReqSummary> live_;
  std::map<AlignKey, uint32_t> occurrences_;
  int64_t arrivals_ = 0;
  std::vector<ReqSummary*> row_req_;
  std::vector<int32_t> row_pos_;
};

// ---- number formatting (render.cc) ----------------------------------------------------

std::string fmt(const char* f, double v);
std::string g6(double v);
std::string g3(double v);

// ---- pass 2: explaining one request (split.cc, causes.cc) ------------------------

// Fingerprints of one batch row at every site of a step: site → fingerprint.
std::map<uint64_t, trace::Fingerprint> row_sites(const trace::StepRecord& s, int64_t row);

// Header fields that differ, as "what: A vs B".
std::vector<std::string> header_differences(const trace::RunHeader& a, const trace::RunHeader& b);

// What pass 2 needs of one aligned pair once both summaries are dropped: the comparison,
// the rows worth a look (positions whose digests differ, up to the split, at most
// max_candidates + 1), and whether the split row has no captured sites at all.
struct Candidate {
  int32_t position = 0;
  int64_t step_a = -1, step_b = -1;
  int32_t row_a = -1, row_b = -1;
};

struct PairWork {
  int64_t order = 0;  // A's arrival index
  RequestDiff d;
  std::vector<Candidate> candidates;
  bool more_candidates = false;
  bool split_row_has_no_sites = false;
};

// Compares one aligned pair and keeps what pass 2 needs.
PairWork make_pair_work(const ReqSummary& ra, const ReqSummary& rb, const DiffOptions& o);

class Explainer {
 public:
  Explainer(trace::TraceReader& a, trace::TraceReader& b, const DiffOptions& o, bool weights_differ,
            bool config_differs)
      : a_(a), b_(b), o_(o), weights_differ_(weights_differ), config_differs_(config_differs) {}

  Status explain(PairWork* w);

 private:
  Status read(trace::TraceReader& r, int64_t step, trace::StepRecord* out) {
    Status st = r.read_step(step, out);
    if (!st.ok())
      return st.with_context(r.path() + ": reading step " + std::to_string(step) + ": ");
    return st;
  }
  void causes(const trace::StepRecord& sa, const trace::StepRecord& sb, RequestDiff* d);

  trace::TraceReader& a_;
  trace::TraceReader& b_;
  const DiffOptions& o_;
  bool weights_differ_, config_differs_;
};

// Logits distance at the numerical split from the two steps' top-K lists.
Status logits_distance(trace::TraceReader& a, trace::TraceReader& b, RequestDiff* d);

// ---- alignment (align.cc) -------------------------------------------------------------

// Pairs the summaries the two scans emit (from two threads) and drops them once compared:
// memory holds the requests in flight in either trace, plus those still waiting for their
// counterpart (requests only one trace has wait until the end).
class Matcher {
 public:
  explicit Matcher(const DiffOptions& o) : o_(o) {}

  void add(int side, ReqSummary&& r);

  // After both scans: pairs in A's arrival order; the unmatched ids of each side.
  std::vector<PairWork> take_pairs();
  // After both scans, before unmatched(): pairs what --align tokens held (else nothing).
  void pair_held() {
    if (o_.align == AlignBy::kTokens && !o_.request) pair_by_tokens();
  }
  std::vector<RequestId> unmatched(int side) const;
  bool found(int side) const { return found_[side]; }

  // After both scans found no pair: which keys differed, for the first unmatched request of
  // A (in arrival order) against B's requests.
  std::string why_unmatched() const;

 private:
  static std::string fmt_float(float v);
  RequestId first_id(int side) const;

  // (prompt hash, sampling params, occurrence of that key in its trace) — or, with explicit
  // ids, one key for the one request of each side.
  using Key = std::tuple<AlignKey, uint32_t>;
  Key key_of(int side, const ReqSummary& r) const;
  // --align tokens: pairs the held summaries once both scans are done.
  void pair_by_tokens();

  const DiffOptions& o_;
  std::mutex mu_;
  std::map<Key, ReqSummary> pending_[2];
  std::vector<PairWork> pairs_;
  bool found_[2] = {false, false};
  bool tokens_paired_ = false;
};

// ---- token text (text.cc) -------------------------------------------------------------

class TextDecoder {
 public:
  void set(std::shared_ptr<const Tokenizer> t) { tok_ = std::move(t); }
  bool ok() const { return tok_ != nullptr; }
  std::string text(const std::vector<int32_t>& ids) const;
  std::string token(int32_t id) const;

 private:
  std::shared_ptr<const Tokenizer> tok_;
};

void fill_text(const TextDecoder& dec, RequestDiff* d);

}  // namespace llmrr::replay::diff_internal
