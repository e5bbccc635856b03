#pragma once
// What `foxhunt train` does after parsing its arguments, as a library call (the CLI in apps/ and
// the end-to-end GPU tests share it): builds the stages from a RunConfig, writes the resolved
// config into the run directory, runs the pipeline with the progress line, metrics (JSONL and
// TensorBoard), checkpoints and the timeline, and returns the outcome with the stages (so tests
// can look at the device state after the run).
#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"

namespace foxhunt::actors {

// --resume / --checkpoint accept a checkpoint directory (it holds counters.json) or a run
// directory (its checkpoints/latest) or a checkpoint root (its latest). std::invalid_argument
// naming the path when there is none, and naming `latest` and its target when that target does
// not exist ("runs/a/checkpoints/latest names step_000000001000, which does not exist").
std::filesystem::path resolve_checkpoint(const std::filesystem::path& p);

// The resolved config of the run a checkpoint belongs to: <checkpoint>/config.resolved.toml, else
// <run>/config.resolved.toml for <run>/checkpoints/<step>; nullopt when neither exists.
std::optional<std::filesystem::path> run_config_of(const std::filesystem::path& checkpoint);

struct TrainRequest {
  RunConfig config;
  std::filesystem::path run_dir;                // created; config.resolved.toml, metrics, checkpoints/
  std::optional<std::filesystem::path> resume;  // a checkpoint directory (resolve_checkpoint)
  StageOptions stage_options;
  const std::atomic<int>* stop_signal = nullptr;          // nonzero: stop gracefully (SIGINT/SIGTERM flag)
  bool console = true;                                    // the live progress line on stderr
  std::function<void(const ProgressSnapshot&)> observer;  // called after each progress report (tests)
  // Called before each progress report is written: may add scalars (a distributed run's rank 0
  // adds the world/ aggregate of every rank's metrics).
  std::function<void(ProgressSnapshot&)> extend;
  // RunHooks::on_learner_stall: a data-parallel rank aborts its NCCL communicator there.
  std::function<void(const std::string& why)> on_learner_stall;
};

struct TrainOutcome {
  RunResult result;
  std::shared_ptr<StageSet> agent;  // the run's stages, quiesced (every stream synchronized); null: sync PPO
  PipelineStages stages;            // a DQN run's stages (empty for other kinds)
};

// Throws (before anything runs) std::invalid_argument / std::runtime_error for a configuration
// or checkpoint that cannot run (a resume is checked by require_resumable before the run
// directory is created); otherwise the run's outcome (failures are in result.outcome).
// The agent's stages come from make_stage_set (by learner.kind); PPO with pipeline.mode = "sync"
// runs run_ppo_training's loop instead. checkpoint.replay = "always" (DQN) or any PPO run through
// the actors (with every_env_steps > 0): the run goes in segments ending at each multiple of
// every_env_steps (PPO: at the first rollout boundary at or after it), each a run_pipeline with its own complete final checkpoint (replay
// buffer included: the periodic one), the next resuming from it as --resume would; the outcome,
// the stages and the counts are the last segment's (the counts are the run's).
TrainOutcome run_training(const TrainRequest& request);

// Writes kept_config_files(config) into the run directory (created) and returns them, for the
// checkpoints to attach. std::runtime_error naming the file that cannot be written.
std::vector<std::pair<std::string, std::string>> write_kept_configs(const std::filesystem::path& run_dir,
                                                                    const RunConfig& config);

}  // namespace foxhunt::actors
