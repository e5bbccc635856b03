#pragma once
// The vocabulary of the actor pipeline: atoms and the CAF type-ID block that registers
// LocalDeviceHandle. Register with `cfg.add_message_types<caf::id_block::foxhunt_actors>()`
// (make_actor_system_config in actors/pipeline.hpp does it).
//
// Who sends what (each arrow carries handles or counts, never tensor data):
//   collector  --(insert_atom, handle{slot, event_C})-->           replay      once the collect COMPLETED
//   replay     --(slot_free_atom, slot, event_R)-->                 collector   credit: slot reusable after
//                                                                               event_R (sent when the insert
//                                                                               is ENQUEUED)
//   replay     --(batch_atom, handle{batch, event_R})-->            learner
//   learner    --(priorities_atom, batch, handle{td, event_L})-->   replay      credit: batch reusable
//   learner    --(weights_atom, handle{snapshot, event_L})-->       target_sync
//   target_sync--(synced_atom, event_T)-->                          learner     credit: snapshot reusable
//   target_sync--(policy_atom, handle{buffer, event_T})-->          collector
//   collector  --(released_atom, buffer, event_C)-->                target_sync credit: buffer reusable
// PPO (actors/ppo_pipeline.hpp):
//   collector  --(rollout_atom, handle{slot, event_C})-->           learner     once the collect COMPLETED
//   learner    --(slot_free_atom, slot, event_L)-->                 collector   credit: slot reusable after
//                                                                               event_L (sent when the update
//                                                                               is ENQUEUED)
//   learner    --(policy_atom, handle{buffer, version, event_L})--> collector
//   collector  --(released_atom, buffer, event_C)-->                learner     credit: buffer reusable
//   learner    --(finished_atom)-->                                 collector   every update of the run done
// Completion messages (collected_atom, *_done_atom) are sent to an actor by its own stage's
// completion callback (Stage::when_done) once the GPU has finished the work: they bound how far
// the host runs ahead. Credits that only order device work travel with an event instead.
#include <caf/atom.hpp>
#include <caf/type_id.hpp>

#include "actors/handle.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(foxhunt_actors, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(foxhunt_actors, (foxhunt::actors::LocalDeviceHandle))
CAF_END_TYPE_ID_BLOCK(foxhunt_actors)

// Atoms (0.17: at most 10 characters).
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, wire_atom, "wire")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, collect_atom, "collect")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, insert_atom, "insert")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, collected_atom, "collected")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, slot_free_atom, "slotfree")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, batch_atom, "batch")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, update_done_atom, "upddone")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, priorities_atom, "prio")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, weights_atom, "weights")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, synced_atom, "synced")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, sync_done_atom, "syncdone")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, policy_atom, "policy")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, released_atom, "released")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, checkpoint_atom, "ckpt")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, checkpoint_done_atom, "ckptdone")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, finished_atom, "finished")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, stop_atom, "stop")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, fault_atom, "fault")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, failure_atom, "failure")
CAF_ADD_ATOM(foxhunt_actors, foxhunt::actors, rollout_atom, "rollout")
