// Walk-forward splits of replay markets (CPU): [split] reads bar indices and dates, resolves dates
// against the data, rejects every bad boundary naming the file, the line and the key; the
// environment of the train part is built from bars before train_end only (its data, its kernel
// parameters and its scale are bitwise unchanged when every later bar is perturbed), and the
// validation and test parts read their own bars plus the window before them, scaled by the train
// part's volatility.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "rl/envs/market_config.hpp"
#include "rl/envs/market_params.hpp"
#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::rl {
namespace {

namespace fs = std::filesystem;

constexpr int kBars = 600;
constexpr int kWindow = 8;
constexpr int kEpisode = 50;

// One daily bar per calendar day from 2001-01-01: a random walk of the close (fixed seed), every
// bar at or after `perturb_from` multiplied by its own random factor in [0.5, 2) (all four prices).
std::string daily_bars(int rows, int perturb_from = kBars + 1, std::uint64_t perturb_seed = 7) {
  std::mt19937_64 rng(12345);
  std::mt19937_64 other(perturb_seed);
  std::normal_distribution<double> z(0.0, 0.01);
  std::uniform_real_distribution<double> factor(0.5, 2.0);
  const std::int64_t day0 = 978307200;  // 2001-01-01 00:00:00 UTC
  std::string s = "date,open,high,low,close,volume\n";
  double c = 100.0;
  for (int k = 0; k < rows; ++k) {
    c *= std::exp(z(rng));
    const double f = k >= perturb_from ? factor(other) : 1.0;
    char line[160];
    std::snprintf(line, sizeof line, "%s,%.6f,%.6f,%.6f,%.6f,1000\n",
                  format_timestamp(day0 + std::int64_t{86400} * k).c_str(), c * f, c * 1.01 * f, c * 0.99 * f, c * f);
    s += line;
  }
  return s;
}

std::string market_toml(const std::string& split) {
  return "[market]\nassets = 1\nwindow = " + std::to_string(kWindow) +
         "\nepisode_length = " + std::to_string(kEpisode) +
         "\n[process]\nkind = \"replay\"\n[replay]\nfiles = [\"prices.csv\"]\n" + split;
}

class MarketSplitTest : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("foxhunt_split_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override {
    fs::remove_all(dir);
    fs::create_directories(dir);
    write_csv(daily_bars(kBars));
  }
  void TearDown() override { fs::remove_all(dir); }
  void write_csv(const std::string& text) { std::ofstream(dir / "prices.csv", std::ios::binary) << text; }
  MarketConfig load(const std::string& split) {
    std::ofstream(dir / "m.toml") << market_toml(split);
    return load_market_config(dir / "m.toml");
  }
  // The message of the ConfigError that loading a market with this [split] throws ("" if accepted).
  std::string rejection(const std::string& split) {
    try {
      load(split);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(MarketSplitTest, ReadsBarIndicesAndDatesResolvedAgainstTheData) {
  const MarketConfig a = load("[split]\ntrain_end = 300\nvalidation_end = 450\n");
  EXPECT_TRUE(a.split.given);
  EXPECT_EQ(a.split.train_end.bar, 300);
  EXPECT_EQ(a.split.validation_end.bar, 450);
  EXPECT_TRUE(a.split.has_validation());
  EXPECT_EQ(a.replay_split, Split::train);
  // 2001-11-01 is day 304 of 2001 (0-based): the first bar of the part after it.
  const MarketConfig b = load("[split]\ntrain_end = \"2001-11-01\"\n");
  EXPECT_TRUE(b.split.train_end.by_time);
  EXPECT_EQ(b.split.train_end.bar, 304);
  EXPECT_FALSE(b.split.has_validation());
  const MarketConfig c = load("[split]\ntrain_end = 2001-11-01\nvalidation_end = 2002-01-01T00:00:00Z\n");
  EXPECT_EQ(c.split.train_end.bar, 304);
  EXPECT_EQ(c.split.validation_end.bar, 365);
  // A date between bars starts the part at the next bar.
  EXPECT_EQ(load("[split]\ntrain_end = \"2001-10-31 12:00\"\n").split.train_end.bar, 304);
  // Without the data (parse from text) a date stays unresolved; load_ohlcv resolves it.
  MarketConfig p = parse_market_config(market_toml("[split]\ntrain_end = 2001-11-01\n"), "text");
  EXPECT_EQ(p.split.train_end.bar, -1);
  EXPECT_TRUE(p.split.train_end.by_time);
  p.files = {(dir / "prices.csv").string()};
  EXPECT_EQ(load_ohlcv(p).bars, 304);
  // No [split]: every bar is the train part.
  const MarketConfig none = load("");
  EXPECT_FALSE(none.split.given);
  EXPECT_EQ(load_ohlcv(none).bars, kBars);
}

TEST_F(MarketSplitTest, TrainPartReadsNoBarAtOrPastTrainEnd) {
  const MarketConfig c = load("[split]\ntrain_end = 300\nvalidation_end = 450\n");
  const OhlcvData all = load_ohlcv_all(c);
  const OhlcvData train = load_ohlcv(split_market(c, Split::train));
  ASSERT_EQ(train.bars, 300);
  EXPECT_EQ(train.first_bar, 0);
  EXPECT_EQ(train.timestamps, std::vector<std::int64_t>(all.timestamps.begin(), all.timestamps.begin() + 300));
  EXPECT_EQ(train.close, std::vector<double>(all.close.begin(), all.close.begin() + 300));
  ASSERT_EQ(train.step_vol.size(), 1u);
  EXPECT_EQ(train.step_vol, close_volatility(all, 0, 300));
  // The kernel parameters index the uploaded bars [0, replay_bars): an episode starts at a bar in
  // [window, replay_bars - episode_length - 1] and its last step reads bar start + episode_length.
  const double* fake_device = reinterpret_cast<const double*>(std::uintptr_t{0x1000});
  const MarketParams params = make_market_params(c, &train, fake_device);
  EXPECT_EQ(params.replay_bars, 300);
  const std::int64_t span = params.replay_bars - params.episode_length - params.window;
  EXPECT_LT(params.window + (span - 1) + params.episode_length, 300) << "the last bar an episode can read";

  // Every bar from train_end on multiplied by random factors: the train part's data, scale and
  // parameters are bitwise the same; the validation part's bars past it differ.
  write_csv(daily_bars(kBars, 300));
  const OhlcvData all2 = load_ohlcv_all(c);
  ASSERT_NE(all2.close, all.close) << "the perturbation changed nothing";
  const OhlcvData train2 = load_ohlcv(split_market(c, Split::train));
  EXPECT_EQ(train2.timestamps, train.timestamps);
  for (const auto& [x, y] : {std::pair{&train.open, &train2.open}, std::pair{&train.high, &train2.high},
                             std::pair{&train.low, &train2.low}, std::pair{&train.close, &train2.close},
                             std::pair{&train.volume, &train2.volume}, std::pair{&train.step_vol, &train2.step_vol}})
    EXPECT_EQ(std::memcmp(x->data(), y->data(), x->size() * sizeof(double)), 0);
  const MarketParams params2 = make_market_params(c, &train2, fake_device);
  EXPECT_EQ(std::memcmp(&params, &params2, sizeof(MarketParams)), 0) << "kernel parameters depend on later bars";

  // The check notices a change inside the part: bar 299 perturbed.
  write_csv(daily_bars(kBars, 299));
  EXPECT_NE(load_ohlcv(split_market(c, Split::train)).close, train.close);
}

TEST_F(MarketSplitTest, ValidationAndTestReadTheirBarsAndTheWindowBefore) {
  const MarketConfig c = load("[split]\ntrain_end = 300\nvalidation_end = 450\n");
  const OhlcvData all = load_ohlcv_all(c);
  const std::vector<double> train_vol = close_volatility(all, 0, 300);
  const OhlcvData val = load_ohlcv(split_market(c, Split::validation));
  EXPECT_EQ(val.first_bar, 300 - kWindow);
  EXPECT_EQ(val.bars, kWindow + 150);
  EXPECT_EQ(val.close, std::vector<double>(all.close.begin() + 292, all.close.begin() + 450));
  EXPECT_EQ(val.step_vol, train_vol) << "every part is scaled by the train part's volatility";
  const OhlcvData test = load_ohlcv(split_market(c, Split::test));
  EXPECT_EQ(test.first_bar, 450 - kWindow);
  EXPECT_EQ(test.bars, kWindow + 150);
  EXPECT_EQ(test.step_vol, train_vol);
  const SplitBars s = split_bars(c, all.timestamps, Split::validation);
  EXPECT_EQ(s.first, 300);
  EXPECT_EQ(s.end, 450);
  EXPECT_EQ(s.history, 292);
  EXPECT_EQ(s.total, kBars);
  // Evaluation on validation reads nothing of the test part either.
  write_csv(daily_bars(kBars, 450));
  EXPECT_EQ(load_ohlcv(split_market(c, Split::validation)).close, val.close);
  // Without validation_end, test starts at train_end.
  const MarketConfig two = load("[split]\ntrain_end = 300\n");
  EXPECT_EQ(load_ohlcv(split_market(two, Split::test)).first_bar, 300 - kWindow);
}

TEST_F(MarketSplitTest, DescribesTheBarsOfEachPart) {
  const MarketConfig c = load("[split]\ntrain_end = 300\nvalidation_end = 450\n");
  const std::string train = describe_split(c, Split::train);
  const std::string val = describe_split(c, Split::validation);
  const std::string test = describe_split(c, Split::test);
  EXPECT_NE(train.find("train: bars 0..299 of prices.csv (2001-01-01 .. 2001-10-27, 300 bars"), std::string::npos)
      << train;
  EXPECT_NE(val.find("validation: bars 300..449 of prices.csv (2001-10-28 .. 2002-03-26, 150 bars"), std::string::npos)
      << val;
  EXPECT_NE(val.find("reaches back to bar 292"), std::string::npos) << val;
  EXPECT_NE(test.find("test: bars 450..599 of prices.csv"), std::string::npos) << test;
  EXPECT_NE(describe_split(load(""), Split::train).find("train: bars 0..599"), std::string::npos);
}

TEST_F(MarketSplitTest, SplitMarketRefusesPartsTheMarketLacks) {
  const MarketConfig none = load("");
  EXPECT_EQ(split_market(none, Split::train).replay_split, Split::train);
  EXPECT_THROW(split_market(none, Split::validation), ConfigError);
  EXPECT_THROW(split_market(none, Split::test), ConfigError);
  const MarketConfig two = load("[split]\ntrain_end = 300\n");
  try {
    split_market(two, Split::validation);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("split.validation_end"), std::string::npos) << e.what();
  }
  EXPECT_EQ(split_market(two, Split::test).replay_split, Split::test);
  MarketConfig gbm;
  gbm.initial_price = {100.0};
  gbm.mu = {0.0};
  gbm.sigma = {0.2};
  EXPECT_NO_THROW(split_market(gbm, Split::train));
  EXPECT_THROW(split_market(gbm, Split::test), ConfigError);
  EXPECT_EQ(parse_split("validation"), Split::validation);
  EXPECT_EQ(std::string(to_string(parse_split("test"))), "test");
  EXPECT_THROW(parse_split("tset"), std::invalid_argument);
  // A config built in code that replays a part it does not have.
  MarketConfig code = none;
  code.replay_split = Split::test;
  EXPECT_THROW(validate(code), ConfigError);
}

struct BadSplit {
  const char* name;
  std::string split;  // the [split] table
  std::string at;     // the text whose line the message names
  std::string part;   // the message contains it
};

TEST_F(MarketSplitTest, RejectsBadSplitsNamingFileLineAndKey) {
  const std::vector<BadSplit> cases = {
      {"train_too_short", "[split]\ntrain_end = 20\n", "train_end",
       "split.train_end = 20: the train part [0, 20) has 20 bars, needs at least 59 (market.window + "
       "market.episode_length + 1)"},
      {"validation_not_after_train", "[split]\ntrain_end = 300\nvalidation_end = 200\n", "validation_end",
       "split.validation_end = 200: must be after split.train_end"},
      {"validation_too_short", "[split]\ntrain_end = 300\nvalidation_end = 320\n", "validation_end",
       "split.validation_end = 320: the validation part [300, 320) has 20 bars, needs at least 51"},
      {"test_too_short", "[split]\ntrain_end = 580\n", "train_end",
       "split.train_end = 580: the test part [580, 600) has 20 bars, needs at least 51"},
      {"test_too_short_after_validation", "[split]\ntrain_end = 300\nvalidation_end = 590\n", "validation_end",
       "split.validation_end = 590: the test part [590, 600) has 10 bars"},
      {"index_past_the_data", "[split]\ntrain_end = 700\n", "train_end",
       "split.train_end = 700: must be a bar index in [1, 599] (the data has 600 bars, 2001-01-01 .. 2002-08-23)"},
      {"date_past_the_data", "[split]\ntrain_end = 2030-01-01\n", "train_end",
       "split.train_end = 2030-01-01: no bar of the data is on both sides of it"},
      {"date_before_the_data", "[split]\ntrain_end = \"1999-01-01\"\n", "train_end",
       "split.train_end = \"1999-01-01\": no bar of the data is on both sides of it"},
      {"zero", "[split]\ntrain_end = 0\n", "train_end", "split.train_end = 0: must be a bar index (an integer >= 1)"},
      {"float", "[split]\ntrain_end = 300.5\n", "train_end",
       "split.train_end = 300.5: must be a bar index (an integer >= 1) or a date"},
      {"bad_date", "[split]\ntrain_end = \"2001-13-01\"\n", "train_end",
       "split.train_end = \"2001-13-01\": must be a bar index"},
      {"missing_train_end", "[split]\nvalidation_end = 400\n", "[split]", "split.train_end: missing in [split]"},
      {"misspelled_key", "[split]\ntrain_end = 300\ntrain_ned = 5\n", "train_ned",
       "split.train_ned: unknown key; did you mean 'train_end'?"},
  };
  for (const BadSplit& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string text = market_toml(c.split);
    const std::size_t pos = text.find(c.at);
    ASSERT_NE(pos, std::string::npos);
    const std::string where =
        (dir / "m.toml").string() + ":" + std::to_string(1 + std::count(text.begin(), text.begin() + pos, '\n')) + ": ";
    const std::string msg = rejection(c.split);
    EXPECT_NE(msg.find(where + c.part), std::string::npos) << "no \"" << where << c.part << "\" in:\n" << msg;
  }
}

TEST(MarketSplit, OnlyReplayMarketsHaveASplit) {
  try {
    parse_market_config(
        "[market]\nassets = 1\n[process]\nkind = \"gbm\"\ninitial_price = 1.0\nsigma = 0.2\n"
        "[split]\ntrain_end = 10\n",
        "gbm.toml");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gbm.toml:7: [split]: only allowed for process.kind = \"replay\""),
              std::string::npos)
        << e.what();
  }
  // Without the data the order of two bar indices is still checked.
  try {
    parse_market_config(market_toml("[split]\ntrain_end = 300\nvalidation_end = 300\n"), "text.toml");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("text.toml:11: split.validation_end = 300: must be after split.train_end"),
              std::string::npos)
        << e.what();
  }
}

TEST(MarketSplit, KeysAreListed) {
  const std::vector<std::string> keys = market_config_keys();
  for (const char* k : {"split.train_end", "split.validation_end"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

TEST(MarketSplit, TimestampsFormatAndParseBack) {
  for (const char* t : {"2001-01-01", "1999-12-31 23:59:59", "2020-02-29", "1970-01-01"}) {
    std::int64_t s = -1;
    ASSERT_TRUE(parse_timestamp(t, s)) << t;
    EXPECT_EQ(format_timestamp(s), t);
  }
  EXPECT_EQ(format_timestamp(-86400), "1969-12-31");
}

}  // namespace
}  // namespace foxhunt::rl
