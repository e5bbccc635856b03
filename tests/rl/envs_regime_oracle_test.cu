// The regime oracle (rl/envs/market_policies.hpp): on a GBM regime market it holds, in every
// environment, the Merton fraction mu_r / sigma_r^2 of the regime in force, clipped to the position
// limit (checked action by action against the state's regime, from the config's mu and sigma in
// double); knowing the hidden regime of a two-regime market with opposite drifts, it beats
// buy-and-hold's Sharpe on the same paths; markets it does not know (OU, jumps) are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu/exit.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_policies.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

namespace foxhunt::rl {
namespace {

class RegimeOracleTest : public test::GpuTest {};

MarketConfig regime2() { return load_market_config(test::configs_dir() / "markets" / "regime2.toml"); }

struct Bufs {
  explicit Bufs(std::int64_t n, std::int64_t d) : obs(n * d), reward(n), te(n), tr(n) {}
  gpu::DeviceBuffer<float> obs, reward;
  gpu::DeviceBuffer<std::uint8_t> te, tr;
  StepOutputs view() { return StepOutputs{obs.data(), reward.data(), te.data(), tr.data(), nullptr, gpu::DType::f32}; }
};

TEST_F(RegimeOracleTest, HoldsTheMertonFractionOfTheCurrentRegime) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = regime2();
  c.action = ActionMode::continuous;
  c.mu = {0.02, -0.03};    // Merton fractions 0.5 and -1/3: inside the limit
  c.sigma = {0.2, 0.3};
  c.position_limit = 0.8;  // 0.5 / 0.8 = 0.625 of the limit
  const std::int64_t n = 256;
  MarketEnv env(c, n);
  Bufs b(n, env.obs_dim());
  gpu::DeviceBuffer<float> act(n);
  env.reset(b.obs.data(), gpu::DType::f32, seed_, stream());
  int seen[2] = {0, 0};
  for (int t = 0; t < 40; ++t) {
    test::poison(act, stream());
    market_policy_actions(nullptr, act.data(), env, BaselinePolicy::regime_oracle, seed_, t, stream());
    const auto a = test::download(act, stream());
    const auto regime = test::download(env.state().regime, static_cast<std::size_t>(n), stream());
    for (std::int64_t i = 0; i < n; ++i) {
      const int r = regime[i];
      ASSERT_TRUE(r == 0 || r == 1);
      ++seen[r];
      const double w = c.mu[r] / (c.sigma[r] * c.sigma[r]);
      const double want = std::clamp(w / c.position_limit, -1.0, 1.0);
      ASSERT_NEAR(a[i], want, 1e-6) << "env " << i << " regime " << r << " step " << t;
    }
    env.step(b.view(), ActionInput{nullptr, act.data()}, 1, stream());
  }
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
}

TEST_F(RegimeOracleTest, ClipsToTheLimitAndPicksTheNearestLevel) {
  SCOPED_TRACE(seed_note());
  const MarketConfig c = regime2();  // mu / sigma^2 = +10 and -3.3: clipped to +1 and -1
  const std::int64_t n = 128;
  MarketEnv env(c, n);
  Bufs b(n, env.obs_dim());
  gpu::DeviceBuffer<std::int32_t> act(n);
  env.reset(b.obs.data(), gpu::DType::f32, seed_, stream());
  for (int t = 0; t < 10; ++t) {
    market_policy_actions(act.data(), nullptr, env, BaselinePolicy::regime_oracle, seed_, t, stream());
    const auto a = test::download(act, stream());
    const auto regime = test::download(env.state().regime, static_cast<std::size_t>(n), stream());
    for (std::int64_t i = 0; i < n; ++i)  // levels [-1, 0, 1]: regime 0 long (index 2), regime 1 short (0)
      ASSERT_EQ(a[i], regime[i] == 0 ? 2 : 0) << "env " << i;
    env.step(b.view(), ActionInput{act.data(), nullptr}, 1, stream());
  }
}

EpisodeStats run(const MarketConfig& c, BaselinePolicy p, std::int64_t n, std::uint64_t seed, cudaStream_t s) {
  MarketEnv env(c, n);
  Bufs b(n, env.obs_dim());
  gpu::DeviceBuffer<std::int32_t> act(n * c.assets);
  env.reset(b.obs.data(), gpu::DType::f32, seed, s);
  for (int t = 0; t < c.episode_length; ++t) {
    market_policy_actions(act.data(), nullptr, env, p, seed + 1, t, s);
    env.step(b.view(), ActionInput{act.data(), nullptr}, 1, s);
  }
  gpu::ExitSlot<EpisodeStats> slot;
  env.export_stats(slot, true, s);
  return slot.wait();
}

TEST_F(RegimeOracleTest, BeatsBuyAndHoldOnOppositeDrifts) {
  SCOPED_TRACE(seed_note());
  const MarketConfig c = regime2();
  const std::int64_t n = 2048;
  const EpisodeStats oracle = run(c, BaselinePolicy::regime_oracle, n, seed_, stream());
  const EpisodeStats hold = run(c, BaselinePolicy::buy_and_hold, n, seed_, stream());
  ASSERT_EQ(oracle.episodes, static_cast<double>(n));
  // The same paths: the difference of means against 5 standard errors of the two means.
  const double se = std::sqrt((oracle.std_sharpe * oracle.std_sharpe + hold.std_sharpe * hold.std_sharpe) / n);
  EXPECT_GT(oracle.mean_sharpe - hold.mean_sharpe, 5 * se)
      << "oracle Sharpe " << oracle.mean_sharpe << ", buy-and-hold " << hold.mean_sharpe;
  EXPECT_GT(oracle.mean_sharpe, 0.0);
}

TEST_F(RegimeOracleTest, RefusesMarketsItDoesNotKnow) {
  MarketConfig ou = load_market_config(test::configs_dir() / "markets" / "ou_mean_reversion.toml");
  MarketEnv e1(ou, 4);
  gpu::DeviceBuffer<std::int32_t> act(4 * ou.assets);
  EXPECT_THROW(market_policy_actions(act.data(), nullptr, e1, BaselinePolicy::regime_oracle, 0, 0, stream()),
               std::invalid_argument);
  MarketConfig jumps = regime2();
  jumps.jump_intensity = 5.0;
  jumps.jump_stddev = 0.05;
  MarketEnv e2(jumps, 4);
  EXPECT_THROW(market_policy_actions(act.data(), nullptr, e2, BaselinePolicy::regime_oracle, 0, 0, stream()),
               std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::rl
