#pragma once
// Configuration of the market environment (rl/envs/market.hpp): what a configs/markets/*.toml
// file says, read with config::Reader (config/reader.hpp) and validated in one pass: every
// problem of a file is reported, each with the file, the line, the key as written in the file
// (e.g. `execution.fee_bps`), the value and the allowed values. Every key is in docs/configs.md.
// Plain C++: no device code, usable from CPU tests and tools.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/error.hpp"

namespace foxhunt::rl {

inline constexpr int kMaxAssets = 16;
inline constexpr int kMaxRegimes = 4;
inline constexpr int kMaxLevels = 9;
inline constexpr int kMaxWindow = 256;

enum class PriceProcess : std::uint8_t { gbm, ou, replay, generated };
enum class ActionMode : std::uint8_t { discrete, continuous };
enum class RewardKind : std::uint8_t { pnl, log_return, differential_sharpe };
enum class CsvLayout : std::uint8_t { per_asset, long_format };

// A market config's problems (config::Error: what() lists them, errors() one per line).
class ConfigError : public config::Error {
 public:
  using config::Error::Error;
};

// The parts of a replay market's bars by time (walk-forward): train [0, train_end), validation
// [train_end, validation_end), test [validation_end, bars).
enum class Split : std::uint8_t { train, validation, test };

// One boundary of [split]: a bar index, or a date (the part after it starts at the first bar at
// or after the date). load_market_config resolves a date to its bar against the data.
struct SplitPoint {
  std::int64_t bar = -1;  // index of the first bar past the part; -1: a date not resolved yet, or unset
  std::int64_t time = 0;  // by_time: UTC seconds of the date
  bool by_time = false;
  bool set() const { return bar >= 0 || by_time; }
  bool operator==(const SplitPoint&) const = default;
};

// [split] (process = replay only). Absent (given = false): every bar is training data and there
// is no validation or test part.
struct MarketSplit {
  bool given = false;
  SplitPoint train_end;       // required with [split]
  SplitPoint validation_end;  // unset: no validation part, the test part starts at train_end
  bool has_validation() const { return validation_end.set(); }
  bool operator==(const MarketSplit&) const = default;
};

struct MarketConfig {
  // [market]
  int assets = 1;
  double dt = 1.0 / 252.0;   // years per step (also sets the Sharpe annualization sqrt(1/dt))
  int episode_length = 256;  // steps, then truncated
  int window = 32;           // log returns per asset in the observation
  double initial_cash = 1e6;
  double min_equity = 0.1;  // terminated when equity < min_equity * initial_cash
  int extra_features = 0;   // width of the optional extra observation block

  // [process]: the price law. Per-regime parameters are (regimes, assets) row-major; without
  // [process.regimes] there is one regime and the top-level per-asset keys fill it.
  PriceProcess process = PriceProcess::gbm;
  std::vector<double> initial_price;  // (assets) > 0
  int regimes = 1;
  std::vector<double> mu;                  // gbm: annual drift
  std::vector<double> sigma;               // gbm and ou: annual volatility
  std::vector<double> kappa;               // ou: mean-reversion speed per year
  std::vector<double> theta;               // ou: mean of log(price / initial_price)
  std::vector<double> transition = {1.0};  // (regimes, regimes) per-step transition matrix, rows sum to 1
  std::vector<double> correlation;         // (assets, assets) of the Brownian parts; empty = identity
  double jump_intensity = 0.0;             // Merton jumps per year (per asset)
  double jump_mean = 0.0;                  // mean log jump size
  double jump_stddev = 0.0;                // stddev of the log jump size

  // [execution]
  double fee_bps = 0.0;          // of traded notional (at the mid price)
  double half_spread_bps = 0.0;  // paid on every trade
  double slippage = 0.0;         // price impact = slippage * step_vol * sqrt(notional / liquidity)
  double liquidity = 1e7;        // notional at which the impact is slippage * step_vol
  double position_limit = 1.0;   // max |weight| per asset (weight = holdings * price / equity)
  double leverage_cap = 1.0;     // max sum |weight| after trading
  double borrow_rate = 0.0;      // annual, charged on short notional each step

