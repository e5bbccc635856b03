#pragma once
// Builds the four stages of a run from its configuration: the one place that knows which
// rl/ and models/ classes implement the roles. `resume` is a checkpoint directory whose learner
// state the learner stage loads.
#include <filesystem>
#include <optional>

#include "actors/pipeline_actors.hpp"
#include "actors/run_config.hpp"

namespace foxhunt::actors {

// Throws std::runtime_error naming what is missing when a configured stage cannot be built
// (e.g. a component not yet on this branch, or no CUDA device).
PipelineStages make_stages(const RunConfig& config, const std::optional<std::filesystem::path>& resume);

}  // namespace foxhunt::actors
