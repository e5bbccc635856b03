#pragma once
// WindowFeatureExtractor: a pretrained sequence model (a `foxhunt pretrain` checkpoint) as the
// trainable first module of an agent ([features] mode = "finetune"). The features of an
// observation row are the model's window form over the row's own return window: the
// (window, assets) returns at the front of the market observation (oldest first, exactly the
// model's (B, T, C) training input with T = market.window) run through the model from the zero
// state, and the output of the last step (embedding) or the pretrain head on it (head) goes into
// the row's extra feature block. A function of the row alone, so a learner recomputes it from the
// stored observations with the current weights and back-propagates its loss into the model
// (rl::TrainableObsFeatures); step() and peek() ignore the done masks.
//
// Parameters: the checkpoint's model and head in an arena of the extractor's own (gradients and
// Adam moments there), loaded at construction (model.safetensors, shapes checked). Two sets of
// buffers: num_envs rows for acting (step / peek) and max_train_rows rows for the learner's
// train_forward / train_backward, so acting never overwrites what a backward reads.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "models/dense.hpp"
#include "models/module.hpp"
#include "pretrain/feature_source.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/obs_features.hpp"

namespace foxhunt::pretrain {

class WindowFeatureExtractor final : public rl::TrainableObsFeatures {
 public:
  // As FeatureExtractor's (the same checks and messages), with the model's sequence length set to
  // market.window. Synchronizes `stream`.
  WindowFeatureExtractor(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                         std::int64_t num_envs, std::int64_t max_train_rows, cudaStream_t stream);

  // The device bytes the constructor allocates for these arguments, from the source's config and
  // the market alone (host only, nothing allocated): the arena's arrays, the acting and training
  // buffers and train_backward's gradients. actors/memory_estimate sizes a run with it;
  // allocated_bytes() is the constructed sum.
  static std::size_t bytes_for(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                               std::int64_t num_envs, std::int64_t max_train_rows);
  std::size_t allocated_bytes() const;

  std::int64_t num_envs() const override { return n_; }
  std::int64_t obs_dim() const override { return obs_dim_; }
  std::int64_t features() const override { return width_; }
  void step(float* obs, const std::uint8_t* terminated, const std::uint8_t* truncated, gpu::BlasLane lane) override;
  void peek(float* obs, gpu::BlasLane lane) override;

  std::int64_t max_train_rows() const override { return train_.rows; }
  gpu::ParameterArena& arena() override { return arena_; }
  void train_forward(float* obs, std::int64_t rows, gpu::BlasLane lane) override;
  void train_backward(const float* d_obs, std::int64_t rows, gpu::BlasLane lane) override;

  std::int64_t feature_column() const noexcept { return feature_col_; }
  std::int64_t window() const noexcept { return window_; }
  FeatureOutput output() const noexcept { return output_; }
  models::RecurrentModule& model() noexcept { return *model_; }
  models::Dense& head() noexcept { return *head_; }

 private:
  // The activations of up to `rows` rows.
  struct Buffers {
    std::int64_t rows = 0;
    gpu::DeviceBuffer<float> input, sequence, last, head_out;  // (B, T, A), (B, T, H), (B, H), (B, out)
    models::OwnedWorkspace model_ws, head_ws;
  };
  Buffers make_buffers(std::int64_t rows) const;
  void forward(float* obs, std::int64_t rows, Buffers& b, gpu::BlasLane lane);

  FeatureOutput output_;
  std::int64_t n_ = 0, obs_dim_ = 0, assets_ = 0, window_ = 0, hidden_ = 0, width_ = 0, feature_col_ = 0;
  std::unique_ptr<models::RecurrentModule> model_;
  std::unique_ptr<models::Dense> head_;
  gpu::ParameterArena arena_;
  Buffers act_, train_;
  gpu::DeviceBuffer<float> d_features_, d_last_, d_sequence_;  // train_backward's (rows, F), (rows, H), (rows, T, H)
};

}  // namespace foxhunt::pretrain
