#pragma once
// The GPU stages of a PPO agent in the actor runtime (actors/ppo_pipeline.hpp), built from
// rl::ppo. Every Stage method only enqueues on the stage's stream.
//
//   PpoGpuCollectorStage  rl::ppo::RolloutCollector acting with its own copy of the network (an
//                         acting rl::ppo::PpoLearner whose parameters the published policies are
//                         copied into), filling policy_lag + 1 rollout slots in turn (one graph
//                         per slot); episode statistics leave through an exit every stats_every
//                         rollouts (counted over the run, cleared: a resume clears where the
//                         uninterrupted run does).
//   PpoGpuLearnerStage    rl::ppo::PpoLearner's update graph (one per rollout slot), preceded by
//                         the rollout's explained variance on the learner's stream, and the
//                         publication of its weights into one of two policy buffers.
// Device-to-host traffic: none but the metrics exits and the final checkpoint.
//
// Placement "split" (docs/distributed.md): the collector (environments, acting network, rollout
// slots, a frozen extractor) runs on its own device, the learner on run.device. The learner then
// stages each rollout: its stream waits the slot's event, copies every array of the slot into a
// staging rollout of its own device (cudaMemcpyPeerAsync), records the slot's release event and
// updates from the copy, so the collector refills the slot while the update runs. The two policy
// buffers live on the collector's device: a publication is a peer copy from the learner's arena,
// and the collector's load of a version stays local. The learner's counters that ppo.state holds
// pass through a mirror on the collector's device (peer copies at the checkpoint and the restore),
// so the collector's stream only ever copies its own device's memory to or from the host. On one
// device ("all") nothing is staged; split with both roles on one device runs the same copies.
//
// [features] (docs/features.md): a frozen extractor (rl::ObsFeatures) belongs to the collector,
// which runs it inside its collection graph exactly as the synchronous loop does
// (rl/ppo/collector.hpp); its per-environment state goes into ppo.state. A fine-tuned extractor
// (rl::TrainableObsFeatures) is the first module of the learner's network and trains there; the
// collector acts with its own copy, whose weights travel in the published policy buffer after the
// network's (one copy, one event: the extractor and the network of a version are swapped together,
// and the collector never reads the arena the learner writes).
//
// A checkpoint directory holds what the synchronous loop's does (actors/ppo_run.hpp:
// learner.safetensors, ppo.state, env.state, features.safetensors when fine-tuned), so either loop
// resumes the other's, plus policy.safetensors: the collector's acting weights (version
// counters.json's policy_version), which with policy_lag 1 are one update behind the learner's,
// and, fine-tuned, policy.features.safetensors: its acting copy of the extractor (same version).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "actors/cuda_lane.hpp"
#include "actors/env_state.hpp"
#include "actors/ppo_pipeline.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/exit.hpp"
#include "gpu/stream.hpp"
#include "rl/envs/episode_stats.hpp"
#include "rl/envs/obs_features.hpp"
#include "rl/envs/vec_env.hpp"
#include "rl/ppo/collector.hpp"
#include "rl/ppo/learner.hpp"
#include "rl/ppo/rollout.hpp"

namespace foxhunt::actors {

inline constexpr const char* kPpoPolicyFile = "policy.safetensors";
inline constexpr const char* kPpoPolicyFeaturesFile = "policy.features.safetensors";

class PpoGpuLearnerStage;

class PpoGpuCollectorStage final : public PpoCollectorStage {
 public:
  PpoGpuCollectorStage(std::unique_ptr<rl::VecEnv> env, const rl::ppo::PpoConfig& config, int slots,
                       std::int64_t stats_every, int device = 0);
  ~PpoGpuCollectorStage() override;  // frees on its own device (placement "split": not the learner's)

  void wait(std::uint64_t event) override { lane_.wait(event); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }
  bool poll_metrics(Scalars& out) override;
  bool record_timeline(StreamTimeline* t) override {
    lane_.set_timeline(t, "ppo_collector");
    return true;
  }

  int rollout_slots() const override { return static_cast<int>(rollouts_.size()); }
  std::int64_t steps_per_rollout() const override { return config_.batch_rows(); }
  LocalDeviceHandle collect(int slot, std::uint64_t generation, std::uint64_t reuse_after) override;
  std::uint64_t use_policy(const LocalDeviceHandle& policy) override;
  std::int64_t restored_policy_version() const override { return restored_version_; }
  // ppo.state (with the attached learner's counters), env.state and policy.safetensors.
  std::function<void(const std::filesystem::path& dir)> checkpoint_job() override;

  // Setup only (synchronizes), before start() or restore(): the feature extractor of the
  // observations ([features]). A trainable one is the acting copy of the learner's (its weights
  // come with every published policy); any other is frozen.
  void set_features(std::unique_ptr<rl::ObsFeatures> features);
  rl::ObsFeatures* features() noexcept { return features_.get(); }
  cudaStream_t stream() const noexcept { return lane_.stream(); }
  // Floats of a published policy: the network's arena, then a trainable extractor's.
  std::int64_t policy_floats() const;

  // Setup only (synchronizes): a fresh start (environments reset from `seed`), acting with
  // `policy` (the learner's weights, laid out as a published policy: PpoGpuLearnerStage::policy_now).
  void start(std::uint64_t seed, const float* policy, std::int64_t floats);
  // Setup only: continue from a checkpoint directory (ppo.state, env.state, and policy.safetensors
  // (with policy.features.safetensors when fine-tuned) when present; otherwise acting with
  // `policy`). rollouts_done = the updates learned.
  void restore(const std::filesystem::path& dir, const float* policy, std::int64_t floats, std::int64_t rollouts_done,
               std::int64_t policy_version);
  void attach_learner(std::shared_ptr<PpoGpuLearnerStage> learner) { learner_ = std::move(learner); }

