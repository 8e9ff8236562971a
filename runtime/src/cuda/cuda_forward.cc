// The engine's forward pass on a CUDA GPU (EngineConfig::device = kCuda), for dense
// Llama-style models: the CPU forward of engine/forward.cc op for op, on device memory.
//
// - Weights are uploaded once (create); the KV cache lives on the device in blocks whose
//   ids are the engine's host block tables (the host allocates ids, stores nothing).
// - Plans: the CPU's lookup (get_plan.h), except that under the production policy
//   (Policy::gemm_from_device) every GEMM asks cuBLASLt's heuristic and its algorithm is the
//   plan (cublaslt_plan.h). A forced plan naming a cuBLASLt algorithm re-creates it; every
//   other plan runs the exact kernels (cuda_ops.h), which follow it bit for bit like the CPU's.
// - Observers: a site's rows become 16-byte fingerprints on the device (select_rows); the
//   fingerprints and the sampled rows' logits come back with one async copy each and one
//   stream sync per step, after which on_plan / on_rows are delivered in forward order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_engine.h"
#include "cuda/engine_kernels.h"
#include "device_forward.h"
#include "get_plan.h"
#include "llmrr/kernels/cublaslt_gemm.h"
#include "llmrr/kernels/cublaslt_plan.h"
#include "llmrr/kernels/cuda_ops.h"

