// Encoding: the plain records into FlatBuffers tables (convert.h); convert_decode.cc holds
// the decoding side.
#include "convert.h"

#include <algorithm>
#include <cstring>

namespace llmrr::trace::detail {

namespace fbs = flatbuffers;

static_assert(sizeof(Fingerprint) == sizeof(fb::Fingerprint), "Fingerprint layout");
static_assert(offsetof(Fingerprint, hash) == 0 && offsetof(Fingerprint, l2) == 8 &&
                  offsetof(Fingerprint, max_abs) == 12,
              "Fingerprint layout must match the schema struct");

// The schema's enums are the vocabulary's (vocab.h): same names, same values, so the
// conversions are static_casts. A value added to one and not the other fails here.
#define LLMRR_SAME_VALUE(E, a, b) \
  static_assert(static_cast<int>(E::a) == static_cast<int>(fb::E::b), #E "::" #a " vs llmrr.fbs")
LLMRR_SAME_VALUE(OpKind, kGemm, Gemm);
LLMRR_SAME_VALUE(OpKind, kRmsNorm, RmsNorm);
LLMRR_SAME_VALUE(OpKind, kAttention, Attention);
LLMRR_SAME_VALUE(OpKind, kCombine, Combine);
static_assert(static_cast<int>(fb::OpKind::MAX) == 3, "OpKind: a value llmrr.fbs has and vocab.h lacks");
LLMRR_SAME_VALUE(SplitMode, kCount, Count);
LLMRR_SAME_VALUE(SplitMode, kSize, Size);
static_assert(static_cast<int>(fb::SplitMode::MAX) == 1, "SplitMode vs llmrr.fbs");
LLMRR_SAME_VALUE(CombineOrder, kFixed, Fixed);
LLMRR_SAME_VALUE(CombineOrder, kArrival, Arrival);
static_assert(static_cast<int>(fb::CombineOrder::MAX) == 1, "CombineOrder vs llmrr.fbs");
LLMRR_SAME_VALUE(SegmentKind, kPrefill, Prefill);
LLMRR_SAME_VALUE(SegmentKind, kDecode, Decode);
static_assert(static_cast<int>(fb::SegmentKind::MAX) == 1, "SegmentKind vs llmrr.fbs");
LLMRR_SAME_VALUE(RouteOutcome, kKept, Kept);
LLMRR_SAME_VALUE(RouteOutcome, kRerouted, Rerouted);
LLMRR_SAME_VALUE(RouteOutcome, kDropped, Dropped);
static_assert(static_cast<int>(fb::RouteOutcome::MAX) == 2, "RouteOutcome vs llmrr.fbs");
LLMRR_SAME_VALUE(FinishReason, kEos, Eos);
LLMRR_SAME_VALUE(FinishReason, kMaxTokens, MaxTokens);
LLMRR_SAME_VALUE(FinishReason, kAborted, Aborted);
static_assert(static_cast<int>(fb::FinishReason::MAX) == 2, "FinishReason vs llmrr.fbs");
LLMRR_SAME_VALUE(OverflowPolicy, kDrop, Drop);
LLMRR_SAME_VALUE(OverflowPolicy, kNextBest, NextBest);
static_assert(static_cast<int>(fb::OverflowPolicy::MAX) == 1, "OverflowPolicy vs llmrr.fbs");
LLMRR_SAME_VALUE(CaptureLevel, kNone, None);
LLMRR_SAME_VALUE(CaptureLevel, kLayers, Layers);
LLMRR_SAME_VALUE(CaptureLevel, kAll, All);
static_assert(static_cast<int>(fb::CaptureLevel::MAX) == 2, "CaptureLevel vs llmrr.fbs");
LLMRR_SAME_VALUE(LogitsMode, kTopK, TopK);
LLMRR_SAME_VALUE(LogitsMode, kFull, Full);
static_assert(static_cast<int>(fb::LogitsMode::MAX) == 1, "LogitsMode vs llmrr.fbs");
LLMRR_SAME_VALUE(DType, kF32, F32);
LLMRR_SAME_VALUE(DType, kBF16, BF16);
LLMRR_SAME_VALUE(DType, kF16, F16);
LLMRR_SAME_VALUE(DType, kF64, F64);
LLMRR_SAME_VALUE(DType, kI8, I8);
LLMRR_SAME_VALUE(DType, kU8, U8);
LLMRR_SAME_VALUE(DType, kI16, I16);
LLMRR_SAME_VALUE(DType, kI32, I32);
LLMRR_SAME_VALUE(DType, kI64, I64);
static_assert(static_cast<int>(fb::DType::MAX) == 8, "DType vs llmrr.fbs");
#undef LLMRR_SAME_VALUE

void KindCounters::add(const KindCounters& o) {
  arrivals += o.arrivals;
  segments += o.segments;
  plans += o.plans;
  fingerprints += o.fingerprints;
  routing += o.routing;
  logits += o.logits;
  tokens += o.tokens;
  finishes += o.finishes;
  ops += o.ops;
  step_overhead += o.step_overhead;
}

namespace {

std::string plan_key(const PlanRecord& p) {
  std::string k;
  k.resize(4 + 12 + 2 * p.arrival.size());
  k[0] = static_cast<char>(p.op);
  k[1] = static_cast<char>(p.mode);
  k[2] = static_cast<char>(p.order);
  k[3] = static_cast<char>(p.separate_new_kv);
  std::memcpy(&k[4], &p.splits, 4);
  std::memcpy(&k[8], &p.split_size, 4);
  std::memcpy(&k[12], &p.k_tile, 4);
  if (!p.arrival.empty()) std::memcpy(&k[16], p.arrival.data(), 2 * p.arrival.size());
  if (p.cublaslt) {
    // Field by field: the struct has padding whose bytes are not part of its value.
    const CublasLtAlgoRecord& a = *p.cublaslt;
    auto put = [&k](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
    k += 'L';
    put(a.algo_id), put(a.tile), put(a.stages), put(a.splitk), put(a.reduction);
    put(a.swizzle), put(a.custom), put(a.inner_shape), put(a.cluster_shape), put(a.workspace);
    put(a.compute_type), put(a.scale_type), put(a.a_type), put(a.b_type), put(a.c_type);
  }
  return k;
}

fbs::Offset<fbs::String> opt_string(fbs::FlatBufferBuilder& fbb, const std::string& s) {
  return s.empty() ? fbs::Offset<fbs::String>() : fbb.CreateString(s);
}

template <typename Src, typename Dst>
fbs::Offset<fbs::Vector<Dst>> narrow_vector(fbs::FlatBufferBuilder& fbb,
                                            const std::vector<Src>& v) {
  Dst* p = nullptr;
  auto off = fbb.CreateUninitializedVector<Dst>(v.size(), &p);
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<Dst>(v[i]);
  return off;
}

}  // namespace

// Sized for a whole chunk up front: growing by doubling would copy the chunk and fault in
// fresh pages at every step up (untouched pages of the reservation cost nothing).
ChunkBuilder::ChunkBuilder() : fbb_(kMaxFrameRawBytes) {}

uint32_t ChunkBuilder::intern(const PlanRecord& plan) {
  std::string key = plan_key(plan);
  auto it = plan_ids_.find(key);
  if (it != plan_ids_.end()) return it->second;
  fbs::Offset<fbs::Vector<uint16_t>> arrival;
  if (!plan.arrival.empty()) arrival = fbb_.CreateVector(plan.arrival);
  fbs::Offset<fb::CublasLtAlgo> lt;
  if (plan.cublaslt) {
    const CublasLtAlgoRecord& a = *plan.cublaslt;
    lt = fb::CreateCublasLtAlgo(fbb_, a.algo_id, a.tile, a.stages, a.splitk, a.reduction,
                                a.swizzle, a.custom, a.inner_shape, a.cluster_shape, a.workspace,
                                a.compute_type, a.scale_type, a.a_type, a.b_type, a.c_type);
  }
  fb::PlanBuilder b(fbb_);
  b.add_op(static_cast<fb::OpKind>(plan.op));
  b.add_mode(static_cast<fb::SplitMode>(plan.mode));
  b.add_order(static_cast<fb::CombineOrder>(plan.order));
  b.add_separate_new_kv(plan.separate_new_kv);
  b.add_splits(plan.splits);
  b.add_split_size(plan.split_size);
  b.add_k_tile(plan.k_tile);
  if (!plan.arrival.empty()) b.add_arrival(arrival);
  if (plan.cublaslt) b.add_cublaslt(lt);
  plan_offsets_.push_back(b.Finish());
  const uint32_t id = static_cast<uint32_t>(plans_.size());
  plans_.push_back(plan);
  plan_ids_.emplace(std::move(key), id);
  return id;
}

void ChunkBuilder::add_step(const StepRecord& s, KindCounters* kc) {
  size_t mark = fbb_.GetSize();
  auto take = [&](uint64_t* counter) {
    const size_t now = fbb_.GetSize();
    *counter += now - mark;
    mark = now;
  };

  // Arrivals.
  fbs::Offset<fbs::Vector<fbs::Offset<fb::Request>>> arrivals;
  if (!s.arrivals.empty()) {
    std::vector<fbs::Offset<fb::Request>> v;
    v.reserve(s.arrivals.size());
    for (const RequestRecord& r : s.arrivals) {
      auto prompt = fbb_.CreateVector(r.prompt);
      auto label = opt_string(fbb_, r.label);
      fbs::Offset<fbs::Vector<int32_t>> history;
      if (!r.history.empty()) history = fbb_.CreateVector(r.history);
      fb::RequestBuilder b(fbb_);
      b.add_id(r.id);
      b.add_prompt(prompt);
      b.add_temperature(r.temperature);
      b.add_top_k(r.top_k);
      b.add_top_p(r.top_p);
      b.add_seed(r.seed);
      b.add_max_tokens(r.max_tokens);
      b.add_arrival_step(r.arrival_step);
      b.add_stop_at_eos(r.stop_at_eos);
      if (!r.label.empty()) b.add_label(label);
      if (r.carried) b.add_carried(true);
      if (!r.history.empty()) b.add_history(history);
      v.push_back(b.Finish());
    }
    arrivals = fbb_.CreateVector(v);
  }
  take(&kc->arrivals);

  // Segments.
  fbs::Offset<fbs::Vector<const fb::Segment*>> segments;
  if (!s.segments.empty()) {
    fb::Segment* p = nullptr;
    segments = fbb_.CreateUninitializedVectorOfStructs<fb::Segment>(s.segments.size(), &p);
    for (size_t i = 0; i < s.segments.size(); ++i) {
      const Segment& g = s.segments[i];
      p[i] = fb::Segment(g.request, g.start, g.count, g.cached,
                         static_cast<fb::SegmentKind>(g.kind), g.sample);
    }
  }
  take(&kc->segments);

  // Plans: intern, then store the delta against the previous step of this chunk.
  sorted_.clear();
  for (const SitePlan& sp : s.plans) sorted_.push_back(&sp);
  std::stable_sort(sorted_.begin(), sorted_.end(),
                   [](const SitePlan* a, const SitePlan* b) { return a->site < b->site; });
  next_.clear();
  size_t j = 0;
  for (const SitePlan* sp : sorted_) {
    while (j < assignment_.size() && assignment_[j].first < sp->site) ++j;
    uint32_t id;
    if (j < assignment_.size() && assignment_[j].first == sp->site &&
        plans_[assignment_[j].second] == sp->plan) {
      id = assignment_[j].second;
    } else {
      id = intern(sp->plan);
    }
    next_.emplace_back(sp->site, id);
  }
  const bool reset = steps_.empty();
  delta_.clear();
  if (reset) {
    for (const auto& e : next_) delta_.emplace_back(e.first, e.second);
  } else {
    size_t a = 0, b = 0;
    while (a < assignment_.size() || b < next_.size()) {
      if (b == next_.size() || (a < assignment_.size() && assignment_[a].first < next_[b].first)) {
        delta_.emplace_back(assignment_[a].first, kNoPlan);
        ++a;
      } else if (a == assignment_.size() || next_[b].first < assignment_[a].first) {
        delta_.emplace_back(next_[b].first, next_[b].second);
        ++b;
      } else {
        if (assignment_[a].second != next_[b].second)
          delta_.emplace_back(next_[b].first, next_[b].second);
        ++a;
        ++b;
      }
    }
  }
  assignment_.swap(next_);
  if (reset) plan_live_ = 0;
  for (const fb::SitePlanRef& d : delta_)
    if (d.plan() != kNoPlan) ++plan_live_;
  plan_cost_ += plan_live_;
  for (const SitePlan& sp : s.plans) arrival_cost_ += sp.plan.arrival.size();
  fbs::Offset<fbs::Vector<const fb::SitePlanRef*>> plan_delta;
  if (!delta_.empty()) plan_delta = fbb_.CreateVectorOfStructs(delta_.data(), delta_.size());
  take(&kc->plans);

  // Fingerprints.
  fbs::Offset<fbs::Vector<fbs::Offset<fb::SiteRows>>> rows;
  const size_t fingerprints_from = fbb_.GetSize();
  if (!s.rows.empty()) {
    std::vector<fbs::Offset<fb::SiteRows>> v;
    v.reserve(s.rows.size());
    for (const SiteRows& r : s.rows) {
      fbs::Offset<fbs::Vector<int32_t>> batch_rows;
      if (!r.batch_rows.empty()) batch_rows = fbb_.CreateVector(r.batch_rows);
      fb::Fingerprint* p = nullptr;
      auto fps = fbb_.CreateUninitializedVectorOfStructs<fb::Fingerprint>(r.rows.size(), &p);
      if (!r.rows.empty()) std::memcpy(static_cast<void*>(p), r.rows.data(), r.rows.size() * 16);
      fb::SiteRowsBuilder b(fbb_);
      b.add_site(r.site);
      b.add_cols(r.cols);
      if (!r.batch_rows.empty()) b.add_batch_rows(batch_rows);
      b.add_rows(fps);
      v.push_back(b.Finish());
    }
    rows = fbb_.CreateVector(v);
  }
  if (fbb_.GetSize() > fingerprints_from)
    fingerprint_marks_.emplace_back(fingerprints_from, fbb_.GetSize());
  take(&kc->fingerprints);

  // Routing.
  fbs::Offset<fbs::Vector<fbs::Offset<fb::Routing>>> routing;
  if (!s.routing.empty()) {
    std::vector<fbs::Offset<fb::Routing>> v;
    v.reserve(s.routing.size());
    for (const Routing& r : s.routing) {
      auto chosen = narrow_vector<int32_t, int16_t>(fbb_, r.chosen);
      auto experts = narrow_vector<int32_t, int16_t>(fbb_, r.experts);
      auto gates = fbb_.CreateVector(r.gates);
      fb::RouteOutcome* po = nullptr;
      auto outcome = fbb_.CreateUninitializedVector<fb::RouteOutcome>(r.outcome.size(), &po);
      if (!r.outcome.empty())
        std::memcpy(static_cast<void*>(po), r.outcome.data(), r.outcome.size());
      fb::RoutingBuilder b(fbb_);
      b.add_layer(r.layer);
      b.add_rows(r.rows);
      b.add_k(r.k);
      b.add_experts_total(r.experts_total);
      b.add_capacity(r.capacity);
      b.add_chosen(chosen);
      b.add_experts(experts);
      b.add_gates(gates);
      b.add_outcome(outcome);
      v.push_back(b.Finish());
    }
    routing = fbb_.CreateVector(v);
  }
  take(&kc->routing);

  // Logits.
  fbs::Offset<fbs::Vector<fbs::Offset<fb::Logits>>> logits;
  if (!s.logits.empty()) {
    std::vector<fbs::Offset<fb::Logits>> v;
    v.reserve(s.logits.size());
    for (const LogitsRecord& l : s.logits) {
      auto ids = fbb_.CreateVector(l.top_ids);
      auto vals = fbb_.CreateVector(l.top_values);
      fb::Fingerprint full(l.full.hash, l.full.l2, l.full.max_abs);
      fb::LogitsBuilder b(fbb_);
      b.add_request(l.request);
      b.add_position(l.position);
      b.add_batch_row(l.batch_row);
      b.add_vocab(l.vocab);
      b.add_top_ids(ids);
      b.add_top_values(vals);
      b.add_full(&full);
      b.add_margin(l.margin);
      b.add_blob(l.blob);
      if (l.logsumexp) b.add_logsumexp(*l.logsumexp);
      v.push_back(b.Finish());
    }
    logits = fbb_.CreateVector(v);
  }
  take(&kc->logits);

  fbs::Offset<fbs::Vector<const fb::Token*>> tokens;
  if (!s.tokens.empty()) {
    fb::Token* p = nullptr;
    tokens = fbb_.CreateUninitializedVectorOfStructs<fb::Token>(s.tokens.size(), &p);
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const TokenRecord& t = s.tokens[i];
      p[i] = fb::Token(t.request, t.position, t.token, t.uniform);
    }
  }
  take(&kc->tokens);

  fbs::Offset<fbs::Vector<const fb::Finish*>> finishes;
  if (!s.finishes.empty()) {
    fb::Finish* p = nullptr;
    finishes = fbb_.CreateUninitializedVectorOfStructs<fb::Finish>(s.finishes.size(), &p);
    for (size_t i = 0; i < s.finishes.size(); ++i) {
      const FinishRecord& f = s.finishes[i];
      p[i] = fb::Finish(f.request, f.generated, static_cast<fb::FinishReason>(f.reason));
    }
  }
  take(&kc->finishes);

  fbs::Offset<fbs::Vector<fbs::Offset<fb::OpRecord>>> ops;
  if (!s.ops.empty()) {
    std::vector<fbs::Offset<fb::OpRecord>> v;
    v.reserve(s.ops.size());
    for (const OpRecord& o : s.ops) {
      auto name = fbb_.CreateString(o.name);
      auto op = opt_string(fbb_, o.op);
      auto attrs = opt_string(fbb_, o.attrs);
      fb::OpRecordBuilder b(fbb_);
      b.add_layer(o.layer);
      b.add_layers(o.layers);
      b.add_first_row(o.first_row);
      b.add_rows(o.rows);
      b.add_graph(o.graph);
      b.add_name(name);
      if (!o.op.empty()) b.add_op(op);
      if (!o.attrs.empty()) b.add_attrs(attrs);
      v.push_back(b.Finish());
    }
    ops = fbb_.CreateVector(v);
  }
  take(&kc->ops);

  fb::StepBuilder b(fbb_);
  b.add_step(s.step);
  if (!s.arrivals.empty()) b.add_arrivals(arrivals);
  if (!s.segments.empty()) b.add_segments(segments);
  b.add_plans_reset(reset);
  if (!delta_.empty()) b.add_plan_delta(plan_delta);
  if (!s.rows.empty()) b.add_rows(rows);
  if (!s.routing.empty()) b.add_routing(routing);
  if (!s.logits.empty()) b.add_logits(logits);
  if (!s.tokens.empty()) b.add_tokens(tokens);
  if (!s.finishes.empty()) b.add_finishes(finishes);
  if (!s.ops.empty()) b.add_ops(ops);
  steps_.push_back(b.Finish());
  take(&kc->step_overhead);
  if (steps_.size() == 1) first_step_ = s.step;
  last_step_ = s.step;
}

void ChunkBuilder::finish(std::vector<uint8_t>* out, std::vector<NoisySpan>* noisy) {
  auto plans = fbb_.CreateVector(plan_offsets_);
  auto steps = fbb_.CreateVector(steps_);
  fb::StepChunkBuilder b(fbb_);
  b.add_plans(plans);
  b.add_steps(steps);
  fbb_.Finish(b.Finish());
  const size_t size = fbb_.GetSize();
  out->assign(fbb_.GetBufferPointer(), fbb_.GetBufferPointer() + size);
  if (noisy != nullptr) {
    noisy->clear();
    // Later steps lie earlier in the buffer.
    for (auto it = fingerprint_marks_.rbegin(); it != fingerprint_marks_.rend(); ++it)
      noisy->push_back({size - it->second, size - it->first});
  }
  fingerprint_marks_.clear();
  fbb_.Clear();
  plan_offsets_.clear();
  plans_.clear();
  plan_ids_.clear();
  assignment_.clear();
  steps_.clear();
  first_step_ = -1;
  last_step_ = -1;
  plan_live_ = 0;
  plan_cost_ = 0;
  arrival_cost_ = 0;
}

size_t step_size_bound(const StepRecord& s) {
  size_t b = 512;
  for (const RequestRecord& r : s.arrivals) b += 160 + 4 * r.prompt.size() + r.label.size();
  b += 24 * s.segments.size();
  for (const SitePlan& p : s.plans)
    b += 16 + 112 + 2 * p.plan.arrival.size() + (p.plan.cublaslt ? 112 : 0);
  b += 16 * s.plans.size() + 16;  // removals in the delta
  for (const SiteRows& r : s.rows) b += 96 + 4 * r.batch_rows.size() + 16 * r.rows.size();
  for (const Routing& r : s.routing)
    b += 128 + 2 * r.chosen.size() + 2 * r.experts.size() + 4 * r.gates.size() + r.outcome.size();
  for (const LogitsRecord& l : s.logits) b += 128 + 4 * l.top_ids.size() + 4 * l.top_values.size();
  for (const OpRecord& o : s.ops) b += 80 + o.name.size() + o.op.size() + o.attrs.size();
  b += 24 * s.tokens.size() + 16 * s.finishes.size() + 10 * 16;
  return b;
}

void build_run_header(const RunHeader& h, std::vector<uint8_t>* out) {
  fbs::FlatBufferBuilder fbb(4096);
  auto host =
      fb::CreateHostInfo(fbb, opt_string(fbb, h.host.hostname), opt_string(fbb, h.host.os),
                         opt_string(fbb, h.host.cpu), h.host.cores, opt_string(fbb, h.host.isa));
  auto device = fb::CreateDeviceInfo(
      fbb, opt_string(fbb, h.device.kind), opt_string(fbb, h.device.name),
      opt_string(fbb, h.device.compute_capability), opt_string(fbb, h.device.driver),
      h.device.memory_bytes, h.device.sm_count, opt_string(fbb, h.device.runtime),
      opt_string(fbb, h.device.cublaslt));
  const ModelInfo& m = h.model;
  auto m_name = opt_string(fbb, m.name);
  auto m_path = opt_string(fbb, m.path);
  auto m_arch = opt_string(fbb, m.architecture);
  auto m_hash = opt_string(fbb, m.weight_hash);
  auto m_wd = opt_string(fbb, m.weight_dtype);
  auto m_cd = opt_string(fbb, m.compute_dtype);
  fb::ModelInfoBuilder mb(fbb);
  mb.add_name(m_name);
  mb.add_path(m_path);
  mb.add_architecture(m_arch);
  mb.add_weight_hash(m_hash);
  mb.add_weight_dtype(m_wd);
  mb.add_compute_dtype(m_cd);
  mb.add_layers(m.layers);
  mb.add_hidden(m.hidden);
  mb.add_vocab(m.vocab);
  mb.add_heads(m.heads);
  mb.add_kv_heads(m.kv_heads);
  mb.add_experts(m.experts);
  mb.add_experts_per_token(m.experts_per_token);
  auto model = mb.Finish();
  const EngineConfig& e = h.engine;
  auto policy = opt_string(fbb, e.policy);
  auto fingerprint = opt_string(fbb, e.fingerprint);
  fb::EngineConfigBuilder eb(fbb);
  eb.add_policy(policy);
  eb.add_virtual_sms(e.virtual_sms);
  eb.add_blocks_per_sm(e.blocks_per_sm);
  eb.add_threads(e.threads);
  eb.add_max_batch_tokens(e.max_batch_tokens);
  eb.add_max_seqs(e.max_seqs);
  eb.add_prefill_chunk(e.prefill_chunk);
  eb.add_kv_block_size(e.kv_block_size);
  eb.add_capacity_factor(e.capacity_factor);
  eb.add_overflow(static_cast<fb::OverflowPolicy>(e.overflow));
  eb.add_atomics(e.atomics);
  eb.add_seed(e.seed);
  eb.add_load(e.load);
  eb.add_capture(static_cast<fb::CaptureLevel>(e.capture));
  eb.add_logits_mode(static_cast<fb::LogitsMode>(e.logits_mode));
  eb.add_top_k(e.top_k);
  if (!fingerprint.IsNull()) eb.add_fingerprint(fingerprint);
  auto engine = eb.Finish();
  auto tool = fbb.CreateString(h.tool_version);
  auto run_id = opt_string(fbb, h.run_id);
  auto extra = opt_string(fbb, h.extra_config_json);
  auto cmd = opt_string(fbb, h.command_line);
  fb::RunHeaderBuilder b(fbb);
  b.add_format_major(h.format_major);
  b.add_format_minor(h.format_minor);
  b.add_tool_version(tool);
  b.add_created_unix_ns(h.created_unix_ns);
  b.add_run_id(run_id);
  b.add_host(host);
  b.add_device(device);
  b.add_model(model);
  b.add_engine(engine);
  b.add_extra_config_json(extra);
  b.add_command_line(cmd);
  fbb.Finish(b.Finish());
  out->assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

void build_kernel_chunk(const std::vector<KernelRecord>& records, std::vector<uint8_t>* out) {
  fbs::FlatBufferBuilder fbb(4096);
  std::vector<fbs::Offset<fb::KernelRecord>> v;
  for (const KernelRecord& k : records) {
    auto name = opt_string(fbb, k.name);
    // Memcpy and range records have no launch shape: no empty vectors stored for them.
    auto grid = k.grid.empty() ? 0 : fbb.CreateVector(k.grid);
    auto block = k.block.empty() ? 0 : fbb.CreateVector(k.block);
    fb::KernelRecordBuilder b(fbb);
    b.add_name(name);
    b.add_step(k.step);
    if (!k.grid.empty()) b.add_grid(grid);
    if (!k.block.empty()) b.add_block(block);
    b.add_stream(k.stream);
    b.add_correlation(k.correlation);
    b.add_start_ns(k.start_ns);
    b.add_end_ns(k.end_ns);
    b.add_kind(static_cast<fb::ActivityKind>(k.kind));
    b.add_static_shared(k.static_shared);
    b.add_dynamic_shared(k.dynamic_shared);
    b.add_bytes(k.bytes);
    b.add_copy_kind(k.copy_kind);
    b.add_device(k.device);
    v.push_back(b.Finish());
  }
  auto recs = fbb.CreateVector(v);
  fb::KernelChunkBuilder b(fbb);
  b.add_records(recs);
  fbb.Finish(b.Finish());
  out->assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

void build_blob_meta(const BlobMetaFields& m, std::vector<uint8_t>* out) {
  fbs::FlatBufferBuilder fbb(512);
  auto shape = fbb.CreateVector(m.shape);
  auto name = opt_string(fbb, m.name);
  fbs::Offset<fb::XorRef> xr;
  if (m.xor_coded) {
    auto trace = opt_string(fbb, m.reference_trace);
    fb::XorRefBuilder b(fbb);
    b.add_trace(trace);
    b.add_blob(m.reference_blob);
    b.add_hash(m.reference_hash);
    xr = b.Finish();
  }
  fb::BlobMetaBuilder b(fbb);
  b.add_id(m.id);
  b.add_dtype(static_cast<fb::DType>(m.dtype));
  b.add_elem_size(m.elem_size);
  b.add_shape(shape);
  b.add_nbytes(m.nbytes);
  b.add_name(name);
  b.add_step(m.step);
  b.add_site(m.site);
  b.add_request(m.request);
  if (m.xor_coded) b.add_xor_ref(xr);
  fbb.Finish(b.Finish());
  out->assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

void build_footer(const FooterFields& f, std::vector<uint8_t>* out) {
  fbs::FlatBufferBuilder fbb(64 * 1024);
  std::vector<fb::FrameEntry> entries;
  entries.reserve(f.frames.size());
  for (const FrameInfo& fi : f.frames)
    entries.emplace_back(fi.offset, fi.first, fi.last, fi.raw_size, fi.stored_size,
                         static_cast<uint8_t>(fi.kind), static_cast<uint8_t>(fi.codec));
  auto frames = fbb.CreateVectorOfStructs(entries);
  std::vector<fbs::Offset<fb::RequestSummary>> reqs;
  for (const RequestSummary& r : f.requests) {
    auto label = opt_string(fbb, r.label);
    fb::RequestSummaryBuilder b(fbb);
    b.add_id(r.id);
    b.add_arrival_step(r.arrival_step);
    b.add_prompt_len(r.prompt_len);
    b.add_prompt_hash(r.prompt_hash);
    b.add_finish_step(r.finish_step);
    b.add_generated(r.generated);
    b.add_reason(static_cast<fb::FinishReason>(r.reason));
    if (!r.label.empty()) b.add_label(label);
    if (r.carried) b.add_carried(true);
    reqs.push_back(b.Finish());
  }
  auto requests = fbb.CreateVector(reqs);
  std::vector<fbs::Offset<fb::KindBytes>> kinds;
  for (const KindBytes& k : f.kind_bytes)
    kinds.push_back(fb::CreateKindBytes(fbb, fbb.CreateString(k.kind), k.raw_bytes));
  auto kind_bytes = fbb.CreateVector(kinds);
  auto reason = opt_string(fbb, f.lossy_reason);
  fb::FooterBuilder b(fbb);
  b.add_complete(f.complete);
  b.add_lossy(f.lossy);
  b.add_lossy_reason(reason);
  b.add_frames(frames);
  b.add_steps(f.steps);
  b.add_first_step(f.first_step);
  b.add_last_step(f.last_step);
  b.add_tokens(f.tokens);
  b.add_blobs(f.blobs);
  b.add_raw_bytes(f.raw_bytes);
  b.add_stored_bytes(f.stored_bytes);
  b.add_requests(requests);
  b.add_kind_bytes(kind_bytes);
  b.add_kernel_records(f.kernel_records);
  b.add_dropped_records(f.dropped_records);
  fbb.Finish(b.Finish());
  out->assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

}  // namespace llmrr::trace::detail
