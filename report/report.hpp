#pragma once
// The evaluation report (`foxhunt eval`, docs/eval.md) as host data, and the files written from it:
//   report.json    every number: the setup (environment, seed, episodes, steps, cost multipliers,
//                  checkpoints), each run's metrics with bootstrap intervals, the environment's own
//                  episode statistics and the mean curves, and the aggregates across checkpoints
//                  (report/json.hpp; schema versioned by kSchemaVersion)
//   equity.csv     the mean curves per step of every run (report/csv.hpp)
//   episodes.csv   every episode's metrics of every run (report/csv.hpp)
//   report.html    self-contained page: inline SVG charts and the tables (report/html.hpp)
// A run is one policy evaluated at one cost multiplier: the agent of one checkpoint, or a
// baseline (which does not depend on the checkpoint: every checkpoint is evaluated on the same
// paths). Plain C++: the values arrive from the device through the exit module (actors/).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "report/stats.hpp"

namespace foxhunt::report {

inline constexpr int kSchemaVersion = 1;

// How a metric is shown: fraction as a percentage, number with three decimals, count and steps
// with one.
enum class Unit : std::uint8_t { fraction, number, count, steps };
const char* to_string(Unit u);

struct MetricColumn {
  std::string key;    // report.json's key ("sharpe")
  std::string label;  // table header ("Sharpe")
  Unit unit = Unit::number;
};

// Means over episodes per step: rows = steps + 1 (row 0 before the first step).
struct Curves {
  std::int64_t rows = 0;
  int assets = 0;
  std::vector<double> equity;    // (rows) equity / initial equity
  std::vector<double> drawdown;  // (rows) 1 - equity / running peak
  std::vector<double> weight;    // (rows, assets) row-major
};

struct PolicyRun {
  std::string policy;   // "greedy", "buy_and_hold", ...
  bool agent = false;   // a checkpoint's policy (false: a baseline)
  int checkpoint = -1;  // index into Report::checkpoints; -1 for baselines
  double cost_multiplier = 1.0;
  std::vector<std::pair<std::string, double>> episode_stats;  // the environment's own statistics
  std::vector<std::vector<double>> episodes;                  // [column][episode]; empty without metrics
  std::vector<Interval> summary;                              // [column], filled by summarize()
  Curves curves;                                              // empty without a trace
};

// One agent policy of one learner kind at one cost multiplier across every checkpoint of that
// kind (a DQN and a PPO agent evaluated together are two aggregates, not one).
struct Aggregate {
  std::string policy;
  std::string learner;  // the checkpoints' learner.kind
  double cost_multiplier = 1.0;
  std::vector<std::vector<double>> values;  // [column][checkpoint]: each checkpoint's mean over episodes
  std::vector<Interval> across;             // [column]: t_interval of values
};

struct CheckpointInfo {
  std::string path;    // the checkpoint directory
  std::string config;  // the run config it was evaluated with
  std::uint64_t run_seed = 0;
  std::string learner;  // learner.kind
  std::string agent;    // the agent's name in a run of several agents ("" otherwise)
};

struct Report {
  std::string environment;  // "market" | "cartpole"
  std::string market;       // the market config file (markets)
  // What the paths replayed, for replay markets: the split part and its bars and dates (e.g.
  // "test part: bars 3115-3650, 2019-12-02 to 2021-12-31"); empty for simulated markets.
  std::string data;
  int assets = 0;
  std::int64_t episodes = 0;  // environments, one episode each
  std::int64_t steps = 0;     // steps each environment ran
  double periods_per_year = 0.0;
  double initial_equity = 0.0;
  std::uint64_t seed = 0;        // eval seed: the price paths
  std::string reference_policy;  // corr_reference is against this policy's returns
  std::vector<double> cost_multipliers;
  std::vector<CheckpointInfo> checkpoints;
  std::vector<MetricColumn> columns;
  std::vector<PolicyRun> runs;
  std::vector<Aggregate> aggregates;  // filled by summarize()
  BootstrapOptions bootstrap;
};

// Every run's summary (bootstrap over its episodes), then one Aggregate per agent policy, learner
// kind and cost multiplier (over the runs of every checkpoint of that kind; with one checkpoint its
// interval is undefined).
void summarize(Report& report);

// "greedy" with one checkpoint; with several, "greedy[dqn]" for the agent of a run of several
// agents (when no other checkpoint has that agent name), else "greedy[2]" (1-based); baselines by
// name.
std::string run_label(const Report& report, const PolicyRun& run);
// Index of the column `key`, -1 when absent.
int column_index(const Report& report, std::string_view key);
// The multiplier the charts show: 1 when evaluated, else the first.
double chart_multiplier(const Report& report);

// Writes report.json, and for reports with curves equity.csv, episodes.csv and report.html, into
// `dir` (created). Returns the files written. std::runtime_error naming a file that cannot be written.
std::vector<std::filesystem::path> write_report(const Report& report, const std::filesystem::path& dir);

// Writes `text` to `file` or throws std::runtime_error naming it.
void write_text_file(const std::filesystem::path& file, std::string_view text);

}  // namespace foxhunt::report
