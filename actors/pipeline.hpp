#pragma once
// The DQN agent of the actor runtime (actors/runtime.hpp): collector, replay, learner and target
// sync (actors/pipeline_shared.hpp: their credit protocol) as a StageSet, and run_pipeline, which
// runs one such agent to its end (spawn, watch, quiesce, final checkpoint: run_stage_set).
#include <memory>

#include "actors/pipeline_shared.hpp"
#include "actors/runtime.hpp"

namespace foxhunt::actors {

// The DQN stage set over `stages` (every one required) under `config`.
std::shared_ptr<StageSet> make_dqn_stage_set(const PipelineConfig& config, const PipelineStages& stages);

// Throws std::invalid_argument for a configuration the protocol cannot run (before spawning).
RunResult run_pipeline(const PipelineConfig& config, const PipelineStages& stages, const RunHooks& hooks);

}  // namespace foxhunt::actors
