#pragma once
// report.html: one self-contained page (inline CSS and SVG; no script, no external font or file),
// so it opens offline. From the top:
//   a header of fixed height (title, setup line)
//   three charts of fixed size, at the chart multiplier (chart_multiplier): the mean equity of
//   every agent run and baseline, their mean drawdown, and the agents' mean weight per asset
//   the tables: per cost multiplier every run's metrics, "mean [95% CI]" over episodes; the cost
//   sensitivity of the main metrics; with several checkpoints the aggregates across them
// The header and the charts have fixed pixel sizes (HtmlLayout), so the charts' plot areas sit at
// known page coordinates whatever the fonts (the screenshot test reads those areas).
#include <string>
#include <vector>

#include "report/report.hpp"
#include "report/svg.hpp"

namespace foxhunt::report {

struct HtmlLayout {
  static constexpr int header = 120;  // px, the header block
  static constexpr int gap = 20;      // px below each chart
  static constexpr ChartGeometry chart{};
};

struct PixelBox {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // page pixels at zoom 1, [x0, x1) x [y0, y1)
};

std::string report_html(const Report& report);

// The plot areas of the charts report_html draws, top to bottom (empty without curves).
std::vector<PixelBox> chart_plot_boxes(const Report& report);

// How the tables print a value of `unit` ("n/a" for NaN).
std::string format_value(double v, Unit unit);

}  // namespace foxhunt::report
