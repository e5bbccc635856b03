#pragma once
// The GPU stages of a DQN run (CartPole-v1 and other discrete rl::VecEnv environments), built
// from rl/envs, rl/dqn and GpuReplayStage. Every Stage method only enqueues on the stage's stream.
//
//   DqnCollectorStage   act (an rl::DqnPolicy holding the last published policy; epsilon from
//                       its own device state) -> env step -> [features] (a frozen extractor
//                       fills the feature block of the final and the next observations) ->
//                       bootstrap observation, written straight into a TransitionSlotLayout slot.
//                       [features] mode = "finetune": the collector's extractor is a copy of the
//                       learner's trainable one, and every published policy carries its weights
//                       after the online network's (policy_floats()), so acting always uses the
//                       latest published extractor.
//   DqnLearnerStage     rl::DqnLearner's update graph, one graph per replay batch buffer (the
//                       graph bakes the batch pointers); the graph also copies the priorities
//                       into the TD buffer of that batch. The target network lives in the learner
//                       and is updated inside the graph (hard every target_period applied updates,
//                       or Polyak), so the target-sync stage does not write learner state.
//   PolicyPublishStage  the target-sync role: copies a learner snapshot into one of two policy
//                       buffers on the collector's device (a peer copy under placement "split"),
//                       which the collector copies into its acting network on swap.
//
// Device-to-host traffic: none but the metrics exits (episode statistics, DqnState) and the
// checkpoint files (DqnLearner::save from a shadow copy, on a worker thread).
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "actors/cuda_lane.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/stages.hpp"
#include "actors/transition_slot.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/exit.hpp"
#include "gpu/graph.hpp"
#include "gpu/stream.hpp"
#include "rl/envs/obs_features.hpp"
#include "rl/dqn/learner.hpp"
#include "rl/dqn/policy.hpp"
#include "rl/envs/episode_stats.hpp"
#include "rl/envs/vec_env.hpp"

namespace foxhunt::actors {

class DqnLearnerStage;

class DqnCollectorStage final : public CollectorStage {
 public:
  // `acting`: the learner's config (act_rows >= env->num_envs()); the policy is
  // rl::dqn_policy_config(acting): its network, seed and epsilon schedule. `layout` must hold (steps, num_envs) f32
  // observations of the env's width and int32 actions. Episode statistics are exported (and cleared) every
  // `stats_every` env steps.
  DqnCollectorStage(std::unique_ptr<rl::VecEnv> env, const rl::DqnLearnerConfig& acting,
                    const TransitionSlotLayout& layout, int slots, std::uint64_t seed, std::int64_t stats_every,
                    int device = 0);
  ~DqnCollectorStage() override;  // frees on its own device (placement "split": not the learner's)

  void wait(std::uint64_t event) override { lane_.wait(event); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }
  bool poll_metrics(Scalars& out) override;

  int slots() const override { return static_cast<int>(slots_.size()); }
  // Transitions per slot: (steps, num_envs).
  std::int64_t steps_per_slot() const override { return layout_.steps * layout_.envs; }
  LocalDeviceHandle collect(int slot, std::uint64_t generation, std::uint64_t reuse_after) override;
  std::uint64_t use_policy(const LocalDeviceHandle& policy) override;

