// Learning by outcome (suite DqnLearning; filter with --gtest_filter=-DqnLearning.* to skip):
// CartPole-v1, the mean return over the last 100 episodes must reach 475 within 500k environment
// steps (checked every 10k steps, see train_cartpole), for plain DQN with CleanRL's
// hyper-parameters and for Rainbow, 3 fixed seeds each. The OU market (configs/markets/
// ou_mean_reversion.toml, whose observation carries the price level): the greedy policy's mean
// episode Sharpe net of costs must reach half the OU oracle's and beat buy-and-hold, 3 seeds; BDQ
// on 8 mean-reverting assets (configs/markets/ou8_correlated.toml): positive Sharpe, above
// buy-and-hold and random, 3 seeds. Everything runs on the device through the single-stream trainer: vectorized
// CartPole and markets (rl/envs), prioritized replay (rl/replay), the learner's update graph. Only
// the episode statistics leave, through the exit. bench/learning_sweep.cu trains these recipes
// and the alternatives side by side.
#include "models/fd_support.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gpu/exit.hpp"
#include "rl/dqn/market_run.hpp"
#include "rl/dqn/replay_hooks.hpp"
#include "rl/dqn/trainer.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_policies.hpp"
#include "rl/replay/replay_buffer.hpp"
#include "tests/support/paths.hpp"

