#pragma once
// What `foxhunt train` does for a run of several agents ([[agent]] tables, or --seeds): every
// agent's stages built (each inside its own gpu::StreamPriorityScope, so its streams carry its
// stream_priority), all of them run at once under one supervisor (run_agents), each with its own
// directory <run>/agents/<name>/ (config.resolved.toml, market.resolved.toml, checkpoints/), its
// own metrics prefix agent/<name>/ in the run's metrics.jsonl and tensorboard/, and its own column
// of the progress line. The run ends when every agent has reached run.total_env_steps, or at the
// first stop or failure (every agent then writes its final checkpoint).
//
// Segments: when any agent needs them (a PPO agent, or checkpoint.replay = "always", with
// checkpoint.every_env_steps > 0; see actors/train_run.hpp) the whole run goes in segments: each
// agent's segment ends at its next multiple of every_env_steps, the segment ends once every agent
// has reached its end, every agent writes a complete checkpoint, and the next segment resumes each
// from its own. An agent that has reached run.total_env_steps takes no part in later segments.
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "actors/runtime.hpp"
#include "actors/stage_factory.hpp"

namespace foxhunt::actors {

// <run>/agents/<name>: an agent's kept configs and checkpoints/.
std::filesystem::path agent_dir(const std::filesystem::path& run_dir, const std::string& name);

// --resume of a run of several agents: `p` is that run's directory; every agent's checkpoint is
// resolve_checkpoint(<p>/agents/<name>). std::invalid_argument naming --resume and the agent when
// one has none.
std::map<std::string, std::filesystem::path> resolve_agent_checkpoints(const AgentsConfig& config,
                                                                       const std::filesystem::path& p);

struct AgentsTrainRequest {
  AgentsConfig config;  // several agents
  std::filesystem::path run_dir;
  std::map<std::string, std::filesystem::path> resume;  // agent name -> checkpoint (every agent, or none)
  StageOptions stage_options;
  const std::atomic<int>* stop_signal = nullptr;  // nonzero: stop every agent gracefully
  bool console = true;
  // Called after each progress report with the running agents' names and snapshots (tests).
  std::function<void(const std::vector<std::string>&, const std::vector<ProgressSnapshot>&)> observer;
  // Test hook (RunHooks::on_started) of the first segment.
  std::function<void(caf::actor, const std::map<std::string, caf::actor>&)> on_started;
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(120)};
};

struct AgentsTrainOutcome {
  AgentsResult result;  // the last segment's outcome; every agent's counts and latest checkpoint
  std::vector<std::shared_ptr<StageSet>> sets;  // the last segment's agents, quiesced
};

// Throws (before anything is created) std::invalid_argument / std::runtime_error for a config or
// checkpoint that cannot run; otherwise the run's outcome (failures in result.outcome).
AgentsTrainOutcome run_agents_training(const AgentsTrainRequest& request);

}  // namespace foxhunt::actors
