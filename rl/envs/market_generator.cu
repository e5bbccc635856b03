#include "rl/envs/market_generator.hpp"

#include <vector>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::rl {
namespace {

static_assert(kMaxGeneratorSampleSteps == models::kMaxSampleSteps, "process.sample_steps' bound is the sampler's");

constexpr std::size_t kBlasWorkspace = 4u << 20;

// Before step k = *step: the samples x (B, D) of group g = k mod W become chunk k / W + 1 of
// environments gB + r, in the half of their pair that is not being read.
__global__ void refill_kernel(float* returns, const float* x, const std::uint64_t* step, std::int64_t n,
                              std::int64_t group, std::int64_t window, std::int64_t assets) {
  const std::uint64_t k = *step;
  const std::int64_t d = window * assets;
  const auto w = static_cast<std::uint64_t>(window);
  const std::int64_t g = static_cast<std::int64_t>(k % w);
  const std::int64_t half = static_cast<std::int64_t>((k / w + 1) % 2);
  const std::int64_t total = group * d;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / d, j = e - r * d;
    const std::int64_t i = g * group + r;
    if (i < n) returns[i * 2 * d + half * d + j] = x[e];
  }
}

// Reset: the samples x (B, D) of group g into rows gB + r of dst, at [row * stride + offset + j].
__global__ void scatter_kernel(float* dst, std::int64_t stride, std::int64_t offset, const float* x, std::int64_t g,
                               std::int64_t n, std::int64_t group, std::int64_t d) {
  const std::int64_t total = group * d;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / d, j = e - r * d;
    const std::int64_t i = g * group + r;
    if (i < n) dst[i * stride + offset + j] = x[e];
  }
}

// Before step k = *step: the context of group g = k mod W's next chunk, the last C returns of its
// chunk k / W (in the half being read), (B, C x assets).
__global__ void refill_context_kernel(float* ctx, const float* returns, const std::uint64_t* step, std::int64_t n,
                                      std::int64_t group, std::int64_t window, std::int64_t context,
                                      std::int64_t assets) {
  const std::uint64_t k = *step;
  const std::int64_t d = window * assets, dc = context * assets;
  const auto w = static_cast<std::uint64_t>(window);
  const std::int64_t g = static_cast<std::int64_t>(k % w);
  const std::int64_t half = static_cast<std::int64_t>((k / w) % 2);
  const std::int64_t total = group * dc;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / dc, j = e - r * dc;
    const std::int64_t i = g * group + r;
    ctx[e] = i < n ? returns[i * 2 * d + half * d + (d - dc) + j] : 0.0f;
  }
}

// Reset: ctx (B, width) of group g from rows gB + r of src at [row * stride + offset + j]; zeros for
// offset < 0 (the first history window) and rows past the last environment.
__global__ void gather_kernel(float* ctx, const float* src, std::int64_t stride, std::int64_t offset, std::int64_t g,
                              std::int64_t n, std::int64_t group, std::int64_t width) {
  const std::int64_t total = group * width;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / width, j = e - r * width;
    const std::int64_t i = g * group + r;
    ctx[e] = i < n && offset >= 0 ? src[i * stride + offset + j] : 0.0f;
  }
}

__global__ void advance_kernel(std::uint64_t* step) { *step += 1; }

std::size_t count(std::int64_t a, std::int64_t b = 1, std::int64_t c = 1) { return static_cast<std::size_t>(a * b * c); }

}  // namespace

MarketGenerator::MarketGenerator(const GeneratorModel& model, std::int64_t num_envs, int market_window,
                                 cudaStream_t stream)
    : model_(model),
      n_(num_envs),
      window_(model.window),
      assets_(model.assets),
      dim_(model.window * model.assets),
      context_(model.context),
      group_((num_envs + model.window - 1) / model.window),
      market_window_(market_window),
      history_((market_window + model.window - 1) / model.window + (model.context > 0 ? 1 : 0)) {
  FH_EXPECT(num_envs >= 1 && window_ >= 1 && assets_ >= 1 && market_window >= 1,
            "MarketGenerator: num_envs, the model's window and assets and the market window must be >= 1");
  FH_EXPECT(context_ >= 0 && context_ <= window_, "MarketGenerator: the model's context must be in [0, its window]");
  FH_EXPECT(group_ < (std::int64_t{1} << 24), "MarketGenerator: num_envs / the model's window must be < 2^24 (the sampler's rows)");
  FH_CHECK(cublasLtCreate(&lt_));
  blas_workspace_ = gpu::DeviceBuffer<std::byte>(kBlasWorkspace);

  models::ScheduleSpec schedule;
  schedule.kind = models::parse_schedule_kind(model.schedule);
  schedule.steps = model.diffusion_steps;
  schedule.beta_start = model.beta_start;
  schedule.beta_end = model.beta_end;
  models::SamplerSpec sampler;
  sampler.kind = models::parse_sampler_kind(model.sampler);
  sampler.steps = model.sample_steps;
  sampler.eta = model.eta;
  models::DenoiserSpec den;
  den.name = "model";  // the names DiffusionTrainer saves under
  den.dim = dim_;
  den.context = context_ * assets_;
  den.hidden = model.hidden;
  den.blocks = model.blocks;
  den.expand = model.expand;
  den.embed = model.embed;
  den.math = model.bf16 ? gpu::LinearMath::bf16 : gpu::LinearMath::fp32;

  schedule_ = std::make_unique<models::NoiseSchedule>(schedule, stream);
  denoiser_ = std::make_unique<models::Denoiser>(den);
  sampler_ = std::make_unique<models::DiffusionSampler>(schedule_->host(), sampler, group_, dim_);
  denoiser_->declare(arena_);
  arena_.finalize(stream);
  denoiser_->bind(arena_);
  try {
    arena_.load(model.weights, stream);
  } catch (const std::exception& e) {
    throw ConfigError("process.checkpoint: the weights of " + model.checkpoint.string() +
                      " do not fit the model its config.resolved.toml describes: " + e.what());
  }
  denoiser_ws_ = gpu::DeviceBuffer<std::byte>(denoiser_->workspace_bytes(group_));
  x_ = gpu::DeviceBuffer<float>(count(group_, dim_));
  if (context_ > 0) ctx_ = gpu::DeviceBuffer<float>(count(group_, context_, assets_));
  history_buf_ = gpu::DeviceBuffer<float>(count(n_, history_ * window_, assets_));
  returns_ = gpu::DeviceBuffer<float>(count(n_, 2 * window_, assets_));
  step_ = gpu::DeviceBuffer<std::uint64_t>(1);
  std::vector<std::uint64_t> counters(count(history_ + 1, window_));
  for (std::size_t c = 0; c < counters.size(); ++c) counters[c] = kGeneratorResetCounter | c;
  reset_counters_ = gpu::DeviceBuffer<std::uint64_t>(counters.size());
  reset_counters_.upload(std::span<const std::uint64_t>(counters), stream);
  step_.zero(stream);
  returns_.zero(stream);
  FH_CHECK(cudaStreamSynchronize(stream));  // set-up: the host vector dies here
}

