#include "report/csv.hpp"

#include <cmath>
#include <cstdio>

namespace foxhunt::report {
namespace {

std::string run_prefix(const PolicyRun& run) {
  return csv_field(run.policy) + "," + (run.checkpoint >= 0 ? std::to_string(run.checkpoint + 1) : std::string()) +
         "," + csv_number(run.cost_multiplier);
}

}  // namespace

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_number(double v) {
  if (!std::isfinite(v)) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string equity_csv(const Report& r) {
  std::string out = "policy,checkpoint,cost_multiplier,step,equity,drawdown";
  for (int a = 0; a < r.assets; ++a) out += ",weight_" + std::to_string(a);
  out += "\n";
  for (const PolicyRun& run : r.runs) {
    const Curves& c = run.curves;
    const std::string prefix = run_prefix(run);
    for (std::int64_t s = 0; s < c.rows; ++s) {
      out += prefix + "," + std::to_string(s) + "," + csv_number(c.equity[s]) + "," + csv_number(c.drawdown[s]);
      for (int a = 0; a < r.assets; ++a)
        out += "," + (a < c.assets ? csv_number(c.weight[s * c.assets + a]) : std::string());
      out += "\n";
    }
  }
  return out;
}

std::string episodes_csv(const Report& r) {
  std::string out = "policy,checkpoint,cost_multiplier,episode";
  for (const MetricColumn& c : r.columns) out += "," + csv_field(c.key);
  out += "\n";
  for (const PolicyRun& run : r.runs) {
    if (run.episodes.size() != r.columns.size() || run.episodes.empty()) continue;
    const std::string prefix = run_prefix(run);
    const std::size_t n = run.episodes[0].size();
    for (std::size_t i = 0; i < n; ++i) {
      out += prefix + "," + std::to_string(i);
      for (const auto& col : run.episodes) out += "," + csv_number(col[i]);
      out += "\n";
    }
  }
  return out;
}

}  // namespace foxhunt::report
