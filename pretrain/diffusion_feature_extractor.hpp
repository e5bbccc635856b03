#pragma once
// DiffusionFeatureExtractor: a diffusion model (a `foxhunt pretrain` checkpoint with [model] kind =
// "diffusion", models/diffusion) as a frozen feature extractor of the market observation
// (rl::ObsFeatures). The features of a row are a function of the row's return window alone:
//   x   = the (market.window, assets) returns at the front of the row (oldest first, assets
//         interleaved): ctx = its first model.context returns, x0 = the data.window after them
//         (market.window = context + window: exactly a window the model trained on);
//   x_t = sqrt(ab_s) x0 + sqrt(1 - ab_s) eps at the fixed step s = features.noise_step, eps the
//         draws of row 0 of (kDiffusionFeatureSeed, counter 0) for every row
//         (models::diffusion_noising_shared_at);
//   embedding = the denoiser's last hidden state on (x_t, ctx, s) (model.hidden columns),
//   score     = 1/D sum_j (eps_hat_j - eps_j)^2, the noise-prediction error (1 column; large for a
//               window unlike the model's market: an anomaly score),
// written into the row's extra feature block (embedding, score, or both: the embedding then the
// score). The same as DiffusionTrainer::features(..., shared_noise = true) on the same windows with
// the same seed, counter and step (tests/pretrain/diffusion_feature_extractor_test.cu).
// Stateless: step() and peek() ignore the done masks and compute the same thing.
//
// Parameters: the checkpoint's denoiser in an arena of the extractor's own (gradients and Adam
// moments there), loaded once (model.safetensors, every tensor's shape checked). Frozen
// ([features] mode = "frozen", max_train_rows = 0) nothing trains them; fine-tuned ("finetune":
// TunedDiffusionFeatureExtractor below, the rl::TrainableObsFeatures face of the same extractor, so
// a frozen one is never taken for a trainable one) a learner recomputes the features of its stored
// observations with train_forward and back-propagates its loss through them with train_backward:
//   d eps_hat = 2 (eps_hat - eps) / D * d score,   d h_L = out'(d eps_hat) + d embedding,
// then the denoiser's backward from h_L (the noise and the window get no gradient). Two sets of
// buffers, num_envs rows for acting and max_train_rows rows for the learner, so acting never
// overwrites what a backward reads. All work is device kernels on the caller's lane: capturable,
// no host synchronization after construction.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "models/diffusion/denoiser.hpp"
#include "models/diffusion/schedule.hpp"
#include "pretrain/feature_source.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/obs_features.hpp"

namespace foxhunt::pretrain {

// The Philox seed of the features' noise (with counter 0): fixed, so a window's features are a
// function of the window, the model and the step.
inline constexpr std::uint64_t kDiffusionFeatureSeed = 0x0D1FF05E;

class DiffusionFeatureExtractor final : public rl::ObsFeatures {
 public:
  // For num_envs environments of `market`, whose extra_features must equal source.width(output),
  // and up to max_train_rows rows of train_forward / train_backward (0: frozen, no training
  // buffers); std::invalid_argument for what the model cannot read (feature_input_problem), an
  // output it does not offer (feature_output_problem) or a noise step outside its schedule;
  // std::runtime_error naming the file when the weights do not fit the config's denoiser.
  // Synchronizes `stream`.
  DiffusionFeatureExtractor(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                            std::int64_t num_envs, std::int64_t max_train_rows, std::int64_t noise_step,
                            cudaStream_t stream);
  // Frozen: max_train_rows = 0.
  DiffusionFeatureExtractor(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                            std::int64_t num_envs, std::int64_t noise_step, cudaStream_t stream)
      : DiffusionFeatureExtractor(source, output, market, num_envs, 0, noise_step, stream) {}

  // The device bytes the constructor allocates for these arguments, from the source's config and
  // the market alone (host only, nothing allocated): the arena's arrays, the schedule's table, the
  // noise counter, the acting and (max_train_rows > 0) training buffers and train_backward's
  // gradients. actors/memory_estimate sizes a run with it; allocated_bytes() is the constructed sum.
  static std::size_t bytes_for(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                               std::int64_t num_envs, std::int64_t max_train_rows);
  std::size_t allocated_bytes() const;