  rl::ppo::Rollout& rollout(int slot) { return *rollouts_.at(static_cast<std::size_t>(slot)); }
  rl::ppo::PpoLearner& acting() { return *acting_; }
  rl::VecEnv& env() { return *env_; }
  // The rollout the next collect continues from (the last one filled).
  rl::ppo::Rollout& carry() { return rollout(last_); }

 private:
  std::vector<DeviceSpan> state_spans();
  // The acting copy of a fine-tuned extractor (null: none, or frozen).
  rl::TrainableObsFeatures* tuned() noexcept { return dynamic_cast<rl::TrainableObsFeatures*>(features_.get()); }
  // Copies a policy laid out as published into the acting network (and acting extractor).
  void load_policy(const float* policy, std::int64_t floats, cudaStream_t stream);
  // Peer copy between the attached learner's counters and their mirror here, on `stream`.
  void copy_learner_counters(bool to_learner, cudaStream_t stream);

  CudaLane lane_;
  std::unique_ptr<gpu::DeviceContext> blas_;
  std::unique_ptr<rl::VecEnv> env_;
  rl::ppo::PpoConfig config_;
  std::unique_ptr<rl::ppo::PpoLearner> acting_;  // only its network acts
  std::vector<std::unique_ptr<rl::ppo::Rollout>> rollouts_;
  std::unique_ptr<rl::ObsFeatures> features_;  // [features]: null without
  std::unique_ptr<rl::ppo::RolloutCollector> collector_;
  std::vector<gpu::Event> filled_;
  gpu::Event released_[2];
  std::shared_ptr<PpoGpuLearnerStage> learner_;
  int last_ = 0;               // the slot filled last (the carry)
  std::int64_t collected_ = 0;  // rollouts over the run
  std::int64_t stats_every_;
  std::int64_t restored_version_ = -1;
  gpu::ExitSlot<rl::EpisodeStats> stats_exit_;
  bool stats_pending_ = false;
  gpu::DeviceBuffer<std::uint64_t> learner_counters_;  // the attached learner's, mirrored for ppo.state
};

class PpoGpuLearnerStage final : public PpoLearnerStage {
 public:
  // Update statistics are published every `metrics_every` updates. features (nullable): a
  // fine-tuned extractor, the first module of the learner's network (rl::ppo::PpoLearner), trained
  // at features_lr_scale times the agent's learning rate; its weights follow the network's in
  // every published policy. publish_device: where the two policy buffers live, the collector's
  // device (-1: `device`).
  PpoGpuLearnerStage(const rl::ppo::PpoConfig& config, std::int64_t obs_dim, std::int64_t metrics_every, int device = 0,
                     std::unique_ptr<rl::TrainableObsFeatures> features = nullptr, float features_lr_scale = 1.f,
                     int publish_device = -1);
  ~PpoGpuLearnerStage() override;  // frees each buffer on its own device

  void wait(std::uint64_t event) override { lane_.wait(event); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }
  bool poll_metrics(Scalars& out) override;
  bool record_timeline(StreamTimeline* t) override {
    lane_.set_timeline(t, "ppo_learner");
    return true;
  }

  std::uint64_t update(const LocalDeviceHandle& rollout) override;
  LocalDeviceHandle publish(int buffer, std::uint64_t version, std::uint64_t reuse_after) override;
  // learner.safetensors (parameters and Adam's moments), and features.safetensors (the fine-tuned
  // extractor's, with its moments).
  std::function<void(const std::filesystem::path& dir)> checkpoint_job() override;

  // Setup only (synchronizes): the collector's rollout slots (memory of `device`, -1: this
  // stage's). staged: each update copies its slot into a staging rollout on this stage's device
  // and reads the copy (placement "split"); otherwise it reads the slot in place.
  void attach_rollouts(std::vector<rl::ppo::Rollout*> rollouts, int device = -1, bool staged = false);
  bool staged() const noexcept { return !staging_.empty(); }
  int device() const noexcept { return lane_.device(); }
  // Setup only (synchronizes): parameters and moments from learner.safetensors (and
  // features.safetensors with a fine-tuned extractor).
  void load(const std::filesystem::path& dir);
  // Setup only (synchronizes): the current weights laid out as a published policy (in policy
  // buffer 0, which the first publication rewrites with the same weights); its floats.
  const float* policy_now();
  std::int64_t policy_floats() const;
  rl::TrainableObsFeatures* features() noexcept { return features_.get(); }
  rl::ppo::PpoLearner& learner() { return *learner_; }
  cudaStream_t stream() const { return lane_.stream(); }

 private:
  CudaLane lane_;
  void copy_policy(int buffer, cudaStream_t stream);

  std::unique_ptr<gpu::DeviceContext> blas_;
  std::unique_ptr<rl::TrainableObsFeatures> features_;  // before learner_, which refers to it
  std::unique_ptr<rl::ppo::PpoLearner> learner_;
  std::vector<rl::ppo::Rollout*> rollouts_;
  int rollouts_device_ = 0;
  std::vector<std::unique_ptr<rl::ppo::Rollout>> staging_;  // staged: one per rollout slot, on this device
  std::vector<gpu::Event> read_done_;  // per rollout slot
  int publish_device_;
  gpu::DeviceBuffer<float> policy_[2];  // on publish_device_
  gpu::Event ready_[2];
  std::int64_t metrics_every_, updates_ = 0;
  bool metrics_pending_ = false;
};

}  // namespace foxhunt::actors
