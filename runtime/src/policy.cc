#include "llmrr/runtime/policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace llmrr {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t pow2_floor(int64_t x) {
  if (x < 1) return 1;
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

Plan gemm(uint32_t splits, uint32_t k_tile) {
  Plan p;
  p.op = OpKind::kGemm;
  p.splits = splits;
  p.k_tile = k_tile;
  return p;
}

// A uniformly random permutation of 0..n-1 drawn from a non-deterministic source: the order
// in which thread blocks of an atomicAdd-based kernel happen to land.
std::vector<uint16_t> random_permutation(std::random_device& rd, size_t n) {
  std::vector<uint16_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  for (size_t i = n; i > 1; --i) {
    size_t j = static_cast<size_t>(rd()) % i;
    std::swap(v[i - 1], v[j]);
  }
  return v;
}

class ProductionPolicy : public Policy {
 public:
  explicit ProductionPolicy(const ProductionOptions& o) : o_(o) {}

  std::string name() const override {
    return o_.atomics ? "production+atomics" : "production";
  }
  bool gemm_from_device() const override { return !o_.atomics; }

  Result<Plan> plan(const PlanQuery& q) override {
    Plan p;
    switch (q.op) {
      case OpKind::kGemm:
        p = q.expert ? production::moe_gemm_plan(q.batch_rows, q.k)
                     : production::gemm_plan(q.rows, q.n, q.k, o_.device);
        // Atomic split-K (cuBLASLt REDUCTION_SCHEME "inplace" / Triton atomic_add): the
        // partials land in whatever order the CTAs finish.
        if (o_.atomics && p.splits > 1) {
          p.order = CombineOrder::kArrival;
          p.arrival = random_permutation(rd_, p.splits);
        }
        return p;
      case OpKind::kRmsNorm:
        return production::rmsnorm_plan(q.rows, q.k, o_.device);
      case OpKind::kAttention:
        return production::attention_plan(q.seqs, q.heads, q.kv_heads,
                                          static_cast<int32_t>(q.k), q.block_size, o_.device);
      case OpKind::kCombine:
        p.op = OpKind::kCombine;
        // MoE combine through index_add_ / scatter-add with atomics (HF Mixtral's index_add_
        // on CUDA, fused_moe's moe_sum variants): each token's expert outputs are added in
        // the order they arrive.
        if (o_.atomics && q.top_k > 1) {
          p.order = CombineOrder::kArrival;
          p.arrival.reserve(static_cast<size_t>(q.rows) * q.top_k);
          for (int64_t r = 0; r < q.rows; ++r) {
            std::vector<uint16_t> perm = random_permutation(rd_, q.top_k);
            p.arrival.insert(p.arrival.end(), perm.begin(), perm.end());
          }
        }
        return p;
    }
    return make_error(ErrorCode::kInternal, "production policy: unknown op kind");
  }

 private:
  ProductionOptions o_;
  std::random_device rd_;
};

class InvariantPolicy : public Policy {
 public:
  InvariantPolicy(int32_t split_size, int32_t gemm_split_size)
      : split_size_(split_size), gemm_split_size_(gemm_split_size) {}
  std::string name() const override { return "invariant"; }

  Result<Plan> plan(const PlanQuery& q) override {
    Plan p;
    p.op = q.op;
    switch (q.op) {
      case OpKind::kGemm:
        // One tile configuration, the full K loop inside each tile, no stream-K (Thinking
        // Machines' batch_invariant_ops matmul; vLLM VLLM_BATCH_INVARIANT). Split-K only by
        // a fixed split size of K: the split count follows K, never M.
        return gemm(invariant_gemm_splits(q.k, gemm_split_size_), kInvariantKTile);
      case OpKind::kRmsNorm:
        // One row per program, whatever the batch.
        p.splits = 1;
        return p;
      case OpKind::kAttention:
        // KV written before the kernel, cached and new KV reduced as one sequence, split by
        // a fixed number of positions (KV 1000 → 256+256+256+232), not a fixed count.
        p.mode = SplitMode::kSize;
        p.split_size = static_cast<uint32_t>(split_size_);
        return p;
      case OpKind::kCombine:
        return p;  // rank order
    }
    return make_error(ErrorCode::kInternal, "invariant policy: unknown op kind");
  }

