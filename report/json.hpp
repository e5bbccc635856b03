#pragma once
// report.json: one object, schema "foxhunt.eval.report" version kSchemaVersion (docs/eval.md has
// the schema). Undefined numbers (NaN) are null.
#include <nlohmann/json.hpp>

#include "report/report.hpp"

namespace foxhunt::report {

nlohmann::json report_json(const Report& report);

}  // namespace foxhunt::report
