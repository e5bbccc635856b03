#pragma once
// The PPO collector actor: drives a PpoCollectorStage, one collect per free rollout slot whose
// due policy version (actors/ppo_pipeline.hpp) it holds, hands each slot to the learner once its
// collect has COMPLETED, swaps in published versions when they are due (returning each buffer
// with the event after its copy), and tells the supervisor when the run is complete.
//
// Messages: (wire_atom, collector, learner, supervisor) once both are spawned; (collect_atom) its
// own tick, at most one in the mailbox; (collected_atom, handle) from its stage's completion
// callback; (slot_free_atom, slot, event) and (policy_atom, handle) and (finished_atom) from the
// learner; (fault_atom, what) a test's fault.
#include <caf/all.hpp>

#include <memory>

#include "actors/ppo_pipeline.hpp"

namespace foxhunt::actors {

caf::actor spawn_ppo_collector(caf::local_actor* parent, std::shared_ptr<PpoCollectorStage> stage,
                               std::shared_ptr<PpoShared> shared);

}  // namespace foxhunt::actors
