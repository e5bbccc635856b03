// OHLCV CSV loading for market replay (CPU): both layouts parse, and every malformed input is
// rejected with the file, the line and the reason, one test per case.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::rl {
namespace {

// Header plus `rows` bars: timestamps 1000, 1060, ...; close 100 + k.
std::string bars(int rows, const std::string& header = "timestamp,open,high,low,close,volume") {
  std::string s = header + "\n";
  for (int k = 0; k < rows; ++k) {
    const double c = 100.0 + k;
    s += std::to_string(1000 + 60 * k) + "," + std::to_string(c - 0.5) + "," + std::to_string(c + 1) + "," +
         std::to_string(c - 1) + "," + std::to_string(c) + ",1000\n";
  }
  return s;
}

// Replaces line `line` (1-based) of the text.
std::string with_line(const std::string& text, int line, const std::string& replacement) {
  std::string out;
  int n = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    ++n;
    out += (n == line ? replacement : text.substr(start, end - start)) + "\n";
    start = end + 1;
  }
  return out;
}

::testing::AssertionResult rejects(const std::string& text, const std::string& where, const std::string& reason,
                                   std::int64_t min_bars = 5) {
  try {
    parse_ohlcv_per_asset({text}, {"prices.csv"}, min_bars);
  } catch (const CsvError& e) {
    const std::string msg = e.what();
    if (msg.rfind("prices.csv:" + where + ": ", 0) != 0)
      return ::testing::AssertionFailure() << "expected file:line prices.csv:" << where << ", got: " << msg;
    if (msg.find(reason) == std::string::npos)
      return ::testing::AssertionFailure() << "expected reason \"" << reason << "\", got: " << msg;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "accepted";
}

TEST(OhlcvCsvTest, ParsesOneFilePerAsset) {
  std::string text = "Date, Close ,Open,High,Low,Volume,Adj Close\r\n";
  const char* rows[] = {"2024-01-02,10,9.5,10.5,9,100,1",         "2024-01-03,11,10,11.5,9.8,120,1",
                        "2024-01-04 00:00,12,11,12.5,10.9,130,1", "2024-01-05T00:00:00Z,13,12,13.5,11.9,0,1",
                        "\"2024-01-08\",14,13,14.5,12.9,10,1",    "2024-01-09,15,14,15.5,13.9,10,1"};
  for (const char* r : rows) text += std::string(r) + "\r\n";
  text += "\n";
  std::string other = "timestamp,open,high,low,close,volume\n";
  for (const char* date : {"2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08", "2024-01-09"})
    other += std::string(date) + ",99,101,98,100,5\n";
  const OhlcvData d = parse_ohlcv_per_asset({text, other}, {"data/AAA.csv", "BBB.csv"}, 5);
  EXPECT_EQ(d.assets, 2);
  EXPECT_EQ(d.bars, 6);
  EXPECT_EQ(d.symbols, (std::vector<std::string>{"AAA", "BBB"}));
  EXPECT_EQ(d.close[0], 10.0);
  EXPECT_EQ(d.close[5], 15.0);
  EXPECT_EQ(d.open[1], 10.0);
  EXPECT_EQ(d.volume[3], 0.0);
  EXPECT_EQ(d.close[6], 100.0);            // asset 1 starts at bars
  EXPECT_EQ(d.timestamps[0], 1704153600);  // 2024-01-02 UTC
  EXPECT_EQ(d.timestamps[1] - d.timestamps[0], 86400);
}

TEST(OhlcvCsvTest, ParsesLongFormatTakingTheRequestedSymbolsInOrder) {
  std::string text = "symbol,timestamp,open,high,low,close,volume\n";
  for (int k = 0; k < 6; ++k) {
    const std::string t = std::to_string(100 + k);
    text += "X," + t + ",1,2,0.5,1.5,10\n";
    text += "A," + t + ",10,20,5," + std::to_string(11 + k) + ",10\n";
    text += "B," + t + ",5,6,4," + std::to_string(5 + k) + ",10\n";
  }
  const OhlcvData d = parse_ohlcv_long(text, "long.csv", {"B", "A"}, 5);
  EXPECT_EQ(d.assets, 2);
  EXPECT_EQ(d.bars, 6);
  EXPECT_EQ(d.symbols, (std::vector<std::string>{"B", "A"}));
  EXPECT_EQ(d.close[0], 5.0);
  EXPECT_EQ(d.close[6], 11.0);
  EXPECT_EQ(d.close[11], 16.0);
}

TEST(OhlcvCsvTest, RejectsAMissingColumn) {
  EXPECT_TRUE(rejects(bars(6, "timestamp,open,high,low,volume"), "1", "missing column 'close'"));
  EXPECT_TRUE(rejects(bars(6, "when,open,high,low,close,volume"), "1", "missing column 'timestamp'"));
}

TEST(OhlcvCsvTest, RejectsANonNumericField) {
  EXPECT_TRUE(
      rejects(with_line(bars(6), 3, "1060,abc,102,100,101,1000"), "3", "non-numeric field in column 'open': 'abc'"));
  EXPECT_TRUE(rejects(with_line(bars(6), 4, "1120,101,102,100,,1000"), "4", "non-numeric field in column 'close'"));
  EXPECT_TRUE(rejects(with_line(bars(6), 2, "1000,1.5x,102,100,101,1000"), "2", "non-numeric field in column 'open'"));
}

TEST(OhlcvCsvTest, RejectsNaN) {
  EXPECT_TRUE(rejects(with_line(bars(6), 4, "1120,101,102,100,NaN,1000"), "4", "NaN in column 'close'"));
  EXPECT_TRUE(rejects(with_line(bars(6), 5, "1180,101,102,100,101,nan"), "5", "NaN in column 'volume'"));
}

TEST(OhlcvCsvTest, RejectsNonIncreasingTimestamps) {
  EXPECT_TRUE(rejects(with_line(bars(6), 5, "1060,101,102,100,101,1000"), "5", "timestamps must increase strictly"));
  EXPECT_TRUE(rejects(with_line(bars(6), 3, "1000,101,102,100,101,1000"), "3", "timestamps must increase strictly"));
}

TEST(OhlcvCsvTest, RejectsTooFewRowsForOneEpisode) {
  EXPECT_TRUE(rejects(bars(4), "5", "too few rows for one episode: 4 bars, need at least 5"));
  EXPECT_TRUE(rejects("timestamp,open,high,low,close,volume\n", "1", "too few rows"));
}

TEST(OhlcvCsvTest, RejectsOtherMalformedRows) {
  EXPECT_TRUE(rejects(with_line(bars(6), 3, "1060,101,102,100"), "3", "expected 6 fields, got 4"));
  EXPECT_TRUE(rejects(with_line(bars(6), 3, "yesterday,101,102,100,101,1"), "3", "bad timestamp 'yesterday'"));
  EXPECT_TRUE(rejects(with_line(bars(6), 3, "2024-13-01,101,102,100,101,1"), "3", "bad timestamp"));
  EXPECT_TRUE(rejects(with_line(bars(6), 3, "1060,101,102,100,-101,1"), "3", "column 'close' must be > 0"));
  EXPECT_TRUE(rejects(with_line(bars(6), 3, "1060,101,102,100,101,-1"), "3", "column 'volume' must be >= 0"));
  EXPECT_TRUE(rejects(with_line(bars(6), 3, "1060,101,99,100,101,1"), "3", "high is below low"));
  EXPECT_TRUE(rejects(with_line(bars(6), 3, "1060,101,102,100,inf,1"), "3", "infinite value in column 'close'"));
  EXPECT_TRUE(rejects("", "1", "empty file"));
}

TEST(OhlcvCsvTest, RejectsAssetsThatDoNotShareTheirBars) {
  try {
    parse_ohlcv_per_asset({bars(6), with_line(bars(6), 4, "1125,101,102,100,101,1000")}, {"a.csv", "b.csv"}, 5);
    FAIL() << "accepted";
  } catch (const CsvError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("b.csv:4: ", 0), 0u) << e.what();
  }
  try {
    parse_ohlcv_per_asset({bars(6), bars(7)}, {"a.csv", "b.csv"}, 5);
    FAIL() << "accepted";
  } catch (const CsvError& e) {
    EXPECT_NE(std::string(e.what()).find("b has 7 bars, a has 6"), std::string::npos) << e.what();
  }
}

