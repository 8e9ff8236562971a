// The replay report as text (format_replay_report) and as JSON (replay_report_json); the
// replay itself is in replay.cc.
#include <nlohmann/json.hpp>
#include <string>

#include "internal.h"
#include "llmrr/replayer/replay.h"

namespace llmrr::replay {

using replay_internal::ints_text;

std::string format_replay_report(const ReplayReport& r) {
  std::string out;
  for (const std::string& n : r.notes) out += "note: " + n + "\n";
  std::string scope = r.request ? " of request " + std::to_string(*r.request) + " alone" : "";
  if (r.routing_mismatch) {
    const RoutingMismatch& m = *r.routing_mismatch;
    out += "routing differs at step " + std::to_string(m.step) + ", layer " +
           std::to_string(m.layer) + ": request " + std::to_string(m.request) + ", position " +
           std::to_string(m.position) + " (batch row " + std::to_string(m.batch_row) +
           "): recorded experts " + ints_text(m.expected.data(), m.expected.size()) +
           ", recomputed " + ints_text(m.found.data(), m.found.size()) + "\n";
    out += "replayed " + std::to_string(r.steps) + " steps" + scope +
           " with routing recomputed: the first token whose experts differ is above\n";
    return out;
  }
  if (r.unreproducible && !r.mismatch) {
    const Unreproducible& u = *r.unreproducible;
    out += "stopped at step " + std::to_string(u.step) + ", site " + u.site +
           ": a tensor-core GEMM (" + u.plan + ") that the CPU cannot reproduce\n";
    std::string list;
    for (size_t i = 0; i < u.sites.size() && i < 8; ++i) list += (i ? ", " : "") + u.sites[i];
    if (u.sites.size() > 8) list += ", ...";
    out += "  cuBLASLt sites of step " + std::to_string(u.step) + " (" +
           std::to_string(u.sites.size()) + "): " + list + "\n";
    out += "checked " + std::to_string(r.steps) + " whole steps" + scope + ", " +
           std::to_string(r.tokens) + " tokens, and step " + std::to_string(u.step) +
           " up to " + u.site + " (" + std::to_string(r.rows_checked) + " rows, " +
           std::to_string(r.plans_checked) +
           " plans in all): bit-exact; the rest needs --device cuda on the recording GPU "
           "model\n";
    return out;
  }
  if (r.mismatch) {
    const Mismatch& m = *r.mismatch;
    out += "mismatch at step " + std::to_string(m.step);
    if (m.position >= 0) {
      out += ", request " + std::to_string(m.request) + ", position " + std::to_string(m.position);
    } else if (m.request != 0 || m.site == "finish") {
      out += ", request " + std::to_string(m.request);
    }
    if (m.batch_row >= 0) out += " (batch row " + std::to_string(m.batch_row) + ")";
    out += ", site " + m.site + ": " + m.what + "\n";
    out += "  expected (trace):  " + m.expected + "\n";
    out += "  found (replay):    " + m.found + "\n";
    out += "replayed " + std::to_string(r.steps) + " steps" + scope + ", " +
           std::to_string(r.tokens) + " tokens before the mismatch: not bit-exact\n";
    return out;
  }
  out += "replayed " + std::to_string(r.steps) + " steps, " + std::to_string(r.tokens) + " tokens" +
         scope + ": bit-exact";
  if (r.check_routing) out += " (routing recomputed, every token's experts as recorded)";
  out += "\n";
  if (!r.trace_complete) {
    out += "(trace truncated: replayed up to its last whole step, step " +
           std::to_string(r.last_whole_step) + ")\n";
  }
  for (const std::string& f : r.written) out += "wrote " + f + "\n";
  return out;
}

std::string replay_report_json(const ReplayReport& r) {
  nlohmann::json j;
  j["trace"] = r.trace;
  j["model"] = r.model;
  j["bit_exact"] = r.bit_exact();
  j["steps"] = r.steps;
  j["tokens"] = r.tokens;
  j["rows_checked"] = r.rows_checked;
  j["logits_checked"] = r.logits_checked;
  j["plans_checked"] = r.plans_checked;
  j["routings_checked"] = r.routings_checked;
  j["logit_blobs_checked"] = r.logit_blobs_checked;
  j["trace_steps"] = r.trace_steps;
  j["trace_tokens"] = r.trace_tokens;
  j["trace_complete"] = r.trace_complete;
  j["last_whole_step"] = r.last_whole_step;
  j["request"] = r.request ? nlohmann::json(*r.request) : nlohmann::json(nullptr);
  j["check_routing"] = r.check_routing;
  j["notes"] = r.notes;
  j["written"] = r.written;
  if (r.mismatch) {
    const Mismatch& m = *r.mismatch;
    j["mismatch"] = {{"step", m.step},           {"request", m.request}, {"position", m.position},
                     {"batch_row", m.batch_row}, {"site", m.site},       {"what", m.what},
                     {"expected", m.expected},   {"found", m.found}};
  } else {
    j["mismatch"] = nullptr;
  }
  if (r.unreproducible) {
    const Unreproducible& u = *r.unreproducible;
    j["unreproducible"] = {
        {"step", u.step}, {"site", u.site}, {"plan", u.plan}, {"sites", u.sites}};
  } else {
    j["unreproducible"] = nullptr;
  }
  if (r.routing_mismatch) {
    const RoutingMismatch& m = *r.routing_mismatch;
    j["routing_mismatch"] = {{"step", m.step},           {"layer", m.layer},
                             {"request", m.request},     {"position", m.position},
                             {"batch_row", m.batch_row}, {"expected", m.expected},
                             {"found", m.found}};
  } else {
    j["routing_mismatch"] = nullptr;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace llmrr::replay
