#pragma once
// ProgressReporter: the live progress line of `foxhunt train` and the run's metrics files
// (metrics.jsonl, TensorBoard), fed with ProgressSnapshots by the DQN pipeline and the PPO loop.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

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

}  // namespace foxhunt::actors
