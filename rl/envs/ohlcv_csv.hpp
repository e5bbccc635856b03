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
  std::vector<std::string> symbols;                    // (assets): file stem (per asset) or symbol (long)
  std::vector<std::int64_t> timestamps;                // (bars) seconds (ISO dates are converted to UTC seconds)
  std::vector<double> open, high, low, close, volume;  // (assets, bars) row-major
};

// One file per asset. `min_bars` rejects files too short for one episode (window + episode + 1).
OhlcvData load_ohlcv_per_asset(const std::vector<std::filesystem::path>& files, std::int64_t min_bars);
// One long-format file; takes `symbols` in that order.
OhlcvData load_ohlcv_long(const std::filesystem::path& file, const std::vector<std::string>& symbols,
                          std::int64_t min_bars);
// Loads what a replay config names (files, layout, symbols), with min_bars = window + episode_length + 1.
OhlcvData load_ohlcv(const MarketConfig& config);

// Parsers on text (the loaders read the file and call these; tests use them directly).
OhlcvData parse_ohlcv_per_asset(const std::vector<std::string>& texts, const std::vector<std::string>& names,
                                std::int64_t min_bars);
OhlcvData parse_ohlcv_long(const std::string& text, const std::string& name, const std::vector<std::string>& symbols,
                           std::int64_t min_bars);

}  // namespace foxhunt::rl
