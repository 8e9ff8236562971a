// Plain structs <-> FlatBuffers (format/llmrr.fbs). Private to llmrr_format.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codec.h"
#include "llmrr/format/container.h"
#include "llmrr/format/llmrr_generated.h"
#include "llmrr/format/records.h"
#include "llmrr/format/status.h"

namespace llmrr::trace::detail {

inline constexpr uint32_t kNoPlan = 0xFFFFFFFFu;

// Plan cost of a chunk: Σ over its steps of P_k, where P_k counts the plan_delta entries
// that add or change a site since the last plans_reset (an upper bound of the step's
// assignment size). Readers reject a chunk above kMaxPlanCost, so resolving plans is never
// quadratic in a hostile file; writers close a chunk once it reaches kWriterPlanCost.
inline constexpr uint64_t kMaxPlanCost = uint64_t{1} << 23;
inline constexpr uint64_t kWriterPlanCost = uint64_t{1} << 22;
// Likewise for the arrival permutations copied into resolved plans (Σ over steps of the
// arrival entries of the step's plans).
inline constexpr uint64_t kMaxArrivalCost = uint64_t{1} << 26;
inline constexpr uint64_t kWriterArrivalCost = uint64_t{1} << 25;

// Raw FlatBuffer bytes per record kind (for the footer and `llmrr inspect`).
struct KindCounters {
  uint64_t arrivals = 0, segments = 0, plans = 0, fingerprints = 0, routing = 0, logits = 0,
           tokens = 0, finishes = 0, ops = 0, step_overhead = 0;
  void add(const KindCounters& o);
};

// Builds one step-chunk FlatBuffer from consecutive steps. Plans are interned into the
// chunk's dictionary and each step stores only its delta against the previous step (the
// first step of a chunk stores its whole assignment, so every chunk decodes on its own).
class ChunkBuilder {
 public:
  ChunkBuilder();
  // Serializes `step` (already validated). Adds the bytes spent per kind to *counters.
  void add_step(const StepRecord& step, KindCounters* counters);
  size_t size() const { return fbb_.GetSize(); }
  int steps() const { return static_cast<int>(steps_.size()); }
  int64_t first_step() const { return first_step_; }
  int64_t last_step() const { return last_step_; }
  uint64_t plan_cost() const { return plan_cost_; }
  uint64_t arrival_cost() const { return arrival_cost_; }
  // Sites with a plan after the last step (a next step's delta may remove all of them).
  size_t assignment_size() const { return assignment_.size(); }
  // Finishes the chunk into *out and resets the builder for the next chunk. *noisy (when
  // given) receives the byte ranges of *out that hold the steps' fingerprints: random
  // 64-bit hashes for the most part, which the writer stores rather than compresses.
  void finish(std::vector<uint8_t>* out, std::vector<NoisySpan>* noisy = nullptr);

 private:
  uint32_t intern(const PlanRecord& plan);

  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<flatbuffers::Offset<fb::Plan>> plan_offsets_;
  std::vector<PlanRecord> plans_;
  std::unordered_map<std::string, uint32_t> plan_ids_;
  std::vector<std::pair<uint64_t, uint32_t>> assignment_;  // sorted by site
  std::vector<flatbuffers::Offset<fb::Step>> steps_;
  int64_t first_step_ = -1;
  int64_t last_step_ = -1;
  uint64_t plan_live_ = 0;  // P_k of the last step
  uint64_t plan_cost_ = 0;  // Σ P_k
  uint64_t arrival_cost_ = 0;
  // Builder sizes before and after each step's fingerprints (FlatBuffers builds back to
  // front, so finish() maps them to offsets from the end of the buffer).
  std::vector<std::pair<size_t, size_t>> fingerprint_marks_;
  // scratch
  std::vector<std::pair<uint64_t, uint32_t>> next_;
  std::vector<const SitePlan*> sorted_;
  std::vector<fb::SitePlanRef> delta_;
};

// Conservative upper bound of the bytes add_step may add (to keep frames under the limit).
size_t step_size_bound(const StepRecord& step);

// Serialized run header / kernel chunk / blob meta / footer.
void build_run_header(const RunHeader& h, std::vector<uint8_t>* out);
void build_kernel_chunk(const std::vector<KernelRecord>& records, std::vector<uint8_t>* out);

struct BlobMetaFields {
  int64_t id = 0;
  DType dtype = DType::kF32;
  uint8_t elem_size = 4;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
  std::string name;
  int64_t step = -1;
  uint64_t site = 0;
  uint64_t request = 0;
  bool xor_coded = false;
  std::string reference_trace;
  int64_t reference_blob = -1;
  uint64_t reference_hash = 0;
};
void build_blob_meta(const BlobMetaFields& m, std::vector<uint8_t>* out);

struct FooterFields {
  bool complete = false;
  bool lossy = false;
  std::string lossy_reason;
  std::vector<FrameInfo> frames;
  int64_t steps = 0, first_step = -1, last_step = -1, tokens = 0, blobs = 0;
  uint64_t raw_bytes = 0, stored_bytes = 0;
  std::vector<RequestSummary> requests;
  std::vector<KindBytes> kind_bytes;
  int64_t kernel_records = 0, dropped_records = 0;
};
void build_footer(const FooterFields& f, std::vector<uint8_t>* out);

// Decoding (input already passed the FlatBuffers Verifier).
void decode_run_header(const fb::RunHeader* h, RunHeader* out);
void decode_plan(const fb::Plan* p, PlanRecord* out);
void decode_blob_meta(const fb::BlobMeta* m, BlobInfo* out);
// False when the records would decode to far more bytes than the frame holds.
bool decode_kernel_chunk(const fb::KernelChunk* k, size_t raw_size, std::vector<KernelRecord>* out);
void decode_footer(const fb::Footer* f, FooterFields* out);

// Decodes the steps of a chunk one by one, resolving plan deltas. Returns an empty string
// on success, otherwise what is wrong with the chunk (plan index out of range, unsorted
// delta, ...).
class ChunkDecoder {
 public:
  // `chunk` (whose buffer is `raw_size` bytes) must stay alive while decoding. Records
  // decoded from the chunk may total at most about raw_size bytes: shared FlatBuffers
  // offsets cannot make a small frame decode to gigabytes. Also rejects chunks whose plan
  // deltas would cost more than kMaxPlanCost to resolve.
  std::string reset(const fb::StepChunk* chunk, size_t raw_size);
  size_t size() const { return steps_ ? steps_->size() : 0; }
  int64_t step_number(size_t i) const {
    return steps_->Get(static_cast<flatbuffers::uoffset_t>(i))->step();
  }
  // Decodes step i; must be called with i = 0, 1, 2, ... (or with skip_payload for steps
  // the caller does not want, which still advances the plan assignment).
  std::string decode(size_t i, StepRecord* out, bool skip_payload = false);

 private:
  const fb::StepChunk* chunk_ = nullptr;
  const flatbuffers::Vector<flatbuffers::Offset<fb::Step>>* steps_ = nullptr;
  bool take(uint64_t bytes) {
    if (bytes > budget_) return false;
    budget_ -= bytes;
    return true;
  }
  std::vector<PlanRecord> plans_;
  std::vector<std::pair<uint64_t, uint32_t>> assignment_;
  std::vector<std::pair<uint64_t, uint32_t>> next_;
  size_t next_index_ = 0;
  uint64_t budget_ = 0;
  uint64_t arrival_budget_ = 0;
};

}  // namespace llmrr::trace::detail
