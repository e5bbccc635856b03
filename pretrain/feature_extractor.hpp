#pragma once
// FeatureExtractor: a pretrained sequence model (a `foxhunt pretrain` checkpoint) as a frozen
// feature extractor of the market observation (rl::ObsFeatures). Per environment it keeps the
// model's per-step state (models::RecurrentModule::step, one row per environment, reset by the
// episode-end mask), feeds it the observation's newest return per asset (the last `assets` columns
// of the return window: exactly the inputs the model trained on, one step of its (B, T, C) windows)
// and writes the chosen output into the observation's extra feature block:
//   embedding  the model's features of the step (F = model.hidden columns);
//   head       the task head on them (the forecasts, or the regime / direction logits).
// So the features of an observation t steps into an episode are the model's training form over
// the episode's returns r_0 .. r_t (r_0: the newest return of the episode's first observation),
// from the zero state (tft: over the last T of them, zeros in front: its state is a shift
// register of T inputs); the two agree by test (tests/pretrain/feature_extractor_test.cu).
//
// Parameters: the checkpoint's model and head in an arena of the extractor's own, loaded once
// (model.safetensors, every tensor's shape checked against the config's model) and never trained
// here (frozen). All work is device kernels and the model's own launches on the caller's lane:
// capturable, no host synchronization after construction.
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

class FeatureExtractor final : public rl::ObsFeatures {
 public:
  // For num_envs environments of `market`, whose extra_features must equal source.width(output)
  // (std::invalid_argument otherwise, as for an input the model cannot read:
  // feature_input_problem). Loads the weights (std::runtime_error naming the file when they do
  // not fit the config's model) and synchronizes `stream`.
  FeatureExtractor(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                   std::int64_t num_envs, cudaStream_t stream);

  // The device bytes the constructor allocates for these arguments, from the source's config alone
  // (host only, nothing allocated; the weights file is not read): the arena's arrays, the
  // per-environment state and its scratch copy, the step's input, output and workspaces, the done
  // masks. actors/memory_estimate sizes a run with it; allocated_bytes() is the constructed sum.
  static std::size_t bytes_for(const FeatureSource& source, FeatureOutput output, std::int64_t num_envs);
  std::size_t allocated_bytes() const;

  std::int64_t num_envs() const override { return n_; }
  std::int64_t obs_dim() const override { return obs_dim_; }
  std::int64_t features() const override { return width_; }
  void step(float* obs, const std::uint8_t* terminated, const std::uint8_t* truncated, gpu::BlasLane lane) override;
  void peek(float* obs, gpu::BlasLane lane) override;

  // The column of the first feature and of the newest return of asset 0 in an observation row.
  std::int64_t feature_column() const noexcept { return feature_col_; }
  std::int64_t newest_return_column() const noexcept { return newest_col_; }
  FeatureOutput output() const noexcept { return output_; }
  models::RecurrentModule& model() noexcept { return *model_; }
  models::Dense& head() noexcept { return *head_; }
  gpu::ParameterArena& arena() noexcept { return arena_; }
  // The per-environment state (num_envs, model().state_features()): part of a trainer's checkpoint.
  gpu::DeviceBuffer<float>& state() noexcept { return state_; }
  bool has_state() const override { return true; }
  float* state_data() override { return state_.data(); }
  std::size_t state_bytes() const override { return state_.bytes(); }

 private:
  // input_ <- the newest returns of obs; state <- step; obs's feature columns <- the output.
  void extract(float* obs, float* state, const std::uint8_t* reset, gpu::BlasLane lane);

  FeatureOutput output_;
  std::int64_t n_ = 0, obs_dim_ = 0, assets_ = 0, width_ = 0, newest_col_ = 0, feature_col_ = 0;
  std::unique_ptr<models::RecurrentModule> model_;
  std::unique_ptr<models::Dense> head_;
  gpu::ParameterArena arena_;
  gpu::DeviceBuffer<float> state_, scratch_state_, input_, embedding_, head_out_;
  gpu::DeviceBuffer<std::uint8_t> done_, all_;
  gpu::DeviceBuffer<std::byte> step_ws_;
  models::Workspace step_view_;
  models::OwnedWorkspace head_ws_;
};

}  // namespace foxhunt::pretrain
