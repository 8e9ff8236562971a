// Decoding: FlatBuffers tables of a trace back into the plain records (convert.h);
// convert.cc holds the encoding side.
#include "convert.h"

#include <cstring>

namespace llmrr::trace::detail {

namespace fbs = flatbuffers;

namespace {

std::string str(const fbs::String* s) {
  return s ? s->str() : std::string();
}

}  // namespace

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
    e.fingerprint = str(x->fingerprint());
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
      s.carried = r->carried();
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
      LLMRR_TAKE(16 + 4 * uint64_t{r->prompt()->size()} + (r->label() ? r->label()->size() : 0) +
                 (r->history() ? 4 * uint64_t{r->history()->size()} : 0));
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
      x.carried = r->carried();
      if (const auto* h = r->history()) x.history.assign(h->begin(), h->end());
      else x.history.clear();
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
      x.logsumexp.reset();
      if (const auto lse = l->logsumexp(); lse.has_value()) x.logsumexp = *lse;
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
  if (const auto* v = s->ops()) {
    out->ops.resize(v->size());
    auto str = [](const flatbuffers::String* x) {
      return x != nullptr ? std::string(x->data(), x->size()) : std::string();
    };
    for (flatbuffers::uoffset_t k = 0; k < v->size(); ++k) {
      const fb::OpRecord* o = v->Get(k);
      LLMRR_TAKE(8 + (o->name() ? uint64_t{o->name()->size()} : 0) +
                 (o->op() ? uint64_t{o->op()->size()} : 0) +
                 (o->attrs() ? uint64_t{o->attrs()->size()} : 0));
      OpRecord& x = out->ops[k];
      x.layer = o->layer();
      x.layers = o->layers();
      x.first_row = o->first_row();
      x.rows = o->rows();
      x.graph = o->graph();
      x.name = str(o->name());
      x.op = str(o->op());
      x.attrs = str(o->attrs());
    }
  } else {
    out->ops.clear();
  }
#undef LLMRR_TAKE
  return {};
}

}  // namespace llmrr::trace::detail
