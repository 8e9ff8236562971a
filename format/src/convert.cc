#include "convert.h"

#include <algorithm>
#include <cstring>

namespace llmrr::trace::detail {

namespace fbs = flatbuffers;

static_assert(sizeof(Fingerprint) == sizeof(fb::Fingerprint), "Fingerprint layout");
static_assert(offsetof(Fingerprint, hash) == 0 && offsetof(Fingerprint, l2) == 8 &&
                  offsetof(Fingerprint, max_abs) == 12,
              "Fingerprint layout must match the schema struct");

void KindCounters::add(const KindCounters& o) {
  arrivals += o.arrivals;
  segments += o.segments;
  plans += o.plans;
  fingerprints += o.fingerprints;
  routing += o.routing;
  logits += o.logits;
  tokens += o.tokens;
  finishes += o.finishes;
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

std::string str(const fbs::String* s) {
  return s ? s->str() : std::string();
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
  b += 24 * s.tokens.size() + 16 * s.finishes.size() + 9 * 16;
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

void decode_run_header(const fb::RunHeader* h, RunHeader* out) {
  *out = RunHeader();
  out->format_major = h->format_major();
  out->format_minor = h->format_minor();
  out->tool_version = str(h->tool_version());
  out->created_unix_ns = h->created_unix_ns();
  out->run_id = str(h->run_id());
  out->extra_config_json = str(h->extra_config_json());
  out->command_line = str(h->command_line());
  if (const fb::HostInfo* x = h->host()) {
    out->host.hostname = str(x->hostname());
    out->host.os = str(x->os());
    out->host.cpu = str(x->cpu());
    out->host.cores = x->cores();
    out->host.isa = str(x->isa());
  }
  if (const fb::DeviceInfo* x = h->device()) {
    out->device.kind = str(x->kind());
    out->device.name = str(x->name());
    out->device.compute_capability = str(x->compute_capability());
    out->device.driver = str(x->driver());
    out->device.memory_bytes = x->memory_bytes();
    out->device.sm_count = x->sm_count();
    out->device.runtime = str(x->runtime());
    out->device.cublaslt = str(x->cublaslt());
  } else {
    out->device.kind.clear();
  }
  if (const fb::ModelInfo* x = h->model()) {
    ModelInfo& m = out->model;
    m.name = str(x->name());
    m.path = str(x->path());
    m.architecture = str(x->architecture());
    m.weight_hash = str(x->weight_hash());
    m.weight_dtype = str(x->weight_dtype());
    m.compute_dtype = str(x->compute_dtype());
    m.layers = x->layers();
    m.hidden = x->hidden();
    m.vocab = x->vocab();
    m.heads = x->heads();
    m.kv_heads = x->kv_heads();
    m.experts = x->experts();
    m.experts_per_token = x->experts_per_token();
  }
  if (const fb::EngineConfig* x = h->engine()) {
    EngineConfig& e = out->engine;
    e.policy = str(x->policy());
    e.virtual_sms = x->virtual_sms();
    e.blocks_per_sm = x->blocks_per_sm();
    e.threads = x->threads();
    e.max_batch_tokens = x->max_batch_tokens();
    e.max_seqs = x->max_seqs();
    e.prefill_chunk = x->prefill_chunk();
    e.kv_block_size = x->kv_block_size();
    e.capacity_factor = x->capacity_factor();
    e.overflow = static_cast<OverflowPolicy>(x->overflow());
    e.atomics = x->atomics();
    e.seed = x->seed();
    e.load = x->load();
    e.capture = static_cast<CaptureLevel>(x->capture());
    e.logits_mode = static_cast<LogitsMode>(x->logits_mode());
    e.top_k = x->top_k();
  } else {
    out->engine = EngineConfig();
    out->engine.capture = CaptureLevel::kNone;
    out->engine.top_k = 0;
  }
}

void decode_plan(const fb::Plan* p, PlanRecord* out) {
  out->op = static_cast<OpKind>(p->op());
  out->mode = static_cast<SplitMode>(p->mode());
  out->order = static_cast<CombineOrder>(p->order());
  out->separate_new_kv = p->separate_new_kv();
  out->splits = p->splits();
  out->split_size = p->split_size();
  out->k_tile = p->k_tile();
  out->arrival.clear();
  if (const auto* a = p->arrival()) out->arrival.assign(a->begin(), a->end());
  out->cublaslt.reset();
  if (const fb::CublasLtAlgo* x = p->cublaslt()) {
    CublasLtAlgoRecord& a = out->cublaslt.emplace();
    a.algo_id = x->algo_id();
    a.tile = x->tile();
    a.stages = x->stages();
    a.splitk = x->splitk();
    a.reduction = x->reduction();
    a.swizzle = x->swizzle();
    a.custom = x->custom();
    a.inner_shape = x->inner_shape();
    a.cluster_shape = x->cluster_shape();
    a.workspace = x->workspace();
    a.compute_type = x->compute_type();
    a.scale_type = x->scale_type();
    a.a_type = x->a_type();
    a.b_type = x->b_type();
    a.c_type = x->c_type();
  }
}

void decode_blob_meta(const fb::BlobMeta* m, BlobInfo* out) {
  out->id = m->id();
  out->dtype = static_cast<DType>(m->dtype());
  out->shape.clear();
  if (const auto* s = m->shape()) out->shape.assign(s->begin(), s->end());
  out->nbytes = m->nbytes();
  out->name = str(m->name());
  out->step = m->step();
  out->site = m->site();
  out->request = m->request();
  out->xor_coded = m->xor_ref() != nullptr;
  if (const fb::XorRef* x = m->xor_ref()) {
    out->reference_trace = str(x->trace());
    out->reference_blob = x->blob();
    out->reference_hash = x->hash();
  } else {
    out->reference_trace.clear();
    out->reference_blob = -1;
    out->reference_hash = 0;
  }
}

bool decode_kernel_chunk(const fb::KernelChunk* k, size_t raw_size,
                         std::vector<KernelRecord>* out) {
  out->clear();
  // Records may share a name string (FlatBuffers allows it); the budget keeps a small frame
  // from decoding to gigabytes of copies.
  uint64_t budget = 2 * static_cast<uint64_t>(raw_size) + 4096;
  for (const fb::KernelRecord* r : *k->records()) {
    KernelRecord x;
    if (r == nullptr) continue;
    const uint64_t cost =
        64 + (r->name() ? r->name()->size() : 0) +
        4 * ((r->grid() ? r->grid()->size() : 0) + (r->block() ? r->block()->size() : 0));
    if (cost > budget) return false;
    budget -= cost;
    x.name = str(r->name());
    x.step = r->step();
    if (r->grid()) x.grid.assign(r->grid()->begin(), r->grid()->end());
    if (r->block()) x.block.assign(r->block()->begin(), r->block()->end());
    x.stream = r->stream();
    x.correlation = r->correlation();
    x.start_ns = r->start_ns();
    x.end_ns = r->end_ns();
    x.kind = static_cast<ActivityKind>(r->kind());
    x.static_shared = r->static_shared();
    x.dynamic_shared = r->dynamic_shared();
    x.bytes = r->bytes();
    x.copy_kind = r->copy_kind();
    x.device = r->device();
    out->push_back(std::move(x));
  }
  return true;
}

void decode_footer(const fb::Footer* f, FooterFields* out) {
  *out = FooterFields();
  out->complete = f->complete();
  out->lossy = f->lossy();
  out->lossy_reason = str(f->lossy_reason());
  out->frames.reserve(f->frames()->size());
  for (const fb::FrameEntry* e : *f->frames()) {
    FrameInfo fi;
    fi.offset = e->offset();
    fi.kind = static_cast<FrameKind>(e->kind());
    fi.codec = static_cast<Codec>(e->codec());
    fi.raw_size = e->raw_size();
    fi.stored_size = e->stored_size();
    fi.first = e->first();
    fi.last = e->last();
    out->frames.push_back(fi);
  }
  out->steps = f->steps();
  out->first_step = f->first_step();
  out->last_step = f->last_step();
  out->tokens = f->tokens();
  out->blobs = f->blobs();
  out->raw_bytes = f->raw_bytes();
  out->stored_bytes = f->stored_bytes();
  if (const auto* rs = f->requests()) {
    for (const fb::RequestSummary* r : *rs) {
      RequestSummary s;
      s.id = r->id();
      s.arrival_step = r->arrival_step();
      s.prompt_len = r->prompt_len();
      s.prompt_hash = r->prompt_hash();
      s.finish_step = r->finish_step();
      s.generated = r->generated();
      s.reason = static_cast<FinishReason>(r->reason());
      s.label = str(r->label());
      out->requests.push_back(std::move(s));
    }
  }
  if (const auto* ks = f->kind_bytes()) {
    for (const fb::KindBytes* k : *ks) out->kind_bytes.push_back({str(k->kind()), k->raw_bytes()});
  }
  out->kernel_records = f->kernel_records();
  out->dropped_records = f->dropped_records();
}

std::string ChunkDecoder::reset(const fb::StepChunk* chunk, size_t raw_size) {
  chunk_ = chunk;
  steps_ = chunk->steps();
  next_index_ = 0;
  assignment_.clear();
  plans_.clear();
  budget_ = raw_size + 4096;
  arrival_budget_ = kMaxArrivalCost;
  if (steps_ == nullptr || steps_->size() == 0)
    return "expected at least one step in the chunk, found none";
  uint64_t live = 0, cost = 0;
  for (const fb::Step* s : *steps_) {
    if (s->plans_reset()) live = 0;
    if (const auto* d = s->plan_delta())
      for (const fb::SitePlanRef* e : *d)
        if (e->plan() != kNoPlan) ++live;
    cost += live;
    if (cost > kMaxPlanCost)
      return "expected a plan cost of at most " + std::to_string(kMaxPlanCost) +
             " (Σ over steps of live plan entries), found more by step " +
             std::to_string(s->step());
  }
  if (const auto* ps = chunk->plans()) {
    plans_.resize(ps->size());
    for (flatbuffers::uoffset_t i = 0; i < ps->size(); ++i) {
      const fb::Plan* p = ps->Get(i);
      if (!take(8 + (p->arrival() ? 2 * uint64_t{p->arrival()->size()} : 0) +
                (p->cublaslt() ? 16 : 0)))
        return "plans: expected at most " + std::to_string(raw_size) +
               " bytes of plans (the payload size), found more: the payload shares offsets";
      decode_plan(p, &plans_[i]);
    }
  }
  return {};
}

std::string ChunkDecoder::decode(size_t i, StepRecord* out, bool skip_payload) {
  if (i != next_index_) return "internal: steps decoded out of order";
  const fb::Step* s = steps_->Get(static_cast<flatbuffers::uoffset_t>(i));
  ++next_index_;
  if (i == 0 && !s->plans_reset())
    return "step " + std::to_string(s->step()) +
           ": expected plans_reset on the first step of a chunk, found it unset";
  const auto* delta0 = s->plan_delta();
  if (!s->plans_reset() && (delta0 == nullptr || delta0->size() == 0)) {
    // Unchanged plans: the common case costs nothing.
  } else {
    next_.clear();
    static const std::vector<std::pair<uint64_t, uint32_t>> kEmpty;
    const auto& base = s->plans_reset() ? kEmpty : assignment_;
    size_t j = 0;
    if (const auto* delta = s->plan_delta()) {
      uint64_t prev = 0;
      for (flatbuffers::uoffset_t k = 0; k < delta->size(); ++k) {
        const fb::SitePlanRef* d = delta->Get(k);
        if (k > 0 && d->site() <= prev)
          return "step " + std::to_string(s->step()) + ": plan_delta[" + std::to_string(k) +
                 "]: expected sites strictly increasing, found site " + std::to_string(d->site()) +
                 " after " + std::to_string(prev);
        prev = d->site();
        while (j < base.size() && base[j].first < d->site()) next_.push_back(base[j++]);
        const bool existing = j < base.size() && base[j].first == d->site();
        if (d->plan() == kNoPlan) {
          if (!existing)
            return "step " + std::to_string(s->step()) + ": plan_delta[" + std::to_string(k) +
                   "]: removes the plan of site " + std::to_string(d->site()) +
                   ": expected a site with a plan, found none";
          ++j;
          continue;
        }
        if (d->plan() >= plans_.size())
          return "step " + std::to_string(s->step()) + ": plan_delta[" + std::to_string(k) +
                 "]: expected a plan index < " + std::to_string(plans_.size()) + ", found " +
                 std::to_string(d->plan());
        next_.emplace_back(d->site(), d->plan());
        if (existing) ++j;
      }
    }
    while (j < base.size()) next_.push_back(base[j++]);
    assignment_.swap(next_);
  }
  if (skip_payload) return {};

  const std::string over =
      "step " + std::to_string(s->step()) +
      ": expected records of at most the payload's size, found more: the payload "
      "shares offsets between records";
#define LLMRR_TAKE(bytes) \
  if (!take(bytes)) return over
  LLMRR_TAKE(8);  // minimum bytes a step occupies: each charge below is a lower bound
  // Lists are resized rather than cleared so that a reused StepRecord keeps the capacity
  // of its inner vectors (sequential readers decode millions of rows this way).
  out->step = s->step();
  if (const auto* v = s->arrivals()) {
    out->arrivals.resize(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      const fb::Request* r = v->Get(k);
      LLMRR_TAKE(16 + 4 * uint64_t{r->prompt()->size()} + (r->label() ? r->label()->size() : 0));
      RequestRecord& x = out->arrivals[k];
      x.id = r->id();
      x.prompt.assign(r->prompt()->begin(), r->prompt()->end());
      x.temperature = r->temperature();
      x.top_k = r->top_k();
      x.top_p = r->top_p();
      x.seed = r->seed();
      x.max_tokens = r->max_tokens();
      x.arrival_step = r->arrival_step();
      x.stop_at_eos = r->stop_at_eos();
      x.label = str(r->label());
    }
  } else {
    out->arrivals.clear();
  }
  if (const auto* v = s->segments()) {
    LLMRR_TAKE(24 * uint64_t{v->size()});
    out->segments.resize(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      const fb::Segment* g = v->Get(k);
      Segment& x = out->segments[k];
      x.request = g->request();
      x.start = g->start();
      x.count = g->count();
      x.cached = g->cached();
      x.kind = static_cast<SegmentKind>(g->kind());
      x.sample = g->sample();
    }
  } else {
    out->segments.clear();
  }
  out->plans.resize(assignment_.size());
  for (size_t k = 0; k < assignment_.size(); ++k) {
    const uint64_t a = plans_[assignment_[k].second].arrival.size();
    if (a > arrival_budget_)
      return "step " + std::to_string(s->step()) + ": expected at most " +
             std::to_string(kMaxArrivalCost) +
             " arrival entries in the chunk's resolved plans, found more";
    arrival_budget_ -= a;
    out->plans[k].site = assignment_[k].first;
    out->plans[k].plan = plans_[assignment_[k].second];
  }
  if (const auto* v = s->rows()) {
    out->rows.resize(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      const fb::SiteRows* r = v->Get(k);
      LLMRR_TAKE(16 + 16 * uint64_t{r->rows()->size()} +
                 (r->batch_rows() ? 4 * uint64_t{r->batch_rows()->size()} : 0));
      SiteRows& x = out->rows[k];
      x.site = r->site();
      x.cols = r->cols();
      if (const auto* br = r->batch_rows())
        x.batch_rows.assign(br->begin(), br->end());
      else
        x.batch_rows.clear();
      x.rows.resize(r->rows()->size());
      if (!x.rows.empty())
        std::memcpy(static_cast<void*>(x.rows.data()), r->rows()->Data(), x.rows.size() * 16);
    }
  } else {
    out->rows.clear();
  }
  if (const auto* v = s->routing()) {
    out->routing.resize(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      const fb::Routing* r = v->Get(k);
      LLMRR_TAKE(8 + (r->chosen() ? 2 * uint64_t{r->chosen()->size()} : 0) +
                 (r->experts() ? 2 * uint64_t{r->experts()->size()} : 0) +
                 (r->gates() ? 4 * uint64_t{r->gates()->size()} : 0) +
                 (r->outcome() ? uint64_t{r->outcome()->size()} : 0));
      Routing& x = out->routing[k];
      x.layer = r->layer();
      x.rows = r->rows();
      x.k = r->k();
      x.experts_total = r->experts_total();
      x.capacity = r->capacity();
      x.chosen.clear();
      x.experts.clear();
      x.gates.clear();
      x.outcome.clear();
      if (r->chosen()) x.chosen.assign(r->chosen()->begin(), r->chosen()->end());
      if (r->experts()) x.experts.assign(r->experts()->begin(), r->experts()->end());
      if (r->gates()) x.gates.assign(r->gates()->begin(), r->gates()->end());
      if (r->outcome()) {
        x.outcome.resize(r->outcome()->size());
        if (!x.outcome.empty())
          std::memcpy(static_cast<void*>(x.outcome.data()), r->outcome()->Data(), x.outcome.size());
      }
    }
  } else {
    out->routing.clear();
  }
  if (const auto* v = s->logits()) {
    out->logits.resize(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      const fb::Logits* l = v->Get(k);
      LLMRR_TAKE(8 + (l->top_ids() ? 4 * uint64_t{l->top_ids()->size()} : 0) +
                 (l->top_values() ? 4 * uint64_t{l->top_values()->size()} : 0));
      LogitsRecord& x = out->logits[k];
      x.request = l->request();
      x.position = l->position();
      x.batch_row = l->batch_row();
      x.vocab = l->vocab();
      x.top_ids.clear();
      x.top_values.clear();
      if (l->top_ids()) x.top_ids.assign(l->top_ids()->begin(), l->top_ids()->end());
      if (l->top_values()) x.top_values.assign(l->top_values()->begin(), l->top_values()->end());
      if (const fb::Fingerprint* f = l->full())
        x.full = Fingerprint{f->hash(), f->l2(), f->max_abs()};
      else
        x.full = Fingerprint{};
      x.margin = l->margin();
      x.blob = l->blob();
    }
  } else {
    out->logits.clear();
  }
  if (const auto* v = s->tokens()) {
    LLMRR_TAKE(24 * uint64_t{v->size()});
    out->tokens.resize(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      const fb::Token* t = v->Get(k);
      out->tokens[k] = TokenRecord{t->request(), t->position(), t->token(), t->uniform()};
    }
  } else {
    out->tokens.clear();
  }
  if (const auto* v = s->finishes()) {
    LLMRR_TAKE(16 * uint64_t{v->size()});
    out->finishes.resize(v->size());
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      const fb::Finish* f = v->Get(k);
      out->finishes[k] =
          FinishRecord{f->request(), static_cast<FinishReason>(f->reason()), f->generated()};
    }
  } else {
    out->finishes.clear();
  }
#undef LLMRR_TAKE
  return {};
}

}  // namespace llmrr::trace::detail
