#include "report/json.hpp"

#include <cmath>

namespace foxhunt::report {
namespace {

using nlohmann::json;

json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json numbers(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(number(x));
  return a;
}

json interval(const Interval& i) {
  return {{"mean", number(i.mean)}, {"ci_low", number(i.low)}, {"ci_high", number(i.high)}, {"count", i.count}};
}

json curves(const Curves& c) {
  json w = json::array();
  for (int a = 0; a < c.assets; ++a) {
    std::vector<double> col(static_cast<std::size_t>(c.rows));
    for (std::int64_t s = 0; s < c.rows; ++s) col[static_cast<std::size_t>(s)] = c.weight[s * c.assets + a];
    w.push_back(numbers(col));
  }
  return {{"steps", c.rows}, {"equity", numbers(c.equity)}, {"drawdown", numbers(c.drawdown)}, {"weights", w}};
}

}  // namespace

json report_json(const Report& r) {
  json j;
  j["schema"] = "foxhunt.eval.report";
  j["schema_version"] = kSchemaVersion;
  j["environment"] = r.environment;
  j["market"] = r.market;
  j["data"] = r.data;
  j["assets"] = r.assets;
  j["episodes"] = r.episodes;
  j["steps"] = r.steps;
  j["periods_per_year"] = number(r.periods_per_year);
  j["initial_equity"] = number(r.initial_equity);
  j["seed"] = r.seed;
  j["reference_policy"] = r.reference_policy;
  j["cost_multipliers"] = numbers(r.cost_multipliers);
  j["bootstrap"] = {{"method", "percentile"},
                    {"resamples", r.bootstrap.resamples},
                    {"level", r.bootstrap.level},
                    {"seed", r.bootstrap.seed},
                    {"over", "episodes"}};
  j["checkpoints"] = json::array();
  for (std::size_t k = 0; k < r.checkpoints.size(); ++k) {
    const CheckpointInfo& c = r.checkpoints[k];
    j["checkpoints"].push_back(
        {{"index", k},
         {"path", c.path},
         {"config", c.config},
         {"run_seed", c.run_seed},
         {"learner", c.learner},
         {"agent", c.agent.empty() ? json(nullptr) : json(c.agent)}});
  }
  j["metrics"] = json::array();
  for (const MetricColumn& c : r.columns)
    j["metrics"].push_back({{"key", c.key}, {"label", c.label}, {"unit", to_string(c.unit)}});
  j["runs"] = json::array();
  for (const PolicyRun& run : r.runs) {
    json o;
    o["policy"] = run.policy;
    o["label"] = run_label(r, run);
    o["agent"] = run.agent;
    o["checkpoint"] = run.checkpoint >= 0 ? json(run.checkpoint) : json(nullptr);
    o["cost_multiplier"] = number(run.cost_multiplier);
    json stats = json::object();
    for (const auto& [k, v] : run.episode_stats) stats[k] = number(v);
    o["episode_stats"] = stats;
    json metrics = json::object();
    for (std::size_t k = 0; k < r.columns.size() && k < run.summary.size(); ++k)
      metrics[r.columns[k].key] = interval(run.summary[k]);
    o["metrics"] = metrics;
    o["curves"] = run.curves.rows > 0 ? curves(run.curves) : json(nullptr);
    j["runs"].push_back(std::move(o));
  }
  j["aggregates"] = json::array();
  for (const Aggregate& a : r.aggregates) {
    json metrics = json::object();
    for (std::size_t k = 0; k < r.columns.size() && k < a.across.size(); ++k) {
      json m = interval(a.across[k]);
      m["values"] = numbers(a.values[k]);
      metrics[r.columns[k].key] = std::move(m);
    }
    j["aggregates"].push_back({{"policy", a.policy},
                               {"learner", a.learner},
                               {"cost_multiplier", number(a.cost_multiplier)},
                               {"checkpoints", a.values.empty() ? 0 : a.values[0].size()},
                               {"interval", "student_t"},
                               {"metrics", std::move(metrics)}});
  }
  return j;
}

}  // namespace foxhunt::report
