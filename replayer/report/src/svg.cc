#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace llmrr::report {
namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// A tick label: short, no trailing zeros.
std::string tick_text(double v) {
  char b[32];
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e6)) {
    std::snprintf(b, sizeof b, "%.0e", v);
  } else if (a >= 100 || v == std::floor(v)) {
    std::snprintf(b, sizeof b, "%.0f", v);
  } else {
    std::snprintf(b, sizeof b, "%.3g", v);
  }
  return b;
}

std::vector<double> nice_ticks(double lo, double hi, int want) {
  std::vector<double> out;
  if (!(hi > lo)) {
    out.push_back(lo);
    return out;
  }
  const double raw = (hi - lo) / std::max(want, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  }
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
    out.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return out;
}

std::string svg_open(const std::string& id, int w, int h, const std::string& title) {
  return "<figure class=\"chart\" id=\"" + esc(id) + "\"><figcaption>" + esc(title) +
         "</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) +
         "\" height=\"" + std::to_string(h) + "\" viewBox=\"0 0 " + std::to_string(w) + " " +
         std::to_string(h) + "\" role=\"img\" aria-label=\"" + esc(title) + "\">";
}

const char* kClose = "</svg></figure>";

// Blue (low) to red (high) through yellow, t in [0, 1].
std::string ramp(double t) {
  t = std::clamp(t, 0.0, 1.0);
  // viridis-like stops: dark blue, teal, yellow-green, yellow, orange-red.
  static const double stops[5][3] = {
      {68, 1, 84}, {49, 104, 142}, {53, 183, 121}, {253, 231, 37}, {230, 60, 30}};
  const double x = t * 4.0;
  const int i = std::min(static_cast<int>(x), 3);
  const double f = x - i;
  char b[16];
  std::snprintf(b, sizeof b, "#%02x%02x%02x",
                static_cast<int>(stops[i][0] + (stops[i + 1][0] - stops[i][0]) * f),
                static_cast<int>(stops[i][1] + (stops[i + 1][1] - stops[i][1]) * f),
                static_cast<int>(stops[i][2] + (stops[i + 1][2] - stops[i][2]) * f));
  return b;
}

}  // namespace

std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int j = 1; ok && j < len; ++j) ok = (static_cast<unsigned char>(s[i + j]) >> 6) == 2;
    if (!ok || (len == 1 && ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f))) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
      ++i;
      continue;
    }
    if (len > 1) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

const char* palette(size_t i) {
  static const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                   "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                                   "#9c755f", "#bab0ac", "#1b9e77", "#7570b3"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

std::string render(const LineChart& c) {
  const int W = c.width, H = c.height, L = 56, R = 12, T = 24, B = 36;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : c.series) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  for (const Marker& m : c.markers) {
    x0 = std::min(x0, m.x);
    x1 = std::max(x1, m.x);
  }
  std::string out = svg_open(c.id, W, H, c.title);
  if (!std::isfinite(x0)) {
    out += "<text x=\"" + num(W / 2.0) + "\" y=\"" + num(H / 2.0) +
           "\" text-anchor=\"middle\" class=\"muted\">no data</text>";
    return out + kClose;
  }
  if (c.y_from_zero) y0 = std::min(y0, 0.0);
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (y1 <= y0) y1 = y0 + 1;
  if (x1 <= x0) x1 = x0 + 1;
  y1 += (y1 - y0) * 0.05;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  out += "<rect x=\"" + num(L) + "\" y=\"" + num(T) + "\" width=\"" + num(W - L - R) +
         "\" height=\"" + num(H - T - B) + "\" class=\"plot\"/>";
  for (double t : nice_ticks(y0, y1, 4)) {
    out += "<line x1=\"" + num(L) + "\" x2=\"" + num(W - R) + "\" y1=\"" + num(py(t)) + "\" y2=\"" +
           num(py(t)) + "\" class=\"grid\"/><text x=\"" + num(L - 4) + "\" y=\"" + num(py(t) + 4) +
           "\" text-anchor=\"end\" class=\"tick\">" + esc(tick_text(t)) + "</text>";
  }
  for (double t : nice_ticks(x0, x1, 8)) {
    out += "<text x=\"" + num(px(t)) + "\" y=\"" + num(H - B + 14) +
           "\" text-anchor=\"middle\" class=\"tick\">" + esc(tick_text(t)) + "</text>";
  }
  out += "<text x=\"" + num(L + (W - L - R) / 2.0) + "\" y=\"" + num(H - 4) +
         "\" text-anchor=\"middle\" class=\"axis\">" + esc(c.x_label) + "</text>";
  out += "<text transform=\"translate(12 " + num(T + (H - T - B) / 2.0) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"axis\">" + esc(c.y_label) + "</text>";
  for (const Marker& m : c.markers) {
    out += "<line x1=\"" + num(px(m.x)) + "\" x2=\"" + num(px(m.x)) + "\" y1=\"" + num(T) +
           "\" y2=\"" + num(H - B) + "\" stroke=\"" + esc(m.color) +
           "\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\" class=\"marker\"><title>" +
           esc(m.label) + "</title></line><text x=\"" + num(px(m.x) + 3) + "\" y=\"" + num(T + 11) +
           "\" class=\"marker-label\" fill=\"" + esc(m.color) + "\">" + esc(m.label) + "</text>";
  }
  for (const Series& s : c.series) {
    std::string d;
    double last_y = 0;
    bool first = true;
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (first) {
        d += "M" + num(px(x)) + " " + num(py(y));
      } else {
        if (s.steps) d += "H" + num(px(x));
        d += (s.steps ? "V" : "L") + (s.steps ? num(py(y)) : num(px(x)) + " " + num(py(y)));
      }
      last_y = y;
      first = false;
    }
    (void)last_y;
    out += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + esc(s.color) +
           "\" stroke-width=\"1.6\" class=\"series\"><title>" + esc(s.name) + "</title></path>";
    if (s.dots && s.points.size() <= 400) {
      for (auto [x, y] : s.points) {
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        out += "<circle cx=\"" + num(px(x)) + "\" cy=\"" + num(py(y)) + "\" r=\"2\" fill=\"" +
               esc(s.color) + "\"><title>" + esc(s.name) + ": " + esc(tick_text(x)) + " → " +
               esc(tick_text(y)) + "</title></circle>";
      }
    }
  }
  // Legend, top right.
  double lx = W - R - 8;
  for (size_t i = c.series.size(); i-- > 0;) {
    const Series& s = c.series[i];
    const double w = 14 + 6.5 * static_cast<double>(s.name.size());
    lx -= w;
    out += "<rect x=\"" + num(lx) + "\" y=\"6\" width=\"10\" height=\"10\" fill=\"" + esc(s.color) +
           "\"/><text x=\"" + num(lx + 13) + "\" y=\"15\" class=\"legend\">" + esc(s.name) +
           "</text>";
    lx -= 8;
  }
  return out + kClose;
}

