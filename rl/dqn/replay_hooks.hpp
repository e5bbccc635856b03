#pragma once
// Plugs rl/replay's ReplayBuffer into the DQN trainer and learner: the trainer's insert hook as a
// (1, N) TransitionBatch from one producer, the graph-safe sample (beta scheduled on the device)
// and the priority update, plus the DqnBatch view of a SampledBatch.
#include <cstdint>

#include "rl/dqn/batch.hpp"
#include "rl/dqn/trainer.hpp"
#include "rl/replay/replay_buffer.hpp"
#include "rl/replay/transition_batch.hpp"

namespace foxhunt::rl {

// The learner's view of a sampled batch (actions are int32: discrete or multi_discrete layouts).
DqnBatch dqn_batch_view(SampledBatch& out);
DqnBatch dqn_batch_view(const SampledBatchView& v);

// Registers a producer of num_envs environments with `rb`; the hooks keep references to rb and
// out (both must outlive them). The replay layout must hold f32 observations of the env's width
// and int32 actions (discrete for one branch, multi_discrete for several).
DqnReplayHooks make_replay_hooks(ReplayBuffer& rb, SampledBatch& out, std::int64_t num_envs);

}  // namespace foxhunt::rl
