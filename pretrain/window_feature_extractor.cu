#include "pretrain/window_feature_extractor.hpp"

#include <stdexcept>
#include <string>

#include "gpu/check.hpp"
#include "gpu/gather.hpp"
#include "rl/envs/market_params.hpp"

namespace foxhunt::pretrain {
namespace {

std::size_t count(std::int64_t a, std::int64_t b, std::int64_t c = 1) { return static_cast<std::size_t>(a * b * c); }

// What ParameterArena::finalize allocates (params, grads, Adam m and v, the state array), known
// from the declarations alone.
std::size_t arena_bytes(const gpu::ParameterArena& a) {
  return static_cast<std::size_t>(4 * a.padded_count() + a.state_padded_count()) * sizeof(float);
}

}  // namespace

WindowFeatureExtractor::WindowFeatureExtractor(const FeatureSource& source, FeatureOutput output,
                                               const rl::MarketConfig& market, std::int64_t num_envs,
                                               std::int64_t max_train_rows, cudaStream_t stream)
    : output_(output), n_(num_envs) {
  FH_EXPECT(num_envs >= 1 && max_train_rows >= 1, "WindowFeatureExtractor: num_envs and max_train_rows must be >= 1");
  if (source.diffusion())
    throw std::invalid_argument("features.checkpoint: the model of " + source.dir.string() +
                                " is a diffusion model, not a sequence model (DiffusionFeatureExtractor)");
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
  window_ = market.window;
  hidden_ = source.embedding;
  obs_dim_ = rl::market_obs_dim(market);
  feature_col_ = window_ * assets_ + assets_ + 3;

  ModelSpec spec = source.model;
  spec.sequence_length = window_;  // the window form over the observation's own returns
  model_ = make_model(spec);
  FH_EXPECT(model_->out_features() == hidden_ && model_->in_features() == assets_,
            "WindowFeatureExtractor: the model of " + source.dir.string() + " is not (assets) -> (model.hidden)");
  models::DenseSpec hs;  // the pretrain trainer's head (pretrain/trainer.hpp)
  hs.name = "head";
  hs.in = hidden_;
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
                             ", window " + std::to_string(window_) + "): " + e.what());
  }
  // The head's gradients stay zero with output = "embedding" (its backward never runs): Adam then
  // leaves it unchanged.
  arena_.zero_grads(stream);
  act_ = make_buffers(n_);
  train_ = make_buffers(max_train_rows);
  d_features_ = gpu::DeviceBuffer<float>(count(max_train_rows, width_));
  d_last_ = gpu::DeviceBuffer<float>(count(max_train_rows, hidden_));
  d_sequence_ = gpu::DeviceBuffer<float>(count(max_train_rows, window_, hidden_));
  FH_CHECK(cudaStreamSynchronize(stream));
}

std::size_t WindowFeatureExtractor::bytes_for(const FeatureSource& source, FeatureOutput output,
                                              const rl::MarketConfig& market, std::int64_t num_envs,
                                              std::int64_t max_train_rows) {
  ModelSpec spec = source.model;
  spec.sequence_length = market.window;  // as the constructor's
  const auto model = make_model(spec);
  models::DenseSpec hs;
  hs.name = "head";
  hs.in = source.embedding;
  hs.out = source.head_outputs;
  hs.math = source.model.math;
  const models::Dense head(hs);
  gpu::ParameterArena arena;  // declarations only
  model->declare(arena);
  head.declare(arena);
  const std::int64_t T = market.window, A = market.assets, H = source.embedding, W = source.width(output);
  const auto buffers = [&](std::int64_t rows) {  // make_buffers(rows)
    std::size_t b = (count(rows, T, A) + count(rows, T, H) + count(rows, H)) * sizeof(float) +
                    model->workspace_bytes(rows, false);
    if (output == FeatureOutput::head) b += count(rows, W) * sizeof(float) + head.workspace_bytes(rows, false);
    return b;
  };
  const std::int64_t R = max_train_rows;
  return arena_bytes(arena) + buffers(num_envs) + buffers(R) +
         (count(R, W) + count(R, H) + count(R, T, H)) * sizeof(float);
}

