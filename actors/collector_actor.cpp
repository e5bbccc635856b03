#include "actors/collector_actor.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.hpp"
#include "actors/ratio.hpp"
#include "actors/supervisor.hpp"
#include "actors/target_sync_actor.hpp"

namespace foxhunt::actors {
namespace {

class CollectorSchedule;

struct CollectorState {
  std::shared_ptr<CollectorStage> stage;
  std::shared_ptr<PipelineShared> shared;
  std::unique_ptr<CollectorSchedule> schedule;
  caf::actor replay;
  TargetSyncActor target_sync;
  SupervisorActor supervisor;
  std::deque<std::pair<int, std::uint64_t>> free_slots;  // (slot, reuse-after event)
  std::vector<std::uint64_t> generation;
  std::int64_t steps_issued = 0;
  int collects_in_flight = 0;  // enqueued, completion not yet seen (insert not sent)
  int policy_buffer = 0;
  std::int64_t policy_version = 0;  // version of the weights the collector acts with
  bool wired = false, tick_pending = false, finished_sent = false;
  const char* name = "foxhunt.collector";
};
using CollectorSelf = caf::stateful_actor<CollectorState>;

// One collect message in the mailbox at a time: credits, policy swaps and exits interleave.
void schedule_collect(CollectorSelf* self) {
  if (!self->state.tick_pending) {
    self->state.tick_pending = true;
    self->send(self, collect_atom_v);
  }
}

// Acts with a published policy buffer from now on; the previous one goes back to target sync.
void swap_policy(CollectorSelf* self, const LocalDeviceHandle& policy) {
  auto& s = self->state;
  const std::uint64_t released = s.stage->use_policy(policy);
  const std::int32_t old = s.policy_buffer;
  s.policy_buffer = policy.slot;
  s.policy_version = static_cast<std::int64_t>(policy.count);
  s.shared->progress->policy_swaps.fetch_add(1);
  self->send(s.target_sync, released_atom_v, old, released);
}

// Acts with a version the stage restored on a resume (no policy buffer involved).
void use_restored_policy(CollectorSelf* self, std::int64_t version) {
  auto& s = self->state;
  s.stage->use_restored_policy(version);
  s.policy_version = version;
  s.shared->progress->policy_swaps.fetch_add(1);
}

void finish(CollectorSelf* self) {
  self->state.finished_sent = true;
  self->send(self->state.supervisor, finished_atom_v);
}

// When a collect may start, which policy it acts with, and when the run is complete.
class CollectorSchedule {
 public:
  virtual ~CollectorSchedule() = default;
  // A slot is free: may its collect start now? (false: a later message calls again)
  virtual bool may_collect(CollectorSelf* self) = 0;
  virtual void on_policy(CollectorSelf* self, const LocalDeviceHandle& policy) = 0;
  // Every env step of the run has been issued.
  virtual void on_all_issued(CollectorSelf* self) = 0;
  // Replay has done all the work up to total_env_steps.
  virtual void on_replay_finished(CollectorSelf* self) = 0;
};

// Timing-driven: collects whenever a slot is free, swaps in each policy as it arrives, and the run
// is complete once every collected slot has gone to replay.
class AsArrivedCollector final : public CollectorSchedule {
 public:
  bool may_collect(CollectorSelf*) override { return true; }
  void on_policy(CollectorSelf* self, const LocalDeviceHandle& policy) override { swap_policy(self, policy); }
  void on_all_issued(CollectorSelf* self) override {
    if (!self->state.finished_sent && self->state.collects_in_flight == 0) finish(self);
  }
  void on_replay_finished(CollectorSelf*) override {}  // only a count-driven replay sends it
};

// Count-driven (PipelineConfig::deterministic): a collect starting at env step s waits for the
// policy version due at s; published versions wait until due; replay reports the end of the work.
class ByCountCollector final : public CollectorSchedule {
 public:
  ByCountCollector(CollectorState& s, const PipelineConfig& cfg)
      : ratio_(cfg.replay_ratio, cfg.learning_starts, cfg.ratio_slack), sync_every_(cfg.sync_every) {
    // lag = min(slots * steps_per_slot, sync_every / ratio) rounded down to whole slots, so the
    // learner is never more than about one version ahead of what the collector may take (with 2
    // policy buffers and one snapshot credit a longer lag could leave both sides waiting).
    const std::int64_t sps = s.stage->steps_per_slot();
    const double per_version = static_cast<double>(cfg.sync_every) / cfg.replay_ratio;
    lag_ = static_cast<std::int64_t>(s.stage->slots()) * sps;
    if (per_version < static_cast<double>(lag_)) lag_ = static_cast<std::int64_t>(per_version) / sps * sps;
    // A final checkpoint's collector: it acts with the version it saved, and holds the versions
    // published before the stop that were not due yet.
    not_waited_for_ = cfg.start.policy_version;
    if (const std::int64_t acting = s.stage->restored_policy_version(); acting >= 0) {
      s.policy_version = acting;
      for (const std::int64_t v : s.stage->restored_pending_policies())
        if (v > acting) restored_.push_back(v);
    } else {
      // A learner-only (periodic) checkpoint: replay may have issued updates beyond the learner's
      // (held back behind a snapshot), so versions the ratio made due at the resumed step count
      // may carry labels the resumed learner never uses. Waiting for them would wait forever.
      not_waited_for_ = std::max(not_waited_for_, ratio_.allowed_updates(cfg.start.env_steps) / sync_every_);
    }
  }

