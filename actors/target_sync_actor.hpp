#pragma once
// The target-sync actor: drives a TargetSyncStage. Each weight snapshot from the learner becomes a
// target-network update and a policy publication into the policy buffer the collector does not
// use (double buffer); once the sync has COMPLETED the snapshot credit goes back to the learner
// and the buffer to the collector. The same under either schedule, so it has none.
//
// A typed actor: its interface is fixed, and the learner and the collector send to it through a
// TargetSyncActor handle, so a message it does not handle fails to compile.
#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "actors/handle.hpp"
#include "actors/messages.hpp"
#include "actors/pipeline_shared.hpp"
#include "actors/stages.hpp"

namespace foxhunt::actors {

using TargetSyncActor = caf::typed_actor<
    // (collector, replay, learner, target_sync, supervisor) once all are spawned
    caf::reacts_to<wire_atom, caf::actor, caf::actor, caf::actor, caf::actor, caf::actor>,
    caf::reacts_to<weights_atom, LocalDeviceHandle>,             // a snapshot, from the learner
    caf::reacts_to<sync_done_atom, LocalDeviceHandle>,           // its stage's completion callback: the policy buffer
    caf::reacts_to<released_atom, std::int32_t, std::uint64_t>,  // a policy buffer back from the collector
    caf::reacts_to<fault_atom, std::string>>;                    // a test's fault

TargetSyncActor spawn_target_sync(caf::local_actor* parent, std::shared_ptr<TargetSyncStage> stage,
                                  std::shared_ptr<PipelineShared> shared);

}  // namespace foxhunt::actors
