#pragma once
// DqnLearner: the DQN family's update on one stream, everything on the device.
//
//   update(batch):  begin (schedules, noise counter; without noise on its own branch beside the
//     forwards) -> resample noise (online, target)
//     -> forward target(s'), online([s; s']) (double DQN: one forward over the 2B rows)
//     -> targets (double DQN / BDQ mean over branches; C51: projection) -> loss, d_logits,
//        per-sample priorities (Z == 1: one fused kernel, rl/dqn/fused.hpp) -> dead-unit count
//     -> backward (flat gradients; Z == 1 heads fused, models/fused_heads.hpp; parameter-gradient
//        work on the side stream, models::SideLane)
//     -> guard (non-finite loss or gradient sets skip), global grad norm, clip scale, priorities
//        made safe on skip (one kernel)
//     -> Adam over the flat arena (skipped bit-exactly on skip), end (counters), target update
//        (hard every K / Polyak) and the non-finite-parameter check (one kernel,
//        dqn_adam_end_and_target_update). bench/dqn.cu lists the graph nodes.
//   capture(batch, before, after) records the same work, with the caller's sampling before and the
//   priority update beside Adam, as one CUDA graph; replay() launches it. Nothing on the host changes
//   between updates: per-step scalars live in DqnState (device memory).
//   Metrics leave through publish_metrics() (an ExitSlot<DqnState>), never by a copy.
//
// A trainable feature extractor (rl::TrainableObsFeatures, [features] mode = "finetune") is the
// online network's first module: each update copies the batch's s and s' into the learner's own
// buffer, recomputes their feature columns with the extractor's current weights (s' first, then
// s, whose activations the extractor keeps for its backward), and the online backward continues
// through d_obs of its first layer into the extractor's arena. The non-finite guard covers both
// arenas (a skip leaves the extractor bitwise unchanged), the gradient-norm clip takes the norm
// over both together, and the extractor's Adam (its own moments, the online step count) runs at
// features_lr_scale times the scheduled learning rate.
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include "gpu/adam.hpp"
#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/data_parallel.hpp"
#include "gpu/exit.hpp"
#include "gpu/graph.hpp"
#include "gpu/stream.hpp"
#include "models/q_network.hpp"
#include "rl/dqn/batch.hpp"
#include "rl/dqn/policy.hpp"
#include "rl/dqn/state.hpp"
#include "rl/dqn/targets.hpp"
#include "rl/envs/obs_features.hpp"

namespace foxhunt::rl {

struct DqnLearnerConfig {
  models::QNetworkSpec net;
  std::int64_t batch = 32;
  bool double_q = true;
  TdLoss loss = TdLoss::huber;  // C51 (net.atoms > 1) always uses its cross-entropy
  float huber_delta = 1.f;
  gpu::AdamConfig adam{};  // adam.lr is ignored: schedule.lr_* drives the rate
  DqnSchedule schedule{};
  float max_grad_norm = 10.f;      // <= 0: no clipping
  float tau = 1.f;                 // target update coefficient: 1 = hard copy
  std::int64_t target_period = 1;  // applied updates between target updates
  float priority_eps = 1e-6f;
  float skip_priority = 1.f;  // priority written for every sample of a skipped update
  std::uint64_t seed = 0;     // init, noise and exploration
  std::int64_t act_rows = 1;  // most observations one act() call handles (e.g. the env count)
};

// std::invalid_argument naming the field and the allowed range.
void validate(const DqnLearnerConfig& config);
// The acting policy of a learner of this config (same network, initial weights, noise and
// exploration streams and epsilon schedule; act_rows rows).
DqnPolicyConfig dqn_policy_config(const DqnLearnerConfig& config);

class DqnLearner {
 public:
  // features (nullable; must outlive the learner): the trainable extractor in front of the online
  // network, for obs_dim observations and at least config.batch training rows.
  DqnLearner(const DqnLearnerConfig& config, gpu::BlasLane lane, TrainableObsFeatures* features = nullptr,
             float features_lr_scale = 1.f);

  // Eager update (tests, first steps). batch.size must equal config.batch.
  void update(const DqnBatch& batch);
  // Captures before(stream) + the update + after(s) once; replay() then reruns it. The batch's
  // pointers (and everything before/after touch) must stay valid while the graph lives. after runs
  // on a forked stream as soon as priorities() is final (after the gradient guard), beside Adam and
  // the target update: it may read priorities() and the batch, never the parameters.
  // A double-DQN learner reads a batch whose next_obs directly follows obs (SampledBatch's layout)
  // as one 2B-row input; other batches are first stacked into a copy.
  void capture(const DqnBatch& batch, const std::function<void(cudaStream_t)>& before = {},
               const std::function<void(cudaStream_t)>& after = {});
  void replay();
  bool captured() const { return graph_.captured(); }

  // Makes this learner one replica of a data-parallel learner (gpu/data_parallel.hpp): every rank
  // takes rank 0's online and target weights and Adam moments (broadcast on stream(), which it
  // synchronizes), and later updates all-reduce the gradients and agree on the skip. Before the
  // first update or capture; every rank calls it. An inactive `dp` changes nothing.
  void join(const gpu::DataParallel& dp);
  const gpu::DataParallel& data_parallel() const noexcept { return dp_; }
  // Nodes of the graph capture() built (0 before): the launch count of one replay.
  std::size_t graph_nodes() const { return graph_.node_count(); }
  // The same capture into a caller-owned graph: one graph per batch buffer when several sampled
  // batches are in flight (actors/). Replay it on stream() with graph.replay(stream()).
  void capture(gpu::CudaGraph& graph, const DqnBatch& batch, const std::function<void(cudaStream_t)>& before = {},
               const std::function<void(cudaStream_t)>& after = {});