 private:
  int32_t split_size_;
  int32_t gemm_split_size_;
};

class ForcedPolicy : public Policy {
 public:
  ForcedPolicy(PlanSource* source, std::shared_ptr<Policy> fallback)
      : source_(source), fallback_(std::move(fallback)) {}
  std::string name() const override { return "forced"; }

  Result<Plan> plan(const PlanQuery& q) override {
    if (std::optional<Plan> p = source_->plan(q.step, q.site)) {
      if (p->op != q.op) {
        return make_error(ErrorCode::kSemantic,
                          "forced plan for step " + std::to_string(q.step) + " site " +
                              site_name(q.site) + " is for another op (" + plan_to_string(*p) +
                              ")");
      }
      return std::move(*p);
    }
    if (fallback_) return fallback_->plan(q);
    return make_error(ErrorCode::kSemantic, "no forced plan for step " + std::to_string(q.step) +
                                                " site " + site_name(q.site));
  }

 private:
  PlanSource* source_;
  std::shared_ptr<Policy> fallback_;
};

}  // namespace

namespace production {

// cuBLAS / cuBLASLt heuristics (their choice is exposed as CUBLASLT_ALGO_CONFIG_TILE_ID and
// SPLITK_NUM): the kernel family follows M — a GEMV-like kernel for a handful of rows (the
// llama.cpp #4479 case: batch 1 and batch 2 take different kernels), small MMA tiles with a
// short k-tile for skinny GEMMs, large tiles beyond — and split-K kicks in when the output
// tiles fill less than one wave of SMs, as many splits as fill the wave while each split
// keeps at least two k-tiles (Megatron-Bridge #4635: the expert FC2 GEMM changed when M
// crossed into split-K).
Plan gemm_plan(int64_t m, int64_t n, int64_t k, const VirtualDevice& d) {
  struct Family {
    int64_t tile_m, tile_n;
    uint32_t k_tile;
    int64_t min_k_per_split;
  };
  static constexpr Family kGemv{8, 64, 0, 32};
  static constexpr Family kSmall{32, 64, 32, 64};
  static constexpr Family kLarge{128, 128, 64, 128};
  const Family& f = m <= 8 ? kGemv : (m <= 64 ? kSmall : kLarge);
  int64_t tiles = ceil_div(std::max<int64_t>(m, 1), f.tile_m) * ceil_div(n, f.tile_n);
  int64_t splits = 1;
  if (tiles < d.sms) {
    splits = std::min<int64_t>({pow2_floor(d.sms / tiles), k / f.min_k_per_split, 16});
    splits = std::max<int64_t>(splits, 1);
  }
  return gemm(static_cast<uint32_t>(splits), f.k_tile);
}

// vLLM fused_moe: the Triton config (BLOCK_SIZE_K, and in our analogue a split count) comes
// from a JSON table tuned per (E, N, device), taking the entry whose key is nearest to M,
// the number of tokens in the batch (`min(configs.keys(), key=lambda x: abs(x - M))`, ties
// to the smaller key). The table below has vLLM's key set; its values are ours.
Plan moe_gemm_plan(int64_t batch_tokens, int64_t k) {
  struct Entry {
    int64_t key;
    uint32_t k_tile, splits;
  };
  static constexpr std::array<Entry, 18> kTable{{
      {1, 64, 4},     {2, 64, 4},     {4, 32, 4},     {8, 32, 2},     {16, 64, 2},
      {24, 64, 2},    {32, 32, 1},    {48, 64, 1},    {64, 64, 1},    {96, 128, 1},
      {128, 128, 1},  {256, 64, 1},   {512, 128, 1},  {1024, 128, 1}, {1536, 128, 1},
      {2048, 128, 1}, {3072, 128, 1}, {4096, 128, 1},
  }};
  const Entry* best = &kTable[0];
  for (const Entry& e : kTable) {
    if (std::llabs(e.key - batch_tokens) < std::llabs(best->key - batch_tokens)) best = &e;
  }
  int64_t splits = std::max<int64_t>(1, std::min<int64_t>(best->splits, k / 32));
  return gemm(static_cast<uint32_t>(splits), best->k_tile);
}

// Norm kernels (e.g. Apex / TensorRT-LLM RMSNorm): at large batch one row per CTA,
// data-parallel; at small batch the row's reduction is split across CTAs so the grid still
// fills the device (rows × chunks ≤ SMs), each chunk at least 32 elements, at most 8.
Plan rmsnorm_plan(int64_t rows, int64_t dim, const VirtualDevice& d) {
  Plan p;
  p.op = OpKind::kRmsNorm;
  p.splits = 1;
  if (rows < d.sms) {
    int64_t chunks = std::min<int64_t>({pow2_floor(d.sms / std::max<int64_t>(rows, 1)),
                                        pow2_floor(std::max<int64_t>(dim / 32, 1)), 8});
    p.splits = static_cast<uint32_t>(std::max<int64_t>(chunks, 1));
  }
  return p;
}

int num_splits_heuristic(int batch_nheads_mblocks, int num_sms, int num_n_blocks,
                         int max_splits) {
  // If we have enough to almost fill the SMs, then just use 1 split.
  if (batch_nheads_mblocks >= 0.8f * num_sms) return 1;
  max_splits = std::min({max_splits, num_sms, num_n_blocks});
  float max_efficiency = 0.f;
  std::vector<float> efficiency;
  efficiency.reserve(std::max(max_splits, 0));
  auto eligible = [&](int s) {
    return s == 1 || ceil_div(num_n_blocks, s) != ceil_div(num_n_blocks, s - 1);
  };
  for (int s = 1; s <= max_splits; ++s) {
    if (!eligible(s)) {
      efficiency.push_back(0.f);
    } else {
      float n_waves = float(batch_nheads_mblocks * s) / num_sms;
      float eff = n_waves / std::ceil(n_waves);
      if (eff > max_efficiency) max_efficiency = eff;
      efficiency.push_back(eff);
    }
  }
  for (int s = 1; s <= max_splits; ++s) {
    if (!eligible(s)) continue;
    if (efficiency[s - 1] >= 0.85 * max_efficiency) return s;
  }
  return 1;
}

Plan attention_plan(std::span<const AttnSeq> seqs, int32_t heads, int32_t kv_heads,
                    int32_t head_dim, int32_t block_size, const VirtualDevice& d) {
  Plan p;
  p.op = OpKind::kAttention;
  p.mode = SplitMode::kCount;
  p.splits = 1;
  bool all_decode = !seqs.empty();
  for (const AttnSeq& s : seqs) all_decode = all_decode && s.decode;
  const int64_t batch = static_cast<int64_t>(seqs.size());
  if (all_decode) {
    // FlashInfer DecodePlan (include/flashinfer/attention/scheduler.cuh): no split when
    // batch × kv_heads already fills max_grid; otherwise binary-search the smallest
    // pages-per-chunk (at least 128 positions) such that Σ ceil(pages_i / chunk) × kv_heads
    // ≤ max_grid. One request's split depends on every other request's length.
    const int64_t max_grid = static_cast<int64_t>(d.blocks_per_sm) * d.sms;
    if (batch * kv_heads >= max_grid) return p;
    std::vector<int64_t> pages;
    int64_t high = 0;
    for (const AttnSeq& s : seqs) {
      pages.push_back(ceil_div(static_cast<int64_t>(s.cached) + s.rows, block_size));
      high = std::max(high, pages.back());
    }
    int64_t low = std::max<int64_t>(128 / block_size, 1);
    while (low < high) {
      int64_t mid = (low + high) / 2;
      int64_t n = 0;
      for (int64_t pg : pages) n += ceil_div(pg, mid);
      if (n * kv_heads > max_grid) {
        low = mid + 1;
      } else {
        high = mid;
      }
    }
    int64_t max_pages = *std::max_element(pages.begin(), pages.end());
    if (low >= max_pages) return p;  // every request fits one chunk: no split
    p.mode = SplitMode::kSize;
    p.split_size = static_cast<uint32_t>(low * block_size);
    return p;
  }
  // Batches with prefill rows: FlashAttention varlen forward with split-KV (flash_api.cpp
  // set_params_splitkv): block_m 64, block_n by head_dim, and num_splits_heuristic over
  // batch × heads × m_blocks against 2 × SMs (FA2 passes multiProcessorCount * 2; here
  // blocks_per_sm × SMs).
  int64_t max_q = 0, max_k = 0;
  bool continues_prefix = false;
  for (const AttnSeq& s : seqs) {
    max_q = std::max<int64_t>(max_q, s.rows);
    max_k = std::max<int64_t>(max_k, static_cast<int64_t>(s.cached) + s.rows);
    if (!s.decode && s.cached > 0) continues_prefix = true;
  }
  const int64_t block_n = head_dim <= 64 ? 256 : (head_dim <= 128 ? 128 : 64);
  const int64_t m_blocks = ceil_div(std::max<int64_t>(max_q, 1), 64);
  const int64_t n_blocks = ceil_div(std::max<int64_t>(max_k, 1), block_n);
  p.splits = static_cast<uint32_t>(num_splits_heuristic(
      static_cast<int>(batch * heads * m_blocks), d.sms * d.blocks_per_sm,
      static_cast<int>(n_blocks), 128));
  // Chunked prefill: the cached prefix (read from the paged cache) and the new chunk are
  // reduced by separate passes and merged (Thinking Machines name this a source of
  // non-invariance; vLLM's cascade / FlashInfer's prefix + suffix merge_state do it).
  p.separate_new_kv = continues_prefix;
  return p;
}

}  // namespace production