namespace llmrr {
namespace {

namespace kc = kernels::cuda;
using kc::DeviceBuffer;
using kc::DeviceWeight;

Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  return make_error(ErrorCode::kInternal, "CUDA: " + what + ": " + cudaGetErrorString(e));
}

// Grows `buf` to at least `bytes` (contents are not kept: used between steps only).
Status ensure(DeviceBuffer& buf, size_t bytes) {
  if (buf.bytes() >= bytes) return Status::Ok();
  ASSIGN_OR_RETURN(buf, DeviceBuffer::alloc(std::max<size_t>(bytes, 256)));
  return Status::Ok();
}

// Page-locked host memory, so that device -> host copies are asynchronous.
class PinnedBuffer {
 public:
  ~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
  }
  Status ensure(size_t bytes) {
    if (bytes <= bytes_) return Status::Ok();
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    bytes_ = 0;
    RETURN_IF_ERROR(cuda_status(cudaMallocHost(&p_, bytes), "cudaMallocHost"));
    bytes_ = bytes;
    return Status::Ok();
  }
  template <typename T>
  T* as() {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

struct DeviceLayer {
  DeviceBuffer attn_norm, mlp_norm, q_bias, k_bias, v_bias;
  DeviceBuffer q_norm, k_norm;  // Qwen3 (empty otherwise)
  DeviceWeight q, k, v, o, gate, up, down;
};

// What an observer hears about one site, delivered after the step's sync.
struct Event {
  SiteId site;
  bool is_plan = false;
  Plan plan;
  uint64_t mask = 0;      // observers that asked for the rows
  int64_t fp_offset = 0;  // first fingerprint in the step's staging buffer
  int64_t rows = 0, cols = 0;
  const int32_t* batch_rows = nullptr;  // valid for the whole forward
};

class CudaForward final : public DeviceForward {
 public:
  static Result<std::unique_ptr<CudaForward>> create(const EngineWeights& w,
                                                     const EngineConfig& config);
  ~CudaForward() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  Status forward(const StepBatch& b, Policy& policy, const std::vector<Observer*>& observers,
                 std::vector<float>* logits) override;

 private:
  CudaForward(const EngineWeights& w) : w_(w) {}

  Status upload_buffer(DeviceBuffer& dst, const std::vector<float>& src) {
    if (src.empty()) return Status::Ok();
    ASSIGN_OR_RETURN(dst, DeviceBuffer::alloc(src.size() * sizeof(float)));
    return dst.upload(src.data(), src.size() * sizeof(float), stream_);
  }

  // ---- plans and observers -----------------------------------------------------------------

  uint64_t ask(SiteId site) {
    if (!b_->notify || obs_->empty()) return 0;
    uint64_t mask = 0;
    for (size_t i = 0; i < obs_->size() && i < 64; ++i) {
      if ((*obs_)[i]->wants_rows(site)) mask |= uint64_t{1} << i;
    }
    return mask;
  }

  // The CPU's plan lookup (get_plan.h), with cuBLASLt as the device's GEMM heuristic: the
  // production policy on CUDA asks it (it does not imitate it).
  Result<Plan> get_plan(const PlanQuery& q, const DeviceWeight* gemm_weight = nullptr) {
    PlanDevice device;
    device.runs_cublaslt = true;
    if (gemm_weight) {
      device.gemm = [this, gemm_weight](const PlanQuery& gq) -> Result<Plan> {
        ASSIGN_OR_RETURN(CublasLtAlgo algo, lt_->choose(gq.rows, *gemm_weight));
        return cublaslt::to_plan(algo);
      };
    }
    ASSIGN_OR_RETURN(Plan p, llmrr::get_plan(*b_, *policy_, q, device));
    if (b_->notify && !obs_->empty()) {
      Event e;
      e.site = q.site;
      e.is_plan = true;
      e.plan = p;
      events_.push_back(std::move(e));
    }
    return p;
  }

  // Queues the fingerprints of a site's rows (when someone asked).
  Status emit(uint64_t mask, SiteId site, const float* data, int64_t ld, int64_t rows, int64_t cols,
              const int32_t* batch_rows) {
    if (!mask || rows == 0) return Status::Ok();
    if (fp_used_ + rows > fp_capacity_) {
      return make_error(ErrorCode::kInternal, "CUDA forward: fingerprint staging too small");
    }
    RETURN_IF_ERROR(kc::select_rows(data, ld, rows, cols, 0, nullptr, nullptr,
                                    fps_.as<kc::RowFingerprint>() + fp_used_, stream_));
    Event e;
    e.site = site;
    e.mask = mask;
    e.fp_offset = fp_used_;
    e.rows = rows;
    e.cols = cols;
    e.batch_rows = batch_rows;
    events_.push_back(e);
    fp_used_ += rows;
    return Status::Ok();
  }

  // ---- ops at sites ------------------------------------------------------------------------

  Status gemm_site(SiteId site, const float* x, int64_t ldx, int64_t m, int64_t plan_m,
                   const DeviceWeight& wt, float* y, int64_t ldy, const DeviceBuffer* bias,
                   const int32_t* map) {
    const uint64_t mask = ask(site);
    ASSIGN_OR_RETURN(Plan p, get_plan(gemm_plan_query(*b_, site, plan_m, wt.n(), wt.k()), &wt));
    if (p.cublaslt) {
      RETURN_IF_ERROR(lt_->gemm(x, ldx, m, wt, y, ldy, *p.cublaslt, stream_));
    } else {
      RETURN_IF_ERROR(kc::gemm(x, ldx, m, wt, y, ldy, p, stream_));
    }
    if (bias && bias->bytes() > 0) {
      RETURN_IF_ERROR(cuda_engine::add_bias(y, ldy, m, wt.n(), bias->as<float>(), stream_));
    }
    if (w_.cfg.bf16_activations)
      RETURN_IF_ERROR(cuda_engine::round_bf16(y, ldy, m, wt.n(), stream_));
    return emit(mask, site, y, ldy, m, wt.n(), map);
  }

  Status norm_site(SiteId site, const float* x, int64_t rows, int64_t plan_rows,
                   const DeviceBuffer& weight, float* y, const int32_t* map) {
    const int64_t H = w_.cfg.hidden;
    const uint64_t mask = ask(site);
    ASSIGN_OR_RETURN(Plan p, get_plan(norm_plan_query(*b_, site, plan_rows, H)));
    RETURN_IF_ERROR(
        kc::rmsnorm(x, H, rows, H, weight.as<float>(), w_.cfg.norm_eps, y, H, p, stream_));
    if (w_.cfg.bf16_activations) RETURN_IF_ERROR(cuda_engine::round_bf16(y, H, rows, H, stream_));
    return emit(mask, site, y, H, rows, H, map);
  }

  // Qwen3's q/k norm: the exact RMSNorm kernel over rows × heads rows of head_dim, in place
  // (the CPU's head_norm_site; same plan query).
  Status head_norm_site(SiteId site, float* x, int64_t rows, int32_t heads,
                        const DeviceBuffer& weight, const int32_t* map) {
    const int64_t D = w_.cfg.head_dim, width = heads * D;
    const uint64_t mask = ask(site);
    ASSIGN_OR_RETURN(Plan p, get_plan(norm_plan_query(*b_, site, b_->full_rows * heads, D)));
    RETURN_IF_ERROR(kc::rmsnorm(x, D, rows * heads, D, weight.as<float>(), w_.cfg.norm_eps, x, D,
                                p, stream_));
    if (w_.cfg.bf16_activations)
      RETURN_IF_ERROR(cuda_engine::round_bf16(x, width, rows, width, stream_));
    return emit(mask, site, x, width, rows, width, map);
  }

  Status residual(float* x, const float* d, int64_t rows) {
    const int64_t H = w_.cfg.hidden;
    RETURN_IF_ERROR(cuda_engine::add_inplace(x, d, rows * H, stream_));
    if (w_.cfg.bf16_activations) RETURN_IF_ERROR(cuda_engine::round_bf16(x, H, rows, H, stream_));
    return Status::Ok();
  }

  Status plain_site(SiteId site, const float* data, int64_t ld, int64_t rows, int64_t cols,
                    const int32_t* map) {
    return emit(ask(site), site, data, ld, rows, cols, map);
  }

  // ---- the KV cache ------------------------------------------------------------------------

  // Device block b: for each layer, K then V, each [block_size][kv_heads][head_dim].
  float* block(int32_t id) {
    return kv_chunks_[id / kBlocksPerChunk].as<float>() +
           static_cast<int64_t>(id % kBlocksPerChunk) * block_floats_;
  }
  float* k_block(int32_t layer, int32_t id) { return block(id) + 2 * layer * per_layer_; }
  float* v_block(int32_t layer, int32_t id) { return k_block(layer, id) + per_layer_; }

  Status reserve_blocks(const StepBatch& b) {
    int32_t top = -1;
    for (const ActiveSeg& s : b.segs) {
      for (int32_t id : *s.table) top = std::max(top, id);
    }
    while (static_cast<int64_t>(kv_chunks_.size()) * kBlocksPerChunk <= top) {
      ASSIGN_OR_RETURN(DeviceBuffer chunk, DeviceBuffer::alloc(static_cast<size_t>(
                                               kBlocksPerChunk * block_floats_ * sizeof(float))));
      kv_chunks_.push_back(std::move(chunk));
    }
    return Status::Ok();
  }

  Status attention_layer(int32_t l);
  Status mlp(int32_t l);

  static constexpr int64_t kBlocksPerChunk = 64;

  const EngineWeights& w_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kc::CublasLtGemm> lt_;
  std::vector<DeviceLayer> layers_;
  DeviceBuffer embed_, final_norm_;
  DeviceWeight lm_head_;
  std::unique_ptr<kc::DeviceRopeTable> rope_;
  int64_t block_floats_ = 0, per_layer_ = 0, kvd_ = 0;
  int32_t kv_block_ = 0;
  std::vector<DeviceBuffer> kv_chunks_;

  // Per step.
  const StepBatch* b_ = nullptr;
  Policy* policy_ = nullptr;
  const std::vector<Observer*>* obs_ = nullptr;
  std::vector<Event> events_;
  DeviceBuffer x_, h_, q_, k_, v_, att_, tmp_, gate_, up_, act_, xs_, hs_, logits_d_;
  DeviceBuffer tokens_d_, positions_d_, sampled_d_, kv_dst_d_, block_ptrs_d_;
  DeviceBuffer fps_;
  int64_t fp_used_ = 0, fp_capacity_ = 0;
  PinnedBuffer fps_host_, logits_host_;
  std::vector<const float*> block_ptrs_;  // [layer][seg] k blocks, then v blocks
  std::vector<size_t> seg_block_offset_;  // per segment: its first entry in a layer's run
  size_t layer_stride_ = 0;               // entries per layer in block_ptrs_
  std::vector<float*> kv_dst_;
};

Result<std::unique_ptr<CudaForward>> CudaForward::create(const EngineWeights& w,
                                                         const EngineConfig& config) {
  const ModelConfig& c = w.cfg;
  for (int32_t l = 0; l < c.layers; ++l) {
    if (w.layers[l].sparse) {
      return make_error(ErrorCode::kUnsupported, "--device cuda runs dense models; layer " +
                                                     std::to_string(l) +
                                                     " is a MoE layer (use --device cpu)");
    }
  }
  if (config.device != Device::kCuda) {
    return make_error(ErrorCode::kInternal, "CUDA forward asked for another device");
  }
  std::unique_ptr<CudaForward> f(new CudaForward(w));
  RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&f->stream_, cudaStreamNonBlocking),
                              "creating a stream"));
  ASSIGN_OR_RETURN(f->lt_, kc::CublasLtGemm::create(f->stream_));
  const cudaStream_t s = f->stream_;
  f->layers_.resize(static_cast<size_t>(c.layers));
  for (int32_t l = 0; l < c.layers; ++l) {
    const LayerWeights& L = w.layers[l];
    DeviceLayer& D = f->layers_[l];
    RETURN_IF_ERROR(f->upload_buffer(D.attn_norm, L.attn_norm));
    RETURN_IF_ERROR(f->upload_buffer(D.mlp_norm, L.mlp_norm));
    RETURN_IF_ERROR(f->upload_buffer(D.q_bias, L.q_bias));
    RETURN_IF_ERROR(f->upload_buffer(D.k_bias, L.k_bias));
    RETURN_IF_ERROR(f->upload_buffer(D.v_bias, L.v_bias));
    RETURN_IF_ERROR(f->upload_buffer(D.q_norm, L.q_norm));
    RETURN_IF_ERROR(f->upload_buffer(D.k_norm, L.k_norm));
    ASSIGN_OR_RETURN(D.q, DeviceWeight::upload(L.q, s));
    ASSIGN_OR_RETURN(D.k, DeviceWeight::upload(L.k, s));
    ASSIGN_OR_RETURN(D.v, DeviceWeight::upload(L.v, s));
    ASSIGN_OR_RETURN(D.o, DeviceWeight::upload(L.o, s));
    ASSIGN_OR_RETURN(D.gate, DeviceWeight::upload(L.mlp.gate, s));
    ASSIGN_OR_RETURN(D.up, DeviceWeight::upload(L.mlp.up, s));
    ASSIGN_OR_RETURN(D.down, DeviceWeight::upload(L.mlp.down, s));
  }
  ASSIGN_OR_RETURN(f->lm_head_, DeviceWeight::upload(w.lm_head, s));
  RETURN_IF_ERROR(f->upload_buffer(f->final_norm_, w.final_norm));
  const size_t embed_bytes = c.weight_type == kernels::WeightType::kBF16
                                 ? w.embed_bf16.size() * sizeof(uint16_t)
                                 : w.embed_f32.size() * sizeof(float);
  ASSIGN_OR_RETURN(f->embed_, DeviceBuffer::alloc(embed_bytes));
  RETURN_IF_ERROR(f->embed_.upload(w.embed_table(), embed_bytes, s));
  ASSIGN_OR_RETURN(kc::DeviceRopeTable rope, kc::DeviceRopeTable::upload(w.rope, s));
  f->rope_ = std::make_unique<kc::DeviceRopeTable>(std::move(rope));
  f->kv_block_ = config.kv_block;
  f->kvd_ = static_cast<int64_t>(c.kv_heads) * c.head_dim;
  f->per_layer_ = static_cast<int64_t>(config.kv_block) * f->kvd_;
  f->block_floats_ = 2 * static_cast<int64_t>(c.layers) * f->per_layer_;
  RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "uploading the weights"));
  return f;
}

