// llmrr dump TRACE [--steps A:B] [--json]: every record, as text or as JSON lines.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli.h"
#include "cli/trace_text.h"
#include "llmrr/recorder/convert.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/diff_kernels.h"
#include "llmrr/safeio/json.h"

namespace {

using namespace llmrr;
using namespace llmrr::trace;
using nlohmann::json;

json fp_json(const Fingerprint& f) {
  return json{{"hash", cli::hash_text(f.hash)}, {"l2", f.l2}, {"max_abs", f.max_abs}};
}

json plan_json(const PlanRecord& p) {
  json j{{"op", op_kind_name(p.op)},
         {"mode", p.mode == SplitMode::kSize ? "size" : "count"},
         {"order", p.order == CombineOrder::kArrival ? "arrival" : "fixed"},
         {"separate_new_kv", p.separate_new_kv},
         {"splits", p.splits},
         {"split_size", p.split_size},
         {"k_tile", p.k_tile},
         {"text", llmrr::plan_text(p)}};
  if (!p.arrival.empty()) j["arrival"] = p.arrival;
  if (p.cublaslt) {
    const CublasLtAlgoRecord& a = *p.cublaslt;
    j["cublaslt"] = {{"algo_id", a.algo_id},
                     {"tile", a.tile},
                     {"stages", a.stages},
                     {"splitk", a.splitk},
                     {"reduction", a.reduction},
                     {"swizzle", a.swizzle},
                     {"custom", a.custom},
                     {"inner_shape", a.inner_shape},
                     {"cluster_shape", a.cluster_shape},
                     {"workspace", a.workspace},
                     {"compute_type", a.compute_type},
                     {"scale_type", a.scale_type},
                     {"a_type", a.a_type},
                     {"b_type", a.b_type},
                     {"c_type", a.c_type}};
  }
  return j;
}

json step_json(const StepRecord& s) {
  json j{{"type", "step"}, {"step", s.step}, {"rows", s.row_count()}};
  json a = json::array();
  for (const RequestRecord& r : s.arrivals) {
    a.push_back({{"id", r.id},
                 {"prompt", r.prompt},
                 {"temperature", r.temperature},
                 {"top_k", r.top_k},
                 {"top_p", r.top_p},
                 {"seed", r.seed},
                 {"max_tokens", r.max_tokens},
                 {"arrival_step", r.arrival_step},
                 {"stop_at_eos", r.stop_at_eos},
                 {"label", r.label}});
    if (r.carried) {
      a.back()["carried"] = true;
      a.back()["history"] = r.history;
    }
  }
  j["arrivals"] = a;
  json g = json::array();
  for (const Segment& x : s.segments)
    g.push_back({{"request", x.request},
                 {"start", x.start},
                 {"count", x.count},
                 {"cached", x.cached},
                 {"kind", segment_kind_name(x.kind)},
                 {"sample", x.sample}});
  j["segments"] = g;
  json p = json::array();
  for (const SitePlan& sp : s.plans) {
    json e = plan_json(sp.plan);
    e["site"] = cli::site_text(sp.site);
    e["site_id"] = sp.site;
    p.push_back(e);
  }
  j["plans"] = p;
  json rows = json::array();
  for (const SiteRows& r : s.rows) {
    json f = json::array();
    for (const Fingerprint& x : r.rows) f.push_back(fp_json(x));
    rows.push_back({{"site", cli::site_text(r.site)},
                    {"site_id", r.site},
                    {"cols", r.cols},
                    {"batch_rows", r.batch_rows},
                    {"fingerprints", f}});
  }
  j["fingerprints"] = rows;
  json ro = json::array();
  for (const trace::Routing& r : s.routing) {
    json out = json::array();
    for (RouteOutcome o : r.outcome) out.push_back(route_outcome_name(o));
    ro.push_back({{"layer", r.layer},
                  {"rows", r.rows},
                  {"k", r.k},
                  {"experts_total", r.experts_total},
                  {"capacity", r.capacity},
                  {"chosen", r.chosen},
                  {"experts", r.experts},
                  {"gates", r.gates},
                  {"outcome", out}});
  }
  j["routing"] = ro;
  json lg = json::array();
  for (const LogitsRecord& l : s.logits)
    lg.push_back({{"request", l.request},
                  {"position", l.position},
                  {"batch_row", l.batch_row},
                  {"vocab", l.vocab},
                  {"top_ids", l.top_ids},
                  {"top_values", l.top_values},
                  {"full", fp_json(l.full)},
                  {"margin", l.margin},
                  {"blob", l.blob},
                  {"logsumexp", l.logsumexp ? json(*l.logsumexp) : json(nullptr)}});
  j["logits"] = lg;
  json t = json::array();
  for (const TokenRecord& x : s.tokens)
    t.push_back({{"request", x.request},
                 {"position", x.position},
                 {"token", x.token},
                 {"uniform", x.uniform}});
  j["tokens"] = t;
  json fi = json::array();
  for (const FinishRecord& x : s.finishes)
    fi.push_back({{"request", x.request},
                  {"reason", finish_reason_name(x.reason)},
                  {"generated", x.generated}});
  j["finishes"] = fi;
  if (!s.ops.empty()) {  // format 1.6; absent when the runtime records none
    json op = json::array();
    for (const trace::OpRecord& x : s.ops)
      op.push_back({{"name", x.name},
                    {"op", x.op},
                    {"layer", x.layer},
                    {"layers", x.layers},
                    {"graph", x.graph},
                    {"first_row", x.first_row},
                    {"rows", x.rows},
                    {"attrs", x.attrs}});
    j["ops"] = op;
  }
  return j;
}

template <typename T>
std::string list_text(const std::vector<T>& v, size_t max = 16) {
  std::string s = "[";
  for (size_t i = 0; i < v.size() && i < max; ++i) {
    if (i) s += ' ';
    s += std::to_string(v[i]);
  }
  if (v.size() > max) s += " ... (" + std::to_string(v.size()) + ")";
  return s + "]";
}

std::string float_text(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", static_cast<double>(v));
  return b;
}

void print_step_text(const StepRecord& s) {
  std::printf("step %lld: %lld rows", static_cast<long long>(s.step),
              static_cast<long long>(s.row_count()));
  for (const Segment& g : s.segments)
    std::printf(" | req %llu %s %d..%d cached %d%s", static_cast<unsigned long long>(g.request),
                segment_kind_name(g.kind), g.start, g.start + g.count - 1, g.cached,
                g.sample ? " sample" : "");
  std::printf("\n");
  for (const RequestRecord& r : s.arrivals)
    std::printf(
        "  arrival  req %llu%s%s: prompt %zu tokens %s, temperature %s, top_k %d, top_p %s, seed "
        "%llu, "
        "max_tokens %d, arrival step %lld%s%s\n",
        static_cast<unsigned long long>(r.id), r.label.empty() ? "" : " ", r.label.c_str(),
        r.prompt.size(), list_text(r.prompt).c_str(), float_text(r.temperature).c_str(), r.top_k,
        float_text(r.top_p).c_str(), static_cast<unsigned long long>(r.seed), r.max_tokens,
        static_cast<long long>(r.arrival_step), r.stop_at_eos ? "" : ", no EOS stop",
        r.carried ? (", carried in with " + std::to_string(r.history.size()) +
                     " tokens generated before: " + list_text(r.history))
                        .c_str()
                  : "");
  // Plans in forward order (the reader returns them sorted by packed site id).
  std::vector<const SitePlan*> plans;
  for (const SitePlan& p : s.plans) plans.push_back(&p);
  std::stable_sort(plans.begin(), plans.end(), [](const SitePlan* a, const SitePlan* b) {
    return cli::site_order(a->site) < cli::site_order(b->site);
  });
  for (const SitePlan* p : plans)
    std::printf("  plan     %-20s %s\n", cli::site_text(p->site).c_str(),
                llmrr::plan_text(p->plan).c_str());
  for (const SiteRows& r : s.rows) {
    std::printf("  rows     %-20s %zu rows x %d\n", cli::site_text(r.site).c_str(), r.rows.size(),
                r.cols);
    for (size_t i = 0; i < r.rows.size(); ++i)
      std::printf("           row %-4d %s\n",
                  r.batch_rows.empty() ? static_cast<int>(i) : r.batch_rows[i],
                  cli::fingerprint_text(r.rows[i]).c_str());
  }
  for (const trace::Routing& r : s.routing) {
    std::printf("  routing  L%d: %d rows, top-%d of %d experts, capacity %d\n", r.layer, r.rows,
                r.k, r.experts_total, r.capacity);
    for (int64_t row = 0; row < r.rows; ++row) {
      std::printf("           row %-4lld", static_cast<long long>(row));
      for (int k = 0; k < r.k; ++k) {
        const size_t i = static_cast<size_t>(row * r.k + k);
        if (i >= r.chosen.size()) break;
        std::printf(" e%d", r.chosen[i]);
        if (r.outcome[i] == RouteOutcome::kRerouted) std::printf("->e%d", r.experts[i]);
        if (r.outcome[i] == RouteOutcome::kDropped) std::printf(" dropped");
        std::printf(" (%s)", float_text(r.gates[i]).c_str());
      }
      std::printf("\n");
    }
  }
  for (const LogitsRecord& l : s.logits) {
    std::printf("  logits   req %llu pos %d row %d: margin %s, full %s%s\n",
                static_cast<unsigned long long>(l.request), l.position, l.batch_row,
                float_text(l.margin).c_str(), cli::fingerprint_text(l.full).c_str(),
                l.blob >= 0 ? (", blob " + std::to_string(l.blob)).c_str() : "");
    std::printf("           top");
    for (size_t i = 0; i < l.top_ids.size(); ++i)
      std::printf(" %d:%s", l.top_ids[i], float_text(l.top_values[i]).c_str());
    std::printf("\n");
  }
  for (const TokenRecord& t : s.tokens) {
    std::printf("  token    req %llu pos %d: %d", static_cast<unsigned long long>(t.request),
                t.position, t.token);
    if (t.uniform >= 0) std::printf(" (draw %.17g)", t.uniform);
    std::printf("\n");
  }
  for (const FinishRecord& f : s.finishes)
    std::printf("  finish   req %llu: %s after %d tokens\n",
                static_cast<unsigned long long>(f.request), finish_reason_name(f.reason),
                f.generated);
  for (const trace::OpRecord& o : s.ops) {
    std::printf("  op       g%d rows %d+%d ", o.graph, o.first_row, o.rows);
    if (o.layer < 0) std::printf("-");
    else if (o.layers == 1) std::printf("L%d", o.layer);
    else std::printf("L%d-%d", o.layer, o.layer + o.layers - 1);
    std::printf(" %s %s: %s\n", o.name.c_str(), o.op.c_str(), o.attrs.c_str());
  }
}

}  // namespace

