// Inline SVG charts for the HTML report: no script, no external resource. Every string that
// reaches the output goes through html_escape.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llmrr::report {

// &, <, >, " and ' as entities; invalid UTF-8 and control bytes as visible \xNN escapes.
std::string esc(std::string_view text);

inline constexpr const char* kColorA = "#1f6fb4";
inline constexpr const char* kColorB = "#e8710a";
inline constexpr const char* kColorSplit = "#c62828";

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y), x increasing
  bool steps = false;                             // draw as a step function
  bool dots = false;
};

struct Marker {
  double x = 0;
  std::string label;
  std::string color = kColorSplit;
};

struct LineChart {
  std::string id;  // element id
  std::string title;
  std::string x_label, y_label;
  std::vector<Series> series;
  std::vector<Marker> markers;
  int width = 560, height = 220;
  bool y_from_zero = true;
};
std::string render(const LineChart& c);

// A grid of cells: rows × cols values, NaN = no data. Colour: log scale of value in
// [lo, hi] (value 0 drawn as `zero_color`), or categorical when `categories` is set (value
// = category index, label = category name, shown in the legend and the tooltip).
struct Heatmap {
  std::string id;
  std::string title;
  std::string x_label, y_label;
  std::vector<std::string> row_labels;
  std::vector<std::string> col_labels;  // shown every few columns
  std::vector<double> values;           // rows × cols
  std::vector<std::string> tooltips;    // rows × cols, optional
  double lo = 1e-8, hi = 1.0;
  bool log_scale = true;
  std::string zero_color = "#eef3ee";
  std::string legend_low, legend_high;  // captions of the colour bar
  std::vector<std::string> categories;  // categorical mode
  int cell_w = 0, cell_h = 14;          // 0 = fit the width
  int width = 720;
  std::vector<double> marked_cols;  // columns outlined (e.g. the split)
};
std::string render(const Heatmap& h);

struct Bars {
  std::string id;
  std::string title;
  std::string x_label, y_label;
  std::vector<std::string> labels;
  std::vector<double> values;
  std::string color = kColorSplit;
  int width = 560, height = 200;
};
std::string render(const Bars& b);

// Categorical colour i of a fixed palette.
const char* palette(size_t i);

}  // namespace llmrr::report
