// The HTML page of `llmrr report` (what it shows: llmrr/replayer/report.h): the request
// stories and render_report. The sections about the runs as a whole (settings, split summary,
// batches, plans, routing) are in sections.cc, the helpers both use in internal.h.
#include "llmrr/replayer/report.h"

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>

#include "llmrr/format/fingerprint.h"
#include "llmrr/format/trace_reader.h"
#include "llmrr/recorder/trace_recorder.h"
#include "llmrr/replayer/diff.h"
#include "llmrr/replayer/run_config.h"
#include "llmrr/runtime/model.h"
#include "llmrr/format/site.h"
#include "llmrr/runtime/tokenizers.h"
#include "collect.h"
#include "internal.h"
#include "svg.h"

namespace llmrr::replay {
namespace {

using report::esc;
using report::RequestData;
using report::TraceData;
using report_internal::base_name;
using report_internal::batches_section;
using report_internal::fmt;
using report_internal::layer_label;
using report_internal::plans_section;
using report_internal::routing_section;
using report_internal::runs_section;
using report_internal::summary_section;
using report_internal::verdict_badge;

// Token text, or a visible stand-in for ids the tokenizer cannot decode (redacted: -1).
class Decoder {
 public:
  void set(std::shared_ptr<const Tokenizer> t) { tok_ = std::move(t); }
  bool ok() const { return tok_ != nullptr; }
  std::string token(int32_t id) const {
    if (id < 0) return "\u2592";  // redacted
    if (!tok_ || id >= tok_->vocab_size()) return "\u27e8" + std::to_string(id) + "\u27e9";
    return tok_->decode(std::vector<int32_t>{id});
  }
  std::string text(const std::vector<int32_t>& ids) const {
    if (!tok_) {
      std::string s;
      for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
      return s;
    }
    std::string out;
    std::vector<int32_t> run;
    for (int32_t id : ids) {
      if (id >= 0 && id < tok_->vocab_size()) {
        run.push_back(id);
        continue;
      }
      out += tok_->decode(run) + token(id);
      run.clear();
    }
    return out + tok_->decode(run);
  }

