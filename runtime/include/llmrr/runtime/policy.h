// Policies: how the engine picks the Plan of every op at every site of every step.
//
// - production: batch-shape-dependent choices made against a *virtual* device (SM count,
//   blocks per SM), imitating the heuristics of cuBLAS(Lt), FlashInfer, FlashAttention and
//   vLLM's fused_moe (policy.cc cites the rule each choice imitates). Run-to-run
//   deterministic; with `atomics`, split-K partials and MoE expert outputs combine in an
//   arrival order drawn from std::random_device per call, and that order goes into
//   Plan::arrival so an observer can record it.
// - invariant: the batch-invariant fix: no split-K and one k-tile, one RMSNorm strategy,
//   attention split by a fixed number of positions, KV reduced as one sequence.
// - forced: plans read per (step, site) from a PlanSource (a trace), optionally falling
//   back to another policy where the source has none (counterfactual replay).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "llmrr/format/status.h"
#include "llmrr/kernels/plan.h"
#include "llmrr/format/site.h"

namespace llmrr {

// The device the production policy plans for. It is part of the run header: the same
// trace replays the same on any host (DESIGN invariant 2).
struct VirtualDevice {
  int32_t sms = 132;           // H100 SXM
  int32_t blocks_per_sm = 2;   // resident CTAs per SM (FlashInfer's max_grid = this × sms)
};

// One request's part of a step as attention planning sees it.
struct AttnSeq {
  int32_t rows = 0;     // query rows of the request in this step
  int32_t cached = 0;   // KV positions cached before this step
  bool decode = false;  // a decode row (rows == 1, after the prompt)
};

// Everything a policy may look at to choose one plan. Shapes are those of the whole step's
// batch even when only some rows are computed (request-alone replay forces its plans).
struct PlanQuery {
  int64_t step = 0;
  SiteId site;
  OpKind op = OpKind::kGemm;
  int64_t rows = 0;        // kGemm: M; kRmsNorm / kCombine: rows; kAttention: query rows
  int64_t n = 0;           // kGemm: output features
  int64_t k = 0;           // kGemm: reduction length; kRmsNorm: dim; kAttention: head_dim
  int64_t batch_rows = 0;  // rows of the whole step (fused_moe's config key M)
  bool expert = false;     // kGemm of a routed expert (rows = tokens routed to it)
  int32_t top_k = 0;       // kCombine: slots per row
  // kAttention only.
  std::span<const AttnSeq> seqs;
  int32_t heads = 0, kv_heads = 0, block_size = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // "production", "production+atomics", "invariant", "forced".
  virtual std::string name() const = 0;
  virtual Result<Plan> plan(const PlanQuery& query) = 0;
  // Whether a GEMM's plan is the device's own heuristic's where the device has one (CUDA:
  // cuBLASLt's algorithm) rather than plan()'s: the production policy, whose GEMM rules
  // imitate that heuristic, asks the real one there. Not with atomics (cuBLASLt has no
  // arrival-order reductions), nor for a policy that wraps another. runtime/src/get_plan.h.
  virtual bool gemm_from_device() const { return false; }
};

// The policy a user names (--policy; a fuzz campaign; the name a run header records, read
// back by the replayer), parsed once from that name; everything after asks what it does
// instead of comparing names. The forced policy is no kind: replay builds it around plans
// read from a trace (make_forced_policy).
class PolicyKind {
 public:
  enum Id : uint8_t { kProduction, kInvariant };
  // Implicit, so that PolicyKind::kInvariant reads as a value.
  constexpr PolicyKind(Id id) : id_(id) {}  // NOLINT(google-explicit-constructor)

  // "production" | "invariant", exactly. Anything else is kInvalidArgument, one line that
  // lists the names: "<what> must be production or invariant (got 'NAME')".
  static Result<PolicyKind> parse(std::string_view name, std::string_view what = "--policy");
  // The name parse() reads (and --policy, a run header's engine.policy without atomics, a
  // fuzz summary print).
  std::string_view name() const;
  constexpr Id id() const { return id_; }
  friend constexpr bool operator==(PolicyKind a, PolicyKind b) = default;

  // Plans follow the batch's shape (split-K, split RMSNorm, split-KV chosen per step against
  // the virtual device): a request's rows depend on the other requests in its batch.
  constexpr bool batch_dependent() const { return id_ == kProduction; }
  // Plans for the virtual device of --sms / --blocks-per-sm (invariant plans ignore it).
  constexpr bool uses_virtual_device() const { return id_ == kProduction; }
  // Arrival-order combines (--atomics) apply.
  constexpr bool supports_atomics() const { return id_ == kProduction; }
  // Split sizes fixed by options (--attn-split positions, --gemm-split K columns), never
  // chosen by the batch.
  constexpr bool fixed_split_sizes() const { return id_ == kInvariant; }

