#include "report/html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace foxhunt::report {
namespace {

constexpr int kCharts = 3;

std::string multiplier_text(double m) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "x%g", m);
  return buf;
}

std::string level_text(double level) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", 100.0 * level);
  return buf;
}

// The two tables of each cost multiplier: returns and risk, then trading.
const std::vector<std::string> kRiskKeys = {"total_return", "annual_return", "annual_volatility",  "sharpe", "sortino",
                                            "calmar",       "max_drawdown",  "max_drawdown_steps", "var95",  "es95"};
const std::vector<std::string> kTradingKeys = {"turnover",       "trades", "hit_rate", "avg_holding_steps", "exposure",
                                               "corr_reference", "cost",   "borrow",   "terminated",        "length"};
const std::vector<std::string> kSensitivityKeys = {"total_return", "sharpe", "max_drawdown", "turnover", "cost"};

bool has_curves(const Report& r) {
  for (const PolicyRun& run : r.runs)
    if (run.curves.rows > 0) return true;
  return false;
}

std::string cell(const Interval& i, Unit u) {
  std::string s = format_value(i.mean, u);
  if (std::isfinite(i.low) && std::isfinite(i.high))
    s += "<br><small>[" + format_value(i.low, u) + ", " + format_value(i.high, u) + "]</small>";
  return s;
}

