#pragma once
// Historical OHLCV bars for market replay, read from CSV once on the host (then uploaded once by
// MarketEnv). Two layouts:
//   per asset: one file per asset, header with (case-insensitive) columns
//              timestamp, open, high, low, close, volume (any order, other columns ignored);
//   long:      one file, the same columns plus `symbol`; the rows of each requested symbol are
//              taken in file order.
// Timestamps are integers (e.g. Unix seconds) or ISO dates/times (YYYY-MM-DD[ HH:MM[:SS]] or
// with 'T'); they must increase strictly per asset, and all assets must share the same ones.
// Every malformed input is rejected with CsvError("<file>:<line>: <reason>").
#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rl/envs/market_config.hpp"

namespace foxhunt::rl {

class CsvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OhlcvData {
  int assets = 0;
  std::int64_t bars = 0;
  std::int64_t first_bar = 0;                          // index in the files of bar 0 (slice_bars)
  std::vector<std::string> symbols;                    // (assets): file stem (per asset) or symbol (long)
  std::vector<std::int64_t> timestamps;                // (bars) seconds (ISO dates are converted to UTC seconds)
  std::vector<double> open, high, low, close, volume;  // (assets, bars) row-major
  // (assets) per-step volatility of the log closes that slippage and the observation are scaled
  // by; empty: the volatility of these bars (load_ohlcv sets the train part's for every part).
  std::vector<double> step_vol;
};

// One file per asset. `min_bars` rejects files too short for one episode (window + episode + 1).
OhlcvData load_ohlcv_per_asset(const std::vector<std::filesystem::path>& files, std::int64_t min_bars);
// One long-format file; takes `symbols` in that order.
OhlcvData load_ohlcv_long(const std::filesystem::path& file, const std::vector<std::string>& symbols,
                          std::int64_t min_bars);
// Every bar of what a replay config names (files, layout, symbols), with min_bars = window +
// episode_length + 1.
OhlcvData load_ohlcv_all(const MarketConfig& config);
// The bars the environment of `config` replays: config.replay_split's part of [split] with the
// market.window bars before it (split_bars(...).history .. end), or every bar without [split];
// step_vol from the train part's bars, so no part's scale depends on later bars. What MarketEnv
// is built with.
OhlcvData load_ohlcv(const MarketConfig& config);

// The bars of one part of [split], resolved against the data's timestamps (bar indices of the
// files). Episodes of the part trade from `begin` (train: market.window, the first bar with a full
// window before it) and end by `end - 1`; the environment reads bars history .. end - 1.
struct SplitBars {
  Split split = Split::train;
  std::int64_t first = 0;    // the part's first bar (train: 0)
  std::int64_t end = 0;      // one past its last bar
  std::int64_t history = 0;  // first bar the environment reads: first - window (train: 0)
  std::int64_t total = 0;    // bars in the data
};
// Resolves config.split (dates to bars) and checks that the boundaries are in order and every
// part holds one episode (train: window + episode_length + 1 bars; validation and test:
// episode_length + 1, their window reaching back into the part before). Each problem goes to
// bad(key, what) with the [split] key it is about ("split.train_end"); `resolved` (may be null)
// receives the config with both boundaries as bar indices.
void check_split(const MarketConfig& config, const std::vector<std::int64_t>& timestamps,
                 const std::function<void(const std::string& key, const std::string& what)>& bad,
                 MarketConfig* resolved = nullptr);
// The bars of part `which`; ConfigError listing the problems of check_split, or naming the [split]
// key when the market has no such part.
SplitBars split_bars(const MarketConfig& config, const std::vector<std::int64_t>& timestamps, Split which);
// What the bars of a part are, for reports: "test: bars 2500..2999 of data.csv (2019-01-02 ..
// 2020-12-31, 500 bars; the observation window reaches back to bar 2468)". `data` is every bar
// (load_ohlcv_all); the second form loads it.
std::string describe_split(const MarketConfig& config, const OhlcvData& data, Split which);
std::string describe_split(const MarketConfig& config, Split which);
// Bars [begin, end) of `data` (every column; first_bar advanced; step_vol kept).
OhlcvData slice_bars(const OhlcvData& data, std::int64_t begin, std::int64_t end);
// Per-asset volatility of the log closes over bars [begin, end) of `data` (1e-4 for a constant series).
std::vector<double> close_volatility(const OhlcvData& data, std::int64_t begin, std::int64_t end);

// Integer seconds, or YYYY-MM-DD[( |T)HH:MM[:SS]][Z] as UTC seconds (the CSV's timestamp rule);
// false when malformed.
bool parse_timestamp(const std::string& text, std::int64_t& seconds);
// UTC seconds as "YYYY-MM-DD" (midnight) or "YYYY-MM-DD HH:MM:SS".
std::string format_timestamp(std::int64_t seconds);

// Parsers on text (the loaders read the file and call these; tests use them directly).
OhlcvData parse_ohlcv_per_asset(const std::vector<std::string>& texts, const std::vector<std::string>& names,
                                std::int64_t min_bars);
OhlcvData parse_ohlcv_long(const std::string& text, const std::string& name, const std::vector<std::string>& symbols,
                           std::int64_t min_bars);

}  // namespace foxhunt::rl