MarketGenerator::~MarketGenerator() {
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

void MarketGenerator::sample(float* x, const float* ctx, std::int64_t batch, std::uint64_t seed,
                             const std::uint64_t* counter, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && batch <= group_, "MarketGenerator::sample: batch outside [1, group size]");
  FH_EXPECT(context_ == 0 || ctx != nullptr, "MarketGenerator::sample: a conditioned model samples with a context");
  const models::Workspace ws{denoiser_ws_.data(), group_, false};
  const gpu::BlasLane lane{stream, lt_, blas_workspace_.data(), blas_workspace_.bytes()};
  const float* c = context_ > 0 ? ctx : nullptr;
  const models::EpsilonFn eps_fn = [this, ws, lane, c](float* eps, const float* xt, const std::int32_t* t,
                                                       std::int64_t b, cudaStream_t s) {
    gpu::BlasLane l = lane;
    l.stream = s;
    denoiser_->forward(eps, xt, c, t, b, ws, l);
  };
  sampler_->sample(x, eps_fn, batch, seed, counter, stream);
}

void MarketGenerator::reset(float* ring, std::uint64_t seed, cudaStream_t stream) {
  const std::int64_t d = dim_, hw = history_ * window_, dc = context_ * assets_;
  const int blocks = gpu::grid_stride_blocks(group_ * d);
  for (std::int64_t j = 0; j <= history_; ++j) {
    for (std::int64_t g = 0; g < window_; ++g) {
      if (g * group_ >= n_) break;  // the groups past the last environment are empty
      if (context_ > 0) {  // window j given the end of window j - 1 (zeros before the first)
        gather_kernel<<<gpu::grid_stride_blocks(group_ * dc), gpu::kBlock, 0, stream>>>(
            ctx_.data(), history_buf_.data(), hw * assets_, j * d - dc, g, n_, group_, dc);
        FH_CHECK_LAUNCH();
      }
      sample(x_.data(), ctx_.data(), group_, seed, reset_counters_.data() + j * window_ + g, stream);
      if (j < history_)
        scatter_kernel<<<blocks, gpu::kBlock, 0, stream>>>(history_buf_.data(), hw * assets_, j * d, x_.data(), g, n_,
                                                           group_, d);
      else
        scatter_kernel<<<blocks, gpu::kBlock, 0, stream>>>(returns_.data(), 2 * d, 0, x_.data(), g, n_, group_, d);
      FH_CHECK_LAUNCH();
    }
  }
  // The ring: the last market-window returns of the history, oldest first.
  const std::size_t row = count(market_window_, assets_) * sizeof(float);
  FH_CHECK(cudaMemcpy2DAsync(ring, row, history_buf_.data() + (hw - market_window_) * assets_,
                             count(hw, assets_) * sizeof(float), row, count(n_), cudaMemcpyDeviceToDevice, stream));
  step_.zero(stream);
}

void MarketGenerator::refill(std::uint64_t seed, cudaStream_t stream) {
  if (context_ > 0) {
    refill_context_kernel<<<gpu::grid_stride_blocks(group_ * context_ * assets_), gpu::kBlock, 0, stream>>>(
        ctx_.data(), returns_.data(), step_.data(), n_, group_, window_, context_, assets_);
    FH_CHECK_LAUNCH();
  }
  sample(x_.data(), ctx_.data(), group_, seed, step_.data(), stream);
  refill_kernel<<<gpu::grid_stride_blocks(group_ * dim_), gpu::kBlock, 0, stream>>>(
      returns_.data(), x_.data(), step_.data(), n_, group_, window_, assets_);
  FH_CHECK_LAUNCH();
}

void MarketGenerator::advance(cudaStream_t stream) {
  advance_kernel<<<1, 1, 0, stream>>>(step_.data());
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
