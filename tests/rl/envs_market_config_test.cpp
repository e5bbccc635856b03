// Market configuration parsing (CPU): the shipped configs load, defaults are as documented, and
// every bad key or value is rejected with a message naming the source, the line, the key and what
// is allowed; all problems of a file are reported in one pass.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "rl/envs/market_config.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/shipped_markets.hpp"

namespace foxhunt::rl {
namespace {

const std::filesystem::path kConfigs = foxhunt::test::configs_dir() / "markets";

// Expects parse_market_config(text) to throw a ConfigError whose message contains every part.
::testing::AssertionResult rejects(const std::string& text, const std::vector<std::string>& parts) {
  try {
    parse_market_config(text, "bad.toml");
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    if (msg.rfind("bad.toml", 0) != 0) return ::testing::AssertionFailure() << "message lacks the source: " << msg;
    for (const auto& p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "accepted";
}

const std::string kGbm = R"(
[market]
assets = 2
[process]
kind = "gbm"
initial_price = [100.0, 50.0]
mu = 0.05
sigma = [0.2, 0.3]
)";

TEST(MarketConfigTest, ShippedConfigsLoad) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    const std::optional<MarketConfig> c = test::load_shipped_market(entry.path());
    if (!c) continue;
    EXPECT_GE(c->assets, 1);
    ++count;
  }
  EXPECT_GE(count, 4);
  const MarketConfig g = load_market_config(kConfigs / "gbm8_correlated.toml");
  EXPECT_EQ(g.assets, 8);
  EXPECT_EQ(g.correlation.size(), 64u);
  EXPECT_EQ(g.reward, RewardKind::log_return);
  const MarketConfig r = load_market_config(kConfigs / "regime_jumps.toml");
  EXPECT_EQ(r.regimes, 2);
  EXPECT_EQ(r.sigma.size(), 4u);
  EXPECT_DOUBLE_EQ(r.sigma[3], 0.60);
  EXPECT_EQ(r.action, ActionMode::continuous);
  EXPECT_DOUBLE_EQ(r.jump_intensity, 4.0);
  EXPECT_FALSE(r.price_level);
  const MarketConfig o = load_market_config(kConfigs / "ou_mean_reversion.toml");
  EXPECT_EQ(o.process, PriceProcess::ou);
  EXPECT_TRUE(o.price_level);
  EXPECT_DOUBLE_EQ(o.reward_scale, 1.0);
  // ou8_correlated: gbm8_correlated's assets, sigmas, correlation and costs with OU prices.
  const MarketConfig o8 = load_market_config(kConfigs / "ou8_correlated.toml");
  EXPECT_EQ(o8.process, PriceProcess::ou);
  EXPECT_EQ(o8.assets, 8);
  EXPECT_EQ(o8.sigma, g.sigma);
  EXPECT_EQ(o8.correlation, g.correlation);
  EXPECT_EQ(o8.kappa, std::vector<double>(8, 5.0));
  EXPECT_EQ(o8.theta, std::vector<double>(8, 0.0));
  EXPECT_EQ(o8.initial_price, g.initial_price);
  EXPECT_DOUBLE_EQ(o8.fee_bps, g.fee_bps);
  EXPECT_DOUBLE_EQ(o8.half_spread_bps, g.half_spread_bps);
  EXPECT_DOUBLE_EQ(o8.position_limit, g.position_limit);
  EXPECT_DOUBLE_EQ(o8.leverage_cap, g.leverage_cap);
  EXPECT_DOUBLE_EQ(o8.borrow_rate, g.borrow_rate);
  EXPECT_EQ(o8.levels, g.levels);
  EXPECT_EQ(o8.reward, RewardKind::log_return);
  EXPECT_DOUBLE_EQ(o8.reward_scale, 100.0);
  EXPECT_TRUE(o8.price_level);
}

TEST(MarketConfigTest, DefaultsAndBroadcast) {
  const MarketConfig c = parse_market_config(kGbm, "ok.toml");
  EXPECT_EQ(c.assets, 2);
  EXPECT_EQ(c.process, PriceProcess::gbm);
  EXPECT_EQ(c.mu, (std::vector<double>{0.05, 0.05}));  // a number broadcasts over assets
  EXPECT_EQ(c.regimes, 1);
  EXPECT_EQ(c.transition, std::vector<double>{1.0});
  EXPECT_EQ(c.episode_length, 256);
  EXPECT_EQ(c.window, 32);
  EXPECT_DOUBLE_EQ(c.dt, 1.0 / 252);
  EXPECT_EQ(c.action, ActionMode::discrete);
  EXPECT_EQ(c.levels.size(), 5u);
  EXPECT_EQ(c.reward, RewardKind::pnl);
  EXPECT_DOUBLE_EQ(c.reward_scale, 1.0);
  EXPECT_FALSE(c.price_level);
  const std::vector<double> l = correlation_cholesky(c);
  EXPECT_EQ(l, (std::vector<double>{1, 0, 0, 1}));
}

TEST(MarketConfigTest, RegimeStationaryDistributionAndCholesky) {
  MarketConfig c = parse_market_config(kGbm, "ok.toml");
  c.regimes = 2;
  c.transition = {0.9, 0.1, 0.3, 0.7};
  const auto pi = regime_stationary(c);
  EXPECT_NEAR(pi[0], 0.75, 1e-12);  // pi0 * 0.1 = pi1 * 0.3
  EXPECT_NEAR(pi[1], 0.25, 1e-12);
  c.correlation = {1.0, 0.6, 0.6, 1.0};
  const auto l = correlation_cholesky(c);
  EXPECT_NEAR(l[2], 0.6, 1e-15);
  EXPECT_NEAR(l[3], 0.8, 1e-15);
}

TEST(MarketConfigTest, PriceLevelAndRewardScaleAreRead) {
  const MarketConfig on = parse_market_config(kGbm + "[observation]\nprice_level = true\n", "ok.toml");
  EXPECT_TRUE(on.price_level);
  const MarketConfig off = parse_market_config(kGbm + "[observation]\nprice_level = false\n", "ok.toml");
  EXPECT_FALSE(off.price_level);
  const MarketConfig empty = parse_market_config(kGbm + "[observation]\n", "ok.toml");
  EXPECT_FALSE(empty.price_level);
  const MarketConfig scaled = parse_market_config(kGbm + "[reward]\nkind = \"log_return\"\nscale = 100.0\n", "ok.toml");
  EXPECT_DOUBLE_EQ(scaled.reward_scale, 100.0);
  EXPECT_EQ(scaled.reward, RewardKind::log_return);
  const MarketConfig int_scale = parse_market_config(kGbm + "[reward]\nscale = 3\n", "ok.toml");
  EXPECT_DOUBLE_EQ(int_scale.reward_scale, 3.0);
}

TEST(MarketConfigTest, RejectsBadPriceLevelAndRewardScale) {
  EXPECT_TRUE(rejects(kGbm + "[observation]\nprice_level = 1\n", {"observation.price_level", "boolean"}));
  EXPECT_TRUE(rejects(kGbm + "[observation]\nprice_level = \"yes\"\n", {"observation.price_level", "boolean"}));
  EXPECT_TRUE(rejects(kGbm + "[observation]\nlevel = true\n", {"observation.level", "unknown key", "price_level"}));
  EXPECT_TRUE(rejects("observation = true\n" + kGbm, {"bad.toml:1: observation", "must be a table"}));
  EXPECT_TRUE(rejects(kGbm + "[reward]\nscale = 0.0\n", {"reward.scale", "(0, 1e+06]", "0"}));
  EXPECT_TRUE(rejects(kGbm + "[reward]\nscale = -2.0\n", {"reward.scale", "(0, 1e+06]", "-2"}));
  EXPECT_TRUE(rejects(kGbm + "[reward]\nscale = \"100\"\n", {"reward.scale", "must be a number"}));
  EXPECT_TRUE(rejects(kGbm + "[reward]\nscale = inf\n", {"reward.scale", "finite"}));
  EXPECT_TRUE(
      rejects("[market]\nassets = 1\n[process]\nkind = \"replay\"\n[replay]\nfiles = [\"a.csv\"]\n"
              "[observation]\nprice_level = true\n",
              {"observation.price_level", "only allowed for process.kind = \"gbm\" or \"ou\""}));
  MarketConfig c = parse_market_config(kGbm, "ok.toml");
  c.reward_scale = 0.0;
  EXPECT_THROW(validate(c), ConfigError);
}

TEST(MarketConfigTest, RejectsSyntaxErrorsWithTheLine) {
  EXPECT_TRUE(rejects("[market]\nassets = = 2\n", {"bad.toml:2", "TOML syntax error"}));
}

TEST(MarketConfigTest, RejectsUnknownTablesAndKeys) {
  EXPECT_TRUE(rejects(kGbm + "[foo]\nx = 1\n", {"bad.toml:9: [foo]: unknown table",
                                                "market, process, execution, action, reward, observation, replay"}));
  EXPECT_TRUE(rejects(kGbm + "[exection]\nfee_bps = 1\n", {"bad.toml:9: [exection]", "did you mean 'execution'?"}));
  EXPECT_TRUE(rejects(kGbm + "[process.jump]\nmean = 1\n", {"[process.jump]", "did you mean 'jumps'?"}));
  EXPECT_TRUE(rejects(kGbm + "[execution]\nfees = 1\n", {"execution.fees", "unknown key", "fee_bps", "borrow_rate"}));
  EXPECT_TRUE(rejects(kGbm + "[reward]\nkind = \"pnl\"\nsharpe = 1\n", {"reward.sharpe", "sharpe_eta"}));
  EXPECT_TRUE(rejects("[market]\nasset = 2\n", {"market.asset", "assets"}));
}

TEST(MarketConfigTest, RejectsWrongTypes) {
  EXPECT_TRUE(
      rejects("[market]\nassets = \"two\"\n" + kGbm.substr(kGbm.find("[process]")), {"market.assets", "integer"}));
  EXPECT_TRUE(rejects("[market]\nassets = 2.5\n", {"market.assets", "integer"}));
  EXPECT_TRUE(rejects(kGbm + "[execution]\nfee_bps = \"5\"\n", {"execution.fee_bps", "must be a number"}));
  EXPECT_TRUE(rejects(kGbm + "[execution]\nfee_bps = nan\n", {"execution.fee_bps", "finite"}));
  EXPECT_TRUE(rejects("market = 3\n" + kGbm.substr(kGbm.find("[process]")), {"bad.toml:1: market", "must be a table"}));
}

TEST(MarketConfigTest, RejectsOutOfRangeValuesNamingTheRange) {
  EXPECT_TRUE(rejects(kGbm + "[execution]\nfee_bps = -1\n", {"execution.fee_bps", "[0, 1000]", "-1"}));
  EXPECT_TRUE(rejects(kGbm + "[execution]\nposition_limit = 0\n", {"execution.position_limit", "(0, 100]"}));
  EXPECT_TRUE(rejects(kGbm + "[execution]\nliquidity = 0\n", {"execution.liquidity", "(0, inf)"}));
  EXPECT_TRUE(rejects(kGbm + "[action]\nlevels = [-2.0, 1.0]\n", {"action.levels", "[-1, 1]"}));
  EXPECT_TRUE(rejects(kGbm + "[action]\nlevels = [1.0]\n", {"action.levels", "2 to 9"}));
  EXPECT_TRUE(rejects(kGbm + "[action]\nlevels = 3\n", {"bad.toml:10: action.levels = 3", "a list of 2 to 9 numbers"}));
  EXPECT_TRUE(rejects(kGbm + "[reward]\nsharpe_eta = 1.5\n", {"reward.sharpe_eta", "(0, 1)"}));
  EXPECT_TRUE(rejects("[market]\nassets = 17\n", {"market.assets", "[1, 16]"}));
  EXPECT_TRUE(rejects("[market]\nassets = 2\nwindow = 0\n" + kGbm.substr(kGbm.find("[process]")),
                      {"market.window", "[1, 256]"}));
  EXPECT_TRUE(rejects("[market]\nassets = 2\ndt = 0\n" + kGbm.substr(kGbm.find("[process]")), {"market.dt", "(0, 1]"}));
  std::string neg = kGbm;
  neg.replace(neg.find("[100.0, 50.0]"), 13, "[100.0, -5.0]");
  EXPECT_TRUE(rejects(neg, {"process.initial_price", "(0, inf)"}));
}

TEST(MarketConfigTest, RejectsBadEnumsListingTheChoices) {
  std::string t = kGbm;
  t.replace(t.find("\"gbm\""), 5, "\"bm\"");
  EXPECT_TRUE(rejects(t, {"bad.toml:5: process.kind = \"bm\": must be one of \"gbm\" | \"ou\" | \"replay\""}));
  EXPECT_TRUE(rejects(kGbm + "[reward]\nkind = \"sharpe\"\n",
                      {"reward.kind", "\"pnl\" | \"log_return\" | \"differential_sharpe\""}));
  EXPECT_TRUE(rejects(kGbm + "[action]\nkind = 3\n", {"action.kind = 3", "\"discrete\" | \"continuous\""}));
}

TEST(MarketConfigTest, RejectsShapeAndConsistencyErrors) {
  std::string t = kGbm;
  t.replace(t.find("[0.2, 0.3]"), 10, "[0.2]");
  EXPECT_TRUE(rejects(t, {"bad.toml:8: process.sigma = [0.2]", "a list of 2 numbers"}));
  EXPECT_TRUE(rejects(kGbm + "kappa = 5.0\n", {"process.kappa", "only allowed for process.kind = \"ou\""}));
  std::string no_sigma = kGbm;
  no_sigma.erase(no_sigma.find("sigma = [0.2, 0.3]"), 18);
  EXPECT_TRUE(rejects(no_sigma, {"process.sigma", "missing"}));
  EXPECT_TRUE(rejects(kGbm + "correlation = [[1.0, 0.5], [0.4, 1.0]]\n", {"process.correlation", "symmetric"}));
  EXPECT_TRUE(rejects(kGbm + "correlation = [[1.0, 1.0], [1.0, 1.0]]\n", {"process.correlation", "positive definite"}));
  EXPECT_TRUE(rejects(kGbm + "correlation = [[0.9, 0.0], [0.0, 1.0]]\n", {"process.correlation", "diagonal"}));
  EXPECT_TRUE(rejects(kGbm + "[process.regimes]\ntransition = [[0.9, 0.2], [0.5, 0.5]]\nsigma = [0.1, 0.2]\n",
                      {"process.mu", "not allowed with [process.regimes]"}));
  const std::string regimes = R"(
[market]
assets = 1
[process]
kind = "gbm"
initial_price = 10.0
[process.regimes]
transition = [[0.9, 0.2], [0.5, 0.5]]
sigma = [0.1, 0.2]
)";
  EXPECT_TRUE(rejects(regimes, {"process.regimes.transition", "row 0 must sum to 1"}));
  std::string three = regimes;
  three.replace(three.find("sigma = [0.1, 0.2]"), 18, "sigma = [0.1, 0.2, 0.3]");
  three.replace(three.find("[[0.9, 0.2], [0.5, 0.5]]"), 24, "[[0.9, 0.1], [0.5, 0.5]]");
  EXPECT_TRUE(rejects(three, {"process.regimes.sigma", "2 rows"}));
  EXPECT_TRUE(
      rejects(kGbm + "[process.jumps]\nintensity = 1000.0\n", {"process.jumps.intensity * market.dt", "[0, 1]"}));
  EXPECT_TRUE(rejects(kGbm + "[process.jumps]\nmeans = 1.0\n", {"process.jumps.means", "did you mean 'mean'?"}));
  EXPECT_TRUE(rejects(kGbm + "[process.jumps]\nspread = 1.0\n", {"process.jumps.spread", "intensity, mean, stddev"}));
  EXPECT_TRUE(
      rejects(kGbm + "[replay]\nfiles = [\"a.csv\"]\n", {"replay", "only allowed for process.kind = \"replay\""}));
  EXPECT_TRUE(rejects("[market]\nassets = 2\n[process]\nkind = \"replay\"\n[replay]\nfiles = [\"a.csv\"]\n",
                      {"replay.files", "one file per asset (2)"}));
  EXPECT_TRUE(rejects("[market]\nassets = 1\n[process]\nkind = \"replay\"\n", {"replay", "missing table"}));
  EXPECT_TRUE(rejects("[market]\nassets = 1\n", {"process", "missing table"}));
  EXPECT_TRUE(rejects(kGbm + "[action]\nkind = \"continuous\"\nlevels = [-1.0, 1.0]\n",
                      {"action.levels", "only allowed for action.kind = \"discrete\""}));
}

