#include "actors/ppo_collector_actor.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.hpp"
#include "actors/supervisor.hpp"

namespace foxhunt::actors {
namespace {

struct PpoCollectorState {
  std::shared_ptr<PpoCollectorStage> stage;
  std::shared_ptr<PpoShared> shared;
  caf::actor learner;
  SupervisorActor supervisor;
  std::deque<std::pair<int, std::uint64_t>> free_slots;  // (slot, reuse-after event), round robin
  std::vector<std::uint64_t> generation;
  std::deque<LocalDeviceHandle> pending;  // published versions, not yet due (ascending)
  std::int64_t rollouts_issued = 0;       // over the run (a resumed run continues the count)
  std::int64_t acting_version = 0;
  int collects_in_flight = 0;
  bool wired = false, tick_pending = false, learner_done = false, finished_sent = false;
  const char* name = "foxhunt.ppo_collector";
};
using Self = caf::stateful_actor<PpoCollectorState>;

std::int64_t due_version(const PpoCollectorState& s, std::int64_t rollout) {
  return std::max<std::int64_t>(0, rollout - s.shared->config.policy_lag);
}

void schedule_collect(Self* self) {
  if (!self->state.tick_pending) {
    self->state.tick_pending = true;
    self->send(self, collect_atom_v);
  }
}

void set_acting(Self* self, std::int64_t version) {
  self->state.acting_version = version;
  self->state.shared->acting_version.store(version);
}

// Swaps in every pending version due for the next collect (versions arrive in order).
void swap_due_policies(Self* self) {
  auto& s = self->state;
  const std::int64_t due = due_version(s, s.rollouts_issued);
  while (!s.pending.empty() && static_cast<std::int64_t>(s.pending.front().count) <= due) {
    const LocalDeviceHandle p = s.pending.front();
    s.pending.pop_front();
    const std::uint64_t released = s.stage->use_policy(p);
    set_acting(self, static_cast<std::int64_t>(p.count));
    s.shared->run->progress->policy_swaps.fetch_add(1);
    self->send(s.learner, released_atom_v, p.slot, released);
  }
}

bool due_policy_held(Self* self) {
  swap_due_policies(self);
  return self->state.acting_version >= due_version(self->state, self->state.rollouts_issued);
}

// Complete: every rollout collected and handed on, every update done, and the collector holds
// the version its next rollout would use (so the final checkpoint does not depend on timing).
void maybe_finish(Self* self) {
  auto& s = self->state;
  if (s.finished_sent || !s.learner_done || s.collects_in_flight > 0 ||
      s.rollouts_issued < s.shared->config.total_rollouts)
    return;
  if (!due_policy_held(self)) return;  // a policy message calls again
  s.finished_sent = true;
  self->send(s.supervisor, finished_atom_v);
}

caf::behavior ppo_collector_actor(Self* self, std::shared_ptr<PpoCollectorStage> stage,
                                  std::shared_ptr<PpoShared> shared) {
  report_exceptions_as(self, "collector");
  auto& st = self->state;
  st.stage = stage;
  st.shared = shared;
  st.generation.assign(static_cast<std::size_t>(stage->rollout_slots()), 0);
  for (int k = 0; k < stage->rollout_slots(); ++k) st.free_slots.emplace_back(k, 0);
  const PpoPipelineConfig& cfg = shared->config;
  // Rollouts count from the updates learned: after a stop by signal the at most 1 + lag rollouts
  // collected but not learned from are lost, and the resumed run collects their places again
  // (counting from env_steps would leave the learner waiting for rollouts that never come).
  st.rollouts_issued = cfg.start.updates;
  // A restored acting network holds its own version; otherwise the collector starts with the
  // learner's weights.
  const std::int64_t restored = stage->restored_policy_version();
  set_acting(self, restored >= 0 ? restored : cfg.start.updates);

  return {
      [self](wire_atom, const caf::actor&, const caf::actor& learner, const caf::actor& supervisor) {
        auto& s = self->state;
        s.learner = learner;
        s.supervisor = caf::actor_cast<SupervisorActor>(supervisor);
        s.wired = true;
        schedule_collect(self);
      },
      [self](collect_atom) {
        auto& s = self->state;
        s.tick_pending = false;
        if (!s.wired) return;
        if (s.rollouts_issued >= s.shared->config.total_rollouts) {
          maybe_finish(self);
          return;
        }
        if (s.free_slots.empty()) return;
        if (!due_policy_held(self)) return;  // a policy message resumes
        auto [slot, reuse_after] = s.free_slots.front();
        s.free_slots.pop_front();
        const std::uint64_t gen = ++s.generation[static_cast<std::size_t>(slot)];
        LocalDeviceHandle h = s.stage->collect(slot, gen, reuse_after);
        h.slot = slot;
        h.generation = gen;
        h.count = static_cast<std::uint64_t>(s.stage->steps_per_rollout());
        ++s.rollouts_issued;
        ++s.collects_in_flight;
        caf::actor me = caf::actor_cast<caf::actor>(self);
        s.stage->when_done([me, h] { caf::anon_send(me, collected_atom_v, h); });
        Scalars scalars;
        if (s.stage->poll_metrics(scalars)) s.shared->run->progress->put_scalars(scalars);
        schedule_collect(self);
      },
      [self](collected_atom, const LocalDeviceHandle& h) {
        auto& s = self->state;
        --s.collects_in_flight;
        s.shared->run->progress->env_steps.fetch_add(static_cast<std::int64_t>(h.count));
        self->send(s.learner, rollout_atom_v, h);
        maybe_finish(self);
      },
      [self](slot_free_atom, std::int32_t slot, std::uint64_t reuse_after) {
        self->state.free_slots.emplace_back(slot, reuse_after);
        schedule_collect(self);
      },
      [self](policy_atom, const LocalDeviceHandle& policy) {
        auto& s = self->state;
        const auto version = static_cast<std::int64_t>(policy.count);
        const std::int64_t newest = s.pending.empty() ? s.acting_version
                                                      : static_cast<std::int64_t>(s.pending.back().count);
        if (version <= newest) {
          // Already acting with it (the learner's first publication): the buffer was never read.
          self->send(s.learner, released_atom_v, policy.slot, std::uint64_t{0});
          return;
        }
        s.pending.push_back(policy);
        swap_due_policies(self);
        schedule_collect(self);
        maybe_finish(self);
      },
      [self](finished_atom) {
        self->state.learner_done = true;
        maybe_finish(self);
      },
      [](fault_atom, const std::string& what) -> caf::result<void> {
        throw std::runtime_error("injected fault: " + what);
      },
  };
}

}  // namespace

caf::actor spawn_ppo_collector(caf::local_actor* parent, std::shared_ptr<PpoCollectorStage> stage,
                               std::shared_ptr<PpoShared> shared) {
  return parent->spawn(ppo_collector_actor, std::move(stage), std::move(shared));
}

}  // namespace foxhunt::actors