namespace foxhunt::rl {
namespace {

class DqnLearning : public test::LaneTest {};

struct Outcome {
  double best_mean = 0;                       // best mean return over >= 100 consecutive episodes (chunk-aligned)
  std::int64_t solved_at = -1;                // transitions at the end of the first such window with mean >= 475
  double final_mean = 0, final_episodes = 0;  // the window that ends at total_steps
};

// Trains on CartPole for total_steps transitions in chunks of `chunk`, reading the episode
// statistics of each chunk (count and mean return of the episodes that ended in it). After each
// chunk, the window of the most recent whole chunks that holds >= 100 episodes stands in for
// "the last 100 episodes" (it holds at least those); the run is solved at the first chunk end
// where that window's mean reaches 475 (Gym's CartPole-v1 threshold), as RL libraries report
// "solved within N steps".
Outcome train_cartpole(const DqnLearnerConfig& lc, const ReplayConfig& rc, std::int64_t num_envs,
                       DqnTrainSchedule schedule, std::int64_t total_steps, std::int64_t chunk, std::uint64_t seed,
                       gpu::BlasLane lane) {
  const cudaStream_t s = lane.stream;
  CartPoleEnv env(num_envs);
  ReplayBuffer rb(rc, s);
  SampledBatch out = rb.allocate_batch(lc.batch);
  DqnLearner learner(lc, lane);
  DqnEnvHooks hooks;
  hooks.num_envs = num_envs;
  hooks.obs_dim = CartPoleConstants::obs_dim;
  hooks.reset = [&env](float* obs, std::uint64_t sd, cudaStream_t cs) { env.reset(obs, gpu::DType::f32, sd, cs); };
  hooks.step = [&env](float* next_obs, float* reward, std::uint8_t* term, std::uint8_t* trunc, float* final_obs,
                      const std::int32_t* actions, cudaStream_t cs) {
    StepOutputs o;
    o.obs = next_obs;
    o.reward = reward;
    o.terminated = term;
    o.truncated = trunc;
    o.final_obs = final_obs;
    o.obs_dtype = gpu::DType::f32;
    ActionInput in;
    in.discrete = actions;
    env.step(o, in, 1, cs);
  };
  DqnTrainer trainer(learner, hooks, make_replay_hooks(rb, out, num_envs), schedule);
  trainer.reset(seed);
  struct Chunk {
    double episodes = 0, return_sum = 0;
  };
  std::vector<Chunk> chunks;
  Outcome o;
  gpu::ExitSlot<EpisodeStats> exit;
  std::string curve;
  for (std::int64_t done = 0; done < total_steps; done += chunk) {
    trainer.run(std::min(chunk, total_steps - done));
    env.export_stats(exit, true, s);  // clear: the next read covers the next chunk only
    const EpisodeStats st = exit.wait();
    chunks.push_back({st.episodes, st.mean_return * st.episodes});
    Chunk window;
    for (auto it = chunks.rbegin(); it != chunks.rend() && window.episodes < 100; ++it) {
      window.episodes += it->episodes;
      window.return_sum += it->return_sum;
    }
    if (window.episodes >= 100) {
      const double mean = window.return_sum / window.episodes;
      o.best_mean = std::max(o.best_mean, mean);
      if (o.solved_at < 0 && mean >= 475.0) o.solved_at = std::min(done + chunk, total_steps);
      o.final_mean = mean;
      o.final_episodes = window.episodes;
    }
    if ((done + chunk) % 50000 == 0) {
      char point[16];
      std::snprintf(point, sizeof point, " %.0f", o.final_mean);
      curve += point;
    }
  }
  learner.publish_metrics();
  const DqnState m = learner.metrics().wait();
  std::printf(
      "  seed %llu: solved at %lld steps (best mean %.1f over >= 100 episodes); final window %.1f over %.0f "
      "episodes; updates %lld, skips %u, loss %.4g, dead %u/%lld\n"
      "    mean return of the last >= 100 episodes every 50k steps:%s\n",
      static_cast<unsigned long long>(seed), static_cast<long long>(o.solved_at), o.best_mean, o.final_mean,
      o.final_episodes, static_cast<long long>(m.updates_applied), m.skips_total, static_cast<double>(m.loss),
      m.dead_units, static_cast<long long>(m.relu_units), curve.c_str());
  return o;
}

ReplayConfig cartpole_replay(std::int64_t capacity, std::int64_t batch, int n_step, bool prioritized,
                             std::uint64_t seed) {
  ReplayConfig rc;
  rc.capacity = capacity;
  rc.layout.obs_dim = CartPoleConstants::obs_dim;
  rc.batch_size = batch;
  rc.n_step = n_step;
  rc.gamma = 0.99f;
  rc.mode = prioritized ? SamplingMode::prioritized : SamplingMode::uniform;
  rc.alpha = 0.5f;
  rc.beta = 0.4f;
  rc.beta_final = 1.f;
  rc.beta_anneal_steps = 40000;
  rc.seed = seed;
  return rc;
}

// CleanRL dqn.py: 120-84 ReLU, Adam 2.5e-4, buffer 10k, batch 128, learning starts 10k, update every
// 10 transitions, hard target copy every 500 transitions (50 updates), epsilon 1 -> 0.05 over
// 250k, MSE against max_a Q_target (no double DQN), no clipping. 8 environments stepped together.
TEST_F(DqnLearning, CartPolePlainDqnCleanRlSettings) {
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    DqnLearnerConfig c;
    c.net.obs_dim = 4;
    c.net.hidden = {120, 84};
    c.net.actions = 2;
    c.batch = 128;
    c.double_q = false;
    c.loss = TdLoss::mse;
    c.schedule.lr_start = c.schedule.lr_end = 2.5e-4f;
    c.schedule.epsilon_start = 1.f;
    c.schedule.epsilon_end = 0.05f;
    c.schedule.epsilon_steps = 250000;
    c.max_grad_norm = 0.f;
    c.tau = 1.f;
    c.target_period = 50;
    c.seed = seed;
    c.act_rows = 8;
    const Outcome o = train_cartpole(c, cartpole_replay(10000, 128, 1, false, seed), 8, DqnTrainSchedule{10000, 10, 1},
                                     500000, 10000, seed, lane());
    EXPECT_GE(o.solved_at, 0) << "seed " << seed << ": the mean over 100 episodes never reached 475 (best "
                              << o.best_mean << ")";
  }
}

// Rainbow: double + dueling + noisy (sigma0 0.5) + 3-step + PER (alpha 0.5, beta 0.4 -> 1) + C51
// (51 atoms on [0, 100]: CartPole's discounted return is below 1 / (1 - 0.99) = 100).
TEST_F(DqnLearning, CartPoleRainbow) {
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    DqnLearnerConfig c;
    c.net.obs_dim = 4;
    c.net.hidden = {128, 128};
    c.net.actions = 2;
    c.net.dueling = true;
    c.net.noisy = true;
    c.net.sigma0 = 0.5f;
    c.net.atoms = 51;
    c.net.v_min = 0.f;
    c.net.v_max = 100.f;
    c.batch = 128;
    c.double_q = true;
    c.adam.eps = 1.5e-4f;
    c.schedule.lr_start = c.schedule.lr_end = 5e-4f;
    c.schedule.epsilon_start = c.schedule.epsilon_end = 0.f;  // noisy exploration
    c.max_grad_norm = 10.f;
    c.tau = 1.f;
    c.target_period = 100;
    c.priority_eps = 0.f;  // the replay adds its own
    c.seed = seed;
    c.act_rows = 8;
    const Outcome o = train_cartpole(c, cartpole_replay(100000, 128, 3, true, seed), 8, DqnTrainSchedule{5000, 8, 1},
                                     500000, 10000, seed, lane());
    EXPECT_GE(o.solved_at, 0) << "seed " << seed << ": the mean over 100 episodes never reached 475 (best "
                              << o.best_mean << ")";
  }
}

// ---- markets ---------------------------------------------------------------------------------

std::filesystem::path market_config_path(const std::string& name) {
  if (const char* env = std::getenv("FOXHUNT_CONFIGS")) return std::filesystem::path(env) / "markets" / name;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = exe.parent_path() / ".." / "share" / "foxhunt" / "configs" / "markets" / name;
    if (std::filesystem::exists(p)) return p;
  }
  return foxhunt::test::configs_dir() / "markets" / name;
}

