#pragma once
// PretrainConfig: what `foxhunt pretrain --config FILE` reads:
//   [model] [data] [data.split] [task] [optim] [run]
// read with config::Reader (config/reader.hpp) like `foxhunt train`'s run config: every problem of
// a file at once, each with the file, the line, the key, the value as written and what is allowed;
// unknown tables and keys are errors (with a suggestion); a key without effect under the options
// chosen (task.quantiles with task.loss = "mse") is an error naming both keys. [model] holds the
// keys every family shares (kind, hidden, layers) and the family's own keys, which the model
// factory reads (pretrain/model_factory.hpp). Every key is in docs/configs.md ("## Pretrain config").
//
// Data: source = "market" reads a market config file (configs/markets/*.toml, a simulated market:
// gbm or ou, with its regimes), resolved against the pretrain config's folder and stored absolute;
// source = "csv" reads historical bars from CSV files (rl/envs/ohlcv_csv.hpp, one file per asset),
// split by time into train / validation / test ([data.split], fractions or bar indices), and no
// window reads bars of two parts.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "rl/envs/market_config.hpp"

namespace foxhunt::pretrain {

// The family-specific [model] keys as the model factory read them (name -> value).
struct FamilyOptions {
  std::map<std::string, std::int64_t> integers;
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> choices;
  std::map<std::string, bool> flags;
  bool operator==(const FamilyOptions&) const = default;
};

struct PretrainConfig {
  struct Model {
    std::string kind = "lstm";  // pretrain/model_factory.hpp: model_kinds()
    std::int64_t hidden = 64;   // the width: LSTM hidden size, d_model of the residual families
    std::int64_t layers = 1;
    FamilyOptions family;
  } model;
  struct Data {
    std::string source = "market";  // market | csv (required in a file)
    std::string market;             // market: the market config file (absolute once loaded)
    std::vector<std::string> path;  // csv: one CSV file per asset (absolute once loaded)
    std::int64_t window = 64;       // returns per window (the sequence length T)
    std::int64_t horizon = 1;       // next returns a window's label holds
    std::int64_t vol_horizon = 20;  // returns of the realized-volatility label
    // csv: the parts by time. Fractions of the bars (train + validation + test <= 1; the test part
    // ends at the last bar), or bar indices (train_end, validation_end: the first bar of the next
    // part) when train_end is given.
    struct Split {
      double train = 0.7, validation = 0.15, test = 0.15;
      std::int64_t train_end = -1, validation_end = -1;
    } split;
  } data;
  struct Task {
    std::string kind = "returns";  // returns | volatility | regime | direction | generate (diffusion; required in a file)
    std::string loss = "mse";      // returns: mse | quantile
    std::vector<double> quantiles{0.1, 0.5, 0.9};  // quantile loss: levels in (0, 1), increasing
  } task;
  struct Optim {
    double lr = 1e-3;
    double weight_decay = 0.01;  // AdamW's decoupled decay
    std::vector<double> betas{0.9, 0.999};
    double eps = 1e-8;
    std::int64_t warmup_steps = 100;  // linear warm-up from lr / warmup_steps to lr
    std::string decay = "cosine";     // cosine | linear | none: from lr to 0 over the steps after warm-up
    double grad_clip = 1.0;           // global gradient-norm clip (0: none)
    std::int64_t batch = 256;         // windows per step
    std::int64_t steps = 2000;        // training steps of the run (the schedule's length)
    std::string math = "fp32";        // fp32 | bf16 GEMMs (fp32 master weights and accumulation)
  } optim;
  struct Run {
    std::string name = "pretrain";
    std::uint64_t seed = 1;
    int device = 0;
    std::int64_t eval_every = 500;        // steps between validations (and one at the end)
    std::int64_t eval_windows = 8192;     // held-out windows per validation
    bool interpret = false;               // tft: what the model looks at, at each validation
    std::int64_t baseline_fit_samples = 65536;  // training windows the linear baseline is fitted on
    std::int64_t checkpoint_every = 0;    // steps between checkpoints (0: only at the end)
    std::int64_t keep = 5;                // newest checkpoints kept (0: all)
    std::int64_t log_every = 50;          // steps between training-statistics reports
    bool tensorboard = true, jsonl = true;
    std::string level = "info";  // trace | debug | info | warn | error
  } run;
};

// Parses and validates TOML text (`source` names it in messages); data.market and data.path are
// kept as written and not opened. Throws config::Error (a std::invalid_argument) listing every
// problem.
PretrainConfig parse_pretrain_config(const std::string& toml_text, const std::string& source = "config");
// Reads a file: parse_pretrain_config, then data.market / data.path resolved against the file's
// folder (stored absolute) and checked: a market that is missing, invalid or not simulated, CSV
// files that are missing, and a split whose parts hold no window are errors naming the key.
PretrainConfig load_pretrain_config(const std::filesystem::path& file);
// The whole configuration as TOML, defaults included (parse_pretrain_config(it) == c); keys
// without effect under the chosen options are comments.
std::string resolved_pretrain_toml(const PretrainConfig& c);
// Every key the reader accepts ("optim.lr"), every family's included, sorted (docs/configs.md's test).
std::vector<std::string> pretrain_config_keys();

// The market of data.source = "market" (load_market_config of data.market).
rl::MarketConfig pretrain_market(const PretrainConfig& c);

// The task's sizes. targets: the regression targets per window (returns: horizon x assets,
// volatility: assets; 0 for classification). outputs: the head's width (returns with the
// quantile loss: targets x quantiles; regime: the market's regimes; direction: assets).
struct TaskShape {
  std::int64_t targets = 0, outputs = 0, classes = 0;
};
TaskShape task_shape(const PretrainConfig& c, std::int64_t assets, std::int64_t regimes);

// CSV parts as bar indices of the data: [0, train_end), [train_end, validation_end),
// [validation_end, bars). std::invalid_argument naming [data.split] when a part cannot hold one
// window (window + max(horizon, vol_horizon) bars).
struct BarSplit {
  std::int64_t train_end = 0, validation_end = 0, bars = 0;
};
BarSplit resolve_split(const PretrainConfig& c, std::int64_t bars);
// The returns after the window that the task's label reads: label_horizon (returns: data.horizon;
// direction: 1) and label_vol_horizon (volatility: data.vol_horizon); 1 where the task reads none,
// the shortest a data source takes.
std::int64_t label_horizon(const PretrainConfig& c);
std::int64_t label_vol_horizon(const PretrainConfig& c);
// Returns one data window holds: data.window, and for a diffusion model its model.context before it.
std::int64_t sample_window(const PretrainConfig& c);
// Bars one window reads: its returns need sample_window + 1 closes, its label the next
// max(label_horizon, label_vol_horizon) returns.
std::int64_t bars_per_window(const PretrainConfig& c);

}  // namespace foxhunt::pretrain
