#pragma once
// A report as evaluate() fills it, from made-up numbers: two checkpoints, two cost multipliers,
// the agent and three baselines, two assets, curves that move.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace foxhunt::test {

inline report::Report fake_report(std::int64_t episodes = 64, std::int64_t steps = 100, int checkpoints = 2) {
  report::Report r;
  r.environment = "market";
  r.market = "/configs/markets/ou_mean_reversion.toml";
  r.assets = 2;
  r.episodes = episodes;
  r.steps = steps;
  r.periods_per_year = 252;
  r.initial_equity = 1e6;
  r.seed = 18446744073709551557ull;  // > 2^63: must survive as an unsigned number
  r.reference_policy = "buy_and_hold";
  r.cost_multipliers = {1.0, 2.0};
  for (int k = 0; k < checkpoints; ++k)
    r.checkpoints.push_back({"/runs/seed" + std::to_string(k) + "/checkpoints/step_1", "/runs/config.toml",
                             static_cast<std::uint64_t>(k + 1), "dqn", ""});
  r.columns = {{"total_return", "total return", report::Unit::fraction},
               {"sharpe", "Sharpe", report::Unit::number},
               {"max_drawdown", "max drawdown", report::Unit::fraction},
               {"hit_rate", "hit rate", report::Unit::fraction},
               {"trades", "trades", report::Unit::count},
               {"turnover", "turnover", report::Unit::number},
               {"cost", "costs", report::Unit::fraction}};
  std::mt19937_64 rng(5);
  std::normal_distribution<double> z(0.0, 1.0);
  const std::vector<std::pair<std::string, bool>> policies = {
      {"greedy", true}, {"buy_and_hold", false}, {"flat", false}, {"random", false}};
  for (double m : r.cost_multipliers) {
    for (const auto& [name, agent] : policies) {
      for (int k = 0; k < (agent ? checkpoints : 1); ++k) {
        report::PolicyRun run;
        run.policy = name;
        run.agent = agent;
        run.checkpoint = agent ? k : -1;
        run.cost_multiplier = m;
        run.episode_stats = {{"episodes", static_cast<double>(episodes)}, {"mean_return", 1.5}};
        run.episodes.assign(r.columns.size(), std::vector<double>(static_cast<std::size_t>(episodes)));
        const double drift = name == "flat" ? 0.0 : (agent ? 0.002 * (k + 1) : 0.0005);
        for (std::size_t c = 0; c < r.columns.size(); ++c)
          for (auto& v : run.episodes[c]) v = name == "flat" ? 0.0 : drift * 50 + 0.05 * z(rng);
        if (name == "flat")
          for (auto& v : run.episodes[3]) v = std::nan("");  // hit rate undefined without a position
        report::Curves& cv = run.curves;
        cv.rows = steps + 1;
        cv.assets = r.assets;
        double e = 1.0, peak = 1.0;
        for (std::int64_t t = 0; t < cv.rows; ++t) {
          if (t > 0 && name != "flat") e *= 1.0 + drift - 0.001 * m + 0.01 * z(rng);
          peak = std::max(peak, e);
          cv.equity.push_back(e);
          cv.drawdown.push_back(1.0 - e / peak);
          for (int a = 0; a < r.assets; ++a)
            cv.weight.push_back(name == "flat" ? 0.0 : (agent ? std::sin(0.1 * t + a + k) : 1.0));
        }
        r.runs.push_back(std::move(run));
      }
    }
  }
  return r;
}

}  // namespace foxhunt::test
