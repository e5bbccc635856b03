#pragma once
// What the four pipeline actors (actors/collector_actor.*, replay_actor.*, learner_actor.*,
// target_sync_actor.*) share: the run's configuration, the stages they drive, the progress counts
// they publish, and their credit protocol (see actors/messages.hpp for the arrows).
//
// Resources and their credits: nothing is written while queued work still reads it, and every
// mailbox holds at most a fixed number of messages.
//   transition slots  collector -> replay   K = collector.slots(); the collector hands a slot to
//                                           replay once its collect has COMPLETED (completion
//                                           callback), so the replay stream never queues an insert
//                                           behind a collect still running (its samples would wait
//                                           too); replay returns the slot as soon as the insert is
//                                           ENQUEUED, with the insert's event (the next collect into
//                                           the slot waits on it on the device), once the replay
//                                           ratio allows more collection.
//   batch buffers     replay -> learner     B = replay.batches(); a batch returns with the learner's
//                                           priorities once its update has COMPLETED.
//   weight snapshot   learner -> target     1; returns when the sync has COMPLETED.
//   policy buffers    target -> collector   2 (double buffer); the one not in use returns with the
//                                           collector's event recorded when it swapped.
// Every credit cycle passes one completion callback (collect, update, sync), so the host never runs
// more than K collects (and K inserts), B updates and one sync ahead of the GPU, and no actor ever
// waits on the GPU; within those bounds the device orders the work by events.
//
// The replay ratio (updates per environment step) is enforced by the replay actor holding back
// slot credits and batch issues (actors/ratio.hpp), from host counts only.
//
// Each of collector, replay and learner is given a schedule when it is spawned: the timing-driven
// one (work as soon as credits allow) or, with PipelineConfig::deterministic, the count-driven one.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/checkpoint_store.hpp"
#include "actors/runtime.hpp"
#include "actors/stages.hpp"

namespace foxhunt::actors {

struct PipelineConfig {
  std::int64_t total_env_steps = 0;   // collection stops (and the run completes) at this count
  std::int64_t learning_starts = 0;   // env steps stored before the first update
  double replay_ratio = 1.0;          // updates per env step
  std::int64_t ratio_slack = 8;       // updates the learner may lag before collection is held
  std::int64_t sync_every = 1;        // updates per target-sync / policy publication
  std::int64_t checkpoint_every = 0;  // env steps between periodic checkpoints; 0: only at stop
  Counters start;                     // counts a resumed run continues from
  // Deterministic mode (the count-driven schedules): every stage's sequence of operations (and so
  // every value on the device) is a function of the counts alone, not of timing, at the price of
  // some overlap:
  //   replay   inserts, samples and priority updates in a fixed order: after each insert, the
  //            updates the ratio allows at the new step count are sampled before the next insert;
  //            update u uses batch buffer u % B, and the priorities of update u - B are applied
  //            right before it (so the last B priority updates of a run are never applied);
  //   learner  the snapshot of version v is taken right after update v * sync_every (further
  //            batches wait while the previous snapshot is still being published);
  //   collector a collect that starts at env step s uses exactly policy version
  //            floor(allowed_updates(s - slots * steps_per_slot) / sync_every) (it waits for it);
  //            on a resumed run, the versions the stage restored (CollectorStage::
  //            restored_pending_policies) are swapped in when due like published ones, and versions
  //            up to start.policy_version are not waited for (without restored collector state:
  //            up to allowed_updates(start.env_steps) / sync_every, the learner's version labels
  //            then being behind the ratio's); a resumed learner whose update count
  //            is a multiple of sync_every above start.policy_version publishes that version first;
  //   end      the run completes once every transition is inserted, every update the ratio
  //            allows at total_env_steps has completed (replay tells the collector) and the
  //            collector holds the policy version due at total_env_steps (what its next collect
  //            would use), so the final checkpoint holds a state that depends on the counts only.
  bool deterministic = false;
};

struct PipelineStages {
  std::shared_ptr<CollectorStage> collector;
  std::shared_ptr<ReplayStage> replay;
  std::shared_ptr<LearnerStage> learner;
  std::shared_ptr<TargetSyncStage> target_sync;
  std::vector<Stage*> all() const { return {collector.get(), replay.get(), learner.get(), target_sync.get()}; }
};

// What every pipeline actor shares: configuration, progress, and the periodic checkpoint writer.
struct PipelineShared {
  PipelineConfig config;
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();
  std::shared_ptr<CheckpointStore> store;    // null: no periodic checkpoints
  std::shared_ptr<BackgroundWorker> worker;  // runs checkpoint jobs; null with store null
  bool sync_writes_learner = false;          // TargetSyncStage::writes_learner_state()
};

}  // namespace foxhunt::actors