  // Acting with the online network and the learner's own state (the synchronous DqnTrainer):
  // dqn_act (rl/dqn/policy.hpp) into actions (rows, D), a device buffer (e.g. the envs' action
  // buffer). rows <= config.act_rows. Capturable (no host values change). A collector apart from
  // the learner acts through a DqnPolicy instead.
  void act(std::int32_t* actions, const float* obs, std::int64_t rows, bool eval);
  const float* act_q() const { return online_->q(act_ws_); }  // (rows, D, A) of the last act()
  // After an environment step of num_envs transitions (epsilon schedule, act counter).
  void after_env_step(std::int64_t num_envs);

  // The priorities of the last update (B), already safe (finite) for the replay.
  const float* priorities() const noexcept { return priorities_.data(); }
  DqnState* state() noexcept { return state_.data(); }
  // Copies the state into the metrics exit (a kernel, no memcpy); read it with metrics().try_read.
  void publish_metrics();
  gpu::ExitSlot<DqnState>& metrics() noexcept { return metrics_; }

  gpu::ParameterArena& online_arena() noexcept { return online_arena_; }
  gpu::ParameterArena& target_arena() noexcept { return target_arena_; }
  models::QNetwork& online() noexcept { return *online_; }
  models::QNetwork& target() noexcept { return *target_; }
  const DqnLearnerConfig& config() const noexcept { return config_; }
  TrainableObsFeatures* features() const noexcept { return features_; }
  float features_lr_scale() const noexcept { return features_lr_scale_; }
  cudaStream_t stream() const noexcept { return lane_.stream; }

  // Networks, Adam moments and the state (counters, schedules) as safetensors files
  // "<stem>.online.safetensors", "<stem>.target.safetensors", "<stem>.state.bin", and with a
  // trainable extractor its parameters and Adam moments in "<stem>.features.safetensors"
  // (kFeaturesSuffix). Synchronizes.
  void save(const std::filesystem::path& stem);
  void load(const std::filesystem::path& stem);
  static constexpr const char* kFeaturesSuffix = ".features.safetensors";
  // Enqueues on `stream` device-to-device copies of everything save() writes (online weights and
  // Adam moments, target weights, the state, a trainable extractor's weights and moments) into
  // `dst`, a learner built from the same config (and an extractor of the same shape when this has one):
  // a consistent snapshot that dst.save() can write later while this learner keeps training.
  void copy_state_to(DqnLearner& dst, cudaStream_t stream);

 private:
  // after (nullable) runs on side_ once the priorities are final, beside Adam (see capture()).
  void record_update(const DqnBatch& batch, cudaStream_t stream, const std::function<void(cudaStream_t)>& after = {});

  DqnLearnerConfig config_;
  gpu::BlasLane lane_;
  gpu::DataParallel dp_;
  gpu::ParameterArena online_arena_, target_arena_;
  std::unique_ptr<models::QNetwork> online_, target_;
  models::QNetwork::Workspace ws_, ws_target_, act_ws_;  // ws_: 2B rows [s; s'] with double DQN
  gpu::DeviceBuffer<DqnState> state_;
  gpu::DeviceBuffer<float> y_, d_logits_, sample_loss_, weighted_loss_, priorities_, m_, obs2_;
  gpu::DeviceBuffer<std::int32_t> next_actions_;
  gpu::DeviceBuffer<std::byte> reduce_ws_, norm_ws_, end_ws_,
      td_ws_;  // norm_ws_, end_ws_, td_ws_: fused-kernel counters
  gpu::ExitSlot<DqnState> metrics_;
  TrainableObsFeatures* features_ = nullptr;
  float features_lr_scale_ = 1.f;
  gpu::DeviceBuffer<float> features_obs_;     // (2B, obs_dim): the batch's [s; s'], features recomputed
  gpu::DeviceBuffer<float> d_obs_;            // (B, obs_dim): the online network's input gradient
  gpu::DeviceBuffer<float> features_scalars_;  // the extractor's learning rate and gradient norm
  gpu::DeviceBuffer<std::byte> features_norm_ws_;
  gpu::CudaGraph graph_;
  // A second stream for the work that does not depend on the online forward (the target forward,
  // the dead-unit count): forked from and joined back into the update's stream, so a captured update
  // holds them as parallel branches. Its own cuBLASLt workspace: concurrent matmuls must not share one.
  gpu::Stream side_;
  gpu::DeviceBuffer<std::byte> side_workspace_;
  gpu::Event forked_, target_done_, online_done_, side_done_;
  // The backward's parameter-gradient work also runs on side_ (after the dead-unit count there):
  // its fork and join events (models::SideLane).
  gpu::Event backward_fork_, backward_join_;
  // A third stream for the begin (schedules, counter resets) when nothing before the TD kernel reads
  // the state (no noise): it runs beside both forwards instead of ahead of them.
  gpu::Stream begin_lane_;
  gpu::Event begin_fork_, begin_done_;
  // The after-hook (the priority update) on side_, beside Adam: its fork and join events.
  gpu::Event after_fork_, after_done_;
};

}  // namespace foxhunt::rl