 private:
  std::shared_ptr<const Tokenizer> tok_;
};

Decoder make_decoder(const trace::RunHeader& h, const std::string& model,
                     std::vector<std::string>* notes) {
  Decoder d;
  if (model == "none") return d;
  if (model.empty() && h.model.name.rfind("builtin:", 0) == 0 && h.model.vocab == kByteVocab) {
    d.set(make_byte_tokenizer());
    return d;
  }
  Result<std::string> spec = resolve_model_spec(h, model);
  if (!spec.ok()) {
    notes->push_back("token text not shown: " + spec.status().message());
    return d;
  }
  Result<LoadedModel> lm = load_model(*spec);
  if (lm.ok() && lm->tokenizer) {
    d.set(lm->tokenizer);
  } else {
    notes->push_back("token text not shown: " +
                     (lm.ok() ? lm->source + " has no tokenizer" : lm.status().message()));
  }
  return d;
}

// ---- page pieces ---------------------------------------------------------------------------

const char* kStyle = R"CSS(
:root{--a:#1f6fb4;--b:#e8710a;--split:#c62828;--muted:#666;--line:#d8dde3;--bg:#f7f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#1d2330;margin:0;background:#fff}
header.top{background:#1d2330;color:#fff;padding:14px 28px}
header.top h1{margin:0;font-size:20px;font-weight:600}
header.top p{margin:4px 0 0;color:#c5cbd6}
main{padding:8px 28px 28px;max-width:1320px}
h2{font-size:17px;margin:26px 0 8px;padding-bottom:4px;border-bottom:2px solid var(--line)}
h3{font-size:15px;margin:20px 0 6px}
table{border-collapse:collapse;font-size:13px}
th,td{padding:3px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.differs td{background:#fff4e5}
tr.differs td:first-child{border-left:3px solid var(--b)}
.verdict{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.v-identical{background:#e3f4e5;color:#1b5e20}
.v-numerical{background:#fff3cd;color:#7a5a00}
.v-visible{background:#fde0e0;color:#a31515}
.muted{color:var(--muted)}
.charts{display:flex;flex-wrap:wrap;gap:10px 18px;align-items:flex-start}
figure.chart{margin:0;background:#fff;border:1px solid var(--line);border-radius:6px;padding:6px 8px}
figure.chart figcaption{font-size:12.5px;font-weight:600;color:#333;margin:0 0 2px}
svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;fill:#333}
svg text.tick{fill:#555}
svg text.axis{fill:#333;font-weight:600}
svg text.marker-label{font-weight:600}
svg .plot{fill:#fcfcfd;stroke:#c9ced6}
svg .grid{stroke:#e7eaee}
.cause{margin:4px 0 8px;padding:8px 12px;background:var(--bg);border-left:3px solid var(--split);font-size:12.5px;max-width:1260px}
.cont{display:grid;grid-template-columns:1fr 1fr;gap:12px;margin:8px 0}
.cont>div{border:1px solid var(--line);border-radius:6px;padding:8px 10px;background:#fff}
.side{flex:1;min-width:320px;border:1px solid var(--line);border-radius:6px;padding:8px 10px}
.cont h4{margin:0 0 6px;font-size:13px}
.cont h4.a{color:var(--a)}.cont h4.b{color:var(--b)}
.text{font:13px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-word}
.text .prompt{color:#777}
.text .after{color:#a31515}
.text mark.split{background:#ffd54f;color:#000;outline:2px solid var(--split);border-radius:2px;padding:0 1px}
ul.legend-list{list-style:none;margin:2px 0 8px;padding:0;font-size:12px;display:flex;flex-wrap:wrap;gap:2px 14px}
.swatch{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px;border-radius:2px}
.request{border-top:1px solid var(--line);padding-top:4px}
.note{color:#7a5a00}
details{margin:6px 0}details summary{cursor:pointer;color:#1f6fb4;font-size:13px}
footer{margin-top:30px;color:var(--muted);font-size:12px}
)CSS";

report::Series margin_series(const RequestData& r, const std::string& name, const char* color) {
  report::Series s;
  s.name = name;
  s.color = color;
  s.dots = true;
  for (const report::Sample& m : r.samples) {
    s.points.emplace_back(static_cast<double>(m.position), m.margin);
  }
  return s;
}

// Tokens of `r` from position `from` on.
std::vector<std::pair<int32_t, int32_t>> generated(const RequestData& r) {
  std::vector<std::pair<int32_t, int32_t>> t = r.tokens;
  std::sort(t.begin(), t.end());
  return t;
}

std::string text_block(const Decoder& dec, const RequestData& r, int32_t split_position,
                       size_t max_prompt_chars = 400) {
  std::string prompt = dec.text(r.record.prompt);
  std::string out = "<div class=\"text\"><span class=\"prompt\">";
  if (prompt.size() > max_prompt_chars) {
    size_t cut = prompt.size() - max_prompt_chars;
    while (cut < prompt.size() && (static_cast<unsigned char>(prompt[cut]) >> 6) == 2) ++cut;
    out += "\u2026" + esc(prompt.substr(cut));
  } else {
    out += esc(prompt);
  }
  out += "</span>";
  for (auto [pos, tok] : generated(r)) {
    const std::string t = esc(dec.token(tok));
    if (split_position >= 0 && pos == split_position) {
      out += "<mark class=\"split\" title=\"first differing token (position " +
             std::to_string(pos) + ")\">" + t + "</mark>";
    } else if (split_position >= 0 && pos > split_position) {
      out += "<span class=\"after\">" + t + "</span>";
    } else {
      out += t;
    }
  }
  return out + "</div>";
}

// Layer × position heatmap of |Δl2| / l2 between the two runs' layer-output rows.
std::string distance_heatmap(const RequestDiff& d, const RequestData& a, const RequestData& b,
                             int32_t layers, int max_positions, const std::string& id) {
  int32_t start = d.root_found ? d.root_position : d.split_position;
  if (start < 0) start = d.visible_position >= 0 ? d.visible_position - 1 : 0;
  std::set<uint64_t> sites;
  int32_t last = -1;
  for (const auto& [k, fp] : a.layer_rows) {
    if (k.first >= start && b.layer_rows.count(k)) {
      sites.insert(k.second);
      last = std::max(last, k.first);
    }
  }
  if (sites.empty()) {
    return "<p class=\"muted\">No layer-output fingerprints from position " +
           std::to_string(start) + " on in both traces (capture level none?).</p>";
  }
  last = std::min(last, start + max_positions - 1);
  std::vector<uint64_t> order(sites.begin(), sites.end());
  std::sort(order.begin(), order.end(), [](uint64_t x, uint64_t y) {
    return SiteId::unpack(x).forward_key() < SiteId::unpack(y).forward_key();
  });
  report::Heatmap h;
  h.id = id;
  h.title =
      "Fingerprint distance |\u0394l2| / l2, layer outputs, from the first differing row "
      "(position " +
      std::to_string(start) + ")";
  h.x_label = "position (prompt rows, then one per generated token)";
  h.legend_low = "1e-8";
  h.legend_high = "1 (relative)";
  h.cell_h = order.size() > 24 ? 11 : 14;
  (void)layers;
  for (uint64_t s : order) h.row_labels.push_back(site_name(SiteId::unpack(s)));
  for (int32_t p = start; p <= last; ++p) h.col_labels.push_back(std::to_string(p));
  const size_t cols = h.col_labels.size();
  h.values.assign(order.size() * cols, std::nan(""));
  h.tooltips.assign(order.size() * cols, "");
  for (size_t r = 0; r < order.size(); ++r) {
    for (size_t c = 0; c < cols; ++c) {
      const std::pair<int32_t, uint64_t> key{start + static_cast<int32_t>(c), order[r]};
      auto ia = a.layer_rows.find(key);
      auto ib = b.layer_rows.find(key);
      if (ia == a.layer_rows.end() || ib == b.layer_rows.end()) continue;
      const trace::Fingerprint &x = ia->second, &y = ib->second;
      double v = 0;
      if (x.hash != y.hash) {
        const double l2 = std::max({static_cast<double>(x.l2), static_cast<double>(y.l2), 1e-30});
        const double mx =
            std::max({static_cast<double>(x.max_abs), static_cast<double>(y.max_abs), 1e-30});
        v = std::max({std::fabs(static_cast<double>(x.l2) - y.l2) / l2,
                      std::fabs(static_cast<double>(x.max_abs) - y.max_abs) / mx, 1e-8});
      }
      h.values[r * cols + c] = v;
      h.tooltips[r * cols + c] =
          h.row_labels[r] + " at position " + std::to_string(key.first) +
          (x.hash == y.hash ? ": bit-identical"
                            : ": l2 " + fmt("%.7g", x.l2) + " vs " + fmt("%.7g", y.l2) +
                                  ", max|x| " + fmt("%.7g", x.max_abs) + " vs " +
                                  fmt("%.7g", y.max_abs) + ", distance " + fmt("%.3g", v));
    }
  }
  if (d.split_position >= start && d.split_position <= last) {
    h.marked_cols.push_back(d.split_position - start);
  }
  return render(h);
}

// Positions before `until` (where the runs' tokens are still the same, so a routing
// difference is not simply a different input) whose experts differ, per layer.
std::string routing_bars(const RequestData& a, const RequestData& b, int32_t layers, int32_t until,
                         const std::string& id) {
  report::Bars bars;
  bars.id = id;
  bars.title = "Routing differences per layer: positions whose experts differ" +
               std::string(until < INT32_MAX ? " (before the visible split)" : "");
  bars.x_label = "layer";
  bars.y_label = "positions";
  int64_t total = 0, compared = 0;
  for (int32_t l = 0; l < layers; ++l) {
    int64_t n = 0;
    for (const auto& [k, ex] : a.experts) {
      if (k.second != l || k.first >= until) continue;
      auto it = b.experts.find(k);
      if (it == b.experts.end()) continue;
      ++compared;
      if (it->second != ex) ++n;
    }
    total += n;
    bars.labels.push_back(layer_label(l));
    bars.values.push_back(static_cast<double>(n));
  }
  if (compared == 0) return "";
  if (total == 0) {
    return "<p class=\"muted\">Routing: every position" +
           std::string(until < INT32_MAX ? " before the visible split" : "") +
           " went to the same experts in both runs.</p>";
  }
  return render(bars);
}

// diff's own story of one request (what `llmrr diff` prints for it).
std::string request_story(const DiffReport& r, const RequestDiff& d) {
  DiffReport one = r;
  one.requests = {d};
  one.notes.clear();
  one.header_differences.clear();
  const std::string all = format_diff_story(one, 1);
  size_t at = all.find("\nrequest ");
  if (at == std::string::npos) return "";
  std::string story = all.substr(at + 1);
  // The first line repeats the heading; the rest explains.
  size_t nl = story.find('\n');
  story = nl == std::string::npos ? "" : story.substr(nl + 1);
  // format_diff_story ends with its overall verdict line.
  for (const char* tail : {"runs differ\n", "\n"}) {
    const std::string t = tail;
    while (story.size() >= t.size() && story.compare(story.size() - t.size(), t.size(), t) == 0) {
      story.erase(story.size() - t.size());
    }
  }
  return story;
}

std::string diff_request(const DiffReport& r, const RequestDiff& d, const TraceData& A,
                         const TraceData& B, const Decoder& dec, const ReportOptions& o,
                         int index) {
  const std::string story = d.verdict == Verdict::kIdentical ? "" : request_story(r, d);
  const RequestData* a = A.find(d.a);
  const RequestData* b = B.find(d.b);
  std::string who = "request " + std::to_string(d.a) +
                    (d.a != d.b ? " (B: " + std::to_string(d.b) + ")" : "") +
                    (d.label.empty() ? "" : " \u201c" + d.label + "\u201d");
  std::string out = "<div class=\"request\" id=\"request-" + std::to_string(index) + "\"><h3>" +
                    esc(who) + " " + verdict_badge(d.verdict) + "</h3>";
  if (d.verdict != Verdict::kIdentical) {
    std::string line;
    if (d.verdict == Verdict::kVisible) {
      line = "Split at token " + std::to_string(d.visible_position - d.prompt_len) + " (position " +
             std::to_string(d.visible_position) + ")";
      if (d.split_position >= 0)
        line += "; logits first differ at position " + std::to_string(d.split_position);
    } else {
      line = "Numerical split only: logits first differ at position " +
             std::to_string(d.split_position) + ", every token the same";
    }
    if (!d.first_site.empty()) {
      line += ". First difference at " + d.first_site + " (position " +
              std::to_string(d.root_position) + ", step " + std::to_string(d.batch_a.step) +
              " in A, " + std::to_string(d.batch_b.step) + " in B)";
    }
    out += "<p>" + esc(line) + ".</p>";
    if (!story.empty()) out += "<pre class=\"cause text\">" + esc(story) + "</pre>";
  } else {
    out += "<p class=\"muted\">" +
           esc(std::to_string(d.compared_logits) + " sampled positions compared, logits " +
               "bit-identical.") +
           "</p>";
  }
  for (const std::string& n : d.notes) out += "<p class=\"note\">" + esc(n) + "</p>";
  if (!a || !b) return out + "</div>";
  out += "<div class=\"charts\">";
  report::LineChart mc;
  mc.id = "margins-" + std::to_string(index);
  mc.title = "Top1 \u2212 top2 logit margin at each sampled row";
  mc.x_label = "position of the sampled row (it samples the token at position + 1)";
  mc.y_label = "margin";
  mc.series.push_back(margin_series(*a, "A", report::kColorA));
  mc.series.push_back(margin_series(*b, "B", report::kColorB));
  if (d.split_position >= 0) {
    mc.markers.push_back({static_cast<double>(d.split_position),
                          "logits differ (" + std::to_string(d.split_position) + ")"});
  }
  if (d.verdict == Verdict::kVisible) {
    mc.markers.push_back({static_cast<double>(d.visible_position - 1),
                          "token " + std::to_string(d.visible_position - d.prompt_len) + " differs",
                          "#7b1fa2"});
  }
  out += render(mc);
  if (d.verdict != Verdict::kIdentical) {
    out +=
        distance_heatmap(d, *a, *b, A.layers, o.max_positions, "heatmap-" + std::to_string(index));
    if (A.experts > 0) {
      const int32_t until = d.verdict == Verdict::kVisible ? d.visible_position : INT32_MAX;
      out += routing_bars(*a, *b, A.layers, until, "routing-diff-" + std::to_string(index));
    }
  }
  out += "</div>";
  const int32_t split = d.verdict == Verdict::kVisible ? d.visible_position : -1;
  out += "<div class=\"cont\"><div><h4 class=\"a\">A</h4>" + text_block(dec, *a, split) +
         "</div><div><h4 class=\"b\">B</h4>" + text_block(dec, *b, split) + "</div></div>";
  return out + "</div>";
}

std::string single_request(const RequestData& r, const Decoder& dec, int index) {
  std::string who = "request " + std::to_string(r.record.id) +
                    (r.record.label.empty() ? "" : " \u201c" + r.record.label + "\u201d");
  std::string out =
      "<div class=\"request\" id=\"request-" + std::to_string(index) + "\"><h3>" + esc(who) +
      "</h3><p class=\"muted\">" +
      esc("prompt " + std::to_string(r.summary.prompt_len) + " tokens, arrived at step " +
          std::to_string(r.summary.arrival_step) + ", " + std::to_string(r.summary.generated) +
          " generated, " +
          (r.summary.finish_step >= 0
               ? std::string("finished (") + trace::finish_reason_name(r.summary.reason) +
                     ") at step " + std::to_string(r.summary.finish_step)
               : std::string("unfinished"))) +
      "</p><div class=\"charts\">";
  report::LineChart mc;
  mc.id = "margins-" + std::to_string(index);
  mc.title = "Top1 \u2212 top2 logit margin at each sampled row (small = near-tie)";
  mc.x_label = "position of the sampled row";
  mc.y_label = "margin";
  mc.series.push_back(margin_series(r, "margin", report::kColorA));
  if (!r.samples.empty()) {
    const auto lo = std::min_element(
        r.samples.begin(), r.samples.end(),
        [](const report::Sample& x, const report::Sample& y) { return x.margin < y.margin; });
    mc.markers.push_back(
        {static_cast<double>(lo->position), "smallest " + fmt("%.3g", lo->margin), "#7b1fa2"});
  }
  out += render(mc) + "<div class=\"side\">" + text_block(dec, r, -1) + "</div></div>";
  return out + "</div>";
}

}  // namespace

std::string html_escape(std::string_view text) {
  return esc(text);
}

Result<std::string> render_report(const std::vector<std::string>& traces, const ReportOptions& o) {
  if (traces.empty() || traces.size() > 2) {
    return make_error(ErrorCode::kInvalidArgument,
                      "report: expected one or two traces, got " + std::to_string(traces.size()));
  }
  std::optional<DiffReport> diff;
  std::set<uint64_t> interest_a, interest_b;
  if (traces.size() == 2) {
    DiffOptions dopt;
    dopt.model = o.model;
    ASSIGN_OR_RETURN(DiffReport d, diff_traces(traces[0], traces[1], dopt));
    int n = 0;
    for (const RequestDiff& r : d.requests) {
      if (r.verdict != Verdict::kIdentical && n++ < o.max_requests) {
        interest_a.insert(r.a);
        interest_b.insert(r.b);
      }
    }
    diff = std::move(d);
  }
  std::vector<TraceData> data;
  for (size_t i = 0; i < traces.size(); ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<trace::TraceReader> rd, trace::TraceReader::open(traces[i]));
    ASSIGN_OR_RETURN(TraceData t, report::collect(*rd, i == 0 ? interest_a : interest_b));
    data.push_back(std::move(t));
  }
  std::vector<const TraceData*> ts;
  for (const TraceData& t : data) ts.push_back(&t);
  std::vector<std::string> notes;
  const Decoder dec = make_decoder(data[0].header, o.model, &notes);

  std::string title = o.title;
  if (title.empty()) {
    title = "llmrr report: " + base_name(traces[0]) +
            (traces.size() == 2 ? " vs " + base_name(traces[1]) : "");
  }
  std::string body;
  body += "<header class=\"top\"><h1>" + esc(title) + "</h1><p>";
  if (diff) {
    int split = 0, visible = 0;
    for (const RequestDiff& r : diff->requests) {
      split += r.verdict != Verdict::kIdentical;
      visible += r.verdict == Verdict::kVisible;
    }
    body +=
        esc(std::to_string(diff->requests.size()) + " common request(s): " + std::to_string(split) +
            " split (" + std::to_string(visible) + " visibly), " +
            std::to_string(diff->requests.size() - split) + " identical");
  } else {
    body += esc(std::to_string(data[0].requests.size()) + " request(s), " +
                std::to_string(data[0].steps.size()) + " steps, " + std::to_string(data[0].tokens) +
                " tokens");
  }
  body += "</p></header><main>";
  for (const std::string& n : notes) body += "<p class=\"note\">" + esc(n) + "</p>";
  body += runs_section(ts);
  if (diff) body += summary_section(*diff);
  body += "<section id=\"requests\"><h2>Requests</h2>";
  int index = 0;
  if (diff) {
    // Split requests first, then identical ones, up to max_requests.
    std::vector<const RequestDiff*> order;
    for (const RequestDiff& r : diff->requests) {
      if (r.verdict != Verdict::kIdentical) order.push_back(&r);
    }
    for (const RequestDiff& r : diff->requests) {
      if (r.verdict == Verdict::kIdentical) order.push_back(&r);
    }
    for (const RequestDiff* r : order) {
      if (index >= o.max_requests) break;
      body += diff_request(*diff, *r, data[0], data[1], dec, o, index++);
    }
    if (order.empty()) body += "<p>No request in common.</p>";
  } else {
    for (const RequestData& r : data[0].requests) {
      if (index >= o.max_requests) break;
      body += single_request(r, dec, index++);
    }
  }
  const size_t total = diff ? diff->requests.size() : data[0].requests.size();
  if (total > static_cast<size_t>(index)) {
    body += "<p class=\"muted\">" +
            esc(std::to_string(total - index) + " more request(s) not drawn (--max-requests).") +
            "</p>";
  }
  body += "</section>";
  body += batches_section(ts);
  body += plans_section(ts);
  body += routing_section(ts);
  body += "<footer>Written by llmrr " + esc(base_run_header().tool_version) +
          ". Self-contained: no network, no external resource.</footer></main>";

  char nonce[24];
  std::snprintf(nonce, sizeof nonce, "%016" PRIx64, trace::hash_bytes(body.data(), body.size()));
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; img-src data:; script-src 'nonce-" +
      std::string(nonce) +
      "'\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>" +
      esc(title) + "</title><style>" + kStyle + "</style></head><body>" + body +
      "<script nonce=\"" + nonce +
      "\">(function(){var d=document.documentElement;"
      "window.addEventListener('error',function(e){d.setAttribute('data-llmrr-error',"
      "String(e.message));});"
      "var n=document.querySelectorAll('figure.chart svg').length;"
      "d.setAttribute('data-llmrr-rendered',String(n));})();</script></body></html>\n";
  return html;
}

}  // namespace llmrr::replay
