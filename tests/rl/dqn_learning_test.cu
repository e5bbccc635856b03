// Learning by outcome (suite DqnLearning; filter with --gtest_filter=-DqnLearning.* to skip):
// CartPole-v1, mean return of the episodes finished over the last 50k of 500k environment steps
// (>= 100 episodes when the policy is good) must be >= 475, for plain DQN with CleanRL's
// hyper-parameters and for Rainbow, 3 fixed seeds each. The OU market (configs/markets/
// ou_mean_reversion.toml): the greedy policy's mean episode Sharpe net of costs must reach half the
// OU oracle's and beat buy-and-hold, 3 seeds; BDQ on the 8-asset market: positive Sharpe,
// 3 seeds. Everything runs on the device through the
// single-stream trainer: vectorized CartPole (rl/envs), prioritized replay (rl/replay), the
// learner's update graph. Only the episode statistics leave, through the exit.
//
// The environments live on another branch until it is merged: the tests compile to a skip until
// rl/envs/cartpole.hpp exists.
#include "models/fd_support.hpp"

#if __has_include("rl/envs/cartpole.hpp")
#include "gpu/exit.hpp"
#include "rl/dqn/config.hpp"
#include "rl/dqn/replay_hooks.hpp"
#include "rl/dqn/trainer.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_policies.hpp"
#include "rl/replay/replay_buffer.hpp"
#define FOXHUNT_HAVE_CARTPOLE 1
#endif

#include <cstdlib>
#include <filesystem>

#include <cstdio>
#include <functional>
#include <string>

namespace foxhunt::rl {
namespace {

class DqnLearning : public test::LaneTest {};

#ifdef FOXHUNT_HAVE_CARTPOLE

struct Outcome {
  double mean_return = 0, episodes = 0;
};

// Trains on CartPole for total_steps transitions; returns the episode statistics of the last
// `window` transitions.
Outcome train_cartpole(const DqnLearnerConfig& lc, const ReplayConfig& rc, std::int64_t num_envs,
                       DqnTrainSchedule schedule, std::int64_t total_steps, std::int64_t window, std::uint64_t seed,
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
  trainer.run(total_steps - window);
  gpu::DeviceBuffer<EpisodeStats> stats(1);
  env.reduce_stats(stats.data(), true, s);  // clear: count only the final window's episodes
  trainer.run(window);
  gpu::ExitSlot<EpisodeStats> exit;
  env.export_stats(exit, false, s);
  const EpisodeStats st = exit.wait();
  learner.publish_metrics();
  const DqnState m = learner.metrics().wait();
  std::printf("  seed %llu: mean return %.1f over %.0f episodes; updates %lld, skips %u, loss %.4g, dead %u/%lld\n",
              static_cast<unsigned long long>(seed), st.mean_return, st.episodes,
              static_cast<long long>(m.updates_applied), m.skips_total, static_cast<double>(m.loss), m.dead_units,
              static_cast<long long>(m.relu_units));
  return {st.mean_return, st.episodes};
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
    const Outcome o = train_cartpole(c, cartpole_replay(10000, 128, 1, false, seed), 8,
                                     DqnTrainSchedule{10000, 10, 1}, 500000, 50000, seed, lane());
    EXPECT_GE(o.episodes, 100) << "seed " << seed;
    EXPECT_GE(o.mean_return, 475.0) << "seed " << seed;
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
    const Outcome o = train_cartpole(c, cartpole_replay(100000, 128, 3, true, seed), 8,
                                     // 60k steps: a window of 50k holds at most 100 perfect
                                     // 500-step episodes (an H200 run saw 99 at return 500.0)
                                     DqnTrainSchedule{5000, 8, 1}, 500000, 60000, seed, lane());
    EXPECT_GE(o.episodes, 100) << "seed " << seed;
    EXPECT_GE(o.mean_return, 475.0) << "seed " << seed;
  }
}

// ---- OU market -----------------------------------------------------------------------------

std::filesystem::path market_config_path(const std::string& name = "ou_mean_reversion.toml") {
  if (const char* env = std::getenv("FOXHUNT_CONFIGS")) return std::filesystem::path(env) / "markets" / name;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = exe.parent_path() / ".." / "share" / "foxhunt" / "configs" / "markets" / name;
    if (std::filesystem::exists(p)) return p;
  }
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "configs" / "markets" / name;
}

