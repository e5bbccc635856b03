#pragma once
// The PPO learner actor: drives a PpoLearnerStage. For each rollout it enqueues the update and
// the publication of its result into a free policy buffer together (so version v is the weights
// after v updates), returns the rollout slot with the update's event, sends the policy to the
// collector, and counts the update once it has COMPLETED; after the run's last update it tells
// the collector. It first publishes the version it starts with.
//
// Messages: (wire_atom, collector, learner, supervisor); (rollout_atom, handle) and
// (released_atom, buffer, event) from the collector; (update_done_atom, version) from its stage's
// completion callback; (fault_atom, what) a test's fault.
#include <caf/all.hpp>

#include <memory>

#include "actors/ppo_pipeline.hpp"

namespace foxhunt::actors {

caf::actor spawn_ppo_learner(caf::local_actor* parent, std::shared_ptr<PpoLearnerStage> stage,
                             std::shared_ptr<PpoShared> shared);

}  // namespace foxhunt::actors
