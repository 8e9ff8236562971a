// The report page's sections about the runs as a whole: their settings, the split summary,
// batches, plans and routing over steps. The request stories and render_report are in
// report.cc, the helpers both use in internal.h.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

#include "internal.h"
#include "llmrr/format/run_header_json.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/format/site.h"

namespace llmrr::replay::report_internal {
namespace {

std::string td(const std::string& s, bool num = false) {
  return std::string(num ? "<td class=\"num\">" : "<td>") + esc(s) + "</td>";
}

// Run header rows: (field, value per trace).
std::vector<std::pair<std::string, std::vector<std::string>>> header_rows(
    const std::vector<const TraceData*>& ts) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto add = [&](const std::string& name, auto get) {
    std::vector<std::string> v;
    for (const TraceData* t : ts) v.push_back(get(*t));
    rows.emplace_back(name, std::move(v));
  };
  auto i2s = [](int64_t v) { return std::to_string(v); };
  add("file", [](const TraceData& t) { return base_name(t.path); });
  add("run id", [](const TraceData& t) { return t.header.run_id; });
  add("recorded by", [](const TraceData& t) { return "llmrr " + t.header.tool_version; });
  add("created", [](const TraceData& t) {
    std::time_t s = static_cast<std::time_t>(t.header.created_unix_ns / 1000000000);
    char b[40];
    std::tm tm{};
    gmtime_r(&s, &tm);
    std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return std::string(b);
  });
  add("model", [](const TraceData& t) { return t.header.model.name; });
  add("weight hash", [](const TraceData& t) { return t.header.model.weight_hash; });
  add("architecture", [&](const TraceData& t) {
    const trace::ModelInfo& m = t.header.model;
    std::string s = m.architecture + ", " + i2s(m.layers) + " layers, hidden " + i2s(m.hidden) +
                    ", vocab " + i2s(m.vocab);
    if (m.experts > 0) s += ", " + i2s(m.experts) + " experts top-" + i2s(m.experts_per_token);
    return s;
  });
  add("dtypes", [](const TraceData& t) {
    return "weights " + t.header.model.weight_dtype + ", compute " + t.header.model.compute_dtype;
  });
  add("policy", [](const TraceData& t) {
    return t.header.engine.policy + (t.header.engine.atomics ? " + atomics" : "");
  });
  add("virtual device", [&](const TraceData& t) {
    return i2s(t.header.engine.virtual_sms) + " SMs x " + i2s(t.header.engine.blocks_per_sm) +
           " blocks";
  });
  add("scheduler", [&](const TraceData& t) {
    const trace::EngineConfig& e = t.header.engine;
    return "max batch tokens " + i2s(e.max_batch_tokens) + ", max seqs " + i2s(e.max_seqs) +
           ", prefill chunk " + i2s(e.prefill_chunk) + ", KV block " + i2s(e.kv_block_size);
  });
  add("expert capacity", [](const TraceData& t) {
    const trace::EngineConfig& e = t.header.engine;
    return e.capacity_factor == 0 ? std::string("dropless")
                                  : fmt("factor %.3g, overflow ", e.capacity_factor) +
                                        trace::overflow_policy_name(e.overflow);
  });
  add("load / seed", [&](const TraceData& t) {
    return i2s(t.header.engine.load) + " / " + std::to_string(t.header.engine.seed);
  });
  add("capture", [&](const TraceData& t) {
    return std::string(trace::capture_level_name(t.header.engine.capture)) + ", logits " +
           trace::logits_mode_name(t.header.engine.logits_mode) + " (top " +
           i2s(t.header.engine.top_k) + ")";
  });
  add("host", [&](const TraceData& t) {
    const trace::HostInfo& h = t.header.host;
    return h.hostname + ", " + h.cpu + ", " + i2s(h.cores) + " cores, " + h.isa;
  });
  add("device", [](const TraceData& t) {
    return t.header.device.kind + (t.header.device.name.empty() ? "" : " " + t.header.device.name);
  });
  add("command line", [](const TraceData& t) {
    return t.header.command_line.empty() ? std::string("(not recorded)") : t.header.command_line;
  });
  add("contents", [&](const TraceData& t) {
    std::string s = i2s(static_cast<int64_t>(t.steps.size())) + " steps, " +
                    i2s(static_cast<int64_t>(t.requests.size())) + " requests, " + i2s(t.tokens) +
                    " tokens, " + fmt("%.1f KiB", static_cast<double>(t.file_bytes) / 1024.0);
    if (!t.complete) s += " (truncated)";
    if (t.lossy) s += " (lossy: " + t.lossy_reason + ")";
    return s;
  });
  return rows;
}

}  // namespace