namespace {
// Every kind, in the order the parse error lists them.
constexpr PolicyKind::Id kKinds[] = {PolicyKind::kProduction, PolicyKind::kInvariant};
}  // namespace

std::string_view PolicyKind::name() const {
  switch (id_) {
    case kProduction:
      return "production";
    case kInvariant:
      return "invariant";
  }
  return "?";
}

Result<PolicyKind> PolicyKind::parse(std::string_view name, std::string_view what) {
  for (PolicyKind k : kKinds) {
    if (k.name() == name) return k;
  }
  std::string valid;
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    if (i > 0) valid += i + 1 == std::size(kKinds) ? " or " : ", ";
    valid += PolicyKind(kKinds[i]).name();
  }
  return make_error(ErrorCode::kInvalidArgument,
                    std::string(what) + " must be " + valid + " (got '" + std::string(name) + "')");
}

std::unique_ptr<Policy> make_policy(PolicyKind kind, const PolicyOptions& options) {
  switch (kind.id()) {
    case PolicyKind::kProduction:
      return make_production_policy({.device = options.device, .atomics = options.atomics});
    case PolicyKind::kInvariant:
      return make_invariant_policy(options.attn_split_size, options.gemm_split_size);
  }
  return make_production_policy();  // not reached: every kind is a case
}

