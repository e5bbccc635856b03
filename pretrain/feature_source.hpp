#pragma once
// FeatureSource: what a `foxhunt pretrain` checkpoint offers an agent as a feature extractor (the
// run config's [features], docs/configs.md), read on the host without a device: the checkpoint's
// resolved pretrain config, the model it describes (family, widths, the input layout: one step =
// one normalized return per asset) and the widths of its outputs. feature_input_problem checks
// that the model reads what a market observation holds (the same assets, the same return
// normalization), so a mismatch is refused before anything runs, naming both sides.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "pretrain/config.hpp"
#include "pretrain/model_factory.hpp"
#include "rl/envs/market_config.hpp"

namespace foxhunt::pretrain {

// Which output of the pretrained network fills the observation's feature block.
enum class FeatureOutput : std::uint8_t {
  embedding,  // the model's features of the current step (B, F): F = the model's out_features()
  head,       // the task head on them (returns/volatility forecasts, regime or direction logits): task outputs
};
FeatureOutput parse_feature_output(const std::string& name);  // "embedding" | "head"
const char* to_string(FeatureOutput o);

inline constexpr const char* kFeatureModelFile = "model.safetensors";
inline constexpr const char* kFeatureConfigFile = "config.resolved.toml";

struct FeatureSource {
  std::filesystem::path dir;  // the checkpoint directory (holds model.safetensors, config.resolved.toml)
  PretrainConfig config;      // its resolved config
  rl::MarketConfig market;    // data.source = "market": the market it trained on
  ModelSpec model;            // in = assets, sequence_length = data.window
  std::int64_t embedding = 0;  // the model's out_features()
  std::int64_t head_outputs = 0;
  std::int64_t width(FeatureOutput o) const { return o == FeatureOutput::embedding ? embedding : head_outputs; }
};

// Reads a pretrain checkpoint directory: its config.resolved.toml (with the market it names) and
// the presence of model.safetensors. std::invalid_argument naming the directory and the file for
// anything missing or unreadable. The weights are read (and their shapes checked) at load.
FeatureSource load_feature_source(const std::filesystem::path& checkpoint_dir);

// Why the source's model cannot read the observations of `env_market` ("" when it can), naming
// both: the pretrain data must be a simulated market (data.source = "market") and the environment
// a simulated market too, with the same number of assets and the same return normalization
// (1 / (sigma_ref sqrt(dt)) per asset, so the model sees returns on the scale it trained on).
std::string feature_input_problem(const FeatureSource& source, const rl::MarketConfig& env_market);

}  // namespace foxhunt::pretrain