Status CudaForward::attention_layer(int32_t l) {
  const StepBatch& b = *b_;
  const ModelConfig& c = w_.cfg;
  const int64_t R = b.rows(), D = c.head_dim;
  const int64_t qd = c.heads * D, kvd = kvd_;
  const DeviceLayer& L = layers_[l];
  const int32_t* map = b.row_map();
  auto site = [&](SiteKind kind) { return SiteId{kind, static_cast<int16_t>(l), -1}; };
  float *x = x_.as<float>(), *h = h_.as<float>(), *q = q_.as<float>(), *k = k_.as<float>(),
        *v = v_.as<float>(), *att = att_.as<float>(), *tmp = tmp_.as<float>();

  RETURN_IF_ERROR(norm_site(site(SiteKind::kAttnNorm), x, R, b.full_rows, L.attn_norm, h, map));
  RETURN_IF_ERROR(
      gemm_site(site(SiteKind::kQ), h, c.hidden, R, b.full_rows, L.q, q, qd, &L.q_bias, map));
  RETURN_IF_ERROR(
      gemm_site(site(SiteKind::kK), h, c.hidden, R, b.full_rows, L.k, k, kvd, &L.k_bias, map));
  RETURN_IF_ERROR(
      gemm_site(site(SiteKind::kV), h, c.hidden, R, b.full_rows, L.v, v, kvd, &L.v_bias, map));
  if (c.qk_norm) {
    RETURN_IF_ERROR(head_norm_site(site(SiteKind::kQNorm), q, R, c.heads, L.q_norm, map));
    RETURN_IF_ERROR(head_norm_site(site(SiteKind::kKNorm), k, R, c.kv_heads, L.k_norm, map));
  }
  const int32_t* pos = positions_d_.as<int32_t>();
  RETURN_IF_ERROR(kc::rope(q, qd, R, pos, c.heads, *rope_, stream_));
  RETURN_IF_ERROR(kc::rope(k, kvd, R, pos, c.kv_heads, *rope_, stream_));
  if (c.bf16_activations) {
    RETURN_IF_ERROR(cuda_engine::round_bf16(q, qd, R, qd, stream_));
    RETURN_IF_ERROR(cuda_engine::round_bf16(k, kvd, R, kvd, stream_));
  }
  // KV written before attention reads it (as on the CPU). Destinations: K rows, then V rows.
  float* const* dst = kv_dst_d_.as<float*>() + static_cast<int64_t>(l) * 2 * R;
  RETURN_IF_ERROR(cuda_engine::write_rows(k, kvd, R, kvd, dst, stream_));
  RETURN_IF_ERROR(cuda_engine::write_rows(v, kvd, R, kvd, dst + R, stream_));

  std::vector<kc::AttnRow> rows(static_cast<size_t>(R));
  const float* const* ptrs = block_ptrs_d_.as<const float*>() + l * layer_stride_;
  for (int64_t r = 0; r < R; ++r) {
    const int32_t si = b.row_seg[r];
    const ActiveSeg& s = b.segs[si];
    rows[r].q = q + r * qd;
    rows[r].out = att + r * qd;
    rows[r].kv.k_blocks = ptrs + seg_block_offset_[si];
    rows[r].kv.v_blocks = ptrs + seg_block_offset_[si] + s.table->size();
    rows[r].kv.block_size = kv_block_;
    rows[r].pos = b.positions[r];
    rows[r].cached = s.seg.kind == SegmentKind::kDecode ? b.positions[r] : s.seg.cached;
  }
  {
    const SiteId st = site(SiteKind::kAttn);
    const uint64_t mask = ask(st);
    ASSIGN_OR_RETURN(Plan p, get_plan(attention_plan_query(b, c, st, kv_block_)));
    kernels::AttnShape shape;
    shape.heads = c.heads;
    shape.kv_heads = c.kv_heads;
    shape.head_dim = static_cast<int32_t>(D);
    shape.scale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
    RETURN_IF_ERROR(kc::attention(rows, shape, p, stream_));
    if (c.bf16_activations) RETURN_IF_ERROR(cuda_engine::round_bf16(att, qd, R, qd, stream_));
    RETURN_IF_ERROR(emit(mask, st, att, qd, R, qd, map));
  }
  RETURN_IF_ERROR(
      gemm_site(site(SiteKind::kO), att, qd, R, b.full_rows, L.o, tmp, c.hidden, nullptr, map));
  RETURN_IF_ERROR(residual(x, tmp, R));
  return plain_site(site(SiteKind::kAttnResid), x, c.hidden, R, c.hidden, map);
}

