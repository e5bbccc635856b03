#include "actors/pipeline_actors.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "actors/supervisor.hpp"

namespace foxhunt::actors {

void Progress::put_scalars(const Scalars& s) {
  std::lock_guard lock(mutex_);
  for (const auto& [k, v] : s) scalars_[k] = v;
}

Scalars Progress::scalars() const {
  std::lock_guard lock(mutex_);
  return {scalars_.begin(), scalars_.end()};
}

Counters Progress::counters() const { return {env_steps.load(), updates_issued.load(), policy_version.load()}; }

// ---------------------------------------------------------------------------------- collector
namespace {
using CollectorSelf = caf::stateful_actor<CollectorState>;

void swap_policy(CollectorSelf* self, const LocalDeviceHandle& policy) {
  auto& s = self->state;
  const std::uint64_t released = s.stage->use_policy(policy);
  const std::int32_t old = s.policy_buffer;
  s.policy_buffer = policy.slot;
  s.policy_version = static_cast<std::int64_t>(policy.count);
  s.shared->progress->policy_swaps.fetch_add(1);
  self->send(s.target_sync, released_atom_v, old, released);
}

// Deterministic mode: the policy version a collect starting at env step `steps` must use: the
// versions the ratio has made due `lag` steps earlier, lag = min(slots * steps_per_slot,
// sync_every / ratio) rounded down to whole slots, so the learner is never more than about one
// version ahead of what the collector may take (with 2 policy buffers and one snapshot credit a
// longer lag could leave both sides waiting).
std::int64_t due_version(const CollectorState& s, std::int64_t steps) {
  const auto& cfg = s.shared->config;
  const std::int64_t sps = s.stage->steps_per_slot();
  const double per_version = static_cast<double>(cfg.sync_every) / cfg.replay_ratio;
  std::int64_t lag = static_cast<std::int64_t>(s.stage->slots()) * sps;
  if (per_version < static_cast<double>(lag)) lag = static_cast<std::int64_t>(per_version) / sps * sps;
  return s.ratio->allowed_updates(std::max<std::int64_t>(0, steps - lag)) / cfg.sync_every;
}

// Deterministic mode: swaps in every published version that is due by now (versions arrive in
// order; a due one is taken at once, which also frees its buffer for the next publication).
void swap_due_policies(CollectorSelf* self) {
  auto& s = self->state;
  const std::int64_t due = due_version(s, s.steps_issued);
  // Versions restored on a resume come first: every published one is newer.
  while (!s.restored_policies.empty() && s.restored_policies.front() <= due) {
    const std::int64_t v = s.restored_policies.front();
    s.restored_policies.pop_front();
    s.stage->use_restored_policy(v);
    s.policy_version = v;
    s.shared->progress->policy_swaps.fetch_add(1);
  }
  while (!s.pending_policies.empty() && static_cast<std::int64_t>(s.pending_policies.front().count) <= due) {
    const LocalDeviceHandle p = s.pending_policies.front();
    s.pending_policies.pop_front();
    swap_policy(self, p);
  }
}

// Deterministic mode: false while the version due for the next collect has not arrived. On a
// resumed run the versions up to start.policy_version are never published again: not waited for
// (CollectorState::not_waited_for; restored pending versions are swapped in above instead).
bool due_policy_ready(CollectorSelf* self) {
  swap_due_policies(self);
  auto& s = self->state;
  const std::int64_t due = due_version(s, s.steps_issued);
  return s.policy_version >= due || due <= s.not_waited_for;
}

// Deterministic mode: the run ends once replay is done and the collector holds the version due
// after its last collect (so the checkpointed acting network does not depend on timing).
void maybe_finish_deterministic(CollectorSelf* self) {
  auto& s = self->state;
  if (s.finished_sent || !s.replay_done || s.steps_issued < s.shared->config.total_env_steps) return;
  if (!due_policy_ready(self)) return;  // a policy message calls again
  s.finished_sent = true;
  self->send(s.supervisor, finished_atom_v);
}
}  // namespace

caf::behavior collector_actor(caf::stateful_actor<CollectorState>* self, std::shared_ptr<CollectorStage> stage,
                              std::shared_ptr<PipelineShared> shared) {
  report_exceptions_as(self, "collector");
  auto& st = self->state;
  st.stage = stage;
  st.shared = shared;
  st.generation.assign(static_cast<std::size_t>(stage->slots()), 0);
  for (int k = 0; k < stage->slots(); ++k) st.free_slots.emplace_back(k, 0);
  st.steps_issued = shared->config.start.env_steps;
  st.policy_version = shared->config.start.policy_version;
  if (shared->config.deterministic) {
    st.ratio = std::make_unique<ReplayRatio>(shared->config.replay_ratio, shared->config.learning_starts,
                                             shared->config.ratio_slack);
    // A final checkpoint's collector: it acts with the version it saved, and holds the versions
    // published before the stop that were not due yet.
    st.not_waited_for = shared->config.start.policy_version;
    if (const std::int64_t acting = stage->restored_policy_version(); acting >= 0) {
      st.policy_version = acting;
      for (const std::int64_t v : stage->restored_pending_policies())
        if (v > acting) st.restored_policies.push_back(v);
    } else {
      // A learner-only (periodic) checkpoint: replay may have issued updates beyond the learner's
      // (held back behind a snapshot), so versions the ratio made due at the resumed step count
      // may carry labels the resumed learner never uses. Waiting for them would wait forever.
      st.not_waited_for = std::max(
          st.not_waited_for, st.ratio->allowed_updates(shared->config.start.env_steps) / shared->config.sync_every);
    }
  }

  // One collect message in the mailbox at a time: credits, policy swaps and exits interleave.
  auto schedule = [self] {
    if (!self->state.tick_pending) {
      self->state.tick_pending = true;
      self->send(self, collect_atom_v);
    }
  };
  return {
      [self, schedule](wire_atom, const caf::actor&, const caf::actor& replay, const caf::actor&,
                       const caf::actor& target_sync, const caf::actor& supervisor) {
        auto& s = self->state;
        s.replay = replay;
        s.target_sync = target_sync;
        s.supervisor = supervisor;
        s.wired = true;
        schedule();
      },
      [self, schedule](collect_atom) {
        auto& s = self->state;
        s.tick_pending = false;
        if (!s.wired) return;
        const std::int64_t total = s.shared->config.total_env_steps;
        if (s.steps_issued >= total) {
          // Finished once every collected slot has gone to replay (deterministic: replay reports the end).
          if (!s.finished_sent && !s.shared->config.deterministic && s.collects_in_flight == 0) {
            s.finished_sent = true;
            self->send(s.supervisor, finished_atom_v);
          }
          return;
        }
        if (s.free_slots.empty()) return;
        if (s.shared->config.deterministic && !due_policy_ready(self)) return;  // a policy message resumes
        auto [slot, reuse_after] = s.free_slots.front();
        s.free_slots.pop_front();
        const std::uint64_t gen = ++s.generation[static_cast<std::size_t>(slot)];
        LocalDeviceHandle h = s.stage->collect(slot, gen, reuse_after);
        h.slot = slot;
        h.generation = gen;
        h.count = static_cast<std::uint64_t>(s.stage->steps_per_slot());
        s.steps_issued += s.stage->steps_per_slot();
        // The insert goes to replay once the collect has completed: queued earlier, its wait on
        // the collect would hold the replay stream (and the learner's next sample) for up to a
        // whole collect. The collector's own stream runs on with the other slots meanwhile.
        ++s.collects_in_flight;
        caf::actor me = caf::actor_cast<caf::actor>(self);
        s.stage->when_done([me, h] { caf::anon_send(me, collected_atom_v, h); });
        Scalars scalars;
        if (s.stage->poll_metrics(scalars)) s.shared->progress->put_scalars(scalars);
        if (!s.free_slots.empty() || s.steps_issued >= total) schedule();
      },
      [self, schedule](collected_atom, const LocalDeviceHandle& h) {
        auto& s = self->state;
        --s.collects_in_flight;
        self->send(s.replay, insert_atom_v, h);
        if (s.steps_issued >= s.shared->config.total_env_steps) schedule();  // may finish now
      },
      [self, schedule](slot_free_atom, std::int32_t slot, std::uint64_t reuse_after) {
        self->state.free_slots.emplace_back(slot, reuse_after);
        schedule();
      },
      [self, schedule](policy_atom, const LocalDeviceHandle& policy) {
        auto& s = self->state;
        if (!s.shared->config.deterministic) {
          swap_policy(self, policy);
          return;
        }
        s.pending_policies.push_back(policy);  // used when due (versions arrive in order)
        swap_due_policies(self);
        maybe_finish_deterministic(self);
        schedule();
      },
      [self](finished_atom) {  // deterministic mode: from replay, all work up to the end is done
        self->state.replay_done = true;
        maybe_finish_deterministic(self);
      },
      [](fault_atom, const std::string& what) -> caf::result<void> {
        throw std::runtime_error("injected fault: " + what);
      },
  };
}

// ---------------------------------------------------------------------------------- replay
namespace {
using ReplaySelf = caf::stateful_actor<ReplayState>;

void release_slots(ReplaySelf* self) {
  auto& s = self->state;
  while (!s.held_slots.empty() && s.ratio->may_collect(s.steps, s.updates_done)) {
    auto [slot, ev] = s.held_slots.front();
    s.held_slots.pop_front();
    self->send(s.collector, slot_free_atom_v, slot, ev);
  }
  s.shared->progress->held_slot_credits.store(static_cast<std::int64_t>(s.held_slots.size()));
}

// The slot goes back (ratio permitting) as soon as the insert is enqueued: the collector's next
// collect into it waits on the insert's event on the device, so no host round trip through the
// insert's completion sits in the slot cycle. The host stays bounded: a slot reaches replay only
// after its collect completed, which (on the device) waited for the slot's previous insert.
void do_insert(ReplaySelf* self, const LocalDeviceHandle& slot) {
  auto& s = self->state;
  const std::uint64_t ev = s.stage->insert(slot);
  s.steps += static_cast<std::int64_t>(slot.count);
  s.stored_here += static_cast<std::int64_t>(slot.count);
  s.shared->progress->env_steps.store(s.steps);
  s.held_slots.emplace_back(slot.slot, ev);
}

void issue_sample(ReplaySelf* self, int b) {
  auto& s = self->state;
  const std::uint64_t gen = ++s.generation[static_cast<std::size_t>(b)];
  LocalDeviceHandle h = s.stage->sample(b, gen);
  h.slot = b;
  h.generation = gen;
  h.count = static_cast<std::uint64_t>(s.updates_issued);
  ++s.updates_issued;
  self->send(s.learner, batch_atom_v, h);
}

bool update_owed(const ReplayState& s) {
  return s.stored_here >= s.stage->batch_size() && s.ratio->may_update(s.steps, s.updates_issued);
}

// Deterministic mode: the replay stream's operations in an order fixed by the counts (see
// PipelineConfig::deterministic). Returns when the next operation needs a message to arrive;
// reports the end of the run once everything up to total_env_steps has been done.
void pump_deterministic(ReplaySelf* self) {
  auto& s = self->state;
  const std::int64_t B = s.stage->batches();
  for (;;) {
    if (update_owed(s)) {
      const std::int64_t local = s.updates_issued - s.shared->config.start.updates;
      const auto b = static_cast<std::size_t>(local % B);
      if (local >= B) {
        if (!s.arrived_td[b]) return;  // the learner's priorities for update u - B first
        s.stage->update_priorities(static_cast<int>(b), *s.arrived_td[b]);
        s.arrived_td[b].reset();
      }
      issue_sample(self, static_cast<int>(b));
      continue;
    }
    if (!s.pending_inserts.empty()) {
      const LocalDeviceHandle h = s.pending_inserts.front();
      s.pending_inserts.pop_front();
      do_insert(self, h);
      continue;
    }
    break;
  }
  release_slots(self);  // the slots of the inserts just enqueued
  if (!s.finished_sent && s.steps >= s.shared->config.total_env_steps && s.updates_done == s.updates_issued &&
      !update_owed(s)) {
    s.finished_sent = true;
    self->send(s.collector, finished_atom_v);  // the collector ends the run once its policy is due
  }
}

void try_sample(ReplaySelf* self) {
  auto& s = self->state;
  while (!s.free_batches.empty() && s.stored_here >= s.stage->batch_size() &&
         s.ratio->may_update(s.steps, s.updates_issued)) {
    const int b = s.free_batches.front();
    s.free_batches.pop_front();
    issue_sample(self, b);
  }
}
}  // namespace

caf::behavior replay_actor(ReplaySelf* self, std::shared_ptr<ReplayStage> stage,
                           std::shared_ptr<PipelineShared> shared) {
  report_exceptions_as(self, "replay");
  auto& st = self->state;
  const auto& cfg = shared->config;
  st.stage = stage;
  st.shared = shared;
  st.ratio = std::make_unique<ReplayRatio>(cfg.replay_ratio, cfg.learning_starts, cfg.ratio_slack, stage->batch_size());
  st.steps = cfg.start.env_steps;
  st.stored_here = stage->stored();  // a resumed run's restored buffer counts towards the first batch
  st.updates_issued = st.updates_done = cfg.start.updates;
  st.generation.assign(static_cast<std::size_t>(stage->batches()), 0);
  for (int b = 0; b < stage->batches(); ++b) st.free_batches.push_back(b);
  st.arrived_td.resize(static_cast<std::size_t>(stage->batches()));
  return {
      [self](wire_atom, const caf::actor& collector, const caf::actor&, const caf::actor& learner, const caf::actor&,
             const caf::actor& supervisor) {
        self->state.collector = collector;
        self->state.learner = learner;
        self->state.supervisor = supervisor;
      },
      [self](insert_atom, const LocalDeviceHandle& slot) {
        if (self->state.shared->config.deterministic) {
          self->state.pending_inserts.push_back(slot);
          pump_deterministic(self);
          return;
        }
        do_insert(self, slot);
        release_slots(self);
        try_sample(self);
      },
      [self](priorities_atom, std::int32_t batch, const LocalDeviceHandle& td) {
        auto& s = self->state;
        if (s.shared->config.deterministic) {
          // Counted as done now (the learner finished it: the ratio's collection credit), applied
          // right before the buffer's next sample.
          s.arrived_td.at(static_cast<std::size_t>(batch)) = td;
          ++s.updates_done;
          release_slots(self);
          pump_deterministic(self);
          return;
        }
        s.stage->update_priorities(batch, td);
        ++s.updates_done;
        s.free_batches.push_back(batch);
        release_slots(self);
        try_sample(self);
      },
      [](fault_atom, const std::string& what) -> caf::result<void> {
        throw std::runtime_error("injected fault: " + what);
      },
  };
}

// ---------------------------------------------------------------------------------- learner
namespace {
using LearnerSelf = caf::stateful_actor<LearnerState>;

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

// Updates wait while a sync writes learner state, and (deterministic mode) while a wanted
// snapshot cannot be taken yet (it must see exactly the updates up to its version).
bool updates_held(const LearnerState& s) {
  return s.sync_outstanding || (s.shared->config.deterministic && s.sync_wanted);
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
  caf::actor sup = s.supervisor;
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
}  // namespace

caf::behavior learner_actor(LearnerSelf* self, std::shared_ptr<LearnerStage> stage,
                            std::shared_ptr<PipelineShared> shared) {
  report_exceptions_as(self, "learner");
  auto& st = self->state;
  st.stage = stage;
  st.shared = shared;
  st.updates_issued = shared->config.start.updates;
  st.version = shared->config.start.policy_version;
  // Deterministic mode: a stop right after update v * sync_every, before snapshot v could be taken
  // (the previous one still publishing), leaves version v owed: taken before the first update.
  if (shared->config.deterministic && st.updates_issued / shared->config.sync_every > st.version) st.sync_wanted = true;
  if (shared->config.checkpoint_every > 0)
    st.next_checkpoint =
        (shared->config.start.env_steps / shared->config.checkpoint_every + 1) * shared->config.checkpoint_every;
  return {
      [self](wire_atom, const caf::actor&, const caf::actor& replay, const caf::actor&, const caf::actor& target_sync,
             const caf::actor& supervisor) {
        self->state.replay = replay;
        self->state.target_sync = target_sync;
        self->state.supervisor = supervisor;
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
        if (s.shared->config.deterministic) {
          if (s.sync_outstanding) {
            s.stage->wait(ev);
            s.sync_outstanding = false;
          }
          try_snapshot(self);  // the wanted version first: no update may slip in before it
          while (!s.queued_batches.empty() && !updates_held(s)) {
            LocalDeviceHandle b = s.queued_batches.front();
            s.queued_batches.pop_front();
            do_update(self, b);
          }
          return;
        }
        if (s.sync_outstanding) {
          s.stage->wait(ev);  // the sync wrote state the next update reads
          s.sync_outstanding = false;
          while (!s.queued_batches.empty() && !s.sync_outstanding) {
            LocalDeviceHandle b = s.queued_batches.front();
            s.queued_batches.pop_front();
            do_update(self, b);
          }
        }
        try_snapshot(self);
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

// ---------------------------------------------------------------------------------- target sync
namespace {
using SyncSelf = caf::stateful_actor<TargetSyncState>;

void do_sync(SyncSelf* self, const LocalDeviceHandle& snapshot) {
  auto& s = self->state;
  auto [buffer, reuse_after] = s.free_buffers.front();
  s.free_buffers.pop_front();
  LocalDeviceHandle h = s.stage->sync(snapshot, buffer, reuse_after);
  h.slot = buffer;
  h.count = snapshot.count;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  s.stage->when_done([me, h] { caf::anon_send(me, sync_done_atom_v, h); });
}
}  // namespace

caf::behavior target_sync_actor(SyncSelf* self, std::shared_ptr<TargetSyncStage> stage,
                                std::shared_ptr<PipelineShared> shared) {
  report_exceptions_as(self, "target_sync");
  auto& st = self->state;
  st.stage = stage;
  st.shared = shared;
  st.free_buffers.emplace_back(1, 0);  // the collector starts on buffer 0
  return {
      [self](wire_atom, const caf::actor& collector, const caf::actor&, const caf::actor& learner, const caf::actor&,
             const caf::actor&) {
        self->state.collector = collector;
        self->state.learner = learner;
      },
      [self](weights_atom, const LocalDeviceHandle& snapshot) {
        auto& s = self->state;
        if (s.free_buffers.empty()) {
          s.pending = snapshot;  // at most one: the learner has one snapshot credit
          s.has_pending = true;
        } else {
          do_sync(self, snapshot);
        }
      },
      [self](sync_done_atom, const LocalDeviceHandle& policy) {
        auto& s = self->state;
        self->send(s.learner, synced_atom_v, policy.event);
        self->send(s.collector, policy_atom_v, policy);
      },
      [self](released_atom, std::int32_t buffer, std::uint64_t ev) {
        auto& s = self->state;
        s.free_buffers.emplace_back(buffer, ev);
        if (s.has_pending) {
          s.has_pending = false;
          do_sync(self, s.pending);
        }
      },
      [](fault_atom, const std::string& what) -> caf::result<void> {
        throw std::runtime_error("injected fault: " + what);
      },
  };
}

}  // namespace foxhunt::actors