  bool may_collect(CollectorSelf* self) override { return due_policy_ready(self); }

  void on_policy(CollectorSelf* self, const LocalDeviceHandle& policy) override {
    pending_.push_back(policy);  // used when due (versions arrive in order)
    swap_due_policies(self);
    maybe_finish(self);
    schedule_collect(self);
  }

  void on_all_issued(CollectorSelf*) override {}  // replay reports the end

  void on_replay_finished(CollectorSelf* self) override {
    replay_done_ = true;
    maybe_finish(self);
  }

 private:
  // The policy version a collect starting at env step `steps` must use: the versions the ratio
  // made due lag_ steps earlier.
  std::int64_t due_version(std::int64_t steps) const {
    return ratio_.allowed_updates(std::max<std::int64_t>(0, steps - lag_)) / sync_every_;
  }

  // Swaps in every version that is due by now (versions arrive in order; a due one is taken at
  // once, which also frees its buffer for the next publication).
  void swap_due_policies(CollectorSelf* self) {
    const std::int64_t due = due_version(self->state.steps_issued);
    // Versions restored on a resume come first: every published one is newer.
    while (!restored_.empty() && restored_.front() <= due) {
      const std::int64_t v = restored_.front();
      restored_.pop_front();
      use_restored_policy(self, v);
    }
    while (!pending_.empty() && static_cast<std::int64_t>(pending_.front().count) <= due) {
      const LocalDeviceHandle p = pending_.front();
      pending_.pop_front();
      swap_policy(self, p);
    }
  }

  // False while the version due for the next collect has not arrived. On a resumed run the
  // versions up to not_waited_for_ are never published again: not waited for (restored pending
  // versions are swapped in above instead).
  bool due_policy_ready(CollectorSelf* self) {
    swap_due_policies(self);
    const std::int64_t due = due_version(self->state.steps_issued);
    return self->state.policy_version >= due || due <= not_waited_for_;
  }

  // The run ends once replay is done and the collector holds the version due after its last
  // collect (so the checkpointed acting network does not depend on timing).
  void maybe_finish(CollectorSelf* self) {
    const auto& s = self->state;
    if (s.finished_sent || !replay_done_ || s.steps_issued < s.shared->config.total_env_steps) return;
    if (!due_policy_ready(self)) return;  // a policy message calls again
    finish(self);
  }

  ReplayRatio ratio_;  // which version is due
  std::int64_t sync_every_, lag_ = 0;
  std::deque<LocalDeviceHandle> pending_;  // published, not yet due
  std::deque<std::int64_t> restored_;      // held by the stage on a resume, not yet due
  std::int64_t not_waited_for_ = 0;        // versions a resumed run never publishes again
  bool replay_done_ = false;
};

caf::behavior collector_actor(CollectorSelf* self, std::shared_ptr<CollectorStage> stage,
                              std::shared_ptr<PipelineShared> shared) {
  report_exceptions_as(self, "collector");
  auto& st = self->state;
  st.stage = stage;
  st.shared = shared;
  st.generation.assign(static_cast<std::size_t>(stage->slots()), 0);
  for (int k = 0; k < stage->slots(); ++k) st.free_slots.emplace_back(k, 0);
  st.steps_issued = shared->config.start.env_steps;
  st.policy_version = shared->config.start.policy_version;
  if (shared->config.deterministic)
    st.schedule = std::make_unique<ByCountCollector>(st, shared->config);
  else
    st.schedule = std::make_unique<AsArrivedCollector>();

  return {
      [self](wire_atom, const caf::actor&, const caf::actor& replay, const caf::actor&, const caf::actor& target_sync,
             const caf::actor& supervisor) {
        auto& s = self->state;
        s.replay = replay;
        s.target_sync = caf::actor_cast<TargetSyncActor>(target_sync);
        s.supervisor = caf::actor_cast<SupervisorActor>(supervisor);
        s.wired = true;
        schedule_collect(self);
      },
      [self](collect_atom) {
        auto& s = self->state;
        s.tick_pending = false;
        if (!s.wired) return;
        const std::int64_t total = s.shared->config.total_env_steps;
        if (s.steps_issued >= total) {
          s.schedule->on_all_issued(self);
          return;
        }
        if (s.free_slots.empty()) return;
        if (!s.schedule->may_collect(self)) return;  // a policy message resumes
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
        if (!s.free_slots.empty() || s.steps_issued >= total) schedule_collect(self);
      },
      [self](collected_atom, const LocalDeviceHandle& h) {
        auto& s = self->state;
        --s.collects_in_flight;
        self->send(s.replay, insert_atom_v, h);
        if (s.steps_issued >= s.shared->config.total_env_steps) schedule_collect(self);  // may finish now
      },
      [self](slot_free_atom, std::int32_t slot, std::uint64_t reuse_after) {
        self->state.free_slots.emplace_back(slot, reuse_after);
        schedule_collect(self);
      },
      [self](policy_atom, const LocalDeviceHandle& policy) { self->state.schedule->on_policy(self, policy); },
      [self](finished_atom) { self->state.schedule->on_replay_finished(self); },
      [](fault_atom, const std::string& what) -> caf::result<void> {
        throw std::runtime_error("injected fault: " + what);
      },
  };
}

}  // namespace

caf::actor spawn_collector(caf::local_actor* parent, std::shared_ptr<CollectorStage> stage,
                           std::shared_ptr<PipelineShared> shared) {
  return parent->spawn(collector_actor, std::move(stage), std::move(shared));
}

}  // namespace foxhunt::actors
