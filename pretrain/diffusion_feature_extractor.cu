#include "pretrain/diffusion_feature_extractor.hpp"

#include <stdexcept>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "models/diffusion/noising.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "rl/envs/market_params.hpp"

namespace foxhunt::pretrain {
namespace {

// The front (Dc + D) columns of each obs row (its return window, oldest first) -> ctx (N, Dc), the
// first Dc of them, and x0 (N, D), the rest.
__global__ void gather_window_kernel(float* __restrict__ x0, float* __restrict__ ctx, const float* __restrict__ obs,
                                     std::int64_t n, std::int64_t dim, std::int64_t context_dim,
                                     std::int64_t obs_dim) {
  const std::int64_t row = context_dim + dim, total = n * row;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / row, j = e - i * row;
    const float v = obs[i * obs_dim + j];
    if (j < context_dim)
      ctx[i * context_dim + j] = v;
    else
      x0[i * dim + (j - context_dim)] = v;
  }
}

// obs[:, col .. col + width) <- [embedding (N, H) if with_embedding][score (N) if with_score].
__global__ void scatter_kernel(float* __restrict__ obs, const float* __restrict__ embedding,
                               const float* __restrict__ score, std::int64_t n, std::int64_t hidden,
                               std::int64_t width, bool with_embedding, std::int64_t obs_dim, std::int64_t col) {
  const std::int64_t total = n * width;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / width, k = e - i * width;
    obs[i * obs_dim + col + k] = with_embedding && k < hidden ? embedding[i * hidden + k] : score[i];
  }
}

std::size_t count(std::int64_t a, std::int64_t b = 1) { return static_cast<std::size_t>(a * b); }

}  // namespace

DiffusionFeatureExtractor::DiffusionFeatureExtractor(const FeatureSource& source, FeatureOutput output,
                                                     const rl::MarketConfig& market, std::int64_t num_envs,
                                                     std::int64_t noise_step, cudaStream_t stream)
    : output_(output), n_(num_envs) {
  FH_EXPECT(num_envs >= 1 && num_envs <= models::kMaxDiffusionBatch,
            "DiffusionFeatureExtractor: num_envs must be in [1, 2^24]");
  if (!source.diffusion())
    throw std::invalid_argument("features.checkpoint: the model of " + source.dir.string() + " is a " +
                                source.config.model.kind + " model, not a diffusion model");
  if (const std::string why = feature_input_problem(source, market); !why.empty())
    throw std::invalid_argument("features.checkpoint: " + why);
  if (const std::string why = feature_output_problem(source, output); !why.empty())
    throw std::invalid_argument("features.output: " + why);
  if (const std::string why = feature_noise_step_problem(source, noise_step); !why.empty())
    throw std::invalid_argument(why);
  width_ = source.width(output);
  if (market.extra_features != width_)
    throw std::invalid_argument("features.output = \"" + std::string(to_string(output)) + "\" of " +
                                source.dir.string() + " has " + std::to_string(width_) +
                                " columns, but the market's extra feature block has market.extra_features = " +
                                std::to_string(market.extra_features));
  noise_step_ = static_cast<std::int32_t>(noise_step);
  const std::int64_t assets = market.assets;
  obs_dim_ = rl::market_obs_dim(market);
  feature_col_ = static_cast<std::int64_t>(market.window) * assets + assets + 3;

  // The denoiser and schedule exactly as the trainer built them (names "model.<...>").
  DiffusionTrainerSpec spec = diffusion_trainer_spec(source.config, assets);
  dim_ = spec.window * assets;
  context_dim_ = spec.context * assets;
  hidden_ = spec.denoiser.hidden;
  FH_EXPECT(context_dim_ + dim_ == static_cast<std::int64_t>(market.window) * assets,
            "DiffusionFeatureExtractor: the model's window does not cover the observation's");
  spec.denoiser.dim = dim_;
  spec.denoiser.context = context_dim_;
  schedule_ = std::make_unique<models::NoiseSchedule>(spec.schedule, stream);
  denoiser_ = std::make_unique<models::Denoiser>(spec.denoiser);
  denoiser_->declare(arena_);
  arena_.finalize(stream);
  denoiser_->bind(arena_);
  const auto file = source.dir / kFeatureModelFile;
  try {
    arena_.load(file, stream);
  } catch (const std::exception& e) {
    throw std::runtime_error("features.checkpoint: " + file.string() + " does not fit its config's model (" +
                             source.config.model.kind + ", hidden " + std::to_string(source.config.model.hidden) +
                             "): " + e.what());
  }

  x0_ = gpu::DeviceBuffer<float>(count(n_, dim_));
  if (context_dim_ > 0) ctx_ = gpu::DeviceBuffer<float>(count(n_, context_dim_));
  x_t_ = gpu::DeviceBuffer<float>(count(n_, dim_));
  eps_ = gpu::DeviceBuffer<float>(count(n_, dim_));
  eps_hat_ = gpu::DeviceBuffer<float>(count(n_, dim_));
  score_ = gpu::DeviceBuffer<float>(count(n_));
  t_ = gpu::DeviceBuffer<std::int32_t>(count(n_));
  counter_ = gpu::DeviceBuffer<std::uint64_t>(1);
  counter_.zero(stream);
  ws_ = gpu::DeviceBuffer<std::byte>(denoiser_->workspace_bytes(n_));
  ws_view_ = models::Workspace{ws_.data(), n_, false};
  FH_CHECK(cudaStreamSynchronize(stream));  // set-up: the weights and tables are in place
}

void DiffusionFeatureExtractor::peek(float* obs, gpu::BlasLane lane) {
  const cudaStream_t s = lane.stream;
  gather_window_kernel<<<gpu::grid_stride_blocks(n_ * (context_dim_ + dim_)), gpu::kBlock, 0, s>>>(
      x0_.data(), ctx_.data(), obs, n_, dim_, context_dim_, obs_dim_);
  FH_CHECK_LAUNCH();
  models::diffusion_noising_shared_at(x_t_.data(), eps_.data(), t_.data(), x0_.data(), n_, dim_, schedule_->device(),
                                      noise_step_, kDiffusionFeatureSeed, counter_.data(), s);
  denoiser_->forward(eps_hat_.data(), x_t_.data(), context_dim_ > 0 ? ctx_.data() : nullptr, t_.data(), n_, ws_view_,
                     lane);
  const bool with_score = output_ != FeatureOutput::embedding;
  if (with_score) models::row_mean_squared_error(score_.data(), eps_hat_.data(), eps_.data(), n_, dim_, s);
  scatter_kernel<<<gpu::grid_stride_blocks(n_ * width_), gpu::kBlock, 0, s>>>(
      obs, denoiser_->last_hidden(ws_view_), score_.data(), n_, hidden_, width_, output_ != FeatureOutput::score,
      obs_dim_, feature_col_);
  FH_CHECK_LAUNCH();
}

void DiffusionFeatureExtractor::step(float* obs, const std::uint8_t*, const std::uint8_t*, gpu::BlasLane lane) {
  peek(obs, lane);  // a function of the row alone: nothing to reset or keep
}

}  // namespace foxhunt::pretrain
