#include "actors/evaluate.hpp"

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <utility>

#include "actors/stage_factory.hpp"
#include "actors/train_run.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "gpu/device.hpp"
#include "gpu/exit.hpp"
#include "rl/dqn/learner.hpp"
#include "rl/dqn/policy.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_policies.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;

std::uint64_t eval_seed(std::uint64_t run_seed) {
  // splitmix64 of a tagged seed: far from run.seed and its neighbours (other runs' seeds).
  std::uint64_t z = run_seed + 0x9e3779b97f4a7c15ull * 0x6576616cull;  // "eval"
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z == run_seed ? z + 1 : z;
}

EvalPlan plan_eval(const EvalRequest& req) {
  EvalPlan plan;
  if (req.checkpoint.empty()) throw std::invalid_argument("--checkpoint: missing (a checkpoint or run directory)");
  if (!fs::is_directory(req.checkpoint))
    throw std::invalid_argument("--checkpoint " + req.checkpoint.string() + ": no such directory");
  try {
    plan.checkpoint = resolve_checkpoint(req.checkpoint);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--checkpoint ") + e.what());
  }
  if (!fs::is_regular_file(plan.checkpoint / "learner.online.safetensors"))
    throw std::invalid_argument("--checkpoint " + plan.checkpoint.string() +
                                ": no learner.online.safetensors there (not a foxhunt train checkpoint)");
  if (req.config) {
    if (!fs::is_regular_file(*req.config))
      throw std::invalid_argument("--config " + req.config->string() + ": no such file");
    plan.config_file = *req.config;
  } else if (auto f = run_config_of(plan.checkpoint)) {
    plan.config_file = *f;
  } else {
    throw std::invalid_argument("--config: missing, and the checkpoint " + plan.checkpoint.string() +
                                " has no config.resolved.toml (nor its run directory): give the run's config");
  }
  try {
    plan.config = load_run_config(plan.config_file);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--config: ") + e.what());
  }
  if (req.episodes < 1 || req.episodes > kMaxEvalEpisodes)
    throw std::invalid_argument("--episodes " + std::to_string(req.episodes) + ": must be in [1, " +
                                std::to_string(kMaxEvalEpisodes) + "]");
  plan.episodes = req.episodes;
  plan.seed = req.seed ? *req.seed : eval_seed(plan.config.run.seed);
  return plan;
}

namespace {

// N environments for `steps` steps with actions from `act(actions, obs, t)`, then the episode
// statistics through the exit module (the one value that leaves the device).
template <class Act>
rl::EpisodeStats run_episodes(rl::VecEnv& env, std::int64_t steps, std::uint64_t seed, cudaStream_t s, Act&& act) {
  const std::int64_t N = env.num_envs(), O = env.obs_dim();
  const rl::ActionSpace space = env.action_space();
  const auto NO = static_cast<std::size_t>(N * O);
  gpu::DeviceBuffer<float> obs(NO), next_obs(NO), reward(static_cast<std::size_t>(N));
  gpu::DeviceBuffer<std::uint8_t> term(static_cast<std::size_t>(N)), trunc(static_cast<std::size_t>(N));
  gpu::DeviceBuffer<std::int32_t> actions(static_cast<std::size_t>(N * space.branches));
  env.reset(obs.data(), gpu::DType::f32, seed, s);
  for (std::int64_t t = 0; t < steps; ++t) {
    act(actions.data(), obs.data(), t);
    rl::StepOutputs out;
    out.obs = next_obs.data();
    out.reward = reward.data();
    out.terminated = term.data();
    out.truncated = trunc.data();
    out.obs_dtype = gpu::DType::f32;
    rl::ActionInput in;
    in.discrete = actions.data();
    env.step(out, in, 1, s);
    std::swap(obs, next_obs);
  }
  gpu::ExitSlot<rl::EpisodeStats> exit;
  env.export_stats(exit, true, s);
  FH_CHECK(cudaStreamSynchronize(s));  // evaluation is not a pipeline: the host waits once, here
  return exit.wait();
}

}  // namespace

