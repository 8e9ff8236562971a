// The bisect report as text (the story) and as JSON.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "llmrr/replayer/bisect.h"

namespace llmrr::replay {
namespace {

std::string plural(int64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string position_text(const BisectReport& r, int32_t p) {
  if (p < r.prompt_len) return "prompt position " + std::to_string(p);
  return "position " + std::to_string(p) + " (token " + std::to_string(p - r.prompt_len) + ")";
}

std::string count_by_kind(const BisectReport& r, int32_t universe) {
  int plans = 0, routing = 0, schedule = 0;
  for (int32_t i = 0; i < universe && i < static_cast<int32_t>(r.factors.size()); ++i) {
    switch (r.factors[static_cast<size_t>(i)].kind) {
      case FactorKind::kPlan:
        ++plans;
        break;
      case FactorKind::kRouting:
        ++routing;
        break;
      case FactorKind::kSchedule:
        ++schedule;
        break;
    }
  }
  return std::to_string(plans) + " plans, " + std::to_string(routing) + " routing, " +
         std::to_string(schedule) + " schedule";
}

void search_story(const BisectReport& r, const char* what, const SearchResult& s,
                  std::string* out) {
  *out += std::string(what) + " split" + (s.target.empty() ? "" : " (" + s.target + ")") + ": ";
  if (!s.ran) {
    *out += s.conclusion + ".\n";
    return;
  }
  *out += s.conclusion + ".\n";
  *out +=
      "  " + std::to_string(s.minimal.size()) + " of " + plural(s.universe, "factor") + " (" +
      count_by_kind(r, s.universe) + "), " + plural(s.replays, "replay") +
      (s.seeded ? " (searched within the numerical split's set, which reproduces it too)" : "") +
      ".\n";
}

nlohmann::json factor_json(const Factor& f) {
  nlohmann::json j = {{"kind", factor_kind_name(f.kind)},
                      {"step_a", f.step_a},
                      {"step_b", f.step_b},
                      {"last_step_a", f.last_step_a},
                      {"last_step_b", f.last_step_b},
                      {"positions", {f.first_position, f.last_position}},
                      {"site", f.site_name},
                      {"a", f.a_text},
                      {"b", f.b_text},
                      {"text", f.text}};
  if (f.kind == FactorKind::kPlan || f.kind == FactorKind::kRouting) j["layer"] = f.layer;
  return j;
}

nlohmann::json search_json(const BisectReport& r, const SearchResult& s) {
  nlohmann::json j = {{"ran", s.ran},
                      {"target", s.target},
                      {"position", s.position},
                      {"universe", s.universe},
                      {"seeded", s.seeded},
                      {"exhausted", s.exhausted},
                      {"skipped", s.skipped},
                      {"replays", s.replays},
                      {"conclusion", s.conclusion}};
  nlohmann::json m = nlohmann::json::array();
  for (int32_t i : s.minimal) {
    nlohmann::json f = factor_json(r.factors[static_cast<size_t>(i)]);
    f["index"] = i;
    m.push_back(std::move(f));
  }
  j["minimal"] = std::move(m);
  return j;
}

}  // namespace

std::string format_bisect_report(const BisectReport& r) {
  std::string out;
  for (const std::string& n : r.notes) out += "note: " + n + "\n";
  std::string who =
      "request " + std::to_string(r.request_a) +
      (r.request_a != r.request_b ? " (B: " + std::to_string(r.request_b) + ")" : "") +
      (r.label.empty() ? "" : " \"" + r.label + "\"");
  if (!r.split()) {
    out += who +
           ": no split: A and B agree (logits bit-identical, same tokens); nothing to "
           "bisect.\n";
    return out;
  }
  out += who + ": ";
  if (r.visible_position >= 0) {
    out += "visible split at " + position_text(r, r.visible_position);
    if (r.split_position >= 0)
      out += ", logits first differ at " + position_text(r, r.split_position);
  } else {
    out += "numerical split only, logits first differ at " + position_text(r, r.split_position);
  }
  out += ".\n";
  out += plural(static_cast<int64_t>(r.factors.size()), "factor") +
         (r.factors.size() == 1 ? " differs" : " differ") + " up to the split (" +
         count_by_kind(r, static_cast<int32_t>(r.factors.size())) + ", over " +
         plural(r.units, "step") + " of the request); routing " + r.routing_mode + " (" +
         r.routing_reason + ").\n";
  if (r.split_position >= 0) search_story(r, "numerical", r.numerical, &out);
  if (r.visible_position >= 0) search_story(r, "visible", r.visible, &out);
  char tail[160];
  std::snprintf(tail, sizeof tail, "%lld replays (%lld answered from the cache) in %.2f s\n",
                static_cast<long long>(r.replays), static_cast<long long>(r.cache_hits), r.seconds);
  out += tail;
  return out;
}

std::string bisect_report_json(const BisectReport& r) {
  nlohmann::json j;
  j["a"] = r.a_path;
  j["b"] = r.b_path;
  j["model"] = r.a_header.model.name;
  j["request_a"] = r.request_a;
  j["request_b"] = r.request_b;
  j["label"] = r.label;
  j["prompt_len"] = r.prompt_len;
  j["verdict"] = verdict_name(r.verdict);
  j["split"] = r.split();
  j["split_position"] = r.split_position;
  j["visible_position"] = r.visible_position;
  j["token_a"] = r.token_a;
  j["token_b"] = r.token_b;
  j["routing_mode"] = r.routing_mode;
  j["routing_reason"] = r.routing_reason;
  j["units"] = r.units;
  nlohmann::json fs = nlohmann::json::array();
  for (const Factor& f : r.factors) fs.push_back(factor_json(f));
  j["factors"] = std::move(fs);
  j["numerical"] = r.split_position >= 0 ? search_json(r, r.numerical) : nlohmann::json(nullptr);
  j["visible"] = r.visible_position >= 0 ? search_json(r, r.visible) : nlohmann::json(nullptr);
  j["replays"] = r.replays;
  j["cache_hits"] = r.cache_hits;
  j["seconds"] = r.seconds;
  j["notes"] = r.notes;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace llmrr::replay