TEST(MarketConfigTest, ValidateRejectsConfigsBuiltInCode) {
  MarketConfig c = parse_market_config(kGbm, "ok.toml");
  c.leverage_cap = -1;
  try {
    validate(c);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("execution.leverage_cap"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_market_config(kConfigs / "does_not_exist.toml"), ConfigError);
}

TEST(MarketConfigTest, ReportsEveryProblemInOnePassWithLines) {
  const std::string text =
      "[market]\nassets = 2.0\nwindow = 0\n[process]\nkind = \"ou\"\ninitial_price = 1.0\n"
      "kappa = 5.0\nsigma = 0.2\n[execution]\nfee_bps = -1\nfee_bp = 2\n[reward]\nscale = 0\n";
  try {
    parse_market_config(text, "many.toml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.errors().size(), 5u) << msg;
    for (const char* p : {"many.toml:2: market.assets = 2.0: must be an integer in [1, 16]",
                          "many.toml:3: market.window = 0: must be an integer in [1, 256]",
                          "many.toml:10: execution.fee_bps = -1: must be a number in [0, 1000]",
                          "many.toml:11: execution.fee_bp: unknown key; did you mean 'fee_bps'?",
                          "many.toml:13: reward.scale = 0: must be a number in (0, 1e+06]"})
      EXPECT_NE(msg.find(p), std::string::npos) << p << " in:\n" << msg;
  }
}

TEST(MarketConfigTest, ReplayFilesMustExist) {
  const auto dir = std::filesystem::temp_directory_path() / ("foxhunt_market_csv_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "data");
  std::ofstream(dir / "m.toml") << "[market]\nassets = 2\n[process]\nkind = \"replay\"\n[replay]\n"
                                   "files = [\"AAA.csv\", \"data\"]\n";
  try {
    load_market_config(dir / "m.toml");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(
        msg.find("m.toml:6: replay.files = [\"AAA.csv\", \"data\"]: " + (dir / "AAA.csv").string() + " does not exist"),
        std::string::npos)
        << msg;
    EXPECT_NE(msg.find((dir / "data").string() + " is not a regular file"), std::string::npos) << msg;
  }
  std::filesystem::remove_all(dir);
  EXPECT_THROW(load_market_config(kConfigs), ConfigError);  // a directory
}

TEST(MarketConfigTest, ListsTheKeysItAccepts) {
  const std::vector<std::string> keys = market_config_keys();
  for (const char* k :
       {"market.assets", "process.kind", "process.regimes.transition", "process.jumps.stddev", "execution.fee_bps",
        "action.levels", "reward.scale", "observation.price_level", "replay.symbols"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

}  // namespace
}  // namespace foxhunt::rl