 private:
  Id id_;
};

struct ProductionOptions {
  VirtualDevice device;
  bool atomics = false;
};
std::unique_ptr<Policy> make_production_policy(const ProductionOptions& options = {});

// attn_split_size: positions per attention part (Thinking Machines use 256; the engine
// options pick 64 for models narrower than 512 so that the split path is exercised by the
// short sequences of the tiny models — see default_invariant_split_size).
// gemm_split_size: K columns per GEMM split (0: no split-K). A GEMM of reduction length K
// then runs split-K with invariant_gemm_splits(K, gemm_split_size) splits — a function of
// K alone, never of M or the batch, so the plan stays batch-invariant while a GPU gets
// more independent work per output at small M (the split *size* is fixed, as attention's).
std::unique_ptr<Policy> make_invariant_policy(int32_t attn_split_size = 256,
                                              int32_t gemm_split_size = 0);

// Everything a policy of either kind may be built with; each kind takes its own fields
// (PolicyKind's capabilities say which) and ignores the others.
struct PolicyOptions {
  VirtualDevice device;           // uses_virtual_device
  bool atomics = false;           // supports_atomics
  int32_t attn_split_size = 256;  // fixed_split_sizes
  int32_t gemm_split_size = 0;    // fixed_split_sizes
};
std::unique_ptr<Policy> make_policy(PolicyKind kind, const PolicyOptions& options);
int32_t default_invariant_split_size(int32_t hidden);
// The k-tile every invariant GEMM uses.
inline constexpr uint32_t kInvariantKTile = 64;
// At most this many invariant GEMM splits (the exact CUDA GEMM's limit).
inline constexpr uint32_t kInvariantMaxGemmSplits = 256;
// ceil(K / split_size), clamped to [1, kInvariantMaxGemmSplits]; 1 when split_size <= 0.
uint32_t invariant_gemm_splits(int64_t k, int32_t split_size);
// Why a --gemm-split value is unusable ("" when fine): >= 0, a multiple of 16 (plan.h's split
// ranges are whole 16-column groups), at most 1 << 20.
std::string gemm_split_check(int64_t split_size);

// Plans recorded per (step, site), e.g. read from a trace.
class PlanSource {
 public:
  virtual ~PlanSource() = default;
  // The plan for (step, site), or nullopt when there is none.
  virtual std::optional<Plan> plan(int64_t step, SiteId site) = 0;
};

// Plans from `source`; where it has none, from `fallback`, or without one an error that
// names the step and site. `source` must outlive the policy.
std::unique_ptr<Policy> make_forced_policy(PlanSource* source,
                                           std::shared_ptr<Policy> fallback = nullptr);

// An in-memory PlanSource: tests, bisect (swap single plans) and the replayer's cache.
class PlanTable : public PlanSource {
 public:
  void set(int64_t step, SiteId site, Plan plan) {
    plans_[{step, site.packed()}] = std::move(plan);
  }
  bool erase(int64_t step, SiteId site) { return plans_.erase({step, site.packed()}) > 0; }
  std::optional<Plan> plan(int64_t step, SiteId site) override {
    auto it = plans_.find({step, site.packed()});
    if (it == plans_.end()) return std::nullopt;
    return it->second;
  }
  const Plan* find(int64_t step, SiteId site) const {
    auto it = plans_.find({step, site.packed()});
    return it == plans_.end() ? nullptr : &it->second;
  }
  size_t size() const { return plans_.size(); }
  const std::map<std::pair<int64_t, uint64_t>, Plan>& all() const { return plans_; }

 private:
  std::map<std::pair<int64_t, uint64_t>, Plan> plans_;
};

// The production rules, exposed for tests and for `llmrr inspect`-style explanations.
namespace production {
// cuBLASLt-style GEMM: kernel family by M, split-K when output tiles underfill one wave.
Plan gemm_plan(int64_t m, int64_t n, int64_t k, const VirtualDevice& device);
// vLLM fused_moe-style: config from the table entry whose key is nearest to M.
Plan moe_gemm_plan(int64_t batch_tokens, int64_t k);
// Split RMSNorm at small batch, one row per CTA at large batch.
Plan rmsnorm_plan(int64_t rows, int64_t dim, const VirtualDevice& device);
// FlashInfer decode planning for decode-only batches, FlashAttention's num_splits_heuristic
// for batches with prefill rows (plus cached / new KV reduced separately when a prefill
// chunk continues a cached prefix).
Plan attention_plan(std::span<const AttnSeq> seqs, int32_t heads, int32_t kv_heads,
                    int32_t head_dim, int32_t block_size, const VirtualDevice& device);
// FlashAttention's num_splits_heuristic (flash_api.cpp), verbatim in behaviour.
int num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks,
                         int max_splits);
}  // namespace production

}  // namespace llmrr
