// market_config_toml (CPU): every shipped market config written back as a market file reads back
// to the same config field by field (doubles bitwise), a replay's [split] as resolved bar indices;
// and what a run keeps of a market run (actors::kept_config_files) loads as the run config it was,
// with the same market and the same split.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/ohlcv_csv.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/shipped_markets.hpp"

namespace foxhunt::rl {
namespace {

namespace fs = std::filesystem;

const fs::path kConfigs = fs::absolute(foxhunt::test::configs_dir()).lexically_normal();

void expect_same(const MarketConfig& a, const MarketConfig& b) {
  EXPECT_EQ(a.assets, b.assets);
  EXPECT_EQ(a.dt, b.dt);
  EXPECT_EQ(a.episode_length, b.episode_length);
  EXPECT_EQ(a.window, b.window);
  EXPECT_EQ(a.initial_cash, b.initial_cash);
  EXPECT_EQ(a.min_equity, b.min_equity);
  EXPECT_EQ(a.extra_features, b.extra_features);
  EXPECT_EQ(a.process, b.process);
  EXPECT_EQ(a.initial_price, b.initial_price);
  EXPECT_EQ(a.regimes, b.regimes);
  EXPECT_EQ(a.mu, b.mu);
  EXPECT_EQ(a.sigma, b.sigma);
  EXPECT_EQ(a.kappa, b.kappa);
  EXPECT_EQ(a.theta, b.theta);
  EXPECT_EQ(a.transition, b.transition);
  EXPECT_EQ(a.correlation, b.correlation);
  EXPECT_EQ(a.jump_intensity, b.jump_intensity);
  EXPECT_EQ(a.jump_mean, b.jump_mean);
  EXPECT_EQ(a.jump_stddev, b.jump_stddev);
  EXPECT_EQ(a.fee_bps, b.fee_bps);
  EXPECT_EQ(a.half_spread_bps, b.half_spread_bps);
  EXPECT_EQ(a.slippage, b.slippage);
  EXPECT_EQ(a.liquidity, b.liquidity);
  EXPECT_EQ(a.position_limit, b.position_limit);
  EXPECT_EQ(a.leverage_cap, b.leverage_cap);
  EXPECT_EQ(a.borrow_rate, b.borrow_rate);
  EXPECT_EQ(a.action, b.action);
  EXPECT_EQ(a.levels, b.levels);
  EXPECT_EQ(a.reward, b.reward);
  EXPECT_EQ(a.sharpe_eta, b.sharpe_eta);
  EXPECT_EQ(a.drawdown_penalty, b.drawdown_penalty);
  EXPECT_EQ(a.turnover_penalty, b.turnover_penalty);
  EXPECT_EQ(a.reward_scale, b.reward_scale);
  EXPECT_EQ(a.price_level, b.price_level);
  EXPECT_EQ(a.files, b.files);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.symbols, b.symbols);
  EXPECT_EQ(a.split.given, b.split.given);
  EXPECT_EQ(a.split.train_end.bar, b.split.train_end.bar);
  EXPECT_EQ(a.split.validation_end.bar, b.split.validation_end.bar);
  EXPECT_EQ(a.replay_split, b.replay_split);
}

TEST(MarketToml, EveryShippedMarketReadsBackToItself) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kConfigs / "markets")) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    const std::optional<MarketConfig> shipped = test::load_shipped_market(e.path());
    if (!shipped) continue;
    const MarketConfig& c = *shipped;
    const std::string text = market_config_toml(c);
    MarketConfig back;
    ASSERT_NO_THROW(back = parse_market_config(text, "written.toml")) << text;
    expect_same(back, c);
    // Written again it stays the same (a date boundary's comment aside: the read-back has bars).
    const std::string again = market_config_toml(back);
    EXPECT_EQ(market_config_toml(parse_market_config(again, "again.toml")), again);
    ++n;
  }
  EXPECT_GE(n, 6);
}

TEST(MarketToml, AReplaySplitIsWrittenAsResolvedBars) {
  const MarketConfig c = load_market_config(kConfigs / "markets" / "example_bars.toml");
  ASSERT_TRUE(c.split.train_end.by_time);
  const std::string text = market_config_toml(c);
  EXPECT_NE(text.find("[split]\ntrain_end = " + std::to_string(c.split.train_end.bar) +
                      "   # the first bar at or after 2018-01-02"),
            std::string::npos)
      << text;
  const MarketConfig back = parse_market_config(text, "written.toml");
  EXPECT_FALSE(back.split.train_end.by_time);
  EXPECT_EQ(load_ohlcv(back).bars, load_ohlcv(c).bars);
  EXPECT_EQ(load_ohlcv(split_market(back, Split::test)).first_bar, load_ohlcv(split_market(c, Split::test)).first_bar);
}

TEST(MarketToml, ARunKeepsItsMarketAndItsSplit) {
  const actors::RunConfig c = actors::load_run_config(kConfigs / "dqn_example_bars.toml");
  const auto kept = actors::kept_config_files(c);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, "config.resolved.toml");
  EXPECT_EQ(kept[1].first, actors::kKeptMarketFile);
  const fs::path dir = fs::temp_directory_path() / ("foxhunt_kept_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [name, text] : kept) std::ofstream(dir / name) << text;
  const actors::RunConfig back = actors::load_run_config(dir / "config.resolved.toml");
  EXPECT_EQ(back.env.market, (dir / actors::kKeptMarketFile).string());
  EXPECT_EQ(back.run.total_env_steps, c.run.total_env_steps);
  expect_same(actors::market_config(back), actors::market_config(c));
  // A cartpole run keeps its run config only.
  actors::RunConfig cartpole = c;
  cartpole.env.kind = "cartpole";
  cartpole.env.market.clear();
  EXPECT_EQ(actors::kept_config_files(cartpole).size(), 1u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace foxhunt::rl
