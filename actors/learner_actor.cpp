#include "actors/learner_actor.hpp"

#include <spdlog/spdlog.h>

#include <deque>
#include <stdexcept>
#include <string>
#include <utility>

#include "actors/messages.hpp"
#include "actors/supervisor.hpp"
#include "actors/target_sync_actor.hpp"

namespace foxhunt::actors {
namespace {

class LearnerSchedule;

struct LearnerState {
  std::shared_ptr<LearnerStage> stage;
  std::shared_ptr<PipelineShared> shared;
  std::unique_ptr<LearnerSchedule> schedule;
  caf::actor replay;
  TargetSyncActor target_sync;
  SupervisorActor supervisor;
  std::int64_t updates_issued = 0;
  std::int64_t version = 0;
  bool snapshot_free = true, sync_wanted = false, sync_outstanding = false;
  std::uint64_t snapshot_reuse_after = 0;
  std::deque<LocalDeviceHandle> queued_batches;  // held while updates_held()
  std::int64_t next_checkpoint = 0;
  bool checkpoint_inflight = false;
  const char* name = "foxhunt.learner";
};
using LearnerSelf = caf::stateful_actor<LearnerState>;

// When updates wait, and what follows the return of the snapshot credit.
class LearnerSchedule {
 public:
  virtual ~LearnerSchedule() = default;
  // Updates wait while this is true (and always while a sync writes learner state).
  virtual bool holds_updates(const LearnerState& s) const = 0;
  // Target sync is done with the snapshot (its credit is back) and its sync's event is `ev`.
  virtual void on_synced(LearnerSelf* self, std::uint64_t ev) = 0;
};

bool updates_held(const LearnerState& s) { return s.sync_outstanding || s.schedule->holds_updates(s); }

void try_snapshot(LearnerSelf* self) {
  auto& s = self->state;
  if (!s.sync_wanted || !s.snapshot_free) return;
  ++s.version;
  LocalDeviceHandle snap = s.stage->snapshot(static_cast<std::uint64_t>(s.version), s.snapshot_reuse_after);
  snap.count = static_cast<std::uint64_t>(s.version);
  snap.slot = 0;
  s.snapshot_free = false;
  s.sync_wanted = false;
  if (s.shared->sync_writes_learner) s.sync_outstanding = true;
  s.shared->progress->policy_version.store(s.version);
  self->send(s.target_sync, weights_atom_v, snap);
}

void do_update(LearnerSelf* self, const LocalDeviceHandle& batch) {
  auto& s = self->state;
  LocalDeviceHandle td = s.stage->update(batch);
  td.slot = batch.slot;
  td.generation = batch.generation;
  ++s.updates_issued;
  s.shared->progress->updates_issued.store(s.updates_issued);
  caf::actor me = caf::actor_cast<caf::actor>(self);
  const std::int32_t b = batch.slot;
  s.stage->when_done([me, b, td] { caf::anon_send(me, update_done_atom_v, b, td); });
  if (s.updates_issued % s.shared->config.sync_every == 0) {
    s.sync_wanted = true;
    try_snapshot(self);
  }
}

void run_queued_updates(LearnerSelf* self) {
  auto& s = self->state;
  while (!s.queued_batches.empty() && !updates_held(s)) {
    LocalDeviceHandle b = s.queued_batches.front();
    s.queued_batches.pop_front();
    do_update(self, b);
  }
}

// The sync wrote state the next update reads: the learner's stream waits for it.
void wait_for_sync(LearnerSelf* self, std::uint64_t ev) {
  self->state.stage->wait(ev);
  self->state.sync_outstanding = false;
}

// Timing-driven: updates wait only for a sync that writes learner state; the snapshot is taken as
// soon as its credit is back, after the batches queued behind that sync.
class AsArrivedLearner final : public LearnerSchedule {
 public:
  bool holds_updates(const LearnerState&) const override { return false; }
  void on_synced(LearnerSelf* self, std::uint64_t ev) override {
    if (self->state.sync_outstanding) {
      wait_for_sync(self, ev);
      run_queued_updates(self);
    }
    try_snapshot(self);
  }
};

// Count-driven (PipelineConfig::deterministic): a wanted snapshot holds the updates too, so it
// sees exactly the updates up to its version; it is taken before any queued batch runs.
class ByCountLearner final : public LearnerSchedule {
 public:
  explicit ByCountLearner(LearnerState& s) {
    // A stop right after update v * sync_every, before snapshot v could be taken (the previous
    // one still publishing), leaves version v owed: taken before the first update.
    if (s.updates_issued / s.shared->config.sync_every > s.version) s.sync_wanted = true;
  }
  bool holds_updates(const LearnerState& s) const override { return s.sync_wanted; }
  void on_synced(LearnerSelf* self, std::uint64_t ev) override {
    if (self->state.sync_outstanding) wait_for_sync(self, ev);
    try_snapshot(self);  // the wanted version first: no update may slip in before it
    run_queued_updates(self);
  }
};

void maybe_checkpoint(LearnerSelf* self) {
  auto& s = self->state;
  const auto& cfg = s.shared->config;
  if (!s.shared->store || !s.shared->worker || cfg.checkpoint_every <= 0 || s.checkpoint_inflight) return;
  const std::int64_t steps = s.shared->progress->env_steps.load();
  if (steps < s.next_checkpoint) return;
  // The learner's state after every update enqueued so far, copied in stream order now.
  const Counters c{steps, s.updates_issued, s.version};
  auto job = s.stage->checkpoint_job();
  s.checkpoint_inflight = true;
  s.next_checkpoint = (steps / cfg.checkpoint_every + 1) * cfg.checkpoint_every;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  SupervisorActor sup = s.supervisor;
  auto store = s.shared->store;
  s.shared->worker->post([store, c, job, me, sup] {
    try {
      auto dir = store->write(c, job);
      caf::anon_send(me, checkpoint_done_atom_v, dir.string());
    } catch (const std::exception& e) {
      caf::anon_send(sup, failure_atom_v, std::string("periodic checkpoint failed: ") + e.what());
    }
  });
}

caf::behavior learner_actor(LearnerSelf* self, std::shared_ptr<LearnerStage> stage,
                            std::shared_ptr<PipelineShared> shared) {
  report_exceptions_as(self, "learner");
  auto& st = self->state;
  const auto& cfg = shared->config;
  st.stage = stage;
  st.shared = shared;
  st.updates_issued = cfg.start.updates;
  st.version = cfg.start.policy_version;
  if (cfg.deterministic)
    st.schedule = std::make_unique<ByCountLearner>(st);
  else
    st.schedule = std::make_unique<AsArrivedLearner>();
  if (cfg.checkpoint_every > 0)
    st.next_checkpoint = (cfg.start.env_steps / cfg.checkpoint_every + 1) * cfg.checkpoint_every;
  return {
      [self](wire_atom, const caf::actor&, const caf::actor& replay, const caf::actor&, const caf::actor& target_sync,
             const caf::actor& supervisor) {
        self->state.replay = replay;
        self->state.target_sync = caf::actor_cast<TargetSyncActor>(target_sync);
        self->state.supervisor = caf::actor_cast<SupervisorActor>(supervisor);
      },
      [self](batch_atom, const LocalDeviceHandle& batch) {
        try_snapshot(self);  // a resumed run's owed version (every actor is wired by now)
        if (updates_held(self->state))
          self->state.queued_batches.push_back(batch);
        else
          do_update(self, batch);
      },
      [self](update_done_atom, std::int32_t batch, const LocalDeviceHandle& td) {
        auto& s = self->state;
        self->send(s.replay, priorities_atom_v, batch, td);
        s.shared->progress->updates_done.fetch_add(1);
        Scalars scalars;
        if (s.stage->poll_metrics(scalars)) s.shared->progress->put_scalars(scalars);
        maybe_checkpoint(self);
      },
      [self](synced_atom, std::uint64_t ev) {
        auto& s = self->state;
        s.snapshot_free = true;
        s.snapshot_reuse_after = ev;
        s.schedule->on_synced(self, ev);
      },
      [self](checkpoint_done_atom, const std::string& dir) {
        self->state.checkpoint_inflight = false;
        self->state.shared->progress->checkpoints.fetch_add(1);
        spdlog::info("checkpoint written: {}", dir);
      },
      [](fault_atom, const std::string& what) -> caf::result<void> {
        throw std::runtime_error("injected fault: " + what);
      },
  };
}

}  // namespace

caf::actor spawn_learner(caf::local_actor* parent, std::shared_ptr<LearnerStage> stage,
                         std::shared_ptr<PipelineShared> shared) {
  return parent->spawn(learner_actor, std::move(stage), std::move(shared));
}

}  // namespace foxhunt::actors
