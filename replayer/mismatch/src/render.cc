// render_mismatch: the mismatch report as text (the summary, the first-differing-layer
// histogram, routing agreement, each request's worst tokens) or as one JSON object.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "llmrr/replayer/mismatch.h"

namespace llmrr::replay {
namespace {

using nlohmann::json;

std::string num(double v, const char* f = "%.6g") {
  if (std::isnan(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json finite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json stats_json(const MismatchStats& s) {
  return {{"tokens", s.tokens},
          {"unknown", s.unknown},
          {"logits_differ", s.logits_differ},
          {"past_threshold", s.past_threshold},
          {"mean_abs_dlogp", s.mean_abs_dlogp},
          {"max_abs_dlogp", s.max_abs_dlogp},
          {"mean_abs_dp", s.mean_abs_dp},
          {"max_abs_dp", s.max_abs_dp},
          {"k3_kl", s.k3_kl},
          {"chi2", s.chi2},
          {"pearson", finite(s.pearson)}};
}

std::string stats_line(const MismatchStats& s, double threshold) {
  std::string out = std::to_string(s.tokens) + " tokens";
  if (s.unknown) out += " (+" + std::to_string(s.unknown) + " outside a top-K)";
  out += ", logits differ at " + std::to_string(s.logits_differ);
  if (s.tokens == 0) return out;
  out += "; |Δlogp| mean " + num(s.mean_abs_dlogp) + " max " + num(s.max_abs_dlogp) +
         "; |Δp| mean " + num(s.mean_abs_dp) + " max " + num(s.max_abs_dp) + "; k3-KL " +
         num(s.k3_kl) + "; χ² " + num(s.chi2) + "; Pearson " + num(s.pearson, "%.9f") + "; " +
         std::to_string(s.past_threshold) + " past |Δlogp| > " + num(threshold);
  return out;
}

}  // namespace

std::string render_mismatch(const MismatchReport& r, bool as_json, int top) {
  if (as_json) {
    json j;
    j["a"] = {{"path", r.a_path}, {"producer", r.a_producer}, {"fingerprint", r.fingerprint_a}};
    j["b"] = {{"path", r.b_path}, {"producer", r.b_producer}, {"fingerprint", r.fingerprint_b}};
    j["sites_comparable"] = r.sites_comparable;
    j["threshold"] = r.threshold;
    j["identical"] = r.identical();
    j["total"] = stats_json(r.total);
    json hist = json::object();
    for (const auto& [layer, n] : r.first_layer_histogram)
      hist[layer < 0 ? std::string("none") : "L" + std::to_string(layer)] = n;
    j["first_layer_histogram"] = hist;
    j["first_site_histogram"] = r.first_site_histogram;
    json ro = json::array();
    for (const RoutingAgreement& g : r.routing)
      ro.push_back({{"layer", g.layer}, {"positions", g.positions}, {"same", g.same}});
    j["routing"] = ro;
    json reqs = json::array();
    for (const RequestMismatch& m : r.requests) {
      json toks = json::array();
      for (const TokenMismatch& t : m.tokens) {
        json x = {{"position", t.position},
                  {"token", t.token},
                  {"logp_a", opt(t.logp_a)},
                  {"logp_b", opt(t.logp_b)},
                  {"logits_equal", t.logits_equal}};
        if (t.logp_a && t.logp_b) x["abs_dlogp"] = std::fabs(*t.logp_a - *t.logp_b);
        if (!t.first_site.empty()) x["first_site"] = t.first_site;
        toks.push_back(std::move(x));
      }
      reqs.push_back({{"a", m.a},
                      {"b", m.b},
                      {"label", m.label},
                      {"prompt_len_a", m.prompt_len_a},
                      {"prompt_len_b", m.prompt_len_b},
                      {"covered", m.covered},
                      {"stats", stats_json(m.stats)},
                      {"tokens", std::move(toks)}});
    }
    j["requests"] = std::move(reqs);
    j["only_a"] = r.only_a;
    j["only_b"] = r.only_b;
    return j.dump(2) + "\n";
  }

  std::string o;
  o += "A (rollout): " + r.a_path + "  [" + r.a_producer + "]\n";
  o += "B (trainer): " + r.b_path + "  [" + r.b_producer + "]\n";
  o += std::to_string(r.requests.size()) + " request(s) paired by tokens";
  if (!r.only_a.empty()) o += ", " + std::to_string(r.only_a.size()) + " only in A";
  if (!r.only_b.empty()) o += ", " + std::to_string(r.only_b.size()) + " only in B";
  o += "\n";
  if (!r.sites_comparable) {
    o += "note: the traces hash rows differently (" +
         (r.fingerprint_a.empty() ? std::string("xxh3-64") : r.fingerprint_a) + " vs " +
         (r.fingerprint_b.empty() ? std::string("xxh3-64") : r.fingerprint_b) +
         "): no site is compared, only the logits\n";
  }
  o += "\nall: " + stats_line(r.total, r.threshold) + "\n";
  if (r.identical()) o += "every compared token's logits are bit-identical\n";
  if (!r.first_layer_histogram.empty()) {
    o += "\nfirst differing site of each token whose logits differ:\n";
    for (const auto& [site, n] : r.first_site_histogram) {
      o += "  " + site + std::string(site.size() < 16 ? 16 - site.size() : 1, ' ') +
           std::to_string(n) + "\n";
    }
  }
  if (!r.routing.empty()) {
    o += "\nMoE routing, positions routed to the same experts:\n";
    for (const RoutingAgreement& g : r.routing) {
      o += "  L" + std::to_string(g.layer) + "  " + std::to_string(g.same) + " of " +
           std::to_string(g.positions) + "\n";
    }
  }
  for (const RequestMismatch& m : r.requests) {
    o += "\nrequest " + std::to_string(m.a) + " (A) / " + std::to_string(m.b) + " (B)";
    if (!m.label.empty()) o += " \"" + m.label + "\"";
    o += ": " + std::to_string(m.covered) + " tokens in common, prompts " +
         std::to_string(m.prompt_len_a) + " / " + std::to_string(m.prompt_len_b) + "\n  " +
         stats_line(m.stats, r.threshold) + "\n";
    std::vector<const TokenMismatch*> worst;
    for (const TokenMismatch& t : m.tokens)
      if (!t.logits_equal) worst.push_back(&t);
    auto key = [](const TokenMismatch* t) {
      return t->logp_a && t->logp_b ? std::fabs(*t->logp_a - *t->logp_b) : -1.0;
    };
    std::stable_sort(worst.begin(), worst.end(),
                     [&](const TokenMismatch* x, const TokenMismatch* y) { return key(x) > key(y); });
    if (worst.size() > static_cast<size_t>(std::max(top, 0))) worst.resize(std::max(top, 0));
    if (worst.empty()) continue;
    o += "  position  token  logp A          logp B          |Δlogp|     first differing site\n";
    for (const TokenMismatch* t : worst) {
      char line[256];
      std::snprintf(line, sizeof line, "  %8d  %5d  %-14s  %-14s  %-10s  %s\n", t->position,
                    t->token, t->logp_a ? num(*t->logp_a, "%.9f").c_str() : "outside top-K",
                    t->logp_b ? num(*t->logp_b, "%.9f").c_str() : "outside top-K",
                    key(t) >= 0 ? num(key(t), "%.3g").c_str() : "n/a", t->first_site.c_str());
      o += line;
    }
  }
  return o;
}

}  // namespace llmrr::replay
