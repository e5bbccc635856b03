#pragma once
// The PPO agent of the actor runtime (actors/runtime.hpp): a collector and a learner exchanging
// rollout slots (no replay, no target sync).
//
// Resources and their credits (nothing is written while queued work still reads it):
//   rollout slots   collector -> learner   R = policy_lag + 1 slots of T x N steps; the collector
//                                          hands a slot to the learner once its collect has
//                                          COMPLETED; the learner returns it as soon as the update
//                                          reading it is ENQUEUED, with the event recorded after
//                                          that update's last read of the slot (the update, or
//                                          under placement "split" its copy of the slot; the next
//                                          collect into the slot waits on it on the device).
//   policy buffers  learner -> collector   2 (double buffer); each update is enqueued together with
//                                          the publication of its result (a copy of the weights,
//                                          and of a fine-tuned feature extractor's, into a free
//                                          buffer), so version v is exactly the weights
//                                          after v updates; the collector copies a due version into
//                                          its acting network and returns the buffer with the event
//                                          after that copy. An update waits for a free buffer.
// Policy lag: rollout i (counted over the run) acts with version max(0, i - policy_lag): lag 0 is
// synchronous PPO (each rollout waits for the update of the previous one), lag 1 collects one
// rollout ahead of the learner. The versions are fixed by the counts, so a run is deterministic
// whatever the timing (run.deterministic is not needed). The run ends once every update of
// total_rollouts has completed and the collector holds the version due for its next rollout, so
// the final checkpoint is the state an uninterrupted run passes through.
// A resumed (or fresh) learner first publishes the version it holds; the collector drops versions
// it already acts with or has passed.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "actors/runtime.hpp"
#include "actors/stages.hpp"

namespace foxhunt::actors {

class PpoCollectorStage : public Stage {
 public:
  virtual int rollout_slots() const = 0;                // the collector's slot credits
  virtual std::int64_t steps_per_rollout() const = 0;   // T x N environment steps per slot
  // Fills rollout slot `slot` (generation `generation`) acting with the current policy, after the
  // stream waited for `reuse_after` (the learner's event after the last update that read the
  // slot). Slots are filled in round-robin order (0, 1, ..., R - 1, 0, ...): each collect
  // continues the environments (and a recurrent policy's state) from the previous slot. The
  // handle names the slot (ptr: the stage's own rollout object, for the learner of this process).
  virtual LocalDeviceHandle collect(int slot, std::uint64_t generation, std::uint64_t reuse_after) = 0;
  // Copies the published policy (waits its event) into the acting network. Returns the event
  // recorded after that copy: the learner may rewrite the buffer after it.
  virtual std::uint64_t use_policy(const LocalDeviceHandle& policy) = 0;
  // The policy version a resumed collector's restored acting network holds (-1: none restored;
  // it then acts with the learner's weights, version = the resumed update count).
  virtual std::int64_t restored_policy_version() const { return -1; }
  // The collector's part of the final checkpoint (quiesced): a job writing its state.
  virtual std::function<void(const std::filesystem::path& dir)> checkpoint_job() { return {}; }
};

class PpoLearnerStage : public Stage {
 public:
  // One PPO update from the rollout (waits rollout.event). Returns the event after the update's
  // last read of the rollout slot.
  virtual std::uint64_t update(const LocalDeviceHandle& rollout) = 0;
  // Copies the current weights into policy buffer `buffer` (0 or 1) after waiting `reuse_after`.
  // handle.event follows the copy; handle.count = version.
  virtual LocalDeviceHandle publish(int buffer, std::uint64_t version, std::uint64_t reuse_after) = 0;
  // The learner's part of the final checkpoint (quiesced).
  virtual std::function<void(const std::filesystem::path& dir)> checkpoint_job() { return {}; }
};

struct PpoStages {
  std::shared_ptr<PpoCollectorStage> collector;
  std::shared_ptr<PpoLearnerStage> learner;
  std::vector<Stage*> all() const { return {collector.get(), learner.get()}; }
};

struct PpoPipelineConfig {
  std::int64_t total_rollouts = 0;  // updates of the run (the run completes once all are done)
  int policy_lag = 0;               // 0 | 1
  // Resumed counts: env_steps = rollouts collected x steps_per_rollout (a multiple), updates,
  // policy_version = the collector's acting version.
  Counters start;
};

// What both PPO actors share.
struct PpoShared {
  PpoPipelineConfig config;
  std::shared_ptr<RunShared> run;
  std::atomic<std::int64_t> acting_version{0};  // the collector's (for the final checkpoint)
};

// The PPO stage set (both stages required).
std::shared_ptr<StageSet> make_ppo_stage_set(const PpoPipelineConfig& config, const PpoStages& stages);
// run_stage_set over make_ppo_stage_set.
RunResult run_ppo_pipeline(const PpoPipelineConfig& config, const PpoStages& stages, const RunHooks& hooks);

}  // namespace foxhunt::actors
