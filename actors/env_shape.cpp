#include "actors/env_shape.hpp"

#include <set>
#include <stdexcept>
#include <string>

#include "rl/envs/cartpole.hpp"
#include "rl/envs/episode_stats.hpp"
#include "rl/envs/market_generator_config.hpp"
#include "rl/envs/market_params.hpp"

namespace foxhunt::actors {

std::size_t EnvShape::state_bytes() const {
  std::size_t b = 0;
  for (const auto& [name, bytes] : state_arrays) b += bytes;
  return b;
}

namespace {

// env.observe: distinct columns of the environment's own observation.
void apply_observe(const RunConfig& c, EnvShape& s) {
  if (c.env.observe.empty()) return;
  std::set<std::int64_t> seen;
  for (std::int64_t col : c.env.observe) {
    if (col >= s.obs_dim)
      throw std::invalid_argument("env.observe: column " + std::to_string(col) + " is outside the observation (" +
                                  std::to_string(s.obs_dim) + " columns: 0 .. " + std::to_string(s.obs_dim - 1) + ")");
    if (!seen.insert(col).second)
      throw std::invalid_argument("env.observe: column " + std::to_string(col) + " is listed twice");
  }
  s.obs_dim = static_cast<std::int64_t>(c.env.observe.size());
}

EnvShape env_shape_unfiltered(const RunConfig& c) {
  const auto n = static_cast<std::size_t>(c.env.num_envs);
  EnvShape s;
  if (c.env.kind == "cartpole") {
    s.obs_dim = rl::CartPoleConstants::obs_dim;
    s.branches = 1;
    s.actions = 2;
    s.action = rl::ActionSpace{rl::ActionSpace::Kind::discrete, 1, 2, 0, 0.0f, 0.0f};
    s.state_arrays = {{"state", n * 4 * sizeof(float)},
                      {"episode_steps", n * sizeof(std::int32_t)},
                      {"counter", n * sizeof(std::uint64_t)},
                      {"accum", n * sizeof(rl::EpisodeAccum)}};
    return s;
  }
  if (c.env.kind != "market")
    throw std::invalid_argument("env.kind = \"" + c.env.kind + "\": must be one of cartpole | market");
  const rl::MarketConfig m = market_config(c);
  if (m.action != rl::ActionMode::discrete && c.learner.kind == "dqn")
    throw std::invalid_argument(
        "env.market: the DQN pipeline needs discrete actions (market action.kind = \"discrete\")");
  s.obs_dim = rl::market_obs_dim(m);  // no data needed (replay markets too)
  s.branches = m.assets;
  s.actions = static_cast<std::int64_t>(m.levels.size());
  if (m.action == rl::ActionMode::discrete)
    s.action = rl::ActionSpace{rl::ActionSpace::Kind::discrete, m.assets, static_cast<int>(m.levels.size()), 0, 0.f, 0.f};
  else
    s.action = rl::ActionSpace{rl::ActionSpace::Kind::continuous, 1, 0, m.assets, -1.0f, 1.0f};
  const auto A = static_cast<std::size_t>(m.assets), W = static_cast<std::size_t>(m.window);
  const std::size_t d = sizeof(double), i = sizeof(std::int32_t);
  for (const char* name : {"log_price", "holdings", "cost_basis"}) s.state_arrays.emplace_back(name, A * n * d);
  for (const char* name :
       {"cash", "peak_equity", "dsr_a", "dsr_b", "sum_ret", "sum_ret_sq", "max_drawdown", "turnover", "episode_reward"})
    s.state_arrays.emplace_back(name, n * d);
  for (const char* name : {"trades", "regime", "episode_step"}) s.state_arrays.emplace_back(name, n * i);
  s.state_arrays.emplace_back("bar", n * sizeof(std::int64_t));
  s.state_arrays.emplace_back("counter", n * sizeof(std::uint64_t));
  s.state_arrays.emplace_back("ring", n * W * A * sizeof(float));
  s.state_arrays.emplace_back("tail", n * (A + 3) * sizeof(float));
  s.state_arrays.emplace_back("accum", n * sizeof(rl::EpisodeAccum));
  if (m.process == rl::PriceProcess::generated) {  // the sampler's state (actors/env_state.cpp)
    const rl::GeneratorModel g = rl::read_generator_checkpoint(m);
    s.state_arrays.emplace_back("gen_returns", n * 2 * static_cast<std::size_t>(g.window) * A * sizeof(float));
    s.state_arrays.emplace_back("gen_step", sizeof(std::uint64_t));
  }
  return s;
}

}  // namespace

EnvShape env_shape(const RunConfig& c) {
  EnvShape s = env_shape_unfiltered(c);
  apply_observe(c, s);
  return s;
}

}  // namespace foxhunt::actors