std::string runs_section(const std::vector<const TraceData*>& ts) {
  // The settings that differ and a few that say what the runs are, then every setting in a
  // collapsed table.
  std::string head = "<tr><th></th>";
  for (size_t i = 0; i < ts.size(); ++i) {
    head += std::string("<th style=\"color:") + (i == 0 ? report::kColorA : report::kColorB) +
            "\">" +
            (ts.size() == 1 ? "trace"
             : i == 0       ? "A"
                            : "B") +
            "</th>";
  }
  head += "</tr>";
  const std::set<std::string> key = {"file", "model", "policy", "load / seed", "contents"};
  const std::set<std::string> per_run = {"file", "run id", "created", "contents"};
  std::string brief, all;
  int differing = 0;
  for (const auto& [name, values] : header_rows(ts)) {
    const bool differs = values.size() == 2 && values[0] != values[1] && !per_run.count(name);
    std::string row = differs ? "<tr class=\"differs\">" : "<tr>";
    row += "<th>" + esc(name) + "</th>";
    for (const std::string& v : values) row += td(v);
    row += "</tr>";
    all += row;
    if (differs || key.count(name)) brief += row;
    differing += differs;
  }
  std::string out = "<section id=\"runs\"><h2>Runs</h2>";
  if (ts.size() == 2) {
    out += "<p>" +
           esc(differing == 0
                   ? std::string("Every recorded setting is the same.")
                   : std::to_string(differing) + " recorded setting(s) differ (highlighted).") +
           "</p>";
  }
  // Then the run header itself, every field (run_header_json, as inspect --json writes it).
  std::string raw;
  for (size_t i = 0; i < ts.size(); ++i) {
    const char* name = ts.size() == 1 ? "trace" : i == 0 ? "A" : "B";
    raw += std::string("<p>Run header of ") + name +
           "</p><pre class=\"run-header text\" data-trace=\"" + name + "\">" +
           esc(trace::run_header_json(ts[i]->header)
                   .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) +
           "</pre>";
  }
  out += "<table>" + head + brief + "</table><details><summary>Every recorded setting</summary>" +
         "<table>" + head + all + "</table>" + raw + "</details>";
  return out + "</section>";
}

std::string summary_section(const DiffReport& r) {
  std::string out = "<section id=\"summary\"><h2>Split summary</h2>";
  if (!r.header_differences.empty()) {
    out += "<p>Run settings that differ: ";
    for (size_t i = 0; i < r.header_differences.size(); ++i) {
      out += (i ? "; " : "") + esc(r.header_differences[i]);
    }
    out += ".</p>";
  }
  for (const std::string& n : r.notes) out += "<p class=\"note\">" + esc(n) + "</p>";
  out +=
      "<p>" +
      esc(std::to_string(r.requests.size()) + " request(s) in common (aligned by " + r.alignment +
          ")" + (r.only_a.empty() ? "" : ", " + std::to_string(r.only_a.size()) + " only in A") +
          (r.only_b.empty() ? "" : ", " + std::to_string(r.only_b.size()) + " only in B")) +
      ".</p>";
  out +=
      "<table><tr><th>request</th><th>label</th><th>verdict</th><th>logits differ at</th>"
      "<th>token differs at</th><th>first differing site</th><th>cause</th></tr>";
  for (const RequestDiff& d : r.requests) {
    out += "<tr>" +
           td(std::to_string(d.a) + (d.a != d.b ? " / " + std::to_string(d.b) : ""), true) +
           td(d.label) + "<td>" + verdict_badge(d.verdict) + "</td>" +
           td(d.split_position >= 0 ? "position " + std::to_string(d.split_position) : "") +
           td(d.visible_position >= 0 ? "token " + std::to_string(d.visible_position - d.prompt_len)
                                      : "") +
           td(d.first_site) + td(d.cause) + "</tr>";
  }
  return out + "</table></section>";
}

