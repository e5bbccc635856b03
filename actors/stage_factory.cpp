#include "actors/stage_factory.hpp"

#include <stdexcept>

namespace foxhunt::actors {

PipelineStages make_stages(const RunConfig& config, const std::optional<std::filesystem::path>& resume) {
  (void)resume;
  // The collector (rl/envs, issue 3) and learner/target-sync (models/ + rl/dqn, issue 5) stages
  // are wired here once those components are on main; the runtime, its protocol and the CLI
  // around it do not depend on them.
  throw std::runtime_error("env.kind = \"" + config.env.kind +
                           "\": the GPU stages for this run (vectorized environments, issue 3; DQN learner, "
                           "issue 5) are not on this branch yet, so `foxhunt train` cannot build its pipeline");
}

}  // namespace foxhunt::actors