  // Setup only (synchronizes), before restore(): [features]' frozen extractor for this
  // collector's environments (num_envs x obs_dim must match; its stream must be stream()). Every
  // observation the environment writes goes through it before it is acted on or stored: the
  // current observations now (every row starts an episode), then per step the final observations
  // (peek: they continue the old episodes) and the next ones (step, reset by the done mask), so
  // replay and n-step see the features like any other observation column. Its per-environment
  // state joins the environments' in a final checkpoint (collector.features.bin).
  void set_features(std::unique_ptr<rl::ObsFeatures> features);
  // The same for [features] mode = "finetune": a trainable extractor whose weights follow the
  // learner's fine-tuned one. Every policy (load_policy, use_policy, a restored version) is then
  // the online network's weights followed by the extractor's parameters (its arena's padded
  // count), and a final checkpoint carries the acting extractor's weights (kTunedFeaturesFile).
  void set_tuned_features(std::unique_ptr<rl::TrainableObsFeatures> features);
  rl::ObsFeatures* features() noexcept { return features_.get(); }
  rl::TrainableObsFeatures* tuned_features() noexcept { return tuned_; }
  static constexpr const char* kFeaturesFile = "collector.features.bin";
  static constexpr const char* kTunedFeaturesFile = "collector.features.safetensors";
  // Floats of one policy: the acting network's, plus the tuned extractor's parameters.
  std::int64_t policy_floats() const;
  // Setup only (synchronizes): the acting weights from `params` (policy_floats(): the learner
  // stage's current_policy()).
  void load_policy(const float* params, std::int64_t floats);
  // Setup only (synchronizes): continue the epsilon schedule and the statistics windows from a
  // resumed run's env-step count (a checkpoint without collector state: the exploration counters
  // and the envs start afresh).
  void resume_at(std::int64_t env_steps);
  // Final checkpoint (quiesced pipeline): collector.json (step counters), collector.policy.*
  // (the acting network with its exploration state: epsilon step, act/noise counters) and, when
  // the env's state is capturable (actors/env_state.hpp: markets, CartPole), collector.env.bin
  // and collector.obs.bin (current and last-final observations; with [features] also
  // kFeaturesFile, the extractor's state); with attach_replay, also the
  // replay buffer (GpuReplayStage::checkpoint_job), from the same quiesced moment; with
  // attach_learner, kPoliciesFile: the policy versions published but not yet acted on.
  std::function<void(const std::filesystem::path& dir)> checkpoint_job() override;
  // The replay buffer whose state the final checkpoint carries with the collector's (the pipeline
  // asks the collector and the learner only). Setup only.
  void attach_replay(std::shared_ptr<GpuReplayStage> replay) { replay_ = std::move(replay); }
  // Deterministic mode, setup only: the final checkpoint also writes the weights of the policy
  // versions (acting version, learner updates / sync_every] into kPoliciesFile (the versions
  // published before the stop that the collector has not swapped in yet, plus the one the learner
  // is due to publish next when its update count is a multiple of sync_every: its online weights;
  // the others come from the learner's snapshot ring). A resumed collector swaps each in when due.
  void attach_learner(std::shared_ptr<DqnLearnerStage> learner, std::int64_t sync_every);
  // Setup only: the version the acting network holds when restore() did not set it (a resume
  // without collector state: the checkpoint's policy_version).
  void set_policy_version(std::int64_t version) noexcept { acting_version_ = version; }
  std::int64_t restored_policy_version() const override { return restored_version_; }
  std::vector<std::int64_t> restored_pending_policies() const override;
  void use_restored_policy(std::int64_t version) override;
  static constexpr const char* kPoliciesFile = "collector.policies.bin";
  // Setup only (synchronizes): restores what checkpoint_job wrote. False (nothing changed) when
  // `dir` holds no collector state; std::runtime_error when it does not fit this collector.
  // Returns true; *env_restored says whether the environment continued too (else it restarted).
  bool restore(const std::filesystem::path& dir, bool* env_restored = nullptr);
  rl::VecEnv& env() noexcept { return *env_; }
  rl::DqnPolicy& acting() noexcept { return *policy_; }
  // The latest exported window of episode statistics (tests read it after the run).
  const gpu::ExitSlot<rl::EpisodeStats>& episode_stats() const noexcept { return stats_exit_; }
  cudaStream_t stream() const noexcept { return lane_.stream(); }
  bool record_timeline(StreamTimeline* t) override {
    lane_.set_timeline(t, "collector");
    return true;
  }

 private:
  CudaLane lane_;
  std::unique_ptr<gpu::DeviceContext> blas_;  // cuBLASLt handle + workspace for the acting network
  std::unique_ptr<rl::VecEnv> env_;
  std::unique_ptr<rl::DqnPolicy> policy_;
  std::unique_ptr<rl::ObsFeatures> features_;  // [features]: null without
  rl::TrainableObsFeatures* tuned_ = nullptr;    // features_ when mode = "finetune"
  // Enqueues the copy of a policy (policy_floats()) into the acting network and the tuned extractor.
  void load_acting(const float* params);
  TransitionSlotLayout layout_;
  std::vector<gpu::DeviceBuffer<std::byte>> slots_;
  std::vector<gpu::Event> filled_;
  gpu::Event released_[2];
  gpu::DeviceBuffer<float> obs_, next_obs_, final_obs_;
  gpu::ExitSlot<rl::EpisodeStats> stats_exit_;
  bool stats_pending_ = false;
  std::int64_t steps_ = 0, stats_every_ = 0, next_stats_ = 0;
  rl::DqnSchedule schedule_;
  std::shared_ptr<GpuReplayStage> replay_;
  // Policy versions: the one the acting network holds; restore(): the restored acting version
  // (-1: none) and the pending versions' weights, ascending.
  std::int64_t acting_version_ = 0, restored_version_ = -1;
  std::vector<std::pair<std::int64_t, gpu::DeviceBuffer<float>>> restored_policies_;
  const float* restored_weights(std::int64_t version) const;  // nullptr: not restored
  std::shared_ptr<DqnLearnerStage> learner_;                  // attach_learner (deterministic mode)
  std::int64_t sync_every_ = 0;
};

class DqnLearnerStage final : public LearnerStage {
 public:
  // Captures one update graph per batch buffer of `replay` (which must outlive this stage).
  // `resume`: a checkpoint directory whose learner/ files are loaded. DqnState metrics are
  // published every `metrics_every` updates.
  // dp: a data-parallel run's replica (joined after the resume's load, before the capture).
  // make_features (may be empty): [features] mode = "finetune", a trainable extractor on the given
  // stream with at least config.batch training rows, trained at features_lr_scale x the learning
  // rate (called twice: the learner's and the checkpoint shadow's).
  using FeaturesFactory = std::function<std::unique_ptr<rl::TrainableObsFeatures>(cudaStream_t)>;
  DqnLearnerStage(const rl::DqnLearnerConfig& config, GpuReplayStage& replay, std::int64_t metrics_every,
                  const std::optional<std::filesystem::path>& resume, int device = 0,
                  const gpu::DataParallel& dp = {}, const FeaturesFactory& make_features = {},
                  float features_lr_scale = 1.f);
  ~DqnLearnerStage() override;  // frees on its own device

