#pragma once
// Line charts as inline SVG text (no scripts, no fonts beyond the browser's sans-serif): a plot area
// with light grey grid lines at "nice" ticks (1, 2, 5 x 10^k), one polyline per series (non-finite
// points break the line), a legend to the right of the plot and a title above it.
#include <string>
#include <vector>

namespace foxhunt::report {

struct ChartGeometry {
  int width = 960, height = 300;                      // the svg element
  int left = 72, right = 200, top = 34, bottom = 40;  // margins around the plot area
};

struct Series {
  std::string name;
  std::string color;      // any SVG colour, e.g. "#1f77b4"
  std::vector<double> y;  // at x = 0, 1, 2, ...
  bool dashed = false;
};

enum class AxisFormat { number, percent };

std::string line_chart_svg(const std::string& title, const std::string& x_label, const std::vector<Series>& series,
                           AxisFormat y_format, const ChartGeometry& geometry = {});

// Tick positions covering [lo, hi] at a step of 1, 2 or 5 x 10^k, about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

// Text with &, <, >, " escaped for HTML and SVG.
std::string xml_escape(const std::string& text);

// A palette of saturated colours (the HTML test counts non-grey pixels to find drawn series).
const std::vector<std::string>& palette();

}  // namespace foxhunt::report
