#pragma once
// What `foxhunt eval` acts through: a policy writes one step of actions for every environment
// from the current observations, on the device, ordered on the given stream. The agent of a
// checkpoint (make_checkpoint_policy, by learner.kind) and the market baselines are
// implementations; a new learner kind adds one class and one line in make_checkpoint_policy.
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "actors/run_config.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "rl/dqn/policy.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_policies.hpp"
#include "rl/envs/obs_features.hpp"
#include "rl/envs/vec_env.hpp"

namespace foxhunt::actors {

// The action buffer of one step, per the environment's action space: exactly one is set.
struct EvalActions {
  std::int32_t* discrete = nullptr;  // (rows, branches)
  float* continuous = nullptr;       // (rows, dim)
};

class EvalPolicy {
 public:
  virtual ~EvalPolicy() = default;
  virtual std::string name() const = 0;  // the report's policy name ("greedy", "buy_and_hold")
  // Actions for obs (rows, obs_dim) f32 of step `step` (0-based since the environments' reset).
  virtual void act(const EvalActions& actions, const float* obs, std::int64_t rows, std::int64_t step,
                   cudaStream_t stream) = 0;
};

// DQN-family checkpoints: greedy per branch on the online network (noisy nets: the mean weights).
// With [features] the run's frozen extractor fills a copy of each observation's feature block
// (one episode per environment: every state starts at step 0 and carries after that).
class DqnGreedyPolicy final : public EvalPolicy {
 public:
  // `weights`: the checkpoint's learner.online.safetensors. std::runtime_error naming it and
  // `config_file` when it does not fit the network of `config`. Synchronizes (a load).
  DqnGreedyPolicy(const RunConfig& config, const std::filesystem::path& config_file, const rl::VecEnv& env,
                  const std::filesystem::path& weights, gpu::BlasLane lane);
  ~DqnGreedyPolicy() override;
  std::string name() const override { return "greedy"; }
  // `stream` must be the lane's stream (the policy's cuBLAS handle is bound to it).
  void act(const EvalActions& actions, const float* obs, std::int64_t rows, std::int64_t step,
           cudaStream_t stream) override;

 private:
  std::unique_ptr<rl::DqnPolicy> policy_;
  gpu::BlasLane lane_;
  std::unique_ptr<rl::ObsFeatures> features_;  // [features]: null without
  gpu::DeviceBuffer<float> obs_;
  gpu::DeviceBuffer<std::uint8_t> no_done_;
};

// PPO checkpoints: the deterministic action of the policy head (argmax per branch, or the
// Gaussian mean within the bounds). Recurrent policies start every environment from the zero
// state at step 0 and carry the state after that (evaluation runs one episode per environment).
class PpoGreedyPolicy final : public EvalPolicy {
 public:
  // `weights`: the checkpoint's learner.safetensors; errors as DqnGreedyPolicy's.
  PpoGreedyPolicy(const RunConfig& config, const std::filesystem::path& config_file, const rl::VecEnv& env,
                  const std::filesystem::path& weights, gpu::BlasLane lane);
  ~PpoGreedyPolicy() override;
  std::string name() const override { return "greedy"; }
  void act(const EvalActions& actions, const float* obs, std::int64_t rows, std::int64_t step,
           cudaStream_t stream) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A baseline of rl/envs/market_policies.hpp acting in `env` (it reads the environment's state).
class MarketBaselinePolicy final : public EvalPolicy {
 public:
  MarketBaselinePolicy(rl::BaselinePolicy kind, const rl::MarketEnv& env, std::uint64_t seed)
      : kind_(kind), env_(env), seed_(seed) {}
  std::string name() const override;
  void act(const EvalActions& actions, const float* obs, std::int64_t rows, std::int64_t step,
           cudaStream_t stream) override;

 private:
  rl::BaselinePolicy kind_;
  const rl::MarketEnv& env_;
  std::uint64_t seed_;
};

const char* baseline_name(rl::BaselinePolicy kind);

// The policy of a checkpoint directory, chosen by config.learner.kind ("dqn": DqnGreedyPolicy,
// "ppo": PpoGreedyPolicy),
// for environments shaped like `env`. std::runtime_error for a kind evaluation does not know or
// a checkpoint that does not fit.
std::unique_ptr<EvalPolicy> make_checkpoint_policy(const RunConfig& config, const std::filesystem::path& config_file,
                                                   const std::filesystem::path& checkpoint, const rl::VecEnv& env,
                                                   gpu::BlasLane lane);

}  // namespace foxhunt::actors
