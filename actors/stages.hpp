#pragma once
// The stage interfaces the actors drive. A stage owns one CUDA stream and the device buffers of
// one role; its methods only ENQUEUE work on that stream and return at once (no host
// synchronization, no readback), so an actor that calls them never blocks its scheduler thread.
// The real stages wrap rl/envs, rl/replay and rl/dqn; the CPU tests use fakes on a simulated
// device (tests/actors/fake_device.hpp).
//
// Every method that produces data returns a LocalDeviceHandle whose `event` is recorded after the
// producer's last write; every method that consumes a handle first makes the stage's stream wait
// on that event. Events are owned by the producing stage, one per recyclable resource, and are
// re-recorded only when that resource is written again, which the credit protocol (actors/
// pipeline_shared.hpp) allows only after the consumer has waited on the previous record.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "actors/handle.hpp"

namespace foxhunt::actors {

class StreamTimeline;

// Named scalars a stage reports (episode return, loss, epsilon, ...): copied out of an exit slot.
using Scalars = std::vector<std::pair<std::string, double>>;

// Host counts of a run: what a checkpoint records and what --resume continues from.
struct Counters {
  std::int64_t env_steps = 0;       // transitions handed to replay
  std::int64_t updates = 0;         // learner updates enqueued
  std::int64_t policy_version = 0;  // weight snapshots published
};

class Stage {
 public:
  virtual ~Stage() = default;
  // Makes this stage's stream wait for `event` (0: no-op). Never blocks the host.
  virtual void wait(std::uint64_t event) = 0;
  // Runs fn once all work enqueued so far on this stage's stream has completed (GPU:
  // cudaLaunchHostFunc). fn runs on a driver thread: it must only send a message, never call CUDA.
  virtual void when_done(std::function<void()> fn) = 0;
  // Blocks until the stream is idle. Shutdown and checkpoints only, never on a scheduler thread.
  virtual void synchronize() = 0;
  // Non-blocking health probe: "" when fine, else the device error (e.g. a faulted stream).
  virtual std::string health() { return {}; }
  // Non-blocking: scalars that completed since the last call (reads an exit slot), if any.
  virtual bool poll_metrics(Scalars& out) { return false; }
  // Records this stage's busy intervals into `timeline` (which outlives the run) from now on;
  // false: the stage records none (the CPU fakes).
  virtual bool record_timeline(StreamTimeline* timeline) {
    (void)timeline;
    return false;
  }
};

class CollectorStage : public Stage {
 public:
  virtual int slots() const = 0;                    // transition slots: the collector's credits
  virtual std::int64_t steps_per_slot() const = 0;  // transitions one filled slot holds
  // Policy forward, action selection and environment step(s) writing slot `slot` (generation
  // `generation`), after the stream waited for `reuse_after` (replay's event from the slot's last
  // ack). The handle's count is steps_per_slot().
  virtual LocalDeviceHandle collect(int slot, std::uint64_t generation, std::uint64_t reuse_after) = 0;
  // Reads policy weights from `policy` from now on (waits its event). Returns the event recorded
  // after all queued work that read the previous buffer: target-sync may rewrite it after that.
  // At construction the collector reads policy buffer 0.
  virtual std::uint64_t use_policy(const LocalDeviceHandle& policy) = 0;
  // The collector's part of the FINAL checkpoint (called once the pipeline is quiesced: every
  // stream idle): a job writing what an exact resume needs (environment state, observations,
  // acting network and exploration counters) into a directory. Empty: nothing to write.
  virtual std::function<void(const std::filesystem::path& dir)> checkpoint_job() { return {}; }
  // Resume (deterministic mode): the policy version the restored acting network holds (-1: none
  // restored), and the versions published before the stop but not yet acted on (ascending, all
  // greater), whose weights this stage restored with it. The collector actor takes each one with
  // use_restored_policy when it is due, exactly where the uninterrupted run swapped it in.
  virtual std::int64_t restored_policy_version() const { return -1; }
  virtual std::vector<std::int64_t> restored_pending_policies() const { return {}; }
  // Reads the weights of restored version `version` from now on (enqueued; no policy buffer).
  virtual void use_restored_policy(std::int64_t version) { (void)version; }
};

class ReplayStage : public Stage {
 public:
  virtual int batches() const = 0;  // sampled-batch buffers: the learner's credits
  virtual std::int64_t batch_size() const = 0;
  // Transitions already stored when the run starts (a buffer restored on --resume; a host count).
  virtual std::int64_t stored() const { return 0; }
  // Inserts the transitions of `slot` (waits slot.event). Returns the event after the last read
  // of the slot: the collector may rewrite it after that.
  virtual std::uint64_t insert(const LocalDeviceHandle& slot) = 0;
  // Samples into batch buffer `batch`. Replay operations are ordered on its one stream, so the
  // batch buffer's previous reader (the priority update) is already ordered before this write.
  virtual LocalDeviceHandle sample(int batch, std::uint64_t generation) = 0;
  // Priorities from the learner's TD errors for the batch sampled into `batch` (waits td.event).
  // The learner may rewrite td after the next batch it receives in the same buffer, whose event
  // is recorded after this read on the replay stream.
  virtual void update_priorities(int batch, const LocalDeviceHandle& td) = 0;
};

class LearnerStage : public Stage {
 public:
  // One update (graph replay) reading `batch` (waits batch.event). Returns the TD-error handle for
  // replay's priority update, indexed like the batch (td.slot == batch.slot).
  virtual LocalDeviceHandle update(const LocalDeviceHandle& batch) = 0;
  // Copies the online weights to the snapshot buffer, after waiting `reuse_after` (target-sync's
  // event from the last ack). handle.count = version.
  virtual LocalDeviceHandle snapshot(std::uint64_t version, std::uint64_t reuse_after) = 0;
  // Enqueues a consistent copy of everything a resume needs (weights, optimizer, target, step
  // counters on the device) and returns a job that waits for that copy and writes files into a
  // directory. The job may run on another (non-scheduler) thread.
  virtual std::function<void(const std::filesystem::path& dir)> checkpoint_job() = 0;
};

class TargetSyncStage : public Stage {
 public:
  // Target-network update (hard or Polyak) from `snapshot` and a copy of the weights into policy
  // buffer `buffer` (1 of 2), after waiting snapshot.event and `reuse_after` (the collector's event
  // from releasing that buffer). The returned handle names the policy buffer; its event also marks
  // the end of the snapshot read.
  virtual LocalDeviceHandle sync(const LocalDeviceHandle& snapshot, int buffer, std::uint64_t reuse_after) = 0;
  // True when sync() writes memory the learner's update reads (a target network kept here): the
  // learner then enqueues no update while a sync is outstanding and waits on its event after.
  virtual bool writes_learner_state() const { return false; }
};

}  // namespace foxhunt::actors
