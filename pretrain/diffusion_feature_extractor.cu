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

// The feature block's gradient (rows of d_obs, columns col .. col + width) -> d_eps_hat (N, D) =
// 2 (eps_hat - eps) / D * d score (score mode and both; zero for embedding alone, whose output
// layer then gets zero gradients) and, with the embedding, d_hidden (N, H) = its columns.
__global__ void feature_grad_kernel(float* __restrict__ d_eps_hat, float* __restrict__ d_hidden,
                                    const float* __restrict__ d_obs, const float* __restrict__ eps_hat,
                                    const float* __restrict__ eps, std::int64_t n, std::int64_t dim,
                                    std::int64_t hidden, std::int64_t width, bool with_embedding, bool with_score,
                                    std::int64_t obs_dim, std::int64_t col) {
  const float two_over_d = 2.f / static_cast<float>(dim);
  const std::int64_t total = n * dim;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / dim;
    d_eps_hat[e] = with_score ? two_over_d * (eps_hat[e] - eps[e]) * d_obs[i * obs_dim + col + width - 1] : 0.f;
  }
  if (!with_embedding) return;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n * hidden;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / hidden, k = e - i * hidden;
    d_hidden[e] = d_obs[i * obs_dim + col + k];
  }
}

std::size_t count(std::int64_t a, std::int64_t b = 1) { return static_cast<std::size_t>(a * b); }

// What ParameterArena::finalize allocates (params, grads, Adam m and v, the state array), known
// from the declarations alone.
std::size_t arena_bytes(const gpu::ParameterArena& a) {
  return static_cast<std::size_t>(4 * a.padded_count() + a.state_padded_count()) * sizeof(float);
}

}  // namespace

DiffusionFeatureExtractor::DiffusionFeatureExtractor(const FeatureSource& source, FeatureOutput output,
                                                     const rl::MarketConfig& market, std::int64_t num_envs,
                                                     std::int64_t max_train_rows, std::int64_t noise_step,
                                                     cudaStream_t stream)
    : output_(output), n_(num_envs) {
  FH_EXPECT(num_envs >= 1 && num_envs <= models::kMaxDiffusionBatch,
            "DiffusionFeatureExtractor: num_envs must be in [1, 2^24]");
  FH_EXPECT(max_train_rows >= 0 && max_train_rows <= models::kMaxDiffusionBatch,
            "DiffusionFeatureExtractor: max_train_rows must be in [0, 2^24]");
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
  const DiffusionTrainerSpec spec = diffusion_trainer_spec(source.config, assets);
  dim_ = spec.denoiser.dim;
  context_dim_ = spec.denoiser.context;
  hidden_ = spec.denoiser.hidden;
  FH_EXPECT(context_dim_ + dim_ == static_cast<std::int64_t>(market.window) * assets,
            "DiffusionFeatureExtractor: the model's window does not cover the observation's");
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

  // Gradients start zero: a learner may step the arena before its first train_backward.
  arena_.zero_grads(stream);
  counter_ = gpu::DeviceBuffer<std::uint64_t>(1);
  counter_.zero(stream);
  act_ = make_buffers(n_);
  if (max_train_rows > 0) {
    train_ = make_buffers(max_train_rows);
    d_eps_hat_ = gpu::DeviceBuffer<float>(count(max_train_rows, dim_));
    if (output_ != FeatureOutput::score) d_hidden_ = gpu::DeviceBuffer<float>(count(max_train_rows, hidden_));
  }
  FH_CHECK(cudaStreamSynchronize(stream));  // set-up: the weights and tables are in place
}

std::size_t DiffusionFeatureExtractor::bytes_for(const FeatureSource& source, FeatureOutput output,
                                                 const rl::MarketConfig& market, std::int64_t num_envs,
                                                 std::int64_t max_train_rows) {
  const DiffusionTrainerSpec spec = diffusion_trainer_spec(source.config, market.assets);  // as the constructor's
  const std::int64_t D = spec.denoiser.dim, Dc = spec.denoiser.context, H = spec.denoiser.hidden;
  const models::Denoiser denoiser(spec.denoiser);
  gpu::ParameterArena arena;  // declarations only
  denoiser.declare(arena);
  const auto buffers = [&](std::int64_t rows) {  // make_buffers(rows)
    return (4 * count(rows, D) + (Dc > 0 ? count(rows, Dc) : 0) + count(rows)) * sizeof(float) +
           count(rows) * sizeof(std::int32_t) + denoiser.workspace_bytes(rows);
  };
  const std::int64_t R = max_train_rows;
  std::size_t bytes = arena_bytes(arena) + count(4, spec.schedule.steps) * sizeof(float) /* (4, T) table */ +
                      sizeof(std::uint64_t) /* counter_ */ + buffers(num_envs);
  if (R > 0) bytes += buffers(R) + (count(R, D) + (output != FeatureOutput::score ? count(R, H) : 0)) * sizeof(float);
  return bytes;
}