// A learning recipe for a market (bench/learning_sweep.cu trains these and others side by side):
// a config file plus MarketConfig fields, nothing the product cannot say in a TOML file, and the
// learner's settings.
struct MarketRecipe {
  std::string config;             // configs/markets/<config>
  int window = 0;                 // > 0: market.window
  bool log_return = false;        // reward.kind = "log_return" (instead of the config's reward) ...
  double reward_scale = 0.0;      // ... > 0: reward.scale (0 keeps the config's)
  double turnover_penalty = 0.0;  // added to reward.turnover_penalty (the Sharpe is always from equity returns)
  MarketLearning learning;
};

MarketConfig recipe_market(const MarketRecipe& r) {
  MarketConfig mc = load_market_config(market_config_path(r.config));
  if (r.log_return) mc.reward = RewardKind::log_return;
  if (r.reward_scale > 0.0) mc.reward_scale = r.reward_scale;
  mc.turnover_penalty += r.turnover_penalty;
  if (r.window > 0) mc.window = r.window;
  validate(mc);
  return mc;
}

using MarketOutcome = MarketDqnRun::Scores;

// Trains the recipe for `total_steps` transitions on 64 environments, then evaluates the greedy
// policy and the baselines on the same fresh episodes (4 per environment, another seed).
MarketOutcome train_market(const MarketRecipe& r, std::uint64_t seed, std::int64_t total_steps, gpu::BlasLane lane) {
  MarketDqnRun run(recipe_market(r), r.learning, seed, total_steps, lane);
  run.trainer().reset(seed);
  run.trainer().run(total_steps);
  const MarketOutcome res = run.score();
  run.learner().publish_metrics();
  const DqnState m = run.learner().metrics().wait();
  std::printf(
      "  seed %llu: greedy Sharpe %.3f (turnover %.1f / episode), oracle %.3f, buy-and-hold %.3f, random %.3f "
      "(turnover %.1f); updates %lld, loss %.4g, q_mean %.4g\n",
      static_cast<unsigned long long>(seed), res.greedy, res.greedy_turnover, res.oracle, res.hold, res.random,
      res.random_turnover, static_cast<long long>(m.updates_applied), static_cast<double>(m.loss),
      static_cast<double>(m.q_mean));
  return res;
}

// OU market (configs/markets/ou_mean_reversion.toml). The observation's 32-return window holds
// only part of the OU state: the best linear estimate of the log price's deviation from its mean
// from 32 returns has R^2 = 0.23 (corr 0.48), and trading on that estimate earns about 0.48
// Sharpe net of costs against the oracle's 1.30 (a simulation of this market's dynamics and
// costs). Half the oracle is out of reach from the window alone (a recipe without the level
// earned 0.38 / 0.43 / 0.14), so the market's observation carries the price level
// (observation.price_level in the config), the state the oracle trades on. Trained on the log
// return x 100 (reward.kind and reward.scale set on the loaded config).
TEST_F(DqnLearning, OuMarketBeatsHalfOracleAndBuyAndHold) {
  MarketRecipe r;
  r.config = "ou_mean_reversion.toml";
  r.log_return = true;
  r.reward_scale = 100.f;
  r.learning.updates_per_vector_step = 2;
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    const MarketOutcome o = train_market(r, seed, 2000000, lane());
    EXPECT_GT(o.oracle, 0.0) << "seed " << seed;
    EXPECT_GE(o.greedy, 0.5 * o.oracle) << "seed " << seed;
    EXPECT_GT(o.greedy, o.hold) << "seed " << seed;
  }
}

// BDQ (one branch per asset, shared value) on 8 assets. On the 8-asset GBM market itself
// (configs/markets/gbm8_correlated.toml) the only edge is the drift: about 1e-4 per step between a
// long and a short branch against 1e-2 of return noise, while the 256 window inputs are
// unpredictable noise. The best constant policy (long everything) earns about 0.37 Sharpe, random
// -1.56 with a turnover of ~410 per episode (a simulation of the market's dynamics and costs);
// the test's recipe there earned -1.45 / -1.50 / -1.44, random's level: a greedy policy that
// argmaxes noise and churns, no sign or mapping error (branch order, action levels, the position
// in the observation, BDQ targets all check out). So the test trains on a market where a
// per-asset signal exists: configs/markets/ou8_correlated.toml, the same 8 assets, costs and
// limits with OU prices (kappa 5), each asset's price level in the observation, the log return x
// 100 as the reward (all in the file).
TEST_F(DqnLearning, BdqMultiAssetMarketPositiveSharpe) {
  MarketRecipe r;
  r.config = "ou8_correlated.toml";
  r.learning.hidden = {256, 256};
  r.learning.updates_per_vector_step = 2;
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    const MarketOutcome o = train_market(r, seed, 2000000, lane());
    EXPECT_GT(o.greedy, 0.0) << "seed " << seed;
    EXPECT_GT(o.greedy, o.hold) << "seed " << seed;
    EXPECT_GT(o.greedy, o.random) << "seed " << seed;
  }
}

}  // namespace
}  // namespace foxhunt::rl
