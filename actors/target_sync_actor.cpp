#include "actors/target_sync_actor.hpp"

#include <deque>
#include <stdexcept>
#include <utility>

#include "actors/supervisor.hpp"

namespace foxhunt::actors {
namespace {

struct TargetSyncState {
  std::shared_ptr<TargetSyncStage> stage;
  std::shared_ptr<PipelineShared> shared;
  caf::actor learner, collector;
  std::deque<std::pair<int, std::uint64_t>> free_buffers;  // (buffer, reuse-after event)
  bool has_pending = false;
  LocalDeviceHandle pending;  // a snapshot waiting for a free policy buffer
  const char* name = "foxhunt.target_sync";
};
using SyncSelf = TargetSyncActor::stateful_pointer<TargetSyncState>;

void do_sync(SyncSelf self, const LocalDeviceHandle& snapshot) {
  auto& s = self->state;
  auto [buffer, reuse_after] = s.free_buffers.front();
  s.free_buffers.pop_front();
  LocalDeviceHandle h = s.stage->sync(snapshot, buffer, reuse_after);
  h.slot = buffer;
  h.count = snapshot.count;
  TargetSyncActor me = caf::actor_cast<TargetSyncActor>(self);
  s.stage->when_done([me, h] { caf::anon_send(me, sync_done_atom_v, h); });
}

TargetSyncActor::behavior_type target_sync_actor(SyncSelf self, std::shared_ptr<TargetSyncStage> stage,
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
        // anon_send: CAF 0.17 lets a typed actor send() only to typed actors; no reply is wanted.
        auto& s = self->state;
        caf::anon_send(s.learner, synced_atom_v, policy.event);
        caf::anon_send(s.collector, policy_atom_v, policy);
      },
      [self](released_atom, std::int32_t buffer, std::uint64_t ev) {
        auto& s = self->state;
        s.free_buffers.emplace_back(buffer, ev);
        if (s.has_pending) {
          s.has_pending = false;
          do_sync(self, s.pending);
        }
      },
      [](fault_atom, const std::string& what) { throw std::runtime_error("injected fault: " + what); },
  };
}

}  // namespace

TargetSyncActor spawn_target_sync(caf::local_actor* parent, std::shared_ptr<TargetSyncStage> stage,
                                  std::shared_ptr<PipelineShared> shared) {
  return parent->spawn(target_sync_actor, std::move(stage), std::move(shared));
}

}  // namespace foxhunt::actors