TEST(OhlcvCsvTest, LongFormatErrorsNameTheLine) {
  const std::string header = "symbol,timestamp,open,high,low,close,volume\n";
  std::string text = header;
  for (int k = 0; k < 6; ++k) text += "A," + std::to_string(100 + k) + ",1,2,0.5,1.5,10\n";
  EXPECT_THROW(parse_ohlcv_long(text, "long.csv", {"A", "Z"}, 5), CsvError);
  try {
    parse_ohlcv_long(text, "long.csv", {"A", "Z"}, 5);
  } catch (const CsvError& e) {
    EXPECT_NE(std::string(e.what()).find("symbol 'Z' has no rows"), std::string::npos) << e.what();
  }
  try {
    parse_ohlcv_long(with_line(text, 4, "A,101,1,2,0.5,1.5,10"), "long.csv", {"A"}, 3);
    FAIL() << "accepted";
  } catch (const CsvError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("long.csv:4: timestamps must increase strictly", 0), 0u) << e.what();
  }
  try {
    parse_ohlcv_long("timestamp,open,high,low,close,volume\n1,1,1,1,1,1\n", "long.csv", {"A"}, 1);
    FAIL() << "accepted";
  } catch (const CsvError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("long.csv:1: missing column 'symbol'", 0), 0u) << e.what();
  }
}

TEST(OhlcvCsvTest, LoadsFilesNamedByAReplayConfig) {
  const auto dir = std::filesystem::temp_directory_path() / ("foxhunt_csv_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "AAA.csv") << bars(40);
  std::ofstream(dir / "market.toml") << "[market]\nassets = 1\nwindow = 8\nepisode_length = 20\n"
                                        "[process]\nkind = \"replay\"\n[replay]\nfiles = [\"AAA.csv\"]\n";
  const MarketConfig c = load_market_config(dir / "market.toml");
  const OhlcvData d = load_ohlcv(c);
  EXPECT_EQ(d.bars, 40);
  MarketConfig longer = c;
  longer.episode_length = 40;  // 8 + 40 + 1 > 40 bars
  try {
    load_ohlcv(longer);
    FAIL() << "accepted";
  } catch (const CsvError& e) {
    EXPECT_NE(std::string(e.what()).find("AAA.csv:41: too few rows for one episode: 40 bars, need at least 49"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_ohlcv_per_asset({dir / "missing.csv"}, 5), CsvError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace foxhunt::rl