std::string metrics_table(const Report& r, double m, const std::vector<std::string>& keys) {
  std::string s = "<table><tr><th>policy</th>";
  std::vector<int> cols;
  for (const auto& k : keys) {
    const int c = column_index(r, k);
    if (c < 0) continue;
    cols.push_back(c);
    s += "<th>" + xml_escape(r.columns[c].label) + "</th>";
  }
  s += "</tr>\n";
  for (const PolicyRun& run : r.runs) {
    if (run.cost_multiplier != m) continue;
    s += "<tr><td class=\"name\">" + xml_escape(run_label(r, run)) + "</td>";
    for (int c : cols)
      s += "<td>" + (c < static_cast<int>(run.summary.size()) ? cell(run.summary[c], r.columns[c].unit) : "") + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string sensitivity_table(const Report& r) {
  std::string s = "<table><tr><th>policy</th><th>metric</th>";
  for (double m : r.cost_multipliers) s += "<th>costs " + multiplier_text(m) + "</th>";
  s += "</tr>\n";
  std::vector<std::string> labels;
  for (const PolicyRun& run : r.runs) {
    const std::string l = run_label(r, run);
    if (std::find(labels.begin(), labels.end(), l) == labels.end()) labels.push_back(l);
  }
  for (const std::string& l : labels)
    for (const auto& key : kSensitivityKeys) {
      const int c = column_index(r, key);
      if (c < 0) continue;
      s += "<tr><td class=\"name\">" + xml_escape(l) + "</td><td class=\"name\">" + xml_escape(r.columns[c].label) +
           "</td>";
      for (double m : r.cost_multipliers) {
        std::string v;
        for (const PolicyRun& run : r.runs)
          if (run.cost_multiplier == m && run_label(r, run) == l && c < static_cast<int>(run.summary.size()))
            v = cell(run.summary[c], r.columns[c].unit);
        s += "<td>" + v + "</td>";
      }
      s += "</tr>\n";
    }
  return s + "</table>\n";
}

std::string aggregate_table(const Report& r) {
  std::string s = "<table><tr><th>policy</th><th>costs</th><th>checkpoints</th>";
  std::vector<int> cols;
  for (const auto& k : kRiskKeys) {
    const int c = column_index(r, k);
    if (c < 0) continue;
    cols.push_back(c);
    s += "<th>" + xml_escape(r.columns[c].label) + "</th>";
  }
  s += "</tr>\n";
  for (const Aggregate& a : r.aggregates) {
    const std::string name = a.learner.empty() ? a.policy : a.policy + " (" + a.learner + ")";
    s += "<tr><td class=\"name\">" + xml_escape(name) + "</td><td>" + multiplier_text(a.cost_multiplier) +
         "</td><td>" + std::to_string(a.values.empty() ? 0 : a.values[0].size()) + "</td>";
    for (int c : cols) s += "<td>" + cell(a.across[c], r.columns[c].unit) + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string number_text(double v, const char* f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string format_value(double v, Unit unit) {
  if (!std::isfinite(v)) return "n/a";
  switch (unit) {
    case Unit::fraction:
      return number_text(100.0 * v, "%.2f%%");
    case Unit::count:
    case Unit::steps:
      return number_text(v, "%.1f");
    case Unit::number:
      break;
  }
  return number_text(v, "%.3f");
}

std::vector<PixelBox> chart_plot_boxes(const Report& r) {
  std::vector<PixelBox> boxes;
  if (!has_curves(r)) return boxes;
  const ChartGeometry& g = HtmlLayout::chart;
  for (int k = 0; k < kCharts; ++k) {
    const int top = HtmlLayout::header + k * (g.height + HtmlLayout::gap);
    boxes.push_back({g.left, top + g.top, g.width - g.right, top + g.height - g.bottom});
  }
  return boxes;
}

std::string report_html(const Report& r) {
  const ChartGeometry& g = HtmlLayout::chart;
  const double cm = chart_multiplier(r);
  std::string s;
  s += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>foxhunt eval report</title>\n<style>\n";
  s += "body{margin:0;padding:0;background:#fff;color:#222;font-family:sans-serif}\n";
  s += "#head{height:" + std::to_string(HtmlLayout::header) +
       "px;overflow:hidden;box-sizing:border-box;padding:8px 16px;margin:0}\n";
  s += "#head h1{font-size:20px;margin:4px 0 6px}#head p{font-size:12px;margin:2px 0;color:#444}\n";
  s += ".chart{height:" + std::to_string(g.height + HtmlLayout::gap) +
       "px;margin:0;padding:0}.chart svg{display:block}\n";
  s += "h2{font-size:15px;margin:18px 16px 6px}p.note{font-size:12px;margin:4px 16px;color:#444}\n";
  s += "table{border-collapse:collapse;margin:6px 16px 12px;font-size:12px}\n";
  s += "th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;vertical-align:top}th{background:#f4f4f4}\n";
  s += "td.name{text-align:left;white-space:nowrap}small{color:#666}\n</style></head><body>\n";

  s += "<div id=\"head\"><h1>foxhunt eval report</h1>\n";
  s += "<p>" + std::to_string(r.episodes) + " episodes x " + std::to_string(r.steps) + " steps, eval seed " +
       std::to_string(r.seed) + ", " + xml_escape(r.environment) +
       (r.market.empty() ? std::string() : " " + xml_escape(r.market)) + "</p>\n";
  if (!r.data.empty()) s += "<p>" + xml_escape(r.data) + "</p>\n";
  for (std::size_t k = 0; k < r.checkpoints.size() && k < 3; ++k)
    s += "<p>[" + std::to_string(k + 1) + "] " + xml_escape(r.checkpoints[k].path) + "</p>\n";
  if (r.checkpoints.size() > 3)
    s += "<p>... " + std::to_string(r.checkpoints.size() - 3) + " more checkpoints (tables below)</p>\n";
  s += "</div>\n";

  if (has_curves(r)) {
    std::vector<Series> equity, drawdown, weights;
    std::size_t color = 0, weight_color = 0;
    const auto& pal = palette();
    for (const PolicyRun& run : r.runs) {
      if (run.cost_multiplier != cm || run.curves.rows == 0) continue;
      const std::string c = pal[color++ % pal.size()];
      const std::string name = run_label(r, run);
      equity.push_back({name, c, run.curves.equity, !run.agent});
      std::vector<double> dd(run.curves.drawdown.size());
      for (std::size_t k = 0; k < dd.size(); ++k) dd[k] = -run.curves.drawdown[k];
      drawdown.push_back({name, c, dd, !run.agent});
      if (!run.agent) continue;
      for (int a = 0; a < run.curves.assets && weights.size() < 16; ++a) {
        std::vector<double> w(static_cast<std::size_t>(run.curves.rows));
        for (std::int64_t t = 0; t < run.curves.rows; ++t) w[t] = run.curves.weight[t * run.curves.assets + a];
        const std::string wc = run.curves.assets > 1 ? pal[weight_color++ % pal.size()] : c;
        weights.push_back({run.curves.assets > 1 ? name + " asset " + std::to_string(a) : name, wc, w, false});
      }
    }
    const std::string costs = " (costs " + multiplier_text(cm) + ", mean over episodes)";
    s += "<div class=\"chart\">" +
         line_chart_svg("Equity / initial equity" + costs, "step", equity, AxisFormat::number, g) + "</div>\n";
    s += "<div class=\"chart\">" + line_chart_svg("Drawdown" + costs, "step", drawdown, AxisFormat::percent, g) +
         "</div>\n";
    s += "<div class=\"chart\">" +
         line_chart_svg("Agent weight per asset" + costs, "step", weights, AxisFormat::number, g) + "</div>\n";
  }

  s += "<p class=\"note\">Each cell: the mean over episodes and its " + level_text(r.bootstrap.level) +
       " percentile-bootstrap interval (" + std::to_string(r.bootstrap.resamples) +
       " resamples of the episodes). Correlation is to " + xml_escape(r.reference_policy) +
       " on the same paths; VaR and ES are per step, historical, 95%. n/a: undefined (docs/eval.md).</p>\n";
  for (double m : r.cost_multipliers) {
    s += "<h2>Costs " + multiplier_text(m) + ": returns and risk</h2>\n" + metrics_table(r, m, kRiskKeys);
    s += "<h2>Costs " + multiplier_text(m) + ": trading</h2>\n" + metrics_table(r, m, kTradingKeys);
  }
  if (r.cost_multipliers.size() > 1) s += "<h2>Cost sensitivity</h2>\n" + sensitivity_table(r);
  if (r.checkpoints.size() > 1) {
    s += "<h2>Across checkpoints</h2>\n<p class=\"note\">Mean of the checkpoints' means and its Student-t " +
         level_text(r.bootstrap.level) + " interval.</p>\n" + aggregate_table(r);
    s += "<h2>Checkpoints</h2>\n<table><tr><th>#</th><th>agent</th><th>learner</th><th>checkpoint</th><th>config</th>"
         "<th>run seed</th></tr>\n";
    for (std::size_t k = 0; k < r.checkpoints.size(); ++k)
      s += "<tr><td>" + std::to_string(k + 1) + "</td><td class=\"name\">" + xml_escape(r.checkpoints[k].agent) +
           "</td><td>" + xml_escape(r.checkpoints[k].learner) + "</td><td class=\"name\">" +
           xml_escape(r.checkpoints[k].path) + "</td><td class=\"name\">" + xml_escape(r.checkpoints[k].config) +
           "</td><td>" + std::to_string(r.checkpoints[k].run_seed) + "</td></tr>\n";
    s += "</table>\n";
  }
  s += "</body></html>\n";
  return s;
}

}  // namespace foxhunt::report
