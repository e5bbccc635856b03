// One DQN training run on a market (BDQ heads when the market has several assets) with the
// single-stream trainer, and the evaluation of its greedy policy beside the baseline policies on
// the same fresh episodes. The learning test (tests/rl/dqn_learning_test.cu) and its recipe sweep
// (bench/learning_sweep.cu) both train through it, so a recipe the sweep measures is the recipe
// the test runs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/exit.hpp"
#include "gpu/linear.hpp"
#include "rl/dqn/learner.hpp"
#include "rl/dqn/trainer.hpp"
#include "rl/envs/episode_stats.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/replay/replay_buffer.hpp"

namespace foxhunt::rl {

// How a market run learns (dueling double DQN, prioritized 3-step replay, Polyak target).
struct MarketLearning {
  std::vector<std::int64_t> hidden{128, 128};
  float lr = 2.5e-4f;
  float gamma = 0.99f;
  int n_step = 3;
  std::int64_t batch = 256;
  std::int64_t updates_per_vector_step = 1;  // one vector step = kEnvs transitions
  double eps_fraction = 0.5;                 // epsilon 1 -> eps_end over this fraction of the steps
  float eps_end = 0.02f;
  float tau = 0.005f;
  gpu::LinearMath math = gpu::LinearMath::fp32;  // the networks' GEMMs (f32 master weights either way)
};

class MarketDqnRun {
 public:
  static constexpr std::int64_t kEnvs = 64;

  // Allocates everything (envs, replay, learner, evaluation buffers) on the lane's stream and
  // waits for it, so that a worker thread can train and evaluate without allocating.
  MarketDqnRun(const MarketConfig& market, const MarketLearning& learning, std::uint64_t seed, std::int64_t total_steps,
               gpu::BlasLane lane);

  DqnTrainer& trainer() { return *trainer_; }
  DqnLearner& learner() { return learner_; }
  const MarketConfig& market() const { return market_; }
  cudaStream_t stream() const { return lane_.stream; }

  // Episode statistics over 4 episodes of every environment, on episodes seeded 1000 + the run's
  // seed (the same for every policy). policy < 0: the learner's greedy policy; else a
  // BaselinePolicy. Synchronous: the statistics leave through the exit module.
  EpisodeStats evaluate(int policy);

  // The greedy policy's and the baselines' mean episode Sharpe net of costs (and turnover) on those
  // same evaluation episodes: what the learning tests assert and the sweep tabulates.
  struct Scores {
    double greedy = 0, greedy_turnover = 0;
    double oracle = 0;  // the OU oracle's; NaN unless the market's prices are OU
    double hold = 0, flat = 0, random = 0, random_turnover = 0;
  };
  Scores score();

 private:
  MarketConfig market_;
  std::uint64_t seed_;
  gpu::BlasLane lane_;
  MarketEnv env_, eval_;
  ReplayBuffer replay_;
  SampledBatch batch_;
  DqnLearner learner_;
  gpu::DeviceBuffer<float> eval_obs_, eval_reward_, eval_final_;
  gpu::DeviceBuffer<std::uint8_t> eval_term_, eval_trunc_;
  gpu::DeviceBuffer<std::int32_t> eval_act_;
  gpu::ExitSlot<EpisodeStats> exit_;
  std::unique_ptr<DqnTrainer> trainer_;
};

}  // namespace foxhunt::rl
