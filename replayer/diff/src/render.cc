// The diff report as a story (format_diff_story) and as JSON (diff_report_json).
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "internal.h"

namespace llmrr::replay {
namespace diff_internal {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string g6(double v) {
  return fmt("%.6g", v);
}
std::string g3(double v) {
  return fmt("%.3g", v);
}

}  // namespace diff_internal

using namespace diff_internal;

namespace {

std::string ints_str(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string outcomes_str(const std::vector<trace::RouteOutcome>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::string(route_outcome_name(v[i]));
  return s;
}

std::string rows_str(int64_t n) {
  return std::to_string(n) + (n == 1 ? " row" : " rows");
}

std::string batch_str(const BatchSide& b) {
  std::string s = "batch of " + rows_str(b.rows);
  if (b.requests > 1) {
    s += ", " + std::to_string(b.requests) + " requests";
  }
  return s;
}

// Distance from the fingerprint summaries (the rows themselves are not in the trace).
std::string fp_dist(const trace::Fingerprint& a, const trace::Fingerprint& b) {
  auto pair = [](const char* what, float x, float y) {
    if (std::memcmp(&x, &y, sizeof x) == 0)
      return std::string(what) + " " + fmt("%.8g", x) + " in both";
    return std::string(what) + " " + fmt("%.8g", x) + " vs " + fmt("%.8g", y) + " (diff " +
           g3(std::fabs(static_cast<double>(x) - static_cast<double>(y))) + ")";
  };
  if (std::memcmp(&a.l2, &b.l2, 4) == 0 && std::memcmp(&a.max_abs, &b.max_abs, 4) == 0) {
    return "the rows differ in low bits only: l2 " + fmt("%.8g", a.l2) + " and max |x| " +
           fmt("%.8g", a.max_abs) + " in both";
  }
  return pair("l2", a.l2, b.l2) + ", " + pair("max |x|", a.max_abs, b.max_abs);
}

std::string step_pair(int64_t a, int64_t b) {
  return a == b ? "step " + std::to_string(a)
                : "step " + std::to_string(a) + " in A (step " + std::to_string(b) + " in B)";
}

std::string position_kind(const RequestDiff& d, int32_t p) {
  if (p < d.prompt_len) return "prompt position " + std::to_string(p);
  return "position " + std::to_string(p) + " (token " + std::to_string(p - d.prompt_len) + ")";
}

// The plan difference the story names: the first differing site's own, else the first
// (forward order) whose output was not seen to be equal.
const PlanDifference* main_plan(const RequestDiff& d) {
  for (const PlanDifference& p : d.plans) {
    if (p.is_first_site) return &p;
  }
  for (const PlanDifference& p : d.plans) {
    if (!p.output_checked_equal) return &p;
  }
  return nullptr;
}

// "kq (MUL_MAT, layer 0): src1 f32:64x1 vs f32:64x19, dst f32:256x1 vs f32:256x19"
std::string op_str(const OpDifference& o) {
  std::string s = o.name + " (" + (o.op.empty() ? std::string() : o.op + ", ") +
                  (o.layer >= 0 ? "layer " + std::to_string(o.layer) : std::string("no layer")) +
                  "): ";
  for (size_t i = 0; i < o.changes.size(); ++i) s += (i ? ", " : "") + o.changes[i];
  return s;
}

std::string explain_cause(const RequestDiff& d) {
  std::string s;
  const PlanDifference* main = main_plan(d);
  const std::string ba = batch_str(d.batch_a), bb = batch_str(d.batch_b);
  if (d.cause == "routing" && d.routing) {
    const RoutingDifference& r = *d.routing;
    s += "routing: at layer " + std::to_string(r.layer) + " this token went to experts " +
         ints_str(r.experts_a) + " (" + outcomes_str(r.outcome_a) + ") in A and " +
         ints_str(r.experts_b) + " (" + outcomes_str(r.outcome_b) + ") in B";
    if (r.chosen_a != r.chosen_b) {
      s += "; the router's own top-k differs too (" + ints_str(r.chosen_a) + " vs " +
           ints_str(r.chosen_b) + "), so the router's input changed first";
    } else if (r.capacity_a > 0 || r.capacity_b > 0) {
      s += "; the router chose " + ints_str(r.chosen_a) +
           " in both runs: expert capacity decided (capacity " + std::to_string(r.capacity_a) +
           " vs " + std::to_string(r.capacity_b) + " per expert; at that layer A rerouted " +
           std::to_string(r.rerouted_a) + " and dropped " + std::to_string(r.dropped_a) + " of " +
           std::to_string(r.rows_a * static_cast<int64_t>(r.experts_a.size())) +
           " slots, B rerouted " + std::to_string(r.rerouted_b) + " and dropped " +
           std::to_string(r.dropped_b) + " of " +
           std::to_string(r.rows_b * static_cast<int64_t>(r.experts_b.size())) + ")";
    } else {
      s += "; the router chose " + ints_str(r.chosen_a) + " in both runs";
    }
    s += d.batch_differs ? " [A " + ba + ", B " + bb + "]" : " [same batch]";
    return s;
  }
  if ((d.cause == "plan" || d.cause == "arrival-order") && main) {
    if (main->arrival_only) {
      s += "the arrival-order reduction at " + main->site_name + ": A " + main->a_text + ", B " +
           main->b_text + " (production --atomics: partials combined in the order they " +
           "arrived" + (d.batch_differs ? "" : "; same batch, same plan otherwise") + ")";
      return s;
    }
    s += (main->is_first_site ? "" : main->site_name + ": ") + std::string("A ran ") +
         main->a_text + " (" + ba + "), B " + main->b_text + " (" + bb + ")";
    return s;
  }
  if (d.cause == "op") {
    s = "what the ops ran with: ";
    int shown = 0;
    for (const OpDifference& o : d.ops) {
      if (shown == 3) {
        s += "; and " + std::to_string(d.ops.size() - 3) + " more";
        break;
      }
      s += (shown++ ? "; " : "") + op_str(o);
    }
    return s + " [A " + ba + ", B " + bb + "]";
  }
  if (d.cause == "batch") {
    return "batch composition only: A " + ba + ", B " + bb +
           "; no recorded plan or routing of the ops feeding it differs";
  }
  if (d.cause == "weights") return "the runs used different weights";
  if (d.cause == "config") return "the runs used different engine configs (dtype / routing)";
  return "no recorded factor differs at this step (same batch shape, plans and routing)";
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kIdentical:
      return "identical";
    case Verdict::kNumerical:
      return "numerical split";
    case Verdict::kVisible:
      return "visible split";
  }
  return "?";
}

std::string format_diff_story(const DiffReport& r, int max_explained) {
  std::string out;
  auto head = [&](const char* name, const std::string& path, const trace::RunHeader& h,
                  int64_t steps, int64_t requests, bool complete) {
    out += std::string(name) + ": " + path + " — " + h.model.name + ", " + h.engine.policy +
           (h.engine.atomics && h.engine.policy.find("atomics") == std::string::npos ? "+atomics"
                                                                                     : "") +
           ", " + std::to_string(requests) + (requests == 1 ? " request, " : " requests, ") +
           std::to_string(steps) + " steps" + (complete ? "" : " (truncated)") + "\n";
  };
  head("A", r.a_path, r.a_header, r.a_steps, r.a_requests, r.a_complete);
  head("B", r.b_path, r.b_header, r.b_steps, r.b_requests, r.b_complete);
  if (!r.header_differences.empty()) {
    out += "run settings that differ: ";
    for (size_t i = 0; i < r.header_differences.size(); ++i) {
      out += (i ? "; " : "") + r.header_differences[i];
    }
    out += "\n";
  }
  for (const std::string& n : r.notes) out += "note: " + n + "\n";
  out += std::to_string(r.requests.size()) + (r.requests.size() == 1 ? " request" : " requests") +
         " in common (aligned by " + r.alignment + ")";
  if (!r.only_a.empty()) out += "; " + std::to_string(r.only_a.size()) + " only in A";
  if (!r.only_b.empty()) out += "; " + std::to_string(r.only_b.size()) + " only in B";
  out += ".\n";
  if (r.requests.empty()) {
    out += "nothing to compare: no request of A matches one of B\n";
    return out;
  }

  int explained = 0;
  int identical = 0;
  for (const RequestDiff& d : r.requests) {
    std::string who = "request " + std::to_string(d.a) +
                      (d.a != d.b ? " (B: " + std::to_string(d.b) + ")" : "") +
                      (d.label.empty() ? "" : " \"" + d.label + "\"");
    if (d.verdict == Verdict::kIdentical) {
      ++identical;
      if (r.requests.size() <= 8 || !d.notes.empty()) {
        out += "\n" + who + ": identical (" + std::to_string(d.compared_logits) +
               " sampled positions, logits bit-identical; " + std::to_string(d.generated_a) +
               " vs " + std::to_string(d.generated_b) + " tokens generated).\n";
        for (const std::string& n : d.notes) out += "  note: " + n + "\n";
      }
      continue;
    }
    out += "\n" + who + ": ";
    if (d.verdict == Verdict::kVisible) {
      if (d.visible_position < d.prompt_len) {
        out += "split in the prompt (position " + std::to_string(d.visible_position) + ")";
      } else {
        out += "split at token " + std::to_string(d.visible_position - d.prompt_len) +
               " (position " + std::to_string(d.visible_position) + ")";
      }
      if (d.split_position >= 0 && d.split_position < d.visible_position - 1) {
        out += "; logits first differ at " + position_kind(d, d.split_position);
      }
      out += ".\n";
    } else {
      out += "numerical split only: logits first differ at " + position_kind(d, d.split_position) +
             ", every token is the same.\n";
    }
    if (explained >= max_explained) {
      out += "  (details omitted; see --json or --request)\n";
      continue;
    }
    ++explained;
    if (!d.cause.empty()) {
      std::string where;
      if (d.root_found) {
        where = "First difference at " + step_pair(d.batch_a.step, d.batch_b.step) + ", " +
                position_kind(d, d.root_position) + ", " + d.first_site + ": ";
      } else {
        where = "At " + step_pair(d.batch_a.step, d.batch_b.step) + " (the first differing " +
                "logits): ";
      }
      out += "  " + where + explain_cause(d) + ".\n";
      if (d.root_found) {
        out += "  There: " + fp_dist(d.site_a, d.site_b) + ".\n";
      }
      if (!d.capture_note.empty()) out += "  (" + d.capture_note + ")\n";
      // Other plans of that layer that differ.
      std::string others;
      int shown = 0, more = 0;
      for (const PlanDifference& p : d.plans) {
        if (&p == main_plan(d) && d.cause != "routing") continue;
        if (shown >= 3) {
          ++more;
          continue;
        }
        ++shown;
        others += (others.empty() ? "" : "; ") + p.site_name + " " + p.a_text + " vs " + p.b_text +
                  (p.output_checked_equal ? " (same bits)" : "");
      }
      if (more > 0) others += "; and " + std::to_string(more) + " more";
      if (!others.empty()) out += "  Other plans that differ there: " + others + ".\n";
      if (d.cause != "op" && !d.ops.empty()) {
        std::string ops;
        for (size_t i = 0; i < d.ops.size() && i < 3; ++i) ops += (i ? "; " : "") + op_str(d.ops[i]);
        if (d.ops.size() > 3) ops += "; and " + std::to_string(d.ops.size() - 3) + " more";
        out += "  Ops that ran otherwise there: " + ops + ".\n";
      }
      if (d.cause != "routing" && d.routing && d.routing->row_differs) {
        out += "  Routing of this token differs too at layer " + std::to_string(d.routing->layer) +
               ": " + ints_str(d.routing->experts_a) + " vs " + ints_str(d.routing->experts_b) +
               ".\n";
      }
    }
    if (d.split_position >= 0) {
      out += "  Logits first differ at " + position_kind(d, d.split_position) + ", " +
             step_pair(d.split_step_a, d.split_step_b) + ": " + fp_dist(d.logits_a, d.logits_b);
      if (d.logits_top_common > 0) {
        out += ", top-K values differ by up to " + g3(d.logits_top_max_delta);
      }
      out += ".\n";
    }
    if (d.verdict == Verdict::kVisible && d.visible_position >= d.prompt_len) {
      out += "  Token " + std::to_string(d.visible_position - d.prompt_len) + ": A " +
             d.token_a_text + " (margin " + g3(d.margin_a) + ") vs B " + d.token_b_text +
             " (margin " + g3(d.margin_b) + ").\n";
      out += "    A top-1 " + d.top1_a_text + " " + g6(d.top1_value_a) + ", top-2 " +
             d.top2_a_text + " " + g6(d.top2_value_a) + " | B top-1 " + d.top1_b_text + " " +
             g6(d.top1_value_b) + ", top-2 " + d.top2_b_text + " " + g6(d.top2_value_b) + "\n";
      out += "    context: ..." + d.context_text + "\n";
      out += "    A:       " + d.text_a + "\n";
      out += "    B:       " + d.text_b + "\n";
    }
    for (const std::string& n : d.notes) out += "  note: " + n + "\n";
  }
  if (identical > 0 && r.requests.size() > 8) {
    out += "\n" + std::to_string(identical) + " of " + std::to_string(r.requests.size()) +
           " common requests are identical.\n";
  }
  out += "\n";
  out += r.identical() ? "no split: every common request is bit-identical\n" : "runs differ\n";
  return out;
}

nlohmann::json diff_internal::diff_report_object(const DiffReport& r) {
  using nlohmann::json;
  auto fp = [](const trace::Fingerprint& f) {
    char b[24];
    std::snprintf(b, sizeof b, "%016" PRIx64, f.hash);
    return json{{"hash", b}, {"l2", f.l2}, {"max_abs", f.max_abs}};
  };
  auto batch = [](const BatchSide& b) {
    json segs = json::array();
    for (const trace::Segment& g : b.segments) {
      segs.push_back({{"request", g.request},
                      {"start", g.start},
                      {"count", g.count},
                      {"kind", trace::segment_kind_name(g.kind)}});
    }
    return json{{"step", b.step},
                {"rows", b.rows},
                {"requests", b.requests},
                {"prefill_segments", b.prefill_segments},
                {"decode_segments", b.decode_segments},
                {"batch_row", b.batch_row},
                {"segments", segs}};
  };
  json j;
  j["a"] = {{"path", r.a_path},
            {"model", r.a_header.model.name},
            {"policy", r.a_header.engine.policy},
            {"steps", r.a_steps},
            {"requests", r.a_requests},
            {"complete", r.a_complete},
            {"last_step", r.a_last_step}};
  j["b"] = {{"path", r.b_path},
            {"model", r.b_header.model.name},
            {"policy", r.b_header.engine.policy},
            {"steps", r.b_steps},
            {"requests", r.b_requests},
            {"complete", r.b_complete},
            {"last_step", r.b_last_step}};
  j["identical"] = r.identical();
  j["alignment"] = r.alignment;
  j["header_differences"] = r.header_differences;
  j["notes"] = r.notes;
  j["only_a"] = r.only_a;
  j["only_b"] = r.only_b;
  j["text_decoded"] = r.text_decoded;
  json reqs = json::array();
  for (const RequestDiff& d : r.requests) {
    json q;
    q["a"] = d.a;
    q["b"] = d.b;
    q["label"] = d.label;
    q["prompt_len"] = d.prompt_len;
    q["generated_a"] = d.generated_a;
    q["generated_b"] = d.generated_b;
    q["verdict"] = verdict_name(d.verdict);
    q["compared_logits"] = d.compared_logits;
    q["notes"] = d.notes;
    if (d.split_position >= 0) {
      q["numerical_split"] = {
          {"position", d.split_position},       {"step_a", d.split_step_a},
          {"step_b", d.split_step_b},           {"logits_a", fp(d.logits_a)},
          {"logits_b", fp(d.logits_b)},         {"top_k_max_delta", d.logits_top_max_delta},
          {"top_k_common", d.logits_top_common}};
    } else {
      q["numerical_split"] = nullptr;
    }
    if (!d.cause.empty()) {
      json first;
      first["position"] = d.root_position;
      first["site"] = d.first_site.empty() ? json(nullptr) : json(d.first_site);
      first["step_a"] = d.batch_a.step;
      first["step_b"] = d.batch_b.step;
      if (d.root_found) {
        first["fingerprint_a"] = fp(d.site_a);
        first["fingerprint_b"] = fp(d.site_b);
        first["common_sites"] = d.common_sites;
      }
      first["capture_note"] = d.capture_note;
      first["cause"] = d.cause;
      first["cause_text"] = explain_cause(d);
      first["batch_a"] = batch(d.batch_a);
      first["batch_b"] = batch(d.batch_b);
      first["batch_differs"] = d.batch_differs;
      json plans = json::array();
      for (const PlanDifference& p : d.plans) {
        plans.push_back({{"site", p.site_name},
                         {"a", p.in_a ? json(p.a_text) : json(nullptr)},
                         {"b", p.in_b ? json(p.b_text) : json(nullptr)},
                         {"arrival_only", p.arrival_only},
                         {"is_first_site", p.is_first_site},
                         {"output_checked_equal", p.output_checked_equal}});
      }
      first["plans"] = plans;
      json ops = json::array();
      for (const OpDifference& o : d.ops) {
        ops.push_back({{"name", o.name},
                       {"op", o.op},
                       {"layer", o.layer >= 0 ? json(o.layer) : json(nullptr)},
                       {"a", o.in_a ? json(o.attrs_a) : json(nullptr)},
                       {"b", o.in_b ? json(o.attrs_b) : json(nullptr)},
                       {"changes", o.changes}});
      }
      first["ops"] = ops;
      if (d.routing) {
        const RoutingDifference& x = *d.routing;
        auto oc = [](const std::vector<trace::RouteOutcome>& v) {
          std::vector<std::string> s;
          for (trace::RouteOutcome o : v) s.push_back(trace::route_outcome_name(o));
          return s;
        };
        first["routing"] = {{"layer", x.layer},
                            {"chosen_a", x.chosen_a},
                            {"chosen_b", x.chosen_b},
                            {"experts_a", x.experts_a},
                            {"experts_b", x.experts_b},
                            {"outcome_a", oc(x.outcome_a)},
                            {"outcome_b", oc(x.outcome_b)},
                            {"capacity_a", x.capacity_a},
                            {"capacity_b", x.capacity_b},
                            {"rerouted_a", x.rerouted_a},
                            {"dropped_a", x.dropped_a},
                            {"rerouted_b", x.rerouted_b},
                            {"dropped_b", x.dropped_b},
                            {"row_differs", x.row_differs}};
      } else {
        first["routing"] = nullptr;
      }
      q["first_difference"] = first;
    } else {
      q["first_difference"] = nullptr;
    }
    if (d.visible_position >= 0) {
      q["visible_split"] = {{"position", d.visible_position},
                            {"token_index", d.visible_position - d.prompt_len},
                            {"top1_a", d.top1_a},
                            {"top2_a", d.top2_a},
                            {"top1_value_a", d.top1_value_a},
                            {"top2_value_a", d.top2_value_a},
                            {"margin_a", d.margin_a},
                            {"top1_b", d.top1_b},
                            {"top2_b", d.top2_b},
                            {"top1_value_b", d.top1_value_b},
                            {"top2_value_b", d.top2_value_b},
                            {"margin_b", d.margin_b},
                            {"context", d.context},
                            {"continuation_a", d.continuation_a},
                            {"continuation_b", d.continuation_b},
                            {"context_text", d.context_text},
                            {"text_a", d.text_a},
                            {"text_b", d.text_b}};
    } else {
      q["visible_split"] = nullptr;
    }
    reqs.push_back(q);
  }
  j["requests"] = reqs;
  return j;
}

std::string diff_report_json(const DiffReport& r) {
  return diff_report_object(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string render_diff(const DiffReport& r, bool json, int max_explained) {
  if (!r.engine) {
    return json ? kernel_diff_json(*r.kernels) + "\n" : format_kernel_diff(*r.kernels);
  }
  if (!json) {
    std::string out = format_diff_story(r, max_explained);
    if (r.kernels) out += "\n" + format_kernel_diff(*r.kernels);
    return out;
  }
  // An ordered object keeps the engine report's (sorted) members first and "kernels" last.
  nlohmann::ordered_json j(diff_report_object(r));
  if (r.kernels) j["kernels"] = nlohmann::ordered_json(kernel_diff_object(*r.kernels));
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace llmrr::replay