std::string render(const Heatmap& h) {
  const size_t rows = h.row_labels.size(), cols = h.col_labels.size();
  int label_w = 8;
  for (const std::string& l : h.row_labels) label_w = std::max<int>(label_w, 7 * l.size());
  const int L = label_w + 14, T = 8, B = 52;
  const int cw =
      h.cell_w > 0 ? h.cell_w
                   : std::max(2, static_cast<int>((h.width - L - 16) / std::max<size_t>(cols, 1)));
  const int W = L + cw * static_cast<int>(cols) + 16;
  const int H = T + h.cell_h * static_cast<int>(rows) + B;
  std::string out = svg_open(h.id, std::max(W, 320), H, h.title);
  auto color = [&](double v) -> std::string {
    if (!h.categories.empty()) return palette(static_cast<size_t>(v));
    if (v == 0) return h.zero_color;
    double t;
    if (h.log_scale) {
      t = (std::log10(std::max(v, h.lo)) - std::log10(h.lo)) /
          (std::log10(h.hi) - std::log10(h.lo));
    } else {
      t = (v - h.lo) / (h.hi - h.lo);
    }
    return ramp(t);
  };
  for (size_t r = 0; r < rows; ++r) {
    out += "<text x=\"" + num(L - 4) + "\" y=\"" + num(T + h.cell_h * (r + 0.5) + 4) +
           "\" text-anchor=\"end\" class=\"tick\">" + esc(h.row_labels[r]) + "</text>";
    for (size_t c = 0; c < cols; ++c) {
      const double v = h.values[r * cols + c];
      if (std::isnan(v)) continue;
      out += "<rect x=\"" + num(L + cw * static_cast<double>(c)) + "\" y=\"" +
             num(T + h.cell_h * static_cast<double>(r)) + "\" width=\"" + num(cw) + "\" height=\"" +
             num(h.cell_h) + "\" fill=\"" + color(v) + "\">";
      if (!h.tooltips.empty()) out += "<title>" + esc(h.tooltips[r * cols + c]) + "</title>";
      out += "</rect>";
    }
  }
  const size_t every = std::max<size_t>(1, static_cast<size_t>(std::ceil(36.0 / cw)));
  for (size_t c = 0; c < cols; c += every) {
    out += "<text x=\"" + num(L + cw * (c + 0.5)) + "\" y=\"" +
           num(T + h.cell_h * static_cast<double>(rows) + 12) +
           "\" text-anchor=\"middle\" class=\"tick\">" + esc(h.col_labels[c]) + "</text>";
  }
  for (double mc : h.marked_cols) {
    out += "<rect x=\"" + num(L + cw * mc) + "\" y=\"" + num(T - 2) + "\" width=\"" + num(cw) +
           "\" height=\"" + num(h.cell_h * static_cast<double>(rows) + 4) +
           "\" fill=\"none\" stroke=\"" + std::string(kColorSplit) +
           "\" stroke-width=\"1.5\" class=\"marker\"/>";
  }
  const double ay = T + h.cell_h * static_cast<double>(rows) + 26;
  out += "<text x=\"" + num(L) + "\" y=\"" + num(ay) + "\" class=\"axis\">" + esc(h.x_label) +
         "</text>";
  // Legend: colour bar or categories.
  const double ly = ay + 8;
  if (h.categories.empty()) {
    double x = L;
    out += "<rect x=\"" + num(x) + "\" y=\"" + num(ly) + "\" width=\"12\" height=\"10\" fill=\"" +
           h.zero_color + "\" stroke=\"#999\" stroke-width=\"0.5\"/><text x=\"" + num(x + 15) +
           "\" y=\"" + num(ly + 9) + "\" class=\"legend\">identical</text>";
    x += 80;
    out += "<text x=\"" + num(x) + "\" y=\"" + num(ly + 9) + "\" class=\"legend\">" +
           esc(h.legend_low) + "</text>";
    x += 8 + 6.5 * static_cast<double>(h.legend_low.size());
    for (int i = 0; i < 20; ++i) {
      out += "<rect x=\"" + num(x + 6 * i) + "\" y=\"" + num(ly) +
             "\" width=\"6\" height=\"10\" fill=\"" + ramp(i / 19.0) + "\"/>";
    }
    out += "<text x=\"" + num(x + 124) + "\" y=\"" + num(ly + 9) + "\" class=\"legend\">" +
           esc(h.legend_high) + "</text>";
  }
  out += kClose;
  if (!h.categories.empty()) {
    out += "<ul class=\"legend-list\">";
    for (size_t i = 0; i < h.categories.size(); ++i) {
      out += std::string("<li><span class=\"swatch\" style=\"background:") + palette(i) +
             "\"></span>" + esc(h.categories[i]) + "</li>";
    }
    out += "</ul>";
  }
  return out;
}

