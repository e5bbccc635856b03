#include "actors/ppo_learner_actor.hpp"

#include <deque>
#include <stdexcept>
#include <string>
#include <utility>

#include "actors/messages.hpp"
#include "actors/supervisor.hpp"

namespace foxhunt::actors {
namespace {

struct PpoLearnerState {
  std::shared_ptr<PpoLearnerStage> stage;
  std::shared_ptr<PpoShared> shared;
  caf::actor collector;
  SupervisorActor supervisor;
  std::deque<std::pair<int, std::uint64_t>> free_buffers;  // (policy buffer, reuse-after event)
  std::deque<LocalDeviceHandle> queued;                     // rollouts waiting for a policy buffer
  std::int64_t updates_issued = 0, updates_done = 0;
  bool wired = false, first_published = false, finished_sent = false;
  const char* name = "foxhunt.ppo_learner";
};
using Self = caf::stateful_actor<PpoLearnerState>;

// Publishes the weights as they are after every update enqueued so far (version = that count).
void publish(Self* self) {
  auto& s = self->state;
  auto [buffer, reuse_after] = s.free_buffers.front();
  s.free_buffers.pop_front();
  LocalDeviceHandle p = s.stage->publish(buffer, static_cast<std::uint64_t>(s.updates_issued), reuse_after);
  p.slot = buffer;
  p.count = static_cast<std::uint64_t>(s.updates_issued);
  s.shared->run->progress->policy_version.store(s.updates_issued);
  self->send(s.collector, policy_atom_v, p);
}

// Each update goes with the publication of its result: it waits for a free policy buffer.
void run_queued(Self* self) {
  auto& s = self->state;
  if (!s.wired) return;
  if (!s.first_published) {
    if (s.free_buffers.empty()) return;
    s.first_published = true;
    publish(self);
  }
  while (!s.queued.empty() && !s.free_buffers.empty()) {
    const LocalDeviceHandle r = s.queued.front();
    s.queued.pop_front();
    const std::uint64_t read_done = s.stage->update(r);
    ++s.updates_issued;
    s.shared->run->progress->updates_issued.store(s.updates_issued);
    self->send(s.collector, slot_free_atom_v, r.slot, read_done);
    publish(self);
    caf::actor me = caf::actor_cast<caf::actor>(self);
    const std::int64_t version = s.updates_issued;
    s.stage->when_done([me, version] { caf::anon_send(me, update_done_atom_v, version); });
  }
}

caf::behavior ppo_learner_actor(Self* self, std::shared_ptr<PpoLearnerStage> stage, std::shared_ptr<PpoShared> shared) {
  report_exceptions_as(self, "learner");
  auto& st = self->state;
  st.stage = stage;
  st.shared = shared;
  st.updates_issued = st.updates_done = shared->config.start.updates;
  st.free_buffers = {{0, 0}, {1, 0}};
  return {
      [self](wire_atom, const caf::actor& collector, const caf::actor&, const caf::actor& supervisor) {
        auto& s = self->state;
        s.collector = collector;
        s.supervisor = caf::actor_cast<SupervisorActor>(supervisor);
        s.wired = true;
        run_queued(self);
      },
      [self](rollout_atom, const LocalDeviceHandle& rollout) {
        self->state.queued.push_back(rollout);
        run_queued(self);
      },
      [self](released_atom, std::int32_t buffer, std::uint64_t reuse_after) {
        self->state.free_buffers.emplace_back(buffer, reuse_after);
        run_queued(self);
      },
      [self](update_done_atom, std::int64_t version) {
        auto& s = self->state;
        s.updates_done = version;
        s.shared->run->progress->updates_done.store(version);
        Scalars scalars;
        if (s.stage->poll_metrics(scalars)) s.shared->run->progress->put_scalars(scalars);
        if (!s.finished_sent && s.updates_done >= s.shared->config.total_rollouts) {
          s.finished_sent = true;
          self->send(s.collector, finished_atom_v);
        }
      },
      [](fault_atom, const std::string& what) -> caf::result<void> {
        throw std::runtime_error("injected fault: " + what);
      },
  };
}

}  // namespace

caf::actor spawn_ppo_learner(caf::local_actor* parent, std::shared_ptr<PpoLearnerStage> stage,
                             std::shared_ptr<PpoShared> shared) {
  return parent->spawn(ppo_learner_actor, std::move(stage), std::move(shared));
}

}  // namespace foxhunt::actors
