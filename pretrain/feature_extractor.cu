#include "pretrain/feature_extractor.hpp"

#include <stdexcept>
#include <string>

#include "gpu/check.hpp"
#include "gpu/gather.hpp"
#include "gpu/launch.cuh"
#include "rl/envs/market_params.hpp"

namespace foxhunt::pretrain {
namespace {

__global__ void done_kernel(std::uint8_t* __restrict__ done, const std::uint8_t* __restrict__ terminated,
                            const std::uint8_t* __restrict__ truncated, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    done[i] = ((terminated != nullptr && terminated[i] != 0) || (truncated != nullptr && truncated[i] != 0)) ? 1 : 0;
}

std::size_t count(std::int64_t a, std::int64_t b) { return static_cast<std::size_t>(a * b); }

// What ParameterArena::finalize allocates (params, grads, Adam m and v, the state array), known
// from the declarations alone.
std::size_t arena_bytes(const gpu::ParameterArena& a) {
  return static_cast<std::size_t>(4 * a.padded_count() + a.state_padded_count()) * sizeof(float);
}

}  // namespace

FeatureExtractor::FeatureExtractor(const FeatureSource& source, FeatureOutput output, const rl::MarketConfig& market,
                                   std::int64_t num_envs, cudaStream_t stream)
    : output_(output), n_(num_envs) {
  FH_EXPECT(num_envs >= 1, "FeatureExtractor: num_envs must be >= 1");
  if (source.diffusion())
    throw std::invalid_argument("features.checkpoint: the model of " + source.dir.string() +
                                " is a diffusion model, not a sequence model (frozen: DiffusionFeatureExtractor)");
  if (const std::string why = feature_input_problem(source, market); !why.empty())
    throw std::invalid_argument("features.checkpoint: " + why);
  if (const std::string why = feature_output_problem(source, output); !why.empty())
    throw std::invalid_argument("features.output: " + why);
  width_ = source.width(output);
  if (market.extra_features != width_)
    throw std::invalid_argument("features.output = \"" + std::string(to_string(output)) + "\" of " +
                                source.dir.string() + " has " + std::to_string(width_) +
                                " columns, but the market's extra feature block has market.extra_features = " +
                                std::to_string(market.extra_features));
  assets_ = market.assets;
  obs_dim_ = rl::market_obs_dim(market);
  newest_col_ = static_cast<std::int64_t>(market.window - 1) * assets_;
  feature_col_ = static_cast<std::int64_t>(market.window) * assets_ + assets_ + 3;

  model_ = make_model(source.model);
  FH_EXPECT(model_->out_features() == source.embedding && model_->in_features() == assets_,
            "FeatureExtractor: the model of " + source.dir.string() + " is not (assets) -> (model.hidden)");
  models::DenseSpec hs;  // the pretrain trainer's head (pretrain/trainer.hpp)
  hs.name = "head";
  hs.in = source.embedding;
  hs.out = source.head_outputs;
  hs.math = source.model.math;
  head_ = std::make_unique<models::Dense>(hs);
  model_->declare(arena_);
  head_->declare(arena_);
  arena_.finalize(stream);
  model_->bind(arena_);
  head_->bind(arena_);
  const auto file = source.dir / kFeatureModelFile;
  try {
    arena_.load(file, stream);
  } catch (const std::exception& e) {
    throw std::runtime_error("features.checkpoint: " + file.string() + " does not fit its config's model (" +
                             source.config.model.kind + ", hidden " + std::to_string(source.config.model.hidden) +
                             "): " + e.what());
  }

  const std::int64_t S = model_->state_features();
  state_ = gpu::DeviceBuffer<float>(count(n_, S));
  scratch_state_ = gpu::DeviceBuffer<float>(count(n_, S));
  state_.zero(stream);
  scratch_state_.zero(stream);
  input_ = gpu::DeviceBuffer<float>(count(n_, assets_));
  embedding_ = gpu::DeviceBuffer<float>(count(n_, source.embedding));
  if (output_ == FeatureOutput::head) {
    head_out_ = gpu::DeviceBuffer<float>(count(n_, source.head_outputs));
    head_ws_ = models::OwnedWorkspace(*head_, n_);
  }
  done_ = gpu::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(n_));
  all_ = gpu::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(n_));
  FH_CHECK(cudaMemsetAsync(all_.data(), 1, all_.bytes(), stream));
  done_.zero(stream);
  step_ws_ = gpu::DeviceBuffer<std::byte>(model_->step_workspace_bytes(n_));
  step_view_ = models::Workspace{step_ws_.data(), n_, false};
  FH_CHECK(cudaStreamSynchronize(stream));
}

std::size_t FeatureExtractor::bytes_for(const FeatureSource& source, FeatureOutput output, std::int64_t num_envs) {
  const auto model = make_model(source.model);
  models::DenseSpec hs;  // as the constructor's
  hs.name = "head";
  hs.in = source.embedding;
  hs.out = source.head_outputs;
  hs.math = source.model.math;
  const models::Dense head(hs);
  gpu::ParameterArena arena;  // declarations only
  model->declare(arena);
  head.declare(arena);
  const std::int64_t n = num_envs;
  std::size_t bytes = arena_bytes(arena) +
                      (2 * count(n, model->state_features()) + count(n, source.model.in) + count(n, source.embedding)) *
                          sizeof(float) +
                      2 * count(n, 1) /* done_, all_ */ + model->step_workspace_bytes(n);
  if (output == FeatureOutput::head) bytes += count(n, source.head_outputs) * sizeof(float) + head.workspace_bytes(n, false);
  return bytes;
}

std::size_t FeatureExtractor::allocated_bytes() const {
  return arena_bytes(arena_) + state_.bytes() + scratch_state_.bytes() + input_.bytes() + embedding_.bytes() +
         head_out_.bytes() + head_ws_.storage.bytes() + done_.bytes() + all_.bytes() + step_ws_.bytes();
}

void FeatureExtractor::extract(float* obs, float* state, const std::uint8_t* reset, gpu::BlasLane lane) {
  const cudaStream_t s = lane.stream;
  gpu::gather_columns(input_.data(), obs, n_, assets_, obs_dim_, newest_col_, s);  // the newest return of each asset
  model_->step(embedding_.data(), state, input_.data(), reset, n_, step_view_, lane);
  const float* out = embedding_.data();
  if (output_ == FeatureOutput::head) {
    head_->forward(head_out_.data(), embedding_.data(), n_, true, head_ws_.view, lane);
    out = head_out_.data();
  }
  gpu::scatter_columns(obs, out, n_, width_, obs_dim_, feature_col_, s);
}

void FeatureExtractor::step(float* obs, const std::uint8_t* terminated, const std::uint8_t* truncated,
                            gpu::BlasLane lane) {
  const std::uint8_t* reset = all_.data();
  if (terminated != nullptr || truncated != nullptr) {
    done_kernel<<<gpu::grid_stride_blocks(n_), gpu::kBlock, 0, lane.stream>>>(done_.data(), terminated, truncated, n_);
    FH_CHECK_LAUNCH();
    reset = done_.data();
  }
  extract(obs, state_.data(), reset, lane);
}

void FeatureExtractor::peek(float* obs, gpu::BlasLane lane) {
  if (state_.bytes() > 0)
    FH_CHECK(cudaMemcpyAsync(scratch_state_.data(), state_.data(), state_.bytes(), cudaMemcpyDeviceToDevice,
                             lane.stream));
  extract(obs, scratch_state_.data(), nullptr, lane);
}

}  // namespace foxhunt::pretrain