  std::int64_t num_envs() const override { return n_; }
  std::int64_t obs_dim() const override { return obs_dim_; }
  std::int64_t features() const override { return width_; }
  void step(float* obs, const std::uint8_t* terminated, const std::uint8_t* truncated, gpu::BlasLane lane) override;
  void peek(float* obs, gpu::BlasLane lane) override;

  // rl::TrainableObsFeatures' contract (TunedDiffusionFeatureExtractor exposes them).
  std::int64_t max_train_rows() const noexcept { return train_.rows; }
  gpu::ParameterArena& arena() noexcept { return arena_; }
  void train_forward(float* obs, std::int64_t rows, gpu::BlasLane lane);
  void train_backward(const float* d_obs, std::int64_t rows, gpu::BlasLane lane);

  std::int64_t feature_column() const noexcept { return feature_col_; }
  std::int64_t noise_step() const noexcept { return noise_step_; }
  FeatureOutput output() const noexcept { return output_; }
  models::Denoiser& denoiser() noexcept { return *denoiser_; }
  // The device counter (0) the noise is drawn with: DiffusionTrainer::features' counter argument.
  const std::uint64_t* noise_counter() const noexcept { return counter_.data(); }

 private:
  // The activations of up to `rows` rows.
  struct Buffers {
    std::int64_t rows = 0;
    gpu::DeviceBuffer<float> x0, ctx, x_t, eps, eps_hat, score;  // (B, D), (B, Dc), (B, D) x 3, (B)
    gpu::DeviceBuffer<std::int32_t> t;
    gpu::DeviceBuffer<std::byte> ws;
    models::Workspace ws_view;
  };
  Buffers make_buffers(std::int64_t rows) const;
  void forward(float* obs, std::int64_t rows, Buffers& b, gpu::BlasLane lane);

  FeatureOutput output_;
  std::int64_t n_ = 0, obs_dim_ = 0, dim_ = 0, context_dim_ = 0, hidden_ = 0, width_ = 0, feature_col_ = 0;
  std::int32_t noise_step_ = 0;
  std::unique_ptr<models::NoiseSchedule> schedule_;
  std::unique_ptr<models::Denoiser> denoiser_;
  gpu::ParameterArena arena_;
  gpu::DeviceBuffer<std::uint64_t> counter_;
  Buffers act_, train_;
  gpu::DeviceBuffer<float> d_eps_hat_, d_hidden_;  // train_backward's (rows, D), (rows, H)
};

// The fine-tuned diffusion extractor ([features] mode = "finetune"): a DiffusionFeatureExtractor
// with max_train_rows >= 1 rows of training buffers, as an rl::TrainableObsFeatures.
class TunedDiffusionFeatureExtractor final : public rl::TrainableObsFeatures {
 public:
  TunedDiffusionFeatureExtractor(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                                 std::int64_t num_envs, std::int64_t max_train_rows, std::int64_t noise_step,
                                 cudaStream_t stream);

  std::int64_t num_envs() const override { return fx_.num_envs(); }
  std::int64_t obs_dim() const override { return fx_.obs_dim(); }
  std::int64_t features() const override { return fx_.features(); }
  void step(float* obs, const std::uint8_t* terminated, const std::uint8_t* truncated, gpu::BlasLane lane) override {
    fx_.step(obs, terminated, truncated, lane);
  }
  void peek(float* obs, gpu::BlasLane lane) override { fx_.peek(obs, lane); }

  std::int64_t max_train_rows() const override { return fx_.max_train_rows(); }
  gpu::ParameterArena& arena() override { return fx_.arena(); }
  void train_forward(float* obs, std::int64_t rows, gpu::BlasLane lane) override { fx_.train_forward(obs, rows, lane); }
  void train_backward(const float* d_obs, std::int64_t rows, gpu::BlasLane lane) override {
    fx_.train_backward(d_obs, rows, lane);
  }

  DiffusionFeatureExtractor& extractor() noexcept { return fx_; }

 private:
  DiffusionFeatureExtractor fx_;
};

}  // namespace foxhunt::pretrain