Status CudaForward::mlp(int32_t l) {
  const StepBatch& b = *b_;
  const ModelConfig& c = w_.cfg;
  const int64_t R = b.rows(), F = c.ffn, H = c.hidden;
  const DeviceLayer& L = layers_[l];
  const int32_t* map = b.row_map();
  auto site = [&](SiteKind kind) { return SiteId{kind, static_cast<int16_t>(l), -1}; };
  float *h = h_.as<float>(), *gate = gate_.as<float>(), *up = up_.as<float>(),
        *act = act_.as<float>(), *tmp = tmp_.as<float>();
  RETURN_IF_ERROR(
      gemm_site(site(SiteKind::kGate), h, H, R, b.full_rows, L.gate, gate, F, nullptr, map));
  RETURN_IF_ERROR(gemm_site(site(SiteKind::kUp), h, H, R, b.full_rows, L.up, up, F, nullptr, map));
  RETURN_IF_ERROR(kc::swiglu(gate, F, up, F, R, F, act, F, stream_));
  if (c.bf16_activations) RETURN_IF_ERROR(cuda_engine::round_bf16(act, F, R, F, stream_));
  RETURN_IF_ERROR(plain_site(site(SiteKind::kAct), act, F, R, F, map));
  return gemm_site(site(SiteKind::kDown), act, F, R, b.full_rows, L.down, tmp, H, nullptr, map);
}

