#pragma once
// The frozen feature extractor of a `foxhunt pretrain` checkpoint ([features] mode = "frozen"):
// the per-step form of a sequence model (pretrain/feature_extractor.hpp) or the window form of a
// diffusion model (pretrain/diffusion_feature_extractor.hpp), by the source's model.kind. Every
// place that acts with frozen features (the PPO sync collector, the DQN collector, eval) builds it
// here.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "pretrain/feature_source.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/obs_features.hpp"

namespace foxhunt::pretrain {

// For num_envs environments of `market` (its extra_features = source.width(output)); noise_step
// is the diffusion model's (features.noise_step), unread for the sequence families. Throws what
// the extractor's constructor throws. Synchronizes `stream`.
std::unique_ptr<rl::ObsFeatures> make_frozen_features(const FeatureSource& source, FeatureOutput output,
                                                      const rl::MarketConfig& market, std::int64_t num_envs,
                                                      std::int64_t noise_step, cudaStream_t stream);

// The device bytes make_frozen_features allocates for these arguments (the extractor's bytes_for),
// computed on the host from the source's config: nothing is allocated, no device is needed.
std::size_t frozen_features_bytes(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                                  std::int64_t num_envs);

}  // namespace foxhunt::pretrain
