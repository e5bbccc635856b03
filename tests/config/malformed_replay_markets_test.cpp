// A table of replay markets with a malformed CSV or [split], each loaded through a run config the
// way `foxhunt check` and `foxhunt train` load one (load_run_config): the message names the run
// config's env.market line, the market file's line and key, and the CSV file's own line and the
// reason. No GPU is needed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "config/reader.hpp"

namespace foxhunt::actors {
namespace {

namespace fs = std::filesystem;

const std::string kRun =
    "[run]\nname = \"t\"\n[env]\nkind = \"market\"\nmarket = \"m.toml\"\n[learner]\nkind = \"dqn\"\n";

// A market replaying data.csv (window 4, 10-step episodes: 15 bars at least), then `split`.
std::string market(const std::string& split = "") {
  return "[market]\nassets = 1\nwindow = 4\nepisode_length = 10\n[process]\nkind = \"replay\"\n"
         "[replay]\nfiles = [\"data.csv\"]\n" +
         split;
}

// 40 daily bars from 2020-01-01, then row `line` (1-based, the header is line 1) replaced.
std::string csv(int line = 0, const std::string& replacement = "") {
  std::string s = "date,open,high,low,close,volume\n";
  for (int k = 0; k < 40; ++k) {
    const int day = 1 + k % 28, month = 1 + k / 28;
    char row[96];
    std::snprintf(row, sizeof row, "2020-%02d-%02d,%d.5,%d,%d,%d,100\n", month, day, 100 + k, 102 + k, 99 + k, 101 + k);
    s += k + 2 == line ? replacement + "\n" : std::string(row);
  }
  if (line == 1) s = replacement + "\n" + s.substr(s.find('\n') + 1);
  return s;
}

struct Case {
  std::string name;
  std::string market;  // m.toml
  std::string csv;     // data.csv
  std::string at;      // text of m.toml whose line the message names
  std::vector<std::string> parts;
};

std::vector<Case> cases() {
  return {
      {"non_numeric_field",
       market(),
       csv(5, "2020-01-04,1,x,1,1,1"),
       "files",
       {"data.csv:5: non-numeric field in column 'high': 'x'"}},
      {"nan_close", market(), csv(3, "2020-01-02,1,2,1,nan,1"), "files", {"data.csv:3: NaN in column 'close'"}},
      {"missing_column",
       market(),
       csv(1, "date,open,high,low,volume"),
       "files",
       {"data.csv:1: missing column 'close'"}},
      {"wrong_field_count", market(), csv(7, "2020-01-06,1,2,1"), "files", {"data.csv:7: expected 6 fields, got 4"}},
      {"bad_timestamp",
       market(),
       csv(4, "2020-02-30x,1,2,1,1,1"),
       "files",
       {"data.csv:4: bad timestamp '2020-02-30x'"}},
      {"timestamps_not_increasing",
       market(),
       csv(6, "2020-01-01,1,2,1,1,1"),
       "files",
       {"data.csv:6: timestamps must increase strictly"}},
      {"high_below_low", market(), csv(8, "2020-01-07,1,1,2,1,1"), "files", {"data.csv:8: high is below low"}},
      {"negative_price", market(), csv(9, "2020-01-08,-1,2,1,1,1"), "files", {"data.csv:9: column 'open' must be > 0"}},
      {"too_few_rows",
       market(),
       "date,open,high,low,close,volume\n2020-01-01,1,2,1,1,1\n",
       "files",
       {"data.csv:2: too few rows for one episode: 1 bars, need at least 15"}},
      {"empty_file", market(), "", "files", {"data.csv:1: empty file"}},
      {"split_train_too_short",
       market("[split]\ntrain_end = 10\n"),
       csv(),
       "train_end",
       {"split.train_end = 10: the train part [0, 10) has 10 bars, needs at least 15"}},
      {"split_test_too_short",
       market("[split]\ntrain_end = 35\n"),
       csv(),
       "train_end",
       {"split.train_end = 35: the test part [35, 40) has 5 bars, needs at least 11"}},
      {"split_date_outside",
       market("[split]\ntrain_end = 2021-01-01\n"),
       csv(),
       "train_end",
       {"split.train_end = 2021-01-01: no bar of the data is on both sides of it"}},
      {"split_misspelled",
       market("[split]\ntrain_end = 20\nvalidaton_end = 30\n"),
       csv(),
       "validaton_end",
       {"split.validaton_end: unknown key; did you mean 'validation_end'?"}},
  };
}

class MalformedReplayMarket : public ::testing::TestWithParam<Case> {
 protected:
  fs::path dir =
      fs::temp_directory_path() / ("foxhunt_replay_market_" + std::to_string(::getpid()) + "_" + GetParam().name);
  void SetUp() override {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
};

TEST_P(MalformedReplayMarket, IsRejectedNamingTheFilesLinesAndKey) {
  const Case& c = GetParam();
  std::ofstream(dir / "m.toml") << c.market;
  std::ofstream(dir / "data.csv", std::ios::binary) << c.csv;
  std::ofstream(dir / "run.toml") << kRun;
  const std::size_t pos = c.market.find(c.at);
  ASSERT_NE(pos, std::string::npos) << c.at;
  const std::string market_line =
      (dir / "m.toml").string() + ":" +
      std::to_string(1 + std::count(c.market.begin(), c.market.begin() + static_cast<std::ptrdiff_t>(pos), '\n')) + ":";
  try {
    load_run_config(dir / "run.toml");
    FAIL() << "accepted:\n" << c.market;
  } catch (const config::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find((dir / "run.toml").string() + ":5: env.market = \"m.toml\""), std::string::npos) << msg;
    EXPECT_NE(msg.find(market_line), std::string::npos) << "no \"" << market_line << "\" in:\n" << msg;
    for (const auto& p : c.parts) EXPECT_NE(msg.find(p), std::string::npos) << "no \"" << p << "\" in:\n" << msg;
    if (c.at == "files") {  // the CSV's own path and line follow the market file's
      EXPECT_NE(msg.find((dir / "data.csv").string() + ":"), std::string::npos) << msg;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, MalformedReplayMarket, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(MalformedReplayMarketTable, AGoodReplayMarketLoads) {
  const fs::path dir = fs::temp_directory_path() / ("foxhunt_replay_market_ok_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "m.toml") << market("[split]\ntrain_end = 15\nvalidation_end = 2020-01-29\n");
  std::ofstream(dir / "data.csv", std::ios::binary) << csv();
  std::ofstream(dir / "run.toml") << kRun;
  RunConfig c;
  ASSERT_NO_THROW(c = load_run_config(dir / "run.toml"));
  const rl::MarketConfig m = market_config(c);
  EXPECT_EQ(m.process, rl::PriceProcess::replay);
  EXPECT_EQ(m.split.train_end.bar, 15);
  EXPECT_EQ(m.split.validation_end.bar, 28);  // 2020-01-29 is the 29th bar (2020-02-01 follows 01-28)
  fs::remove_all(dir);
}

}  // namespace
}  // namespace foxhunt::actors