std::unique_ptr<Policy> make_production_policy(const ProductionOptions& options) {
  return std::make_unique<ProductionPolicy>(options);
}

std::unique_ptr<Policy> make_invariant_policy(int32_t attn_split_size, int32_t gemm_split_size) {
  return std::make_unique<InvariantPolicy>(std::max(attn_split_size, 1),
                                           std::max(gemm_split_size, 0));
}

uint32_t invariant_gemm_splits(int64_t k, int32_t split_size) {
  if (split_size <= 0 || k <= split_size) return 1;
  const int64_t s = (k + split_size - 1) / split_size;
  return static_cast<uint32_t>(std::min<int64_t>(s, kInvariantMaxGemmSplits));
}

std::string gemm_split_check(int64_t split_size) {
  if (split_size < 0) return "must be >= 0 (0 = no split-K)";
  if (split_size % 16 != 0) return "must be a multiple of 16";
  if (split_size > (1 << 20)) return "must be at most 1048576";
  return "";
}

int32_t default_invariant_split_size(int32_t hidden) { return hidden < 512 ? 64 : 256; }

std::unique_ptr<Policy> make_forced_policy(PlanSource* source, std::shared_ptr<Policy> fallback) {
  return std::make_unique<ForcedPolicy>(source, std::move(fallback));
}

}  // namespace llmrr
