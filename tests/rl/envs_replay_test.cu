// Historical replay: prices come from the loaded bars, each episode starts at a random bar with
// the real returns before it in the observation window, and episodes stay inside the data.
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "rl/envs/market.hpp"
#include "rl/envs/market_policies.hpp"
#include "rl/envs/ohlcv_csv.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::rl {
namespace {

class ReplayTest : public test::GpuTest {};

OhlcvData random_walk(int assets, std::int64_t bars, std::mt19937_64& rng) {
  std::vector<std::string> texts, names;
  std::normal_distribution<double> z(0.0, 0.01);
  for (int a = 0; a < assets; ++a) {
    std::string t = "timestamp,open,high,low,close,volume\n";
    double c = 50.0 * (a + 1);
    for (std::int64_t b = 0; b < bars; ++b) {
      c *= std::exp(z(rng));
      t += std::to_string(1000 + b) + "," + std::to_string(c) + "," + std::to_string(c * 1.01) + "," +
           std::to_string(c * 0.99) + "," + std::to_string(c) + ",100\n";
    }
    texts.push_back(t);
    names.push_back("asset" + std::to_string(a) + ".csv");
  }
  return parse_ohlcv_per_asset(texts, names, 1);
}

TEST_F(ReplayTest, PricesFollowTheBarsFromRandomOffsets) {
  SCOPED_TRACE(seed_note());
  const int A = 2;
  const std::int64_t bars = 500, n = 257;
  const OhlcvData data = random_walk(A, bars, rng());
  MarketConfig c;
  c.assets = A;
  c.process = PriceProcess::replay;
  c.window = 8;
  c.episode_length = 50;
  c.files = {"asset0.csv", "asset1.csv"};
  c.fee_bps = 5;
  validate(c);
  MarketEnv env(c, n, &data);
  const std::int64_t d = env.obs_dim();
  gpu::DeviceBuffer<float> obs(n * d), reward(n), final_obs(n * d);
  gpu::DeviceBuffer<std::uint8_t> te(n), tr(n);
  test::poison(obs, stream());
  env.reset(obs.data(), gpu::DType::f32, seed_, stream());
  auto log_close = [&](int a, std::int64_t b) { return std::log(data.close[a * bars + b]); };
  std::vector<std::int64_t> bar = test::download(env.state().bar, n, stream());
  const auto o = test::download(obs, stream());
  const auto x = test::download(env.state().log_price, n * A, stream());
  std::set<std::int64_t> starts;
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_GE(bar[i], c.window);
    ASSERT_LE(bar[i], bars - c.episode_length - 1);
    starts.insert(bar[i]);
    for (int a = 0; a < A; ++a) {
      ASSERT_EQ(x[a * n + i], log_close(a, bar[i]));
      for (int k = 0; k < c.window; ++k) {  // the real returns ending at the start bar
        const double r = log_close(a, bar[i] - c.window + k + 1) - log_close(a, bar[i] - c.window + k);
        ASSERT_NEAR(o[i * d + k * A + a], r * env.params().ret_scale[a], 1e-4) << "env " << i << " slot " << k;
      }
    }
  }
  EXPECT_GT(starts.size(), static_cast<std::size_t>(n / 2));  // random offsets, not one shared start
  gpu::DeviceBuffer<std::int32_t> act(n * A);
  const StepOutputs out{obs.data(), reward.data(), te.data(), tr.data(), final_obs.data(), gpu::DType::f32};
  for (int t = 1; t <= 60; ++t) {
    market_policy_actions(act.data(), nullptr, env, BaselinePolicy::buy_and_hold, 1, t, stream());
    env.step(out, ActionInput{act.data(), nullptr}, 1, stream());
    const auto xb = test::download(env.state().bar, n, stream());
    const auto xt = test::download(env.state().log_price, n * A, stream());
    const auto trh = test::download(tr, stream());
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(trh[i], t == c.episode_length ? 1 : 0);
      if (t == c.episode_length) {
        bar[i] = xb[i];  // a new episode at a new random bar
        ASSERT_GE(bar[i], c.window);
        ASSERT_LE(bar[i], bars - c.episode_length - 1);
      } else {
        ASSERT_EQ(xb[i], bar[i] + 1) << "env " << i << " step " << t;
        bar[i] = xb[i];
      }
      for (int a = 0; a < A; ++a) ASSERT_EQ(xt[a * n + i], log_close(a, bar[i]));
    }
  }
}

TEST_F(ReplayTest, RejectsDataTooShortForAnEpisode) {
  const OhlcvData data = random_walk(1, 40, rng());
  MarketConfig c;
  c.process = PriceProcess::replay;
  c.window = 8;
  c.episode_length = 40;
  c.files = {"asset0.csv"};
  EXPECT_THROW(MarketEnv(c, 4, &data), ConfigError);
  EXPECT_THROW(MarketEnv(c, 4, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::rl