std::string batches_section(const std::vector<const TraceData*>& ts) {
  std::string out = "<section id=\"batches\"><h2>Batches over steps</h2><div class=\"charts\">";
  report::LineChart rows, reqs;
  rows.id = "batch-rows";
  rows.title = "Batch size (rows) per step";
  rows.x_label = "step";
  rows.y_label = "rows";
  reqs.id = "batch-requests";
  reqs.title = "Requests in the batch per step";
  reqs.x_label = "step";
  reqs.y_label = "requests";
  for (size_t i = 0; i < ts.size(); ++i) {
    report::Series s, q;
    const std::string name = ts.size() == 1 ? "rows" : i == 0 ? "A" : "B";
    s.name = name;
    q.name = ts.size() == 1 ? std::string("requests") : name;
    s.color = q.color = i == 0 ? report::kColorA : report::kColorB;
    s.steps = q.steps = true;
    for (const report::StepData& st : ts[i]->steps) {
      s.points.emplace_back(static_cast<double>(st.step), static_cast<double>(st.rows));
      q.points.emplace_back(static_cast<double>(st.step), static_cast<double>(st.requests));
    }
    rows.series.push_back(std::move(s));
    reqs.series.push_back(std::move(q));
  }
  out += render(rows) + render(reqs);
  return out + "</div></section>";
}

namespace {

std::string kind_name(int kind) {
  const SiteKind k = static_cast<SiteKind>(kind);
  const bool expert = k == SiteKind::kExpertGate || k == SiteKind::kExpertUp ||
                      k == SiteKind::kExpertAct || k == SiteKind::kExpertDown;
  const bool global = k == SiteKind::kEmbed || k == SiteKind::kFinalNorm || k == SiteKind::kLogits;
  std::string s = site_name(
      SiteId{k, static_cast<int16_t>(global ? -1 : 0), static_cast<int16_t>(expert ? 0 : -1)});
  if (s.rfind("L0.", 0) == 0) s = s.substr(3);
  size_t e = s.find("e0.");
  if (expert && e != std::string::npos) s.replace(e, 3, "e*.");
  return s;
}

}  // namespace

std::string plans_section(const std::vector<const TraceData*>& ts) {
  std::string out =
      "<section id=\"plans\"><h2>Plans in force over steps</h2>"
      "<p class=\"muted\">For each op, the plan at its first layer (expert GEMMs: the "
      "first expert that ran); one cell per step. Hover a cell for the plan.</p>";
  std::set<int> kinds;
  for (const TraceData* t : ts) {
    for (const report::StepData& s : t->steps) {
      for (const auto& [k, p] : s.plans) kinds.insert(k);
    }
  }
  // Ops whose plan changes over the steps or between the runs first.
  std::vector<std::pair<int, int>> ranked;  // (-changes, kind)
  for (int k : kinds) {
    std::set<std::string> seen;
    for (const TraceData* t : ts) {
      for (const report::StepData& s : t->steps) {
        auto it = s.plans.find(k);
        if (it != s.plans.end()) seen.insert(it->second);
      }
    }
    ranked.emplace_back(-static_cast<int>(seen.size()), k);
  }
  std::stable_sort(ranked.begin(), ranked.end());
  int shown = 0, constant = 0;
  std::string constant_list;
  out += "<div class=\"charts\">";
  for (auto [neg, k] : ranked) {
    if (-neg <= 1 || shown >= 8) {
      ++constant;
      if (-neg == 1) {
        std::string plan;
        for (const report::StepData& s : ts[0]->steps) {
          auto it = s.plans.find(k);
          if (it != s.plans.end()) plan = it->second;
        }
        constant_list += (constant_list.empty() ? "" : "; ") + kind_name(k) + ": " + plan;
      }
      continue;
    }
    ++shown;
    report::Heatmap h;
    h.id = "plans-" + std::to_string(k);
    h.title = kind_name(k);
    h.x_label = "step";
    h.cell_h = 16;
    h.width = 620;
    std::map<std::string, int> cat;
    size_t cols = 0;
    for (const TraceData* t : ts) cols = std::max(cols, t->steps.size());
    for (size_t c = 0; c < cols; ++c) {
      const TraceData* t = ts[0]->steps.size() > c ? ts[0] : ts.back();
      h.col_labels.push_back(std::to_string(t->steps[c].step));
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      h.row_labels.push_back(ts.size() == 1 ? "plan" : i == 0 ? "A" : "B");
      for (size_t c = 0; c < cols; ++c) {
        double v = std::nan("");
        std::string tip;
        if (c < ts[i]->steps.size()) {
          const report::StepData& s = ts[i]->steps[c];
          auto it = s.plans.find(k);
          if (it != s.plans.end()) {
            auto [ci, fresh] = cat.emplace(it->second, static_cast<int>(cat.size()));
            if (fresh) h.categories.push_back(it->second);
            v = ci->second;
            tip = "step " + std::to_string(s.step) + " (" + std::to_string(s.rows) +
                  " rows): " + it->second;
          }
        }
        h.values.push_back(v);
        h.tooltips.push_back(tip);
      }
    }
    out += render(h);
  }
  out += "</div>";
  if (shown == 0) out += "<p>No plan changes over the steps.</p>";
  if (!constant_list.empty()) {
    out += "<p class=\"muted\">Constant over every step: " + esc(constant_list) + ".</p>";
  }
  return out + "</section>";
}

