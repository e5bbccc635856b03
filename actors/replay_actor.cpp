#include "actors/replay_actor.hpp"

#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.hpp"
#include "actors/ratio.hpp"
#include "actors/supervisor.hpp"

namespace foxhunt::actors {
namespace {

class ReplaySchedule;

struct ReplayState {
  std::shared_ptr<ReplayStage> stage;
  std::shared_ptr<PipelineShared> shared;
  std::unique_ptr<ReplaySchedule> schedule;
  caf::actor collector, learner;
  std::unique_ptr<ReplayRatio> ratio;
  std::int64_t steps = 0;                                // transitions received (incl. a resumed run's count)
  std::int64_t stored_here = 0;                          // the buffer's fill: restored at start + inserted since
  std::int64_t updates_issued = 0;                       // batches sent
  std::int64_t updates_done = 0;                         // priorities received
  std::deque<std::pair<int, std::uint64_t>> held_slots;  // enqueued inserts' slots the ratio holds back
  std::vector<std::uint64_t> generation;
  const char* name = "foxhunt.replay";
};
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
void insert(ReplaySelf* self, const LocalDeviceHandle& slot) {
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

// The order of inserts, samples and priority updates.
class ReplaySchedule {
 public:
  virtual ~ReplaySchedule() = default;
  virtual void on_insert(ReplaySelf* self, const LocalDeviceHandle& slot) = 0;
  virtual void on_priorities(ReplaySelf* self, int batch, const LocalDeviceHandle& td) = 0;
};

// Timing-driven: inserts and applies priorities as they arrive, samples into whichever batch
// buffer the learner returned first whenever the ratio owes an update.
class AsArrivedReplay final : public ReplaySchedule {
 public:
  explicit AsArrivedReplay(int batches) {
    for (int b = 0; b < batches; ++b) free_batches_.push_back(b);
  }
  void on_insert(ReplaySelf* self, const LocalDeviceHandle& slot) override {
    insert(self, slot);
    release_slots(self);
    try_sample(self);
  }
  void on_priorities(ReplaySelf* self, int batch, const LocalDeviceHandle& td) override {
    auto& s = self->state;
    s.stage->update_priorities(batch, td);
    ++s.updates_done;
    free_batches_.push_back(batch);
    release_slots(self);
    try_sample(self);
  }

 private:
  void try_sample(ReplaySelf* self) {
    while (!free_batches_.empty() && update_owed(self->state)) {
      const int b = free_batches_.front();
      free_batches_.pop_front();
      issue_sample(self, b);
    }
  }
  std::deque<int> free_batches_;
};

// Count-driven (PipelineConfig::deterministic): the replay stream's operations in an order fixed
// by the counts; tells the collector once everything up to total_env_steps has been done.
class ByCountReplay final : public ReplaySchedule {
 public:
  explicit ByCountReplay(int batches) : arrived_td_(static_cast<std::size_t>(batches)) {}
  void on_insert(ReplaySelf* self, const LocalDeviceHandle& slot) override {
    pending_inserts_.push_back(slot);
    pump(self);
  }
  void on_priorities(ReplaySelf* self, int batch, const LocalDeviceHandle& td) override {
    // Counted as done now (the learner finished it: the ratio's collection credit), applied right
    // before the buffer's next sample.
    arrived_td_.at(static_cast<std::size_t>(batch)) = td;
    ++self->state.updates_done;
    release_slots(self);
    pump(self);
  }

 private:
  // Runs the operations in their fixed order until the next one needs a message to arrive.
  void pump(ReplaySelf* self) {
    auto& s = self->state;
    const std::int64_t B = s.stage->batches();
    for (;;) {
      if (update_owed(s)) {
        const std::int64_t local = s.updates_issued - s.shared->config.start.updates;
        const auto b = static_cast<std::size_t>(local % B);
        if (local >= B) {
          if (!arrived_td_[b]) return;  // the learner's priorities for update u - B first
          s.stage->update_priorities(static_cast<int>(b), *arrived_td_[b]);
          arrived_td_[b].reset();
        }
        issue_sample(self, static_cast<int>(b));
        continue;
      }
      if (!pending_inserts_.empty()) {
        const LocalDeviceHandle h = pending_inserts_.front();
        pending_inserts_.pop_front();
        insert(self, h);
        continue;
      }
      break;
    }
    release_slots(self);  // the slots of the inserts just enqueued
    if (!finished_sent_ && s.steps >= s.shared->config.total_env_steps && s.updates_done == s.updates_issued &&
        !update_owed(s)) {
      finished_sent_ = true;
      self->send(s.collector, finished_atom_v);  // the collector ends the run once its policy is due
    }
  }

  std::deque<LocalDeviceHandle> pending_inserts_;  // not yet enqueued
  // Per batch buffer, the learner's TD handle waiting to be applied right before the buffer's
  // next sample.
  std::vector<std::optional<LocalDeviceHandle>> arrived_td_;
  bool finished_sent_ = false;
};

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
  if (cfg.deterministic)
    st.schedule = std::make_unique<ByCountReplay>(stage->batches());
  else
    st.schedule = std::make_unique<AsArrivedReplay>(stage->batches());
  return {
      [self](wire_atom, const caf::actor& collector, const caf::actor&, const caf::actor& learner, const caf::actor&,
             const caf::actor&) {
        self->state.collector = collector;
        self->state.learner = learner;
      },
      [self](insert_atom, const LocalDeviceHandle& slot) { self->state.schedule->on_insert(self, slot); },
      [self](priorities_atom, std::int32_t batch, const LocalDeviceHandle& td) {
        self->state.schedule->on_priorities(self, batch, td);
      },
      [](fault_atom, const std::string& what) -> caf::result<void> {
        throw std::runtime_error("injected fault: " + what);
      },
  };
}

}  // namespace

caf::actor spawn_replay(caf::local_actor* parent, std::shared_ptr<ReplayStage> stage,
                        std::shared_ptr<PipelineShared> shared) {
  return parent->spawn(replay_actor, std::move(stage), std::move(shared));
}

}  // namespace foxhunt::actors
