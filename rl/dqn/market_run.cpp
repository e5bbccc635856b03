#include "rl/dqn/market_run.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/check.hpp"
#include "rl/dqn/replay_hooks.hpp"
#include "rl/envs/market_policies.hpp"

namespace foxhunt::rl {

namespace {

DqnLearnerConfig learner_config(const MarketLearning& l, const MarketEnv& env, std::uint64_t seed,
                                std::int64_t total_steps) {
  DqnLearnerConfig c;
  c.net.obs_dim = env.obs_dim();
  c.net.hidden = l.hidden;
  c.net.branches = env.action_space().branches;
  c.net.actions = env.action_space().choices;
  c.net.dueling = true;
  c.net.math = l.math;
  c.batch = l.batch;
  c.double_q = true;
  c.adam.eps = 1.5e-4f;
  c.schedule.lr_start = c.schedule.lr_end = l.lr;
  c.schedule.epsilon_start = 1.f;
  c.schedule.epsilon_end = l.eps_end;
  c.schedule.epsilon_steps = static_cast<std::int64_t>(l.eps_fraction * static_cast<double>(total_steps));
  c.max_grad_norm = 10.f;
  c.tau = l.tau;
  c.priority_eps = 0.f;
  c.seed = seed;
  c.act_rows = env.num_envs();
  return c;
}

ReplayConfig replay_config(const MarketLearning& l, const MarketEnv& env, std::uint64_t seed,
                           std::int64_t total_steps) {
  ReplayConfig rc;
  rc.capacity = std::min<std::int64_t>(std::int64_t{1} << 20, std::max<std::int64_t>(total_steps, 65536));
  rc.layout.obs_dim = env.obs_dim();
  const std::int64_t branches = env.action_space().branches;
  rc.layout.action_kind = branches > 1 ? ActionKind::multi_discrete : ActionKind::discrete;
  rc.layout.action_dim = branches;
  rc.batch_size = l.batch;
  rc.n_step = l.n_step;
  rc.gamma = l.gamma;
  rc.alpha = 0.6f;
  rc.beta = 0.4f;
  rc.beta_final = 1.f;
  rc.beta_anneal_steps = 30000;
  rc.seed = seed;
  return rc;
}

}  // namespace

MarketDqnRun::MarketDqnRun(const MarketConfig& market, const MarketLearning& learning, std::uint64_t seed,
                           std::int64_t total_steps, gpu::BlasLane lane)
    : market_(market),
      seed_(seed),
      lane_(lane),
      env_(market_, kEnvs),
      eval_(market_, kEnvs),
      replay_(replay_config(learning, env_, seed, total_steps), lane.stream),
      batch_(replay_.allocate_batch(learning.batch)),
      learner_(learner_config(learning, env_, seed, total_steps), lane),
      eval_obs_(static_cast<std::size_t>(kEnvs * env_.obs_dim())),
      eval_reward_(static_cast<std::size_t>(kEnvs)),
      eval_final_(static_cast<std::size_t>(kEnvs * env_.obs_dim())),
      eval_term_(static_cast<std::size_t>(kEnvs)),
      eval_trunc_(static_cast<std::size_t>(kEnvs)),
      eval_act_(static_cast<std::size_t>(kEnvs * env_.action_space().branches)) {
  DqnEnvHooks hooks;
  hooks.num_envs = kEnvs;
  hooks.obs_dim = env_.obs_dim();
  hooks.reset = [this](float* obs, std::uint64_t s, cudaStream_t cs) { env_.reset(obs, gpu::DType::f32, s, cs); };
  hooks.step = [this](float* next_obs, float* reward, std::uint8_t* term, std::uint8_t* trunc, float* final_obs,
                      const std::int32_t* actions, cudaStream_t cs) {
    StepOutputs o;
    o.obs = next_obs;
    o.reward = reward;
    o.terminated = term;
    o.truncated = trunc;
    o.final_obs = final_obs;
    ActionInput in;
    in.discrete = actions;
    env_.step(o, in, 1, cs);
  };
  trainer_ = std::make_unique<DqnTrainer>(learner_, hooks, make_replay_hooks(replay_, batch_, kEnvs),
                                          DqnTrainSchedule{20000, kEnvs, learning.updates_per_vector_step});
  FH_CHECK(cudaStreamSynchronize(lane.stream));
}

EpisodeStats MarketDqnRun::evaluate(int policy) {
  const cudaStream_t s = lane_.stream;
  const std::uint64_t eval_seed = 1000 + seed_;
  eval_.reset(eval_obs_.data(), gpu::DType::f32, eval_seed, s);
  const std::int64_t steps = static_cast<std::int64_t>(market_.episode_length) * 4;
  for (std::int64_t t = 0; t < steps; ++t) {
    if (policy < 0)
      learner_.act(eval_act_.data(), eval_obs_.data(), kEnvs, true);
    else
      market_policy_actions(eval_act_.data(), nullptr, eval_, static_cast<BaselinePolicy>(policy), eval_seed,
                            static_cast<std::uint64_t>(t), s);
    StepOutputs o;
    o.obs = eval_obs_.data();
    o.reward = eval_reward_.data();
    o.terminated = eval_term_.data();
    o.truncated = eval_trunc_.data();
    o.final_obs = eval_final_.data();
    ActionInput in;
    in.discrete = eval_act_.data();
    eval_.step(o, in, 1, s);
  }
  eval_.export_stats(exit_, true, s);
  return exit_.wait();
}

MarketDqnRun::Scores MarketDqnRun::score() {
  Scores r;
  const EpisodeStats g = evaluate(-1);
  r.greedy = g.mean_sharpe;
  r.greedy_turnover = g.mean_turnover;
  r.oracle = market_.process == PriceProcess::ou ? evaluate(static_cast<int>(BaselinePolicy::ou_oracle)).mean_sharpe
                                                 : std::nan("");
  r.hold = evaluate(static_cast<int>(BaselinePolicy::buy_and_hold)).mean_sharpe;
  r.flat = evaluate(static_cast<int>(BaselinePolicy::flat)).mean_sharpe;
  const EpisodeStats rnd = evaluate(static_cast<int>(BaselinePolicy::random));
  r.random = rnd.mean_sharpe;
  r.random_turnover = rnd.mean_turnover;
  return r;
}

}  // namespace foxhunt::rl
