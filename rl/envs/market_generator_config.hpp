#pragma once
// The diffusion model a generated market (process.kind = "generated") samples its returns from: read
// from a `foxhunt pretrain` checkpoint ([model] kind = "diffusion", [task] kind = "generate") and held
// against the market. Plain C++ (the checkpoint's TOML files only; the weights are loaded by
// rl/envs/market_generator.hpp on the device).
//
// process.checkpoint names a checkpoint directory (holding model.safetensors and
// config.resolved.toml), a run directory (its checkpoints/latest) or a checkpoints folder (its
// latest). The model fits the market when: it is a diffusion model trained on simulated market
// windows (data.source = "market", its market.resolved.toml beside it) of as many assets as
// market.assets, conditioned on at most its window (model.context <= data.window: each window is
// conditioned on the end of the one before it), and its market's return normalization
// 1 / (sigma_ref sqrt(dt)) per asset equals this market's (process.sigma, market.dt) to 1e-6: the
// model samples normalized returns, the market turns them back into log returns with its own scale.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "rl/envs/market_config.hpp"

namespace foxhunt::rl {

inline constexpr int kMaxGeneratorSampleSteps = 4095;  // models::kMaxSampleSteps

struct GeneratorModel {
  std::filesystem::path checkpoint;  // the checkpoint directory
  std::filesystem::path weights;     // its model.safetensors
  std::int64_t assets = 0, window = 0;
  std::int64_t context = 0;  // returns of the conditioning window (model.context, <= window)
  std::int64_t hidden = 0, blocks = 0, expand = 0, embed = 0;
  std::int64_t diffusion_steps = 0;
  std::string schedule;  // "linear" | "cosine"
  double beta_start = 1e-4, beta_end = 0.02;
  std::string sampler;  // "ddpm" | "ddim", after the market's process.sampler
  std::int64_t sample_steps = 0;  // after process.sample_steps
  double eta = 0.0;               // after process.eta (ddim)
  bool bf16 = false;              // optim.math = "bf16"
  std::vector<double> ret_scale;  // (assets) the model's market's return normalization
};

// 1 / (sigma_ref sqrt(dt)) per asset, sigma_ref^2 the stationary mix of the regimes' sigma^2 (the
// observation's normalization of a gbm, ou or generated market; MarketParams::ret_scale in double).
std::vector<double> market_return_scale(const MarketConfig& market);

// The checkpoint directory `path` names (rules above); std::runtime_error saying why when none.
std::filesystem::path resolve_generator_checkpoint(const std::filesystem::path& path);

// Every problem of the market's model as (key, message), the checkpoint named; fills *model (when
// not null) as far as it could be read.
std::vector<std::pair<std::string, std::string>> generator_problems(const MarketConfig& market, GeneratorModel* model);

// The model of a generated market; ConfigError listing every problem.
GeneratorModel read_generator_checkpoint(const MarketConfig& market);

}  // namespace foxhunt::rl
