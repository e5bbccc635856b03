#pragma once
// DqnPolicy: the acting side of the DQN family, apart from any learner. A Q-network forward over
// the observations, then per action branch greedy, epsilon-greedy (epsilon from its own device
// state, on the env-step schedule) or, for noisy nets, greedy under fresh noise per step. Its
// weights are a flat parameter buffer (the learner's arena layout), loaded from a published
// policy buffer, a learner's arena, or a checkpoint file. The collector and `foxhunt eval` act
// through it; DqnLearner::act runs the same selection (dqn_act) on the learner's own network.
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <memory>

#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "models/q_network.hpp"
#include "rl/dqn/state.hpp"

namespace foxhunt::rl {

// Philox streams of the online network's noise and of the action draws. A policy and a learner
// built from the same seed draw the same noise and the same exploration.
inline constexpr std::uint32_t kOnlineNoiseStreams = 0x100;
inline constexpr std::uint32_t kActStream = 0x300;

struct DqnPolicyConfig {
  models::QNetworkSpec net;
  DqnSchedule schedule{};  // epsilon_* drive exploration; the rest only fills the state as a learner's
  std::uint64_t seed = 0;  // initial weights (a learner's of the same seed), noise and exploration
  std::int64_t rows = 1;   // most observations one act() call handles (e.g. the env count)
};

// Q of obs (rows, obs_dim) with net (noisy nets: fresh noise keyed by state->act_noise_counter
// unless eval; eval uses mu only), then per branch epsilon-greedy with state->epsilon (greedy when
// eval or when the net is noisy), draws keyed by (seed, kActStream, state->act_counter), into
// actions (rows, D). ws: a workspace of net for at least rows. Capturable (no host values change).
void dqn_act(std::int32_t* actions, models::QNetwork& net, models::QNetwork::Workspace& ws, DqnState* state,
             const float* obs, std::int64_t rows, bool eval, std::uint64_t seed, gpu::BlasLane lane);

class DqnPolicy {
 public:
  // The network initialised as a DqnLearner of the same seed initialises its online network, and
  // the state as that learner's (epsilon at epsilon_start, the counters at zero).
  DqnPolicy(const DqnPolicyConfig& config, gpu::BlasLane lane);

  // dqn_act on this policy's network and state; rows <= config.rows.
  void act(std::int32_t* actions, const float* obs, std::int64_t rows, bool eval);
  const float* q() const { return net_->q(ws_); }  // (rows, D, A) of the last act()
  // After an environment step of num_envs transitions: the epsilon schedule and the draw counters.
  void after_env_step(std::int64_t num_envs);

  // The flat weights (floats() values, the learner's online arena layout).
  float* params() noexcept { return arena_.params(); }
  std::int64_t floats() const noexcept { return arena_.padded_count(); }
  // Enqueues on the policy's stream a copy of `floats` weights from device memory (a published
  // policy buffer, a learner's arena); acts after it see them.
  void load_weights(const float* params, std::int64_t floats);
  // The weights of an arena file (e.g. a learner checkpoint's "<stem>.online.safetensors"; its
  // optimizer state, if any, is not used). std::runtime_error naming the file when it does not fit
  // the network. Synchronizes.
  void load_weights(const std::filesystem::path& file);

  // Checkpoint: "<stem>.online.safetensors" (the weights) and "<stem>.state.bin" (epsilon step,
  // act and noise counters: a DqnState, as a learner's state file). Synchronizes.
  void save(const std::filesystem::path& stem);
  // Loads what save() wrote (or a learner's files of the same stem: its weights and state).
  void load(const std::filesystem::path& stem);

  gpu::ParameterArena& arena() noexcept { return arena_; }
  models::QNetwork& network() noexcept { return *net_; }
  DqnState* state() noexcept { return state_.data(); }
  const DqnPolicyConfig& config() const noexcept { return config_; }
  cudaStream_t stream() const noexcept { return lane_.stream; }

 private:
  DqnPolicyConfig config_;
  gpu::BlasLane lane_;
  gpu::ParameterArena arena_;
  std::unique_ptr<models::QNetwork> net_;
  models::QNetwork::Workspace ws_;
  gpu::DeviceBuffer<DqnState> state_;
};

}  // namespace foxhunt::rl
