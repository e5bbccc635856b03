#include "actors/env_shape.hpp"

#include <stdexcept>
#include <string>

#include "rl/envs/cartpole.hpp"
#include "rl/envs/episode_stats.hpp"
#include "rl/envs/market_params.hpp"

namespace foxhunt::actors {

std::size_t EnvShape::state_bytes() const {
  std::size_t b = 0;
  for (const auto& [name, bytes] : state_arrays) b += bytes;
  return b;
}

EnvShape env_shape(const RunConfig& c) {
  const auto n = static_cast<std::size_t>(c.env.num_envs);
  EnvShape s;
  if (c.env.kind == "cartpole") {
    s.obs_dim = rl::CartPoleConstants::obs_dim;
    s.branches = 1;
    s.actions = 2;
    s.state_arrays = {{"state", n * 4 * sizeof(float)},
                      {"episode_steps", n * sizeof(std::int32_t)},
                      {"counter", n * sizeof(std::uint64_t)},
                      {"accum", n * sizeof(rl::EpisodeAccum)}};
    return s;
  }
  if (c.env.kind != "market")
    throw std::invalid_argument("env.kind = \"" + c.env.kind + "\": must be one of cartpole | market");
  const rl::MarketConfig m = market_config(c);
  if (m.action != rl::ActionMode::discrete)
    throw std::invalid_argument(
        "env.market: the DQN pipeline needs discrete actions (market action.kind = \"discrete\")");
  s.obs_dim = rl::market_obs_dim(m);  // no data needed (replay markets too)
  s.branches = m.assets;
  s.actions = static_cast<std::int64_t>(m.levels.size());
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
  return s;
}

}  // namespace foxhunt::actors