std::string routing_section(const std::vector<const TraceData*>& ts) {
  std::string out = "<section id=\"routing\"><h2>Routing</h2>";
  if (ts[0]->experts <= 0) {
    return out + "<p class=\"muted\">Dense model: no expert routing.</p></section>";
  }
  out += "<div class=\"charts\">";
  report::LineChart over;
  over.id = "routing-over-steps";
  over.title = "Tokens rerouted or dropped by expert capacity, per step";
  over.x_label = "step";
  over.y_label = "token \u00d7 k slots";
  bool any = false;
  for (size_t i = 0; i < ts.size(); ++i) {
    const TraceData& t = *ts[i];
    report::Heatmap h;
    h.id = "expert-load-" + std::to_string(i);
    h.title = std::string("Expert load (token slots routed), ") + (ts.size() == 1 ? "all steps"
                                                                   : i == 0       ? "A"
                                                                                  : "B");
    h.x_label = "expert";
    h.log_scale = false;
    h.cell_w = std::max(8, std::min(28, 560 / std::max(t.experts, 1)));
    int64_t hi = 1;
    for (int64_t v : t.expert_load) hi = std::max(hi, v);
    h.lo = 0;
    h.hi = static_cast<double>(hi);
    h.legend_low = "0";
    h.legend_high = std::to_string(hi);
    for (int32_t l = 0; l < t.layers; ++l) h.row_labels.push_back(layer_label(l));
    for (int32_t e = 0; e < t.experts; ++e) h.col_labels.push_back(std::to_string(e));
    for (int32_t l = 0; l < t.layers; ++l) {
      for (int32_t e = 0; e < t.experts; ++e) {
        const int64_t v = t.expert_load[static_cast<size_t>(l) * t.experts + e];
        h.values.push_back(v == 0 ? 0.0 : static_cast<double>(v));
        h.tooltips.push_back("layer " + std::to_string(l) + ", expert " + std::to_string(e) + ": " +
                             std::to_string(v) + " token slots");
      }
    }
    out += render(h);
    report::Series s;
    s.name = ts.size() == 1 ? "rerouted + dropped" : i == 0 ? "A" : "B";
    s.color = i == 0 ? report::kColorA : report::kColorB;
    s.steps = true;
    for (const report::StepData& st : t.steps) {
      s.points.emplace_back(static_cast<double>(st.step),
                            static_cast<double>(st.rerouted + st.dropped));
      any |= st.rerouted + st.dropped > 0;
    }
    over.series.push_back(std::move(s));
  }
  if (any) {
    out += render(over);
  }
  out += "</div>";
  if (!any)
    out +=
        "<p class=\"muted\">No token was rerouted or dropped (dropless, or capacity "
        "never reached).</p>";
  return out + "</section>";
}

}  // namespace llmrr::replay::report_internal
