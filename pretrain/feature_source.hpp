#pragma once
// FeatureSource: what a `foxhunt pretrain` checkpoint offers an agent as a feature extractor (the
// run config's [features], docs/configs.md), read on the host without a device: the checkpoint's
// resolved pretrain config, the model it describes (family, widths, the input layout: one step =
// one normalized return per asset; for a diffusion model one window of them) and the widths of its
// outputs. feature_input_problem checks
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
// A sequence model offers embedding and head, a diffusion model embedding, score and both.
enum class FeatureOutput : std::uint8_t {
  embedding,  // the model's features of the current step (B, F): F = the model's out_features()
              // (diffusion: the denoiser's last hidden state of the noised window, model.hidden)
  head,       // the task head on them (returns/volatility forecasts, regime or direction logits): task outputs
  score,      // diffusion: the window's anomaly score (its noise-prediction error at features.noise_step): 1
  both,       // diffusion: the embedding, then the score: model.hidden + 1
};
FeatureOutput parse_feature_output(const std::string& name);  // "embedding" | "head" | "score" | "both"
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
  std::int64_t diffusion_context = 0;  // diffusion: model.context, the conditioning returns before the window
  std::int64_t diffusion_steps = 0;    // diffusion: model.diffusion_steps, the schedule's T
  bool diffusion() const { return config.model.kind == "diffusion"; }
  // Columns of an output (one the model offers: feature_output_problem).
  std::int64_t width(FeatureOutput o) const {
    switch (o) {
      case FeatureOutput::embedding: return embedding;
      case FeatureOutput::head: return head_outputs;
      case FeatureOutput::score: return 1;
      case FeatureOutput::both: return embedding + 1;
    }
    return 0;
  }
};

// Reads a pretrain checkpoint directory: its config.resolved.toml (with the market it names) and
// the presence of model.safetensors. std::invalid_argument naming the directory and the file for
// anything missing or unreadable. The weights are read (and their shapes checked) at load.
FeatureSource load_feature_source(const std::filesystem::path& checkpoint_dir);

// Why the source's model cannot read the observations of `env_market` ("" when it can), naming
// both: the pretrain data must be a simulated market (data.source = "market") and the environment
// a simulated market too, with the same number of assets and the same return normalization
// (1 / (sigma_ref sqrt(dt)) per asset, so the model sees returns on the scale it trained on).
// A diffusion model (model.kind = "diffusion") reads the whole return window of the observation:
// market.window must equal its data.window + model.context (the conditioning returns first).
std::string feature_input_problem(const FeatureSource& source, const rl::MarketConfig& env_market);

// Why the source's model does not offer `output` ("" when it does): head is a sequence model's
// (its pretrain task head), score and both a diffusion model's.
std::string feature_output_problem(const FeatureSource& source, FeatureOutput output);

// Why `step` cannot be the diffusion model's noise step of the features ("" when it can: in
// [0, model.diffusion_steps)). Always "" for the sequence families, which do not read it.
std::string feature_noise_step_problem(const FeatureSource& source, std::int64_t step);

}  // namespace foxhunt::pretrain
