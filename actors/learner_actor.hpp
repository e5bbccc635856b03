#pragma once
// The learner actor: drives a LearnerStage. One update per batch replay sends (its TD errors go
// back with the batch's credit once the update has COMPLETED), a weight snapshot for target sync
// every sync_every updates (one snapshot credit), and the periodic checkpoints, written off the
// scheduler threads (PipelineShared::worker). A timing-driven schedule takes a snapshot as soon as
// its credit is back; the count-driven one (PipelineConfig::deterministic) takes version v right
// after update v * sync_every, holding further batches until it can.
//
// Messages: (wire_atom, collector, replay, learner, target_sync, supervisor) once all are spawned;
// (batch_atom, batch) from replay; (update_done_atom, batch, td) from its stage's completion
// callback; (synced_atom, event) from target sync; (checkpoint_done_atom, dir) from the checkpoint
// worker; (fault_atom, what) a test's fault.
#include <caf/all.hpp>

#include <memory>

#include "actors/pipeline_shared.hpp"
#include "actors/stages.hpp"

namespace foxhunt::actors {

caf::actor spawn_learner(caf::local_actor* parent, std::shared_ptr<LearnerStage> stage,
                         std::shared_ptr<PipelineShared> shared);

}  // namespace foxhunt::actors
