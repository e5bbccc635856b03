#pragma once
// ProgressReporter: the live progress line of `foxhunt train` and the run's metrics files
// (metrics.jsonl, TensorBoard), fed with ProgressSnapshots by the DQN pipeline and the PPO loop.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/metrics_log.hpp"
#include "actors/pipeline.hpp"
#include "actors/run_config.hpp"

namespace foxhunt::actors {

// 1.23G / 4.56M / 7.8k / 12
std::string human_count(double v);

class ProgressReporter {
 public:
  ProgressReporter(const RunConfig& cfg, const std::filesystem::path& run_dir, bool console);
  void operator()(const ProgressSnapshot& s);
  void flush();
  // A new segment whose snapshot clock starts at 0 again (the counts continue).
  void restart_clock() { last_seconds_ = 0; }
  void finish_line();

 private:
  std::int64_t total_;
  bool console_, tty_;
  double last_seconds_ = 0, last_line_ = -1e9;
  std::int64_t last_steps_ = 0, last_updates_ = 0, calls_ = 0;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

// The same for a run of several agents: one column per agent on the progress line (its steps,
// steps/s and latest episode return), and each agent's scalars in the run's metrics files under
// `agent/<name>/<tag>` at that agent's own env-step count.
class AgentsProgressReporter {
 public:
  // (name, total_env_steps) per agent; the metrics files as logging.jsonl / logging.tensorboard.
  AgentsProgressReporter(const std::vector<std::pair<std::string, std::int64_t>>& agents, bool jsonl,
                         bool tensorboard, const std::filesystem::path& run_dir, bool console);
  // snapshots[i] is the agent named names[i] (the agents still running, in any order).
  void operator()(const std::vector<std::string>& names, const std::vector<ProgressSnapshot>& snapshots);
  void flush();
  void restart_clock();  // a new segment: every agent's snapshot clock starts at 0 again
  void finish_line();

 private:
  struct Column {
    std::string name;
    std::int64_t total = 0;
    double last_seconds = 0;
    std::int64_t last_steps = 0, last_updates = 0;
    std::string text;  // its last part of the line
  };
  Column* column(const std::string& name);
  std::vector<Column> columns_;
  bool console_, tty_;
  double last_line_ = -1e9;
  std::int64_t calls_ = 0;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

}  // namespace foxhunt::actors