  void wait(std::uint64_t event) override { lane_.wait(event); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }
  bool poll_metrics(Scalars& out) override;

  LocalDeviceHandle update(const LocalDeviceHandle& batch) override;
  LocalDeviceHandle snapshot(std::uint64_t version, std::uint64_t reuse_after) override;
  std::function<void(const std::filesystem::path& dir)> checkpoint_job() override;

  rl::DqnLearner& learner() noexcept { return *learner_; }
  // Floats of a published policy: the online network's, then the fine-tuned extractor's
  // parameters (none without one). Snapshots have this size.
  std::int64_t policy_floats() const;
  // Idle stream only (setup, a final checkpoint): the policy of the current weights (the online
  // arena itself without an extractor; else a copy of both, made here, synchronizing).
  const float* current_policy();
  cudaStream_t stream() const noexcept { return lane_.stream(); }
  int device() const noexcept { return lane_.device(); }
  bool record_timeline(StreamTimeline* t) override {
    lane_.set_timeline(t, "learner");
    return true;
  }

  // Snapshots go round a ring of this many buffers (version % kSnapshotRing), so the last few
  // published versions stay readable for a final checkpoint (at most three are ever pending in
  // deterministic mode: one in a policy buffer, one in the snapshot, one not taken yet). One
  // snapshot is outstanding at a time (the credit), so a ring buffer is rewritten only after the
  // sync that read it, as with a single buffer.
  static constexpr int kSnapshotRing = 4;
  // Setup only: the update count the run resumed from (updates_total() counts on from it).
  void set_update_base(std::int64_t updates) noexcept { update_base_ = updates; }
  std::int64_t updates_total() const noexcept { return update_base_ + updates_; }
  // Idle stream only (final checkpoint): the weights of policy version `version`, i.e. the online
  // weights right after update version * sync_every: the online network when that is the update
  // count now, else the ring's copy while it still holds that version; nullptr otherwise.
  const float* policy_weights(std::int64_t version, std::int64_t sync_every);

 private:
  CudaLane lane_;
  GpuReplayStage* replay_;  // outlives this stage (constructor contract)
  std::unique_ptr<gpu::DeviceContext> blas_;
  // Declared before the learners that point to them (destroyed after).
  std::unique_ptr<rl::TrainableObsFeatures> features_, shadow_features_;
  std::unique_ptr<rl::DqnLearner> learner_, shadow_;  // shadow: the consistent copy a checkpoint writes
  gpu::DeviceBuffer<float> current_;                  // current_policy()'s copy (with an extractor)
  // Enqueues online weights ++ extractor weights into dst (policy_floats()).
  void copy_policy(float* dst, cudaStream_t stream);
  std::vector<gpu::CudaGraph> graphs_;
  std::vector<gpu::DeviceBuffer<float>> td_;
  std::vector<gpu::Event> td_ready_;
  gpu::DeviceBuffer<float> snapshot_[kSnapshotRing];
  std::int64_t snapshot_version_[kSnapshotRing] = {-1, -1, -1, -1};
  gpu::Event snapshot_ready_, checkpoint_ready_;
  std::int64_t updates_ = 0, metrics_every_ = 0, update_base_ = 0;
  bool metrics_pending_ = false;
};

class PolicyPublishStage final : public TargetSyncStage {
 public:
  // Both policy buffers start as a copy of `initial` (floats values, device memory of
  // `source_device`; -1: `device`; setup only). The buffers live on `device`, the collector's:
  // with placement "split" that is not the learner's, and every copy from a snapshot (on the
  // snapshot handle's device) is a cudaMemcpyPeerAsync, so the collector only ever reads its own
  // device's memory.
  PolicyPublishStage(const float* initial, std::int64_t floats, int device = 0, int source_device = -1);
  ~PolicyPublishStage() override;  // frees on its own device
  // Setup only: policy buffer b (1 of 2) on this stage's device, e.g. the collector's initial weights.
  const float* buffer(int b) const { return policy_.at(static_cast<std::size_t>(b)).data(); }

  void wait(std::uint64_t event) override { lane_.wait(event); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }

  LocalDeviceHandle sync(const LocalDeviceHandle& snapshot, int buffer, std::uint64_t reuse_after) override;
  bool record_timeline(StreamTimeline* t) override {
    lane_.set_timeline(t, "target_sync");
    return true;
  }

 private:
  CudaLane lane_;
  std::int64_t floats_;
  std::array<gpu::DeviceBuffer<float>, 2> policy_;
  gpu::Event ready_[2];
};

}  // namespace foxhunt::actors