std::string render(const Bars& b) {
  const int W = b.width, H = b.height, L = 44, R = 10, T = 16, B = 36;
  std::string out = svg_open(b.id, W, H, b.title);
  double hi = 0;
  for (double v : b.values) hi = std::max(hi, v);
  if (hi <= 0) hi = 1;
  const size_t n = b.values.size();
  const double bw = n ? static_cast<double>(W - L - R) / n : 0;
  auto py = [&](double y) { return H - B - y / hi * (H - T - B); };
  for (double t : nice_ticks(0, hi, 4)) {
    out += "<line x1=\"" + num(L) + "\" x2=\"" + num(W - R) + "\" y1=\"" + num(py(t)) + "\" y2=\"" +
           num(py(t)) + "\" class=\"grid\"/><text x=\"" + num(L - 4) + "\" y=\"" + num(py(t) + 4) +
           "\" text-anchor=\"end\" class=\"tick\">" + esc(tick_text(t)) + "</text>";
  }
  const size_t every =
      std::max<size_t>(1, static_cast<size_t>(std::ceil(24.0 / std::max(bw, 1.0))));
  for (size_t i = 0; i < n; ++i) {
    const double x = L + bw * i;
    out += "<rect x=\"" + num(x + bw * 0.15) + "\" y=\"" + num(py(b.values[i])) + "\" width=\"" +
           num(bw * 0.7) + "\" height=\"" + num(py(0) - py(b.values[i])) + "\" fill=\"" +
           esc(b.color) + "\"><title>" + esc(b.labels[i]) + ": " + esc(tick_text(b.values[i])) +
           "</title></rect>";
    if (i % every == 0) {
      out += "<text x=\"" + num(x + bw / 2) + "\" y=\"" + num(H - B + 14) +
             "\" text-anchor=\"middle\" class=\"tick\">" + esc(b.labels[i]) + "</text>";
    }
  }
  out += "<text x=\"" + num(L + (W - L - R) / 2.0) + "\" y=\"" + num(H - 4) +
         "\" text-anchor=\"middle\" class=\"axis\">" + esc(b.x_label) + "</text>";
  out += "<text transform=\"translate(12 " + num(T + (H - T - B) / 2.0) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"axis\">" + esc(b.y_label) + "</text>";
  return out + kClose;
}

}  // namespace llmrr::report