EvalReport evaluate(const EvalPlan& plan) {
  const RunConfig& cfg = plan.config;
  std::string why;
  if (gpu::device_count(&why) < 1)
    throw std::runtime_error("foxhunt eval needs a CUDA device: " + (why.empty() ? std::string("none found") : why));
  FH_CHECK(cudaSetDevice(cfg.run.device));
  const std::int64_t N = plan.episodes;
  std::unique_ptr<rl::VecEnv> env = make_env(cfg, N);
  const rl::ActionSpace space = env->action_space();
  if (space.kind != rl::ActionSpace::Kind::discrete)
    throw std::runtime_error("foxhunt eval: the environment's actions must be discrete");

  gpu::DeviceContext ctx(cfg.run.device, 1);
  const gpu::BlasLane lane = ctx.blas(0);
  const cudaStream_t s = lane.stream;
  rl::DqnLearnerConfig lc = dqn_learner_config(cfg, env->obs_dim(), space.branches, space.choices);
  lc.act_rows = N;
  rl::validate(lc);
  rl::DqnPolicy policy(rl::dqn_policy_config(lc), lane);
  try {
    policy.load_weights(plan.checkpoint / "learner.online.safetensors");  // greedy: the weights are all it reads
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint " + plan.checkpoint.string() + " does not load with config " +
                             plan.config_file.string() + ": " + e.what());
  }

  EvalReport report;
  report.market = cfg.env.kind != "cartpole";
  report.episodes = N;
  report.seed = plan.seed;
  report.steps = report.market ? market_config(cfg).episode_length : rl::CartPoleConstants::max_episode_steps;
  report.rows.push_back(
      {"greedy", run_episodes(*env, report.steps, plan.seed, s,
                              [&](std::int32_t* a, const float* obs, std::int64_t) { policy.act(a, obs, N, true); })});
  if (report.market) {
    const rl::MarketConfig mc = market_config(cfg);
    std::vector<std::pair<const char*, rl::BaselinePolicy>> baselines = {
        {"buy_and_hold", rl::BaselinePolicy::buy_and_hold}, {"flat", rl::BaselinePolicy::flat}};
    if (mc.process == rl::PriceProcess::ou) baselines.emplace_back("ou_oracle", rl::BaselinePolicy::ou_oracle);
    for (const auto& [name, kind] : baselines) {
      rl::MarketEnv market(mc, N);
      const rl::BaselinePolicy k = kind;
      report.rows.push_back(
          {name, run_episodes(market, report.steps, plan.seed, s, [&](std::int32_t* a, const float*, std::int64_t t) {
             rl::market_policy_actions(a, nullptr, market, k, plan.seed, static_cast<std::uint64_t>(t), s);
           })});
    }
  }
  return report;
}

std::string format_eval_table(const EvalReport& r) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%lld environments x %lld steps, eval seed %llu\n",
                static_cast<long long>(r.episodes), static_cast<long long>(r.steps),
                static_cast<unsigned long long>(r.seed));
  out += line;
  if (r.market) {
    std::snprintf(line, sizeof line, "%-14s %9s %12s %12s %10s %12s %12s\n", "policy", "episodes", "mean return",
                  "total return", "Sharpe", "max drawdown", "turnover");
    out += line;
    for (const auto& row : r.rows) {
      const rl::EpisodeStats& s = row.stats;
      std::snprintf(line, sizeof line, "%-14s %9.0f %12.5g %11.3f%% %10.3f %11.3f%% %12.4g\n", row.policy.c_str(),
                    s.episodes, s.mean_return, 100.0 * s.mean_total_return, s.mean_sharpe, 100.0 * s.mean_max_drawdown,
                    s.mean_turnover);
      out += line;
    }
    out += "(means over episodes; Sharpe annualized per episode; turnover = traded notional / equity, summed)\n";
  } else {
    std::snprintf(line, sizeof line, "%-14s %9s %12s %12s %12s\n", "policy", "episodes", "mean return", "std return",
                  "mean length");
    out += line;
    for (const auto& row : r.rows) {
      const rl::EpisodeStats& s = row.stats;
      std::snprintf(line, sizeof line, "%-14s %9.0f %12.2f %12.2f %12.1f\n", row.policy.c_str(), s.episodes,
                    s.mean_return, s.std_return, s.mean_length);
      out += line;
    }
  }
  return out;
}

}  // namespace foxhunt::actors
