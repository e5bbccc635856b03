#pragma once
// Baseline policies for the market environment, computed on the device from the environment's
// state (for tests and for users' reports). Each call writes one step of actions (N, assets) in
// the environment's action form, to be passed to MarketEnv::step with T = 1:
//   flat          the level closest to 0 (continuous: 0) for every asset;
//   buy_and_hold  the largest level (continuous: +1) on an episode's first step, then -1 / NaN
//                 (hold: no trade) so the units bought are kept;
//   random        uniform level index (continuous: U(-1, 1)) from Philox (seed, env, call_index);
//   ou_oracle     for the OU market, knows kappa, theta, sigma and the current regime: target
//                 weight -clamp(d / s, -1, 1), where d is the log price's deviation from its mean
//                 and s the stationary standard deviation (discrete: the nearest level);
//   regime_oracle for GBM markets without jumps, knows the current regime r: holds the Merton
//                 fraction of that regime's drift, w_a = mu_ra / sigma_ra^2 (log utility, no
//                 risk-free rate), as target weight clamp(w_a / position_limit, -1, 1) (sigma_ra =
//                 0: the sign of the drift; discrete: the nearest level); the leverage cap then
//                 scales the weights as for any action. The ceiling of an agent that infers the
//                 hidden regime from the returns.
#include <cstdint>

#include "rl/envs/market.hpp"

namespace foxhunt::rl {

enum class BaselinePolicy : std::uint8_t { flat, buy_and_hold, random, ou_oracle, regime_oracle };

// discrete (N, assets) int32 or continuous (N, assets) f32: set the one matching the action
// space. `call_index` numbers the calls (random draws use it as their Philox counter).
void market_policy_actions(std::int32_t* discrete, float* continuous, const MarketEnv& env, BaselinePolicy policy,
                           std::uint64_t seed, std::uint64_t call_index, cudaStream_t stream);

}  // namespace foxhunt::rl