Status CudaForward::forward(const StepBatch& b, Policy& policy,
                            const std::vector<Observer*>& observers, std::vector<float>* logits) {
  const ModelConfig& c = w_.cfg;
  const int64_t R = b.rows(), H = c.hidden, V = c.vocab;
  const int64_t qd = static_cast<int64_t>(c.heads) * c.head_dim;
  const int64_t S = static_cast<int64_t>(b.sampled.size());
  b_ = &b;
  policy_ = &policy;
  obs_ = &observers;
  events_.clear();
  fp_used_ = 0;

  // Buffers for this batch.
  const size_t f = sizeof(float);
  RETURN_IF_ERROR(ensure(x_, R * H * f));
  RETURN_IF_ERROR(ensure(h_, R * H * f));
  RETURN_IF_ERROR(ensure(tmp_, R * H * f));
  RETURN_IF_ERROR(ensure(q_, R * qd * f));
  RETURN_IF_ERROR(ensure(att_, R * qd * f));
  RETURN_IF_ERROR(ensure(k_, R * kvd_ * f));
  RETURN_IF_ERROR(ensure(v_, R * kvd_ * f));
  RETURN_IF_ERROR(ensure(gate_, R * c.ffn * f));
  RETURN_IF_ERROR(ensure(up_, R * c.ffn * f));
  RETURN_IF_ERROR(ensure(act_, R * c.ffn * f));
  RETURN_IF_ERROR(ensure(xs_, std::max<int64_t>(S, 1) * H * f));
  RETURN_IF_ERROR(ensure(hs_, std::max<int64_t>(S, 1) * H * f));
  RETURN_IF_ERROR(ensure(logits_d_, std::max<int64_t>(S, 1) * V * f));
  // Fingerprints: at most every site of the forward, each with at most R rows.
  fp_capacity_ = (static_cast<int64_t>(c.layers) * 16 + 4) * std::max<int64_t>(R, 1);
  RETURN_IF_ERROR(ensure(fps_, fp_capacity_ * sizeof(kc::RowFingerprint)));

  // Host-built tables: tokens, positions, sampled rows, KV destinations, block pointers.
  RETURN_IF_ERROR(reserve_blocks(b));
  RETURN_IF_ERROR(ensure(tokens_d_, R * sizeof(int32_t)));
  RETURN_IF_ERROR(ensure(positions_d_, R * sizeof(int32_t)));
  RETURN_IF_ERROR(ensure(sampled_d_, std::max<int64_t>(S, 1) * sizeof(int32_t)));
  RETURN_IF_ERROR(tokens_d_.upload(b.tokens.data(), R * sizeof(int32_t), stream_));
  RETURN_IF_ERROR(positions_d_.upload(b.positions.data(), R * sizeof(int32_t), stream_));
  if (S > 0) RETURN_IF_ERROR(sampled_d_.upload(b.sampled.data(), S * sizeof(int32_t), stream_));
  const int32_t bs = kv_block_;
  kv_dst_.assign(static_cast<size_t>(c.layers) * 2 * R, nullptr);
  seg_block_offset_.assign(b.segs.size(), 0);
  layer_stride_ = 0;
  for (size_t si = 0; si < b.segs.size(); ++si) {
    seg_block_offset_[si] = layer_stride_;
    layer_stride_ += 2 * b.segs[si].table->size();
  }
  block_ptrs_.assign(static_cast<size_t>(c.layers) * layer_stride_, nullptr);
  for (int32_t l = 0; l < c.layers; ++l) {
    for (size_t si = 0; si < b.segs.size(); ++si) {
      const std::vector<int32_t>& t = *b.segs[si].table;
      const size_t o = l * layer_stride_ + seg_block_offset_[si];
      for (size_t j = 0; j < t.size(); ++j) {
        block_ptrs_[o + j] = k_block(l, t[j]);
        block_ptrs_[o + t.size() + j] = v_block(l, t[j]);
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      const std::vector<int32_t>& t = *b.segs[b.row_seg[r]].table;
      const int32_t p = b.positions[r];
      const int64_t off = static_cast<int64_t>(p % bs) * kvd_;
      kv_dst_[(l * 2) * R + r] = k_block(l, t[p / bs]) + off;
      kv_dst_[(l * 2 + 1) * R + r] = v_block(l, t[p / bs]) + off;
    }
  }
  RETURN_IF_ERROR(ensure(kv_dst_d_, kv_dst_.size() * sizeof(float*)));
  RETURN_IF_ERROR(kv_dst_d_.upload(kv_dst_.data(), kv_dst_.size() * sizeof(float*), stream_));
  RETURN_IF_ERROR(ensure(block_ptrs_d_, std::max<size_t>(block_ptrs_.size(), 1) * sizeof(float*)));
  if (!block_ptrs_.empty()) {
    RETURN_IF_ERROR(
        block_ptrs_d_.upload(block_ptrs_.data(), block_ptrs_.size() * sizeof(float*), stream_));
  }
  // Host tables go up from pageable memory: the upload has copied them when it returns
  // (cudaMemcpyAsync stages pageable sources), so reusing the vectors next step is safe.

  const int32_t* map = b.row_map();
  float* x = x_.as<float>();
  RETURN_IF_ERROR(kc::embedding(embed_.data(), c.weight_type, c.vocab, H, tokens_d_.as<int32_t>(),
                                R, x, H, stream_));
  RETURN_IF_ERROR(plain_site(SiteId{SiteKind::kEmbed, -1, -1}, x, H, R, H, map));
  for (int32_t l = 0; l < c.layers; ++l) {
    RETURN_IF_ERROR(attention_layer(l));
    auto site = [&](SiteKind kind) { return SiteId{kind, static_cast<int16_t>(l), -1}; };
    RETURN_IF_ERROR(norm_site(site(SiteKind::kMlpNorm), x, R, b.full_rows, layers_[l].mlp_norm,
                              h_.as<float>(), map));
    RETURN_IF_ERROR(mlp(l));
    RETURN_IF_ERROR(residual(x, tmp_.as<float>(), R));
    RETURN_IF_ERROR(plain_site(site(SiteKind::kLayerOut), x, H, R, H, map));
  }
  logits->resize(static_cast<size_t>(S) * V);
  if (S > 0) {
    RETURN_IF_ERROR(
        cuda_engine::gather_rows(x, H, sampled_d_.as<int32_t>(), S, H, xs_.as<float>(), stream_));
    RETURN_IF_ERROR(norm_site(SiteId{SiteKind::kFinalNorm, -1, -1}, xs_.as<float>(), S,
                              b.full_sampled, final_norm_, hs_.as<float>(), b.sampled_orig.data()));
    RETURN_IF_ERROR(gemm_site(SiteId{SiteKind::kLogits, -1, -1}, hs_.as<float>(), H, S,
                              b.full_sampled, lm_head_, logits_d_.as<float>(), V, nullptr,
                              b.sampled_orig.data()));
  }
  // The step's small records come back with one copy each and one sync.
  RETURN_IF_ERROR(fps_host_.ensure(std::max<int64_t>(fp_used_, 1) * sizeof(kc::RowFingerprint)));
  RETURN_IF_ERROR(logits_host_.ensure(std::max<int64_t>(S * V, 1) * f));
  if (fp_used_ > 0) {
    RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(fps_host_.as<void>(), fps_.data(), fp_used_ * sizeof(kc::RowFingerprint),
                        cudaMemcpyDeviceToHost, stream_),
        "copying fingerprints"));
  }
  if (S > 0) {
    RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(logits_host_.as<void>(), logits_d_.data(),
                                                S * V * f, cudaMemcpyDeviceToHost, stream_),
                                "copying logits"));
  }
  RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "step " + std::to_string(b.step)));
  if (S > 0) std::memcpy(logits->data(), logits_host_.as<float>(), S * V * f);

  // Observers, in forward order.
  static_assert(sizeof(kc::RowFingerprint) == sizeof(trace::Fingerprint));
  const auto* fps = reinterpret_cast<const trace::Fingerprint*>(fps_host_.as<kc::RowFingerprint>());
  for (const Event& e : events_) {
    if (e.is_plan) {
      for (Observer* o : observers) o->on_plan(b.step, e.site, e.plan);
      continue;
    }
    RowsView view;
    view.step = b.step;
    view.site = e.site;
    view.rows = e.rows;
    view.cols = e.cols;
    view.batch_rows = e.batch_rows;
    view.fingerprints = fps + e.fp_offset;
    for (size_t i = 0; i < observers.size() && i < 64; ++i) {
      if (e.mask & (uint64_t{1} << i)) observers[i]->on_rows(view);
    }
  }
  events_.clear();
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<DeviceForward>> make_device_forward(const EngineWeights& weights,
                                                           const EngineConfig& config) {
  RETURN_IF_ERROR(check_device(config.device));
  ASSIGN_OR_RETURN(std::unique_ptr<CudaForward> f, CudaForward::create(weights, config));
  return std::unique_ptr<DeviceForward>(std::move(f));
}

}  // namespace llmrr
