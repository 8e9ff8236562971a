#include "llmrr/recorder/convert.h"

namespace llmrr {

trace::PlanRecord to_plan_record(const Plan& p) {
  trace::PlanRecord r;
  r.op = p.op;
  r.mode = p.mode;
  r.order = p.order;
  r.separate_new_kv = p.separate_new_kv;
  r.splits = p.splits;
  r.split_size = p.split_size;
  r.k_tile = p.k_tile;
  r.arrival = p.arrival;
  if (p.cublaslt) {
    const CublasLtAlgo& a = *p.cublaslt;
    r.cublaslt = trace::CublasLtAlgoRecord{a.algo_id,     a.tile,          a.stages,    a.splitk,
                                           a.reduction,   a.swizzle,       a.custom,    a.inner_shape,
                                           a.cluster_shape, a.workspace,   a.compute_type,
                                           a.scale_type,  a.a_type,        a.b_type,    a.c_type};
  }
  return r;
}

Plan to_plan(const trace::PlanRecord& r) {
  Plan p;
  p.op = r.op;
  p.mode = r.mode;
  p.order = r.order;
  p.separate_new_kv = r.separate_new_kv;
  p.splits = r.splits;
  p.split_size = r.split_size;
  p.k_tile = r.k_tile;
  p.arrival = r.arrival;
  if (r.cublaslt) {
    const trace::CublasLtAlgoRecord& a = *r.cublaslt;
    p.cublaslt = CublasLtAlgo{a.algo_id,       a.tile,      a.stages,       a.splitk,
                              a.reduction,     a.swizzle,   a.custom,       a.inner_shape,
                              a.cluster_shape, a.workspace, a.compute_type, a.scale_type,
                              a.a_type,        a.b_type,    a.c_type};
  }
  return p;
}

std::string plan_text(const trace::PlanRecord& r) {
  std::string s = plan_to_string(to_plan(r));
  return s.empty() ? "unknown op " + std::to_string(static_cast<int>(r.op)) : s;
}

trace::RequestRecord to_request_record(const RequestSpec& s) {
  trace::RequestRecord r;
  r.id = s.id;
  r.prompt = s.prompt;
  r.temperature = s.sampling.temperature;
  r.top_k = s.sampling.top_k;
  r.top_p = s.sampling.top_p;
  r.seed = s.sampling.seed;
  r.max_tokens = s.max_tokens;
  r.arrival_step = s.arrival_step;
  r.stop_at_eos = s.stop_at_eos;
  r.label = s.label;
  return r;
}

RequestSpec to_request_spec(const trace::RequestRecord& r) {
  RequestSpec s;
  s.id = r.id;
  s.prompt = r.prompt;
  s.sampling.temperature = r.temperature;
  s.sampling.top_k = r.top_k;
  s.sampling.top_p = r.top_p;
  s.sampling.seed = r.seed;
  s.max_tokens = r.max_tokens;
  s.arrival_step = r.arrival_step;
  s.stop_at_eos = r.stop_at_eos;
  s.label = r.label;
  return s;
}

trace::Segment to_trace_segment(const BatchSegment& g) {
  trace::Segment s;
  s.request = g.request;
  s.start = g.start;
  s.count = g.count;
  s.cached = g.cached;
  s.kind = g.kind;
  s.sample = g.sample;
  return s;
}

BatchSegment to_segment(const trace::Segment& g) {
  BatchSegment s;
  s.request = g.request;
  s.start = g.start;
  s.count = g.count;
  s.cached = g.cached;
  s.kind = g.kind;
  s.sample = g.sample;
  return s;
}

}  // namespace llmrr