int run_dump_command(int argc, char** argv) {
  CLI::App app{
      "Print the records of a trace: the run header, then every step (batch, plans,\n"
      "fingerprints, routing, logits, tokens, arrivals, finishes), as text or JSON lines.",
      "dump"};
  std::string path, range;
  bool as_json = false;
  app.add_option("TRACE", path, "trace file (.trace)")->required();
  app.add_option("--steps", range, "only steps A..B (inclusive): A:B, A:, :B or A");
  app.add_flag("--json", as_json,
               "one JSON object per line: a header line, step lines, a summary line");
  app.footer(
      "Examples:\n"
      "  llmrr dump run.trace --steps 10:12\n"
      "  llmrr dump run.trace --json | jq -c 'select(.type == \"step\") | .tokens'\n"
      "\n"
      "Exit codes: 0 ok, 2 bad input (unreadable or damaged trace, bad --steps), 3 internal "
      "error.");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  int64_t first = std::numeric_limits<int64_t>::min(), last = std::numeric_limits<int64_t>::max();
  if (!range.empty() && !cli::parse_range(range, &first, &last))
    return cli::report(
        "dump",
        make_error(ErrorCode::kInvalidArgument,
                   "--steps: expected A:B, A:, :B or A with A <= B, found \"" + range + "\""));
  auto r = TraceReader::open(path);
  if (!r.ok()) return cli::report("dump", r.status());
  TraceReader& rd = **r;
  for (const std::string& w : rd.warnings()) cli::warn("dump", w);
  const RunHeader& h = rd.run_header();
  // A range that names no step of the trace is a mistake, not an empty answer. (Kernel
  // records, from llmrr record-cuda, carry steps of their own: those traces are not checked.)
  const bool kernel_records =
      std::any_of(rd.frames().begin(), rd.frames().end(),
                  [](const auto& f) { return f.kind == FrameKind::kKernelRecords; });
  if (!range.empty() && !kernel_records &&
      (last < rd.first_step() || first > rd.last_step() || rd.step_count() == 0)) {
    return cli::report(
        "dump", make_error(ErrorCode::kInvalidArgument,
                           "--steps " + range + ": no step of " + path + " is in that range (" +
                               (rd.step_count() == 0
                                    ? std::string("it holds no step")
                                    : "it holds steps " + std::to_string(rd.first_step()) + " to " +
                                          std::to_string(rd.last_step())) +
                               ")"));
  }
  if (as_json) {
    json j{{"type", "header"},
           {"format", std::to_string(rd.format_major()) + "." + std::to_string(rd.format_minor())},
           {"tool_version", h.tool_version},
           {"run_id", h.run_id},
           {"model", h.model.name},
           {"weight_hash", h.model.weight_hash},
           {"policy", h.engine.policy},
           {"complete", rd.complete()},
           {"lossy", rd.lossy()}};
    std::printf("%s\n", safeio::dump(j).c_str());
  } else {
    std::printf("trace %s: format %u.%u, llmrr %s, model %s, policy %s, %s%s\n", path.c_str(),
                rd.format_major(), rd.format_minor(), h.tool_version.c_str(),
                h.model.name.empty() ? "none" : h.model.name.c_str(),
                h.engine.policy.empty() ? "-" : h.engine.policy.c_str(),
                rd.complete() ? "complete" : "incomplete", rd.lossy() ? ", lossy" : "");
  }
  StepCursor c = rd.steps(first, last);
  StepRecord s;
  int64_t n = 0;
  for (;;) {
    auto more = c.next(&s);
    if (!more.ok()) {
      std::fflush(stdout);
      return cli::report("dump", more.status());
    }
    if (!*more) break;
    ++n;
    if (as_json)
      std::printf("%s\n",
                  step_json(s).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    else
      print_step_text(s);
  }
  // Blobs in range (by step, or all when no range was given).
  for (int64_t b = 0; b < rd.blob_count(); ++b) {
    auto info = rd.blob_info(b);
    if (!info.ok()) return cli::report("dump", info.status());
    if (!range.empty() && (info->step < first || info->step > last)) continue;
    if (as_json) {
      json j{{"type", "blob"},
             {"id", info->id},
             {"dtype", dtype_name(info->dtype)},
             {"shape", info->shape},
             {"bytes", info->nbytes},
             {"name", info->name},
             {"step", info->step},
             {"site", cli::site_text(info->site)},
             {"request", info->request},
             {"shuffled", info->shuffled},
             {"xor_coded", info->xor_coded}};
      if (info->xor_coded) {
        j["reference_trace"] = info->reference_trace;
        j["reference_blob"] = info->reference_blob;
      }
      std::printf("%s\n", safeio::dump(j).c_str());
    } else {
      std::printf(
          "blob %lld: %s %s, %s, step %lld, request %llu%s\n", static_cast<long long>(info->id),
          dtype_name(info->dtype), list_text(info->shape).c_str(), info->name.c_str(),
          static_cast<long long>(info->step), static_cast<unsigned long long>(info->request),
          info->xor_coded ? (", XOR against blob " + std::to_string(info->reference_blob) +
                             " of run " + info->reference_trace)
                                .c_str()
                          : "");
    }
  }
  // Kernel records (CUPTI activity), in file order; with --steps only those of the steps.
  std::vector<KernelRecord> recs;
  int64_t kernels_printed = 0;
  for (size_t f = 0; f < rd.frames().size(); ++f) {
    if (rd.frames()[f].kind != FrameKind::kKernelRecords) continue;
    if (Status st = rd.read_kernels(static_cast<int64_t>(f), &recs); !st.ok())
      return cli::report("dump", st);
    for (const KernelRecord& k : recs) {
      if (!range.empty() && (k.step < first || k.step > last)) continue;
      ++kernels_printed;
      if (as_json) {
        json j{{"type", "kernel"},
               {"kind", activity_kind_name(k.kind)},
               {"step", k.step},
               {"name", k.name},
               {"correlation", k.correlation},
               {"stream", k.stream},
               {"device", k.device},
               {"start_ns", k.start_ns},
               {"end_ns", k.end_ns}};
        if (k.kind == ActivityKind::kKernel) {
          j["grid"] = k.grid;
          j["block"] = k.block;
          j["static_shared"] = k.static_shared;
          j["dynamic_shared"] = k.dynamic_shared;
        } else if (k.kind == ActivityKind::kMemcpy) {
          j["copy_kind"] = memcpy_kind_name(k.copy_kind);
          j["bytes"] = k.bytes;
        }
        std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
      } else {
        std::printf("kernel step %lld corr %llu stream %llu: %s, %lld ns\n",
                    static_cast<long long>(k.step), static_cast<unsigned long long>(k.correlation),
                    static_cast<unsigned long long>(k.stream),
                    replay::launch_text(k, std::string::npos).c_str(),
                    static_cast<long long>(k.end_ns - k.start_ns));
      }
    }
  }
  if (as_json) {
    json j{{"type", "summary"},          {"kernels_printed", kernels_printed},
           {"steps_printed", n},         {"steps", rd.step_count()},
           {"tokens", rd.token_count()}, {"blobs", rd.blob_count()}};
    std::printf("%s\n", safeio::dump(j).c_str());
  }
  return 0;
}