// Mean episode Sharpe over `episodes_per_env` full episodes of every environment, actions from
// `policy(call)` (which writes env.num_envs() discrete actions into `actions`).
double mean_sharpe(MarketEnv& env, float* obs, std::int32_t* actions, std::uint64_t seed, int episodes_per_env,
                   const std::function<void(std::uint64_t)>& policy, cudaStream_t s) {
  const std::int64_t N = env.num_envs(), O = env.obs_dim();
  gpu::DeviceBuffer<float> reward(N), final_obs(N * O);
  gpu::DeviceBuffer<std::uint8_t> term(N), trunc(N);
  env.reset(obs, gpu::DType::f32, seed, s);
  const std::int64_t steps = static_cast<std::int64_t>(env.config().episode_length) * episodes_per_env;
  for (std::int64_t t = 0; t < steps; ++t) {
    policy(static_cast<std::uint64_t>(t));
    StepOutputs o;
    o.obs = obs;
    o.reward = reward.data();
    o.terminated = term.data();
    o.truncated = trunc.data();
    o.final_obs = final_obs.data();
    ActionInput in;
    in.discrete = actions;
    env.step(o, in, 1, s);
  }
  gpu::ExitSlot<EpisodeStats> exit;
  env.export_stats(exit, true, s);
  const EpisodeStats st = exit.wait();
  return st.mean_sharpe;
}

TEST_F(DqnLearning, OuMarketBeatsHalfOracleAndBuyAndHold) {
  const MarketConfig mc = load_market_config(market_config_path());
  const std::int64_t N = 64;
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    MarketEnv env(mc, N);
    const std::int64_t O = env.obs_dim(), A = env.action_space().choices;
    DqnLearnerConfig c;
    c.net.obs_dim = O;
    c.net.hidden = {128, 128};
    c.net.actions = A;
    c.net.dueling = true;
    c.batch = 256;
    c.double_q = true;
    c.adam.eps = 1.5e-4f;
    c.schedule.lr_start = c.schedule.lr_end = 2.5e-4f;
    c.schedule.epsilon_start = 1.f;
    c.schedule.epsilon_end = 0.02f;
    c.schedule.epsilon_steps = 1000000;
    c.max_grad_norm = 10.f;
    c.tau = 0.005f;
    c.priority_eps = 0.f;
    c.seed = seed;
    c.act_rows = N;
    ReplayConfig rc;
    rc.capacity = 1 << 20;
    rc.layout.obs_dim = O;
    rc.batch_size = c.batch;
    rc.n_step = 3;
    rc.gamma = 0.99f;
    rc.alpha = 0.6f;
    rc.beta = 0.4f;
    rc.beta_final = 1.f;
    rc.beta_anneal_steps = 30000;
    rc.seed = seed;
    const cudaStream_t st = s();
    ReplayBuffer rb(rc, st);
    SampledBatch out = rb.allocate_batch(c.batch);
    DqnLearner learner(c, lane());
    DqnEnvHooks hooks;
    hooks.num_envs = N;
    hooks.obs_dim = O;
    hooks.reset = [&env](float* obs, std::uint64_t sd, cudaStream_t cs) { env.reset(obs, gpu::DType::f32, sd, cs); };
    hooks.step = [&env](float* next_obs, float* reward, std::uint8_t* term, std::uint8_t* trunc, float* final_obs,
                        const std::int32_t* actions, cudaStream_t cs) {
      StepOutputs o;
      o.obs = next_obs;
      o.reward = reward;
      o.terminated = term;
      o.truncated = trunc;
      o.final_obs = final_obs;
      ActionInput in;
      in.discrete = actions;
      env.step(o, in, 1, cs);
    };
    DqnTrainer trainer(learner, hooks, make_replay_hooks(rb, out, N), DqnTrainSchedule{20000, 64, 1});
    trainer.reset(seed);
    trainer.run(2000000);

    // Evaluation on fresh episodes (another seed), the same for every policy.
    MarketEnv eval(mc, N);
    gpu::DeviceBuffer<float> obs(N * O);
    gpu::DeviceBuffer<std::int32_t> act(N);
    const std::uint64_t eval_seed = 1000 + seed;
    const double greedy = mean_sharpe(
        eval, obs.data(), act.data(), eval_seed, 4,
        [&](std::uint64_t) { learner.act(act.data(), obs.data(), N, true); }, st);
    const double oracle = mean_sharpe(
        eval, obs.data(), act.data(), eval_seed, 4,
        [&](std::uint64_t t) {
          market_policy_actions(act.data(), nullptr, eval, BaselinePolicy::ou_oracle, eval_seed, t, st);
        },
        st);
    const double hold = mean_sharpe(
        eval, obs.data(), act.data(), eval_seed, 4,
        [&](std::uint64_t t) {
          market_policy_actions(act.data(), nullptr, eval, BaselinePolicy::buy_and_hold, eval_seed, t, st);
        },
        st);
    std::printf("  seed %llu: greedy Sharpe %.3f, oracle %.3f, buy-and-hold %.3f\n",
                static_cast<unsigned long long>(seed), greedy, oracle, hold);
    EXPECT_GT(oracle, 0.0) << "seed " << seed;
    EXPECT_GE(greedy, 0.5 * oracle) << "seed " << seed;
    EXPECT_GT(greedy, hold) << "seed " << seed;
  }
}

