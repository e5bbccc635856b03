#include "apps/run_checks.hpp"

#include <stdexcept>

#include "actors/checkpoint_check.hpp"
#include "actors/checkpoint_store.hpp"
#include "actors/agents_run.hpp"
#include "actors/train_run.hpp"

namespace foxhunt::apps {

CheckedRun check_run(const std::filesystem::path& config, const std::string& resume) {
  CheckedRun run;
  run.config = actors::load_run_config(config);
  if (!resume.empty()) {
    try {
      run.resume = actors::resolve_checkpoint(resume);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--resume ") + e.what());
    }
    actors::require_resumable(run.config, *run.resume);
    run.resume_counters = actors::CheckpointStore::read_counters(*run.resume);
  }
  run.memory = actors::estimate_memory(run.config);
  return run;
}

CheckedAgents check_agents(const std::filesystem::path& config, const std::string& seeds, const std::string& resume) {
  CheckedAgents run;
  run.config = actors::load_agents_config(config);
  if (!seeds.empty()) run.config = actors::with_seeds(run.config, actors::parse_seeds(seeds));
  if (!run.config.several) return run;
  if (!resume.empty()) {
    run.resume = resume;
    run.checkpoints = actors::resolve_agent_checkpoints(run.config, resume);
    for (const auto& a : run.config.agents) {
      const std::filesystem::path& dir = run.checkpoints.at(a.name);
      try {
        actors::require_resumable(a.config, dir);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("--resume: agent \"" + a.name + "\": " + e.what());
      }
      run.resume_counters[a.name] = actors::CheckpointStore::read_counters(dir);
    }
  }
  for (const auto& a : run.config.agents) {
    actors::MemoryEstimate m;
    try {
      m = actors::estimate_memory(a.config);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("agent \"" + a.name + "\": " + e.what());
    }
    run.total.parameters += m.parameters;
    run.total.replay += m.replay;
    run.total.learner += m.learner;
    run.total.collector += m.collector;
    run.total.fixed += m.fixed;
    run.memory.push_back(m);
  }
  return run;
}

std::string split_collectors_problem(const actors::RunConfig& config, int ranks, int devices) {
  const auto& d = config.distributed;
  if (d.placement != "split" || d.collector_device < 0 || d.collector_device + ranks <= devices) return "";
  return "distributed.collector_device = " + std::to_string(d.collector_device) + " with --gpus " +
         std::to_string(ranks) + " puts the collectors on devices " + std::to_string(d.collector_device) + ".." +
         std::to_string(d.collector_device + ranks - 1) + ", but this host has " + std::to_string(devices) +
         " (learners take devices 0..gpus-1; e.g. collector_device = gpus on 2 * gpus devices, or -1: each "
         "collector beside its learner)";
}

}  // namespace foxhunt::apps
