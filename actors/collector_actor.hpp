#pragma once
// The collector actor: drives a CollectorStage (policy forward, action selection, environment
// step into a transition slot), one collect per free slot credit, and hands each slot to replay
// once its collect has COMPLETED. It acts with the policy buffer target sync published last
// (timing-driven schedule) or with the version the counts make due (count-driven schedule,
// PipelineConfig::deterministic), and tells the supervisor when the run is complete.
//
// Messages: (wire_atom, collector, replay, learner, target_sync, supervisor) once all are spawned;
// (collect_atom) its own tick, at most one in the mailbox; (collected_atom, slot) from its stage's
// completion callback; (slot_free_atom, slot, event) from replay; (policy_atom, buffer) from target
// sync; (finished_atom) from replay, count-driven schedule only; (fault_atom, what) a test's fault.
#include <caf/all.hpp>

#include <memory>

#include "actors/pipeline_shared.hpp"
#include "actors/stages.hpp"

namespace foxhunt::actors {

caf::actor spawn_collector(caf::local_actor* parent, std::shared_ptr<CollectorStage> stage,
                           std::shared_ptr<PipelineShared> shared);

}  // namespace foxhunt::actors
