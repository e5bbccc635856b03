#pragma once
// The report's CSV files, long format (one row per run and step / episode), RFC 4180 quoting,
// undefined numbers (NaN) as empty fields, numbers with 17 significant digits:
//   equity.csv    policy,checkpoint,cost_multiplier,step,equity,drawdown,weight_0..weight_{A-1}
//                 (means over episodes; step 0 is before the first step; checkpoint is 1-based,
//                 empty for baselines)
//   episodes.csv  policy,checkpoint,cost_multiplier,episode,<every metric key>
#include <string>

#include "report/report.hpp"

namespace foxhunt::report {

std::string equity_csv(const Report& report);
std::string episodes_csv(const Report& report);

// One CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& text);
// A number as CSV writes it: %.17g, empty for NaN and infinities.
std::string csv_number(double v);

}  // namespace foxhunt::report
