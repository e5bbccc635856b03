// The supervised data sources and baselines on the host (CPU): configs/markets/regime2.toml loads as
// the two-regime GBM market it describes; the HMM filter refuses every law it is not exact for with
// a message naming the key; the window sources refuse what they cannot sample before touching a
// device; the automatic burn-in follows its rule; the CSV scale is the train part's.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "pretrain/csv_windows.hpp"
#include "pretrain/hmm_filter.hpp"
#include "pretrain/market_windows.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/ohlcv_csv.hpp"
#include "tests/support/paths.hpp"

namespace foxhunt::pretrain {
namespace {

const std::filesystem::path kMarkets = test::configs_dir() / "markets";

// Expects `f` to throw std::invalid_argument whose message contains every part.
template <class F>
::testing::AssertionResult refuses(F f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "accepted";
}

rl::MarketConfig gbm_market() {
  rl::MarketConfig c;
  c.initial_price = {100.0};
  c.mu = {0.05};
  c.sigma = {0.2};
  rl::validate(c);
  return c;
}

TEST(PretrainDataTest, Regime2IsTheTwoRegimeGbmMarketItDescribes) {
  const rl::MarketConfig c = rl::load_market_config(kMarkets / "regime2.toml");
  EXPECT_EQ(c.assets, 1);
  EXPECT_EQ(c.process, rl::PriceProcess::gbm);
  ASSERT_EQ(c.regimes, 2);
  EXPECT_EQ(c.transition, (std::vector<double>{0.98, 0.02, 0.02, 0.98}));
  EXPECT_EQ(c.mu, (std::vector<double>{0.10, -0.30}));
  EXPECT_EQ(c.sigma, (std::vector<double>{0.10, 0.30}));
  EXPECT_EQ(c.jump_intensity, 0.0);
  EXPECT_TRUE(c.correlation.empty());
  const std::vector<double> pi = rl::regime_stationary(c);
  ASSERT_EQ(pi.size(), 2u);
  EXPECT_NEAR(pi[0], 0.5, 1e-12);
  EXPECT_NEAR(pi[1], 0.5, 1e-12);
  EXPECT_NO_THROW(HmmFilter::check_supported(c));
  EXPECT_EQ(auto_burn_in(c), 0);
}

TEST(PretrainDataTest, HmmFilterRefusesLawsItIsNotExactFor) {
  rl::MarketConfig ou = gbm_market();
  ou.process = rl::PriceProcess::ou;
  ou.mu.clear();
  ou.kappa = {5.0};
  ou.theta = {0.0};
  rl::validate(ou);
  EXPECT_TRUE(refuses([&] { HmmFilter::check_supported(ou); }, {"HmmFilter", "process.kind = \"ou\"", "Gaussian"}));
  // The constructor checks before it touches a device (this runs without one).
  EXPECT_TRUE(refuses([&] { HmmFilter f(ou, 64); }, {"process.kind = \"ou\""}));

  const rl::MarketConfig jumps = rl::load_market_config(kMarkets / "regime_jumps.toml");
  EXPECT_TRUE(refuses([&] { HmmFilter f(jumps, 64); }, {"process.jumps.intensity = 4", "must be 0"}));

  const rl::MarketConfig replay = rl::load_market_config(kMarkets / "example_bars.toml");
  EXPECT_TRUE(refuses([&] { HmmFilter f(replay, 64); }, {"process.kind = \"replay\""}));

  rl::MarketConfig flat = rl::load_market_config(kMarkets / "regime2.toml");
  flat.sigma[1] = 0.0;
  EXPECT_TRUE(refuses([&] { HmmFilter f(flat, 64); }, {"process.regimes.sigma", "regime 1, asset 0", "> 0"}));
  rl::MarketConfig one = gbm_market();
  one.sigma = {0.0};
  EXPECT_TRUE(refuses([&] { HmmFilter::check_supported(one); }, {"process.sigma", "> 0"}));
}

TEST(PretrainDataTest, MarketWindowsRefusesReplayAndBadSpecs) {
  const rl::MarketConfig replay = rl::load_market_config(kMarkets / "example_bars.toml");
  EXPECT_TRUE(refuses([&] { MarketWindows w(replay, WindowSpec{}, 16); }, {"process.kind = \"replay\"", "CsvWindows"}));
  const rl::MarketConfig g = gbm_market();
  EXPECT_TRUE(refuses([&] { MarketWindows w(g, WindowSpec{0, 1, 20}, 16); }, {"spec.window"}));
  EXPECT_TRUE(refuses([&] { MarketWindows w(g, WindowSpec{64, 0, 20}, 16); }, {"spec.horizon"}));
  EXPECT_TRUE(refuses([&] { MarketWindows w(g, WindowSpec{64, 1, 0}, 16); }, {"spec.vol_horizon"}));
  EXPECT_TRUE(refuses([&] { MarketWindows w(g, WindowSpec{}, 0); }, {"max_batch"}));
  EXPECT_TRUE(refuses([&] { MarketWindows w(g, WindowSpec{64, 1, 20, 1 << 20}, 16); }, {"2^20"}));
  const MarketWindows w(g, WindowSpec{64, 4, 20, 7}, 16);  // no device needed until generate()
  EXPECT_EQ(w.burn_in(), 7);
  EXPECT_EQ(w.assets(), 1);
  EXPECT_EQ(w.regimes(), 1);
}

TEST(PretrainDataTest, AutomaticBurnInIsZeroWhenTheStartIsStationary) {
  EXPECT_EQ(auto_burn_in(gbm_market()), 0);
  const rl::MarketConfig jumps = rl::load_market_config(kMarkets / "regime_jumps.toml");
  EXPECT_EQ(auto_burn_in(jumps), 0);  // GBM: returns depend on the (stationary) regime only
  const rl::MarketConfig ou = rl::load_market_config(kMarkets / "bench_ou.toml");
  EXPECT_EQ(auto_burn_in(ou), 0);  // one regime, no jumps: started from the exact stationary law
  rl::MarketConfig ou2 = ou;
  ou2.regimes = 2;
  ou2.transition = {0.9, 0.1, 0.1, 0.9};
  ou2.kappa = {5.0, 10.0};
  ou2.theta = {0.0, 0.1};
  ou2.sigma = {0.2, 0.4};
  rl::validate(ou2);
  EXPECT_EQ(auto_burn_in(ou2), static_cast<std::int64_t>(std::ceil(8.0 / (5.0 * ou.dt))));  // 404
  ou2.kappa = {0.01, 0.01};
  EXPECT_EQ(auto_burn_in(ou2), kMaxAutoBurnIn);
}

rl::OhlcvData random_walk_bars(std::int64_t bars) {
  rl::OhlcvData d;
  d.assets = 1;
  d.bars = bars;
  d.symbols = {"x"};
  double c = 100.0;
  for (std::int64_t b = 0; b < bars; ++b) {
    c *= std::exp(0.01 * std::sin(0.7 * static_cast<double>(b)) + 0.002 * static_cast<double>(b % 5));
    d.timestamps.push_back(b * 86400);
    d.close.push_back(c);
  }
  d.open = d.high = d.low = d.close;
  d.volume.assign(static_cast<std::size_t>(bars), 1.0);
  return d;
}

TEST(PretrainDataTest, CsvWindowsRefusesPartsWithoutAWindow) {
  const rl::OhlcvData d = random_walk_bars(200);
  const WindowSpec spec{16, 2, 5};
  EXPECT_TRUE(refuses([&] { CsvWindows w(d, 100, 100 + 16 + 5, spec, 1.0, 8); }, {"22 bars", "hold no window"}));
  EXPECT_TRUE(refuses([&] { CsvWindows w(d, 150, 250, spec, 1.0, 8); }, {"first_bar, end_bar"}));
  EXPECT_TRUE(refuses([&] { CsvWindows w(d, 0, 100, spec, 0.0, 8); }, {"return_scale"}));
  EXPECT_TRUE(refuses([&] { CsvWindows w(d, 0, 100, spec, std::vector<double>{1.0, 2.0}, 8); }, {"one value per asset"}));
}

TEST(PretrainDataTest, TrainReturnScaleIsTheInverseTrainVolatility) {
  const rl::OhlcvData d = random_walk_bars(300);
  const std::vector<double> vol = rl::close_volatility(d, 0, 120);
  const std::vector<double> scale = train_return_scale(d, 0, 120);
  ASSERT_EQ(scale.size(), 1u);
  EXPECT_EQ(scale[0], 1.0 / vol[0]);
  rl::OhlcvData later = d;
  for (std::int64_t b = 120; b < 300; ++b) later.close[b] *= 3.0 + std::cos(static_cast<double>(b));
  EXPECT_EQ(train_return_scale(later, 0, 120), scale);  // later bars do not enter
}

}  // namespace
}  // namespace foxhunt::pretrain