// BDQ on the 8-asset correlated GBM market (configs/markets/gbm8_correlated.toml; the issue asks
// for 4 assets, no 4-asset config ships yet): one branch per asset, shared value; the greedy
// policy's mean episode Sharpe net of costs must be positive.
TEST_F(DqnLearning, BdqMultiAssetMarketPositiveSharpe) {
  const MarketConfig mc = load_market_config(market_config_path("gbm8_correlated.toml"));
  const std::int64_t N = 64;
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    MarketEnv env(mc, N);
    const std::int64_t O = env.obs_dim(), D = env.action_space().branches, A = env.action_space().choices;
    DqnLearnerConfig c;
    c.net.obs_dim = O;
    c.net.hidden = {256, 256};
    c.net.branches = D;
    c.net.actions = A;
    c.net.dueling = true;
    c.batch = 256;
    c.double_q = true;
    c.adam.eps = 1.5e-4f;
    c.schedule.lr_start = c.schedule.lr_end = 2.5e-4f;
    c.schedule.epsilon_start = 1.f;
    c.schedule.epsilon_end = 0.02f;
    c.schedule.epsilon_steps = 1000000;
    c.max_grad_norm = 10.f;
    c.tau = 0.005f;
    c.priority_eps = 0.f;
    c.seed = seed;
    c.act_rows = N;
    ReplayConfig rc;
    rc.capacity = 1 << 20;
    rc.layout.obs_dim = O;
    rc.layout.action_kind = D > 1 ? ActionKind::multi_discrete : ActionKind::discrete;
    rc.layout.action_dim = D;
    rc.batch_size = c.batch;
    rc.n_step = 3;
    rc.gamma = 0.99f;
    rc.alpha = 0.6f;
    rc.beta = 0.4f;
    rc.beta_final = 1.f;
    rc.beta_anneal_steps = 30000;
    rc.seed = seed;
    const cudaStream_t st = s();
    ReplayBuffer rb(rc, st);
    SampledBatch out = rb.allocate_batch(c.batch);
    DqnLearner learner(c, lane());
    DqnEnvHooks hooks;
    hooks.num_envs = N;
    hooks.obs_dim = O;
    hooks.reset = [&env](float* obs, std::uint64_t sd, cudaStream_t cs) { env.reset(obs, gpu::DType::f32, sd, cs); };
    hooks.step = [&env](float* next_obs, float* reward, std::uint8_t* term, std::uint8_t* trunc, float* final_obs,
                        const std::int32_t* actions, cudaStream_t cs) {
      StepOutputs o;
      o.obs = next_obs;
      o.reward = reward;
      o.terminated = term;
      o.truncated = trunc;
      o.final_obs = final_obs;
      ActionInput in;
      in.discrete = actions;
      env.step(o, in, 1, cs);
    };
    DqnTrainer trainer(learner, hooks, make_replay_hooks(rb, out, N), DqnTrainSchedule{20000, 64, 1});
    trainer.reset(seed);
    trainer.run(2000000);
    MarketEnv eval(mc, N);
    gpu::DeviceBuffer<float> obs(N * O);
    gpu::DeviceBuffer<std::int32_t> act(N * D);
    const double greedy = mean_sharpe(
        eval, obs.data(), act.data(), 1000 + seed, 4,
        [&](std::uint64_t) { learner.act(act.data(), obs.data(), N, true); }, st);
    std::printf("  seed %llu: BDQ greedy Sharpe %.3f\n", static_cast<unsigned long long>(seed), greedy);
    EXPECT_GT(greedy, 0.0) << "seed " << seed;
  }
}

#else

TEST_F(DqnLearning, BdqMultiAssetMarketPositiveSharpe) { GTEST_SKIP() << "rl/envs not merged yet"; }
TEST_F(DqnLearning, OuMarketBeatsHalfOracleAndBuyAndHold) { GTEST_SKIP() << "rl/envs not merged yet"; }
TEST_F(DqnLearning, CartPolePlainDqnCleanRlSettings) { GTEST_SKIP() << "rl/envs (CartPole) not merged yet"; }
TEST_F(DqnLearning, CartPoleRainbow) { GTEST_SKIP() << "rl/envs (CartPole) not merged yet"; }

#endif

}  // namespace
}  // namespace foxhunt::rl
