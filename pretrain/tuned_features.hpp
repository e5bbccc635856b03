#pragma once
// The trainable feature extractor of a `foxhunt pretrain` checkpoint ([features] mode =
// "finetune"): the window form of a sequence model (pretrain/window_feature_extractor.hpp) or the
// diffusion model's features of the return window (pretrain/diffusion_feature_extractor.hpp), by
// the source's model.kind. Every place that builds a fine-tuned extractor (the PPO learner and its
// acting copy, the DQN learner and collector, eval) builds it here.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpu/arena.hpp"
#include "pretrain/feature_source.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/obs_features.hpp"

namespace foxhunt::pretrain {

// For num_envs environments of `market` (its extra_features = source.width(output)) and up to
// max_train_rows (>= 1) rows of train_forward / train_backward; noise_step is the diffusion
// model's (features.noise_step), unread for the sequence families. Throws what the extractor's
// constructor throws. Synchronizes `stream`.
std::unique_ptr<rl::TrainableObsFeatures> make_tuned_features(const FeatureSource& source, FeatureOutput output,
                                                              const rl::MarketConfig& market, std::int64_t num_envs,
                                                              std::int64_t max_train_rows, std::int64_t noise_step,
                                                              cudaStream_t stream);

// The device bytes make_tuned_features allocates for these arguments (the extractor's bytes_for:
// parameters, gradients, Adam moments, acting and training buffers), computed on the host from the
// source's config: nothing is allocated, no device is needed.
std::size_t tuned_features_bytes(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                                 std::int64_t num_envs, std::int64_t max_train_rows);

// Declares into `arena` (host only, nothing allocated on the device) the parameters of the
// extractor make_tuned_features builds for `market`, under the same names: a checkpoint file of
// the fine-tuned extractor is checked against it.
void declare_tuned_parameters(const FeatureSource& source, const rl::MarketConfig& market, gpu::ParameterArena& arena);

}  // namespace foxhunt::pretrain
