#pragma once
// The host-side checks `foxhunt check` and `foxhunt train` share, none needing a device: the run
// config and everything it references (load_run_config), the checkpoint to resume
// (actors/checkpoint_check), and the run's device-memory estimate (actors/memory_estimate).
#include <filesystem>
#include <map>
#include <vector>
#include <optional>
#include <string>

#include "actors/memory_estimate.hpp"
#include "actors/run_config.hpp"
#include "actors/stages.hpp"

namespace foxhunt::apps {

struct CheckedRun {
  actors::RunConfig config;
  std::optional<std::filesystem::path> resume;  // the checkpoint directory --resume resolves to
  actors::Counters resume_counters;
  actors::MemoryEstimate memory;
};

// std::invalid_argument listing the problems of the first file that has any: the config's (all of
// them, from load_run_config), or the checkpoint's (naming --resume, each file, tensor and shape).
// `resume` empty: no resume.
CheckedRun check_run(const std::filesystem::path& config, const std::string& resume);

// A run of several agents ([[agent]] tables, or --seeds): every agent's config, checkpoint to
// resume (<resume>/agents/<name>) and memory estimate, and their sum (the agents share the device).
struct CheckedAgents {
  actors::AgentsConfig config;
  std::optional<std::filesystem::path> resume;              // the run directory given to --resume
  std::map<std::string, std::filesystem::path> checkpoints;  // agent -> checkpoint (with resume)
  std::map<std::string, actors::Counters> resume_counters;
  std::vector<actors::MemoryEstimate> memory;  // per agent, in order
  actors::MemoryEstimate total;                // summed
};

// load_agents_config(config), with_seeds when `seeds` is given; for a file of one agent without
// --seeds, config.several is false and nothing else is filled in (check_run's turn).
// std::invalid_argument as check_run's, naming the agent.
CheckedAgents check_agents(const std::filesystem::path& config, const std::string& seeds, const std::string& resume);

// Placement "split" over --gpus `ranks` (rank r's learner on device r, its collector on
// collector_device + r): "" when every collector's device is among `devices`, else the problem,
// naming distributed.collector_device and the devices it asks for (foxhunt launch, train --gpus).
std::string split_collectors_problem(const actors::RunConfig& config, int ranks, int devices);

}  // namespace foxhunt::apps
