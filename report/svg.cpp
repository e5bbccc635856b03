#include "report/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace foxhunt::report {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string tick_label(double v, double step, AxisFormat f) {
  if (std::abs(v) < step * 1e-9) v = 0.0;  // no "-0" or 1e-17 from the tick arithmetic
  if (f == AxisFormat::percent) {
    const double pct_step = step * 100.0;
    const int digits = pct_step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(pct_step)));
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f%%", std::min(digits, 6), v * 100.0);
    return buf;
  }
  const int digits = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::min(digits, 8), v);
  return buf;
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
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
      default:
        out += c;
    }
  }
  return out;
}

const std::vector<std::string>& palette() {
  static const std::vector<std::string> p = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
                                             "#e377c2", "#17becf", "#bcbd22", "#8c564b", "#0b3d91"};
  return p;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
  return ticks;
}

std::string line_chart_svg(const std::string& title, const std::string& x_label, const std::vector<Series>& series,
                           AxisFormat y_format, const ChartGeometry& g) {
  const double x0 = g.left, x1 = g.width - g.right, y0 = g.top, y1 = g.height - g.bottom;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  std::size_t points = 0;
  for (const Series& s : series) {
    points = std::max(points, s.y.size());
    for (double v : s.y)
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  }
  if (!(lo <= hi)) lo = 0.0, hi = 1.0;
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {  // a flat chart: a band around its value
    const double pad = std::max(std::abs(hi) * 0.01, 1e-6);
    lo -= pad;
    hi += pad;
  }
  const double pad = (hi - lo) * 0.05;
  lo -= pad;
  hi += pad;
  const double xmax = points > 1 ? static_cast<double>(points - 1) : 1.0;
  auto px = [&](double x) { return x0 + (x1 - x0) * x / xmax; };
  auto py = [&](double y) { return y1 - (y1 - y0) * (y - lo) / (hi - lo); };

  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(g.width) + "\" height=\"" +
       std::to_string(g.height) + "\" viewBox=\"0 0 " + std::to_string(g.width) + " " + std::to_string(g.height) +
       "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(g.width) + "\" height=\"" + std::to_string(g.height) +
       "\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + std::to_string(g.left) + "\" y=\"20\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\">" +
       xml_escape(title) + "</text>\n";
  // Grid and tick labels.
  const std::vector<double> yt = nice_ticks(lo, hi, 5);
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : (hi - lo);
  for (double t : yt) {
    const std::string y = fmt("%.1f", py(t));
    s += "<line x1=\"" + fmt("%.1f", x0) + "\" y1=\"" + y + "\" x2=\"" + fmt("%.1f", x1) + "\" y2=\"" + y +
         "\" stroke=\"#e0e0e0\"/>\n";
    s += "<text x=\"" + fmt("%.1f", x0 - 6) + "\" y=\"" + fmt("%.1f", py(t) + 4) +
         "\" text-anchor=\"end\" fill=\"#444\">" + tick_label(t, ystep, y_format) + "</text>\n";
  }
  for (double t : nice_ticks(0.0, xmax, 8)) {
    const std::string x = fmt("%.1f", px(t));
    s += "<line x1=\"" + x + "\" y1=\"" + fmt("%.1f", y0) + "\" x2=\"" + x + "\" y2=\"" + fmt("%.1f", y1) +
         "\" stroke=\"#eeeeee\"/>\n";
    s += "<text x=\"" + x + "\" y=\"" + fmt("%.1f", y1 + 15) + "\" text-anchor=\"middle\" fill=\"#444\">" +
         fmt("%.0f", t) + "</text>\n";
  }
  s += "<rect x=\"" + fmt("%.1f", x0) + "\" y=\"" + fmt("%.1f", y0) + "\" width=\"" + fmt("%.1f", x1 - x0) +
       "\" height=\"" + fmt("%.1f", y1 - y0) + "\" fill=\"none\" stroke=\"#888\"/>\n";
  s += "<text x=\"" + fmt("%.1f", (x0 + x1) / 2) + "\" y=\"" + std::to_string(g.height - 6) +
       "\" text-anchor=\"middle\" fill=\"#444\">" + xml_escape(x_label) + "</text>\n";
  // Series.
  for (const Series& ser : series) {
    std::string pts;
    auto flush = [&] {
      if (!pts.empty())
        s += "<polyline fill=\"none\" stroke=\"" + xml_escape(ser.color) + "\" stroke-width=\"1.8\"" +
             (ser.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + pts + "\"/>\n";
      pts.clear();
    };
    for (std::size_t k = 0; k < ser.y.size(); ++k) {
      if (!std::isfinite(ser.y[k])) {
        flush();
        continue;
      }
      pts += fmt("%.2f", px(static_cast<double>(k))) + "," + fmt("%.2f", py(ser.y[k])) + " ";
    }
    flush();
  }
  // Legend.
  double ly = y0 + 8;
  for (const Series& ser : series) {
    const double lx = x1 + 12;
    s += "<line x1=\"" + fmt("%.1f", lx) + "\" y1=\"" + fmt("%.1f", ly) + "\" x2=\"" + fmt("%.1f", lx + 18) +
         "\" y2=\"" + fmt("%.1f", ly) + "\" stroke=\"" + xml_escape(ser.color) + "\" stroke-width=\"2.5\"" +
         (ser.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
    s += "<text x=\"" + fmt("%.1f", lx + 24) + "\" y=\"" + fmt("%.1f", ly + 4) + "\" fill=\"#222\">" +
         xml_escape(ser.name) + "</text>\n";
    ly += 16;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace foxhunt::report