std::size_t DiffusionFeatureExtractor::allocated_bytes() const {
  std::size_t bytes = arena_bytes(arena_) + count(4, schedule_->steps()) * sizeof(float) + counter_.bytes() +
                      d_eps_hat_.bytes() + d_hidden_.bytes();
  for (const Buffers* b : {&act_, &train_})
    bytes += b->x0.bytes() + b->ctx.bytes() + b->x_t.bytes() + b->eps.bytes() + b->eps_hat.bytes() +
             b->score.bytes() + b->t.bytes() + b->ws.bytes();
  return bytes;
}

DiffusionFeatureExtractor::Buffers DiffusionFeatureExtractor::make_buffers(std::int64_t rows) const {
  Buffers b;
  b.rows = rows;
  b.x0 = gpu::DeviceBuffer<float>(count(rows, dim_));
  if (context_dim_ > 0) b.ctx = gpu::DeviceBuffer<float>(count(rows, context_dim_));
  b.x_t = gpu::DeviceBuffer<float>(count(rows, dim_));
  b.eps = gpu::DeviceBuffer<float>(count(rows, dim_));
  b.eps_hat = gpu::DeviceBuffer<float>(count(rows, dim_));
  b.score = gpu::DeviceBuffer<float>(count(rows));
  b.t = gpu::DeviceBuffer<std::int32_t>(count(rows));
  b.ws = gpu::DeviceBuffer<std::byte>(denoiser_->workspace_bytes(rows));
  b.ws_view = models::Workspace{b.ws.data(), rows, false};
  return b;
}

void DiffusionFeatureExtractor::forward(float* obs, std::int64_t rows, Buffers& b, gpu::BlasLane lane) {
  FH_EXPECT(rows >= 1 && rows <= b.rows, "DiffusionFeatureExtractor: rows outside [1, the buffers' rows]");
  const cudaStream_t s = lane.stream;
  gather_window_kernel<<<gpu::grid_stride_blocks(rows * (context_dim_ + dim_)), gpu::kBlock, 0, s>>>(
      b.x0.data(), b.ctx.data(), obs, rows, dim_, context_dim_, obs_dim_);
  FH_CHECK_LAUNCH();
  models::diffusion_noising_shared_at(b.x_t.data(), b.eps.data(), b.t.data(), b.x0.data(), rows, dim_,
                                      schedule_->device(), noise_step_, kDiffusionFeatureSeed, counter_.data(), s);
  denoiser_->forward(b.eps_hat.data(), b.x_t.data(), context_dim_ > 0 ? b.ctx.data() : nullptr, b.t.data(), rows,
                     b.ws_view, lane);
  const bool with_score = output_ != FeatureOutput::embedding;
  if (with_score) models::row_mean_squared_error(b.score.data(), b.eps_hat.data(), b.eps.data(), rows, dim_, s);
  scatter_kernel<<<gpu::grid_stride_blocks(rows * width_), gpu::kBlock, 0, s>>>(
      obs, denoiser_->last_hidden(b.ws_view), b.score.data(), rows, hidden_, width_, output_ != FeatureOutput::score,
      obs_dim_, feature_col_);
  FH_CHECK_LAUNCH();
}

void DiffusionFeatureExtractor::peek(float* obs, gpu::BlasLane lane) { forward(obs, n_, act_, lane); }

void DiffusionFeatureExtractor::step(float* obs, const std::uint8_t*, const std::uint8_t*, gpu::BlasLane lane) {
  forward(obs, n_, act_, lane);  // a function of the row alone: nothing to reset or keep
}

TunedDiffusionFeatureExtractor::TunedDiffusionFeatureExtractor(const FeatureSource& source, FeatureOutput output,
                                                               const rl::MarketConfig& market, std::int64_t num_envs,
                                                               std::int64_t max_train_rows, std::int64_t noise_step,
                                                               cudaStream_t stream)
    : fx_(source, output, market, num_envs, max_train_rows, noise_step, stream) {
  FH_EXPECT(max_train_rows >= 1, "TunedDiffusionFeatureExtractor: max_train_rows must be >= 1");
}

void DiffusionFeatureExtractor::train_forward(float* obs, std::int64_t rows, gpu::BlasLane lane) {
  FH_EXPECT(train_.rows > 0, "DiffusionFeatureExtractor::train_forward: built frozen (max_train_rows = 0)");
  forward(obs, rows, train_, lane);
}

void DiffusionFeatureExtractor::train_backward(const float* d_obs, std::int64_t rows, gpu::BlasLane lane) {
  FH_EXPECT(rows >= 1 && rows <= train_.rows, "DiffusionFeatureExtractor::train_backward: rows out of range");
  const cudaStream_t s = lane.stream;
  const bool with_embedding = output_ != FeatureOutput::score;
  feature_grad_kernel<<<gpu::grid_stride_blocks(rows * dim_), gpu::kBlock, 0, s>>>(
      d_eps_hat_.data(), d_hidden_.data(), d_obs, train_.eps_hat.data(), train_.eps.data(), rows, dim_, hidden_,
      width_, with_embedding, output_ != FeatureOutput::embedding, obs_dim_, feature_col_);
  FH_CHECK_LAUNCH();
  denoiser_->backward(nullptr, nullptr, d_eps_hat_.data(), with_embedding ? d_hidden_.data() : nullptr, rows,
                      train_.ws_view, lane);
}

}  // namespace foxhunt::pretrain
