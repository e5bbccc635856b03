#pragma once
// The replay actor: drives a ReplayStage. It inserts the slots the collector hands over, returns
// their credits as far as the replay ratio allows (actors/ratio.hpp), samples batches for the
// learner and applies the learner's priorities: as soon as credits allow (timing-driven schedule)
// or in an order fixed by the counts (count-driven schedule, PipelineConfig::deterministic).
//
// Messages: (wire_atom, collector, replay, learner, target_sync, supervisor) once all are spawned;
// (insert_atom, slot) from the collector; (priorities_atom, batch, td) from the learner;
// (fault_atom, what) a test's fault.
#include <caf/all.hpp>

#include <memory>

#include "actors/pipeline_shared.hpp"
#include "actors/stages.hpp"

namespace foxhunt::actors {

caf::actor spawn_replay(caf::local_actor* parent, std::shared_ptr<ReplayStage> stage,
                        std::shared_ptr<PipelineShared> shared);

}  // namespace foxhunt::actors