  // [action]
  ActionMode action = ActionMode::discrete;
  std::vector<double> levels = {-1.0, -0.5, 0.0, 0.5, 1.0};  // discrete targets, x position_limit

  // [reward]
  RewardKind reward = RewardKind::pnl;
  double sharpe_eta = 0.01;       // differential Sharpe EMA rate
  double drawdown_penalty = 0.0;  // reward -= drawdown_penalty * current drawdown
  double turnover_penalty = 0.0;  // reward -= turnover_penalty * traded notional / equity
  double reward_scale = 1.0;      // `reward.scale` (> 0): the reward (penalties included) times this

  // [process] kind = "generated" (rl/envs/market_generator.hpp): returns sampled from a diffusion
  // model; initial_price and sigma (the reference volatility: slippage scale and the returns'
  // normalization, which must be the model's) as for gbm, one regime, no jumps or correlation.
  std::string generator_checkpoint;  // `process.checkpoint`: a diffusion pretrain checkpoint or run directory
  std::string generator_sampler;     // `process.sampler`: "" the checkpoint's, "ddpm" | "ddim"
  int generator_sample_steps = 0;    // `process.sample_steps`: 0 the checkpoint's
  double generator_eta = -1.0;       // `process.eta`: < 0 the checkpoint's (ddim only)

  // [observation]
  bool price_level = false;  // append one column per asset: the log price's standardized level
                             // (rl/envs/market.hpp); gbm and ou only

  // [replay] (process = replay)
  std::vector<std::string> files;  // per_asset: one per asset; long_format: one
  CsvLayout layout = CsvLayout::per_asset;
  std::vector<std::string> symbols;  // long_format: the symbols to take, in asset order

  // [split] (process = replay) and the part of it the environment replays (split_market sets it).
  MarketSplit split;
  Split replay_split = Split::train;

  bool operator==(const MarketConfig&) const = default;  // e.g. checkpoints evaluated on one market
};

// Parses TOML text; `source` names it in messages (a file name). Throws ConfigError.
MarketConfig parse_market_config(const std::string& toml_text, const std::string& source);
// Reads and parses a file; relative replay paths are resolved against the file's folder and
// must name existing files; a generated market's checkpoint is resolved the same way and read
// (read_generator_checkpoint, rl/envs/market_generator_config.hpp): it must fit the market.
MarketConfig load_market_config(const std::filesystem::path& file);
// Checks every value and cross-constraint of a config built in code; throws ConfigError listing
// every problem, each naming the key.
void validate(const MarketConfig& config);

// The config of the same market replaying one part of its [split] (the environment then reads
// only those bars, plus the market.window bars before the part's first one as the observation's
// history). Train without [split] is the whole data. Throws ConfigError naming the [split] key
// when the market is not a replay, has no [split] (validation, test) or no validation part.
MarketConfig split_market(const MarketConfig& config, Split which);
const char* to_string(Split s);
// "train" | "validation" | "test"; std::invalid_argument listing them otherwise.
Split parse_split(const std::string& name);

// The config as a market file that reads back to it (numbers to 17 digits, replay paths as they
// are in the config, [split] boundaries as resolved bar indices, with the date as a comment):
// what a run directory keeps of its market (market.resolved.toml).
std::string market_config_toml(const MarketConfig& config);

// Every key the market config reader accepts ("execution.fee_bps"), sorted (docs/configs.md's test).
std::vector<std::string> market_config_keys();

// Derived quantities (host side, also used by tests).
// Lower-triangular Cholesky factor (assets, assets) of config.correlation (identity if empty).
std::vector<double> correlation_cholesky(const MarketConfig& config);
// Stationary distribution of the regime chain (regimes).
std::vector<double> regime_stationary(const MarketConfig& config);

const char* to_string(PriceProcess p);
const char* to_string(ActionMode m);
const char* to_string(RewardKind k);

}  // namespace foxhunt::rl