std::size_t WindowFeatureExtractor::allocated_bytes() const {
  std::size_t bytes = arena_bytes(arena_) + d_features_.bytes() + d_last_.bytes() + d_sequence_.bytes();
  for (const Buffers* b : {&act_, &train_})
    bytes += b->input.bytes() + b->sequence.bytes() + b->last.bytes() + b->head_out.bytes() +
             b->model_ws.storage.bytes() + b->head_ws.storage.bytes();
  return bytes;
}

WindowFeatureExtractor::Buffers WindowFeatureExtractor::make_buffers(std::int64_t rows) const {
  Buffers b;
  b.rows = rows;
  b.input = gpu::DeviceBuffer<float>(count(rows, window_, assets_));
  b.sequence = gpu::DeviceBuffer<float>(count(rows, window_, hidden_));
  b.last = gpu::DeviceBuffer<float>(count(rows, hidden_));
  b.model_ws = models::OwnedWorkspace(*model_, rows);
  if (output_ == FeatureOutput::head) {
    b.head_out = gpu::DeviceBuffer<float>(count(rows, width_));
    b.head_ws = models::OwnedWorkspace(*head_, rows);
  }
  return b;
}

void WindowFeatureExtractor::forward(float* obs, std::int64_t rows, Buffers& b, gpu::BlasLane lane) {
  FH_EXPECT(rows >= 1 && rows <= b.rows, "WindowFeatureExtractor: rows out of range");
  const cudaStream_t s = lane.stream;
  gpu::gather_columns(b.input.data(), obs, rows, window_ * assets_, obs_dim_, 0, s);  // (B, T, A): oldest first
  model_->forward(b.sequence.data(), b.input.data(), rows, false, b.model_ws.view, lane);
  // last (B, H) = sequence[:, T - 1, :]: columns (T - 1) H .. T H of rows T H wide.
  gpu::gather_columns(b.last.data(), b.sequence.data(), rows, hidden_, window_ * hidden_, (window_ - 1) * hidden_, s);
  const float* out = b.last.data();
  if (output_ == FeatureOutput::head) {
    head_->forward(b.head_out.data(), b.last.data(), rows, false, b.head_ws.view, lane);
    out = b.head_out.data();
  }
  gpu::scatter_columns(obs, out, rows, width_, obs_dim_, feature_col_, s);
}

void WindowFeatureExtractor::step(float* obs, const std::uint8_t*, const std::uint8_t*, gpu::BlasLane lane) {
  forward(obs, n_, act_, lane);
}

void WindowFeatureExtractor::peek(float* obs, gpu::BlasLane lane) { forward(obs, n_, act_, lane); }

void WindowFeatureExtractor::train_forward(float* obs, std::int64_t rows, gpu::BlasLane lane) {
  forward(obs, rows, train_, lane);
}

void WindowFeatureExtractor::train_backward(const float* d_obs, std::int64_t rows, gpu::BlasLane lane) {
  FH_EXPECT(rows >= 1 && rows <= train_.rows, "WindowFeatureExtractor::train_backward: rows out of range");
  const cudaStream_t s = lane.stream;
  if (output_ == FeatureOutput::head) {
    gpu::gather_columns(d_features_.data(), d_obs, rows, width_, obs_dim_, feature_col_, s);
    head_->backward(d_last_.data(), d_features_.data(), train_.last.data(), rows, train_.head_ws.view, lane, nullptr);
  } else {
    gpu::gather_columns(d_last_.data(), d_obs, rows, width_, obs_dim_, feature_col_, s);
  }
  // The loss reads the last step only: the sequence's gradient is d_last there and zero elsewhere.
  gpu::expand_columns(d_sequence_.data(), d_last_.data(), rows, hidden_, window_ * hidden_, (window_ - 1) * hidden_, s);
  model_->backward(nullptr, d_sequence_.data(), train_.input.data(), rows, train_.model_ws.view, lane, nullptr);
}

}  // namespace foxhunt::pretrain
