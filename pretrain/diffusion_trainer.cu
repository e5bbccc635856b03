#include "pretrain/diffusion_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "gpu/check.hpp"
#include "gpu/grad_norm.hpp"
#include "gpu/launch.cuh"
#include "models/diffusion/noising.hpp"
#include "pretrain/step_kernels.hpp"

namespace foxhunt::pretrain {
namespace {

// The shared step kernels (pretrain/step_kernels.hpp) index the counters by this layout.
static_assert(DiffusionTrainer::kStep == kStepIndex && DiffusionTrainer::kDataCounter == kDataIndex &&
              DiffusionTrainer::kEvalCounter == kEvalIndex && DiffusionTrainer::kWindowStart == kWindowStartIndex &&
              DiffusionTrainer::kCounterCount == kStepCounterCount);

using C = DiffusionTrainer::Counter;

// A validation batch of n windows: the loss weighted by its windows, the counter advanced.
__global__ void eval_accumulate_kernel(double* sums, std::uint64_t* counters, const float* loss, std::int64_t n) {
  sums[0] += static_cast<double>(*loss) * static_cast<double>(n);
  sums[1] += static_cast<double>(n);
  counters[C::kEvalCounter] += 1;
}

__global__ void eval_finish_kernel(EvalMetrics* out, const double* sums) {
  EvalMetrics m;
  const double nan_v = nan("");
  m.loss = sums[1] > 0 ? sums[0] / sums[1] : nan_v;
  m.mse = m.loss;
  m.r2 = m.pinball = m.accuracy = m.baseline_r2 = m.baseline_accuracy = nan_v;
  m.windows = static_cast<std::uint64_t>(sums[1]);
  *out = m;
}

std::size_t n_of(std::int64_t a, std::int64_t b = 1, std::int64_t c = 1) { return static_cast<std::size_t>(a * b * c); }

}  // namespace

DiffusionTrainerSpec diffusion_trainer_spec(const PretrainConfig& c, std::int64_t assets) {
  const FamilyOptions& f = c.model.family;
  DiffusionTrainerSpec t;
  t.denoiser.name = "model";
  t.denoiser.hidden = c.model.hidden;
  t.denoiser.blocks = c.model.layers;
  t.denoiser.expand = f.integers.at("expand");
  t.denoiser.embed = f.integers.at("embed");
  t.denoiser.math = c.optim.math == "bf16" ? gpu::LinearMath::bf16 : gpu::LinearMath::fp32;
  t.schedule.kind = models::parse_schedule_kind(f.choices.at("schedule"));
  t.schedule.steps = f.integers.at("diffusion_steps");
  const auto number = [&](const char* key, double fallback) {
    const auto it = f.numbers.find(key);
    return it == f.numbers.end() ? fallback : it->second;
  };
  t.schedule.beta_start = number("beta_start", t.schedule.beta_start);  // linear only
  t.schedule.beta_end = number("beta_end", t.schedule.beta_end);
  t.sampler.kind = models::parse_sampler_kind(f.choices.at("sampler"));
  t.sampler.steps = f.integers.at("sample_steps");
  t.sampler.eta = number("eta", 0.0);  // ddim only
  t.optim.lr = static_cast<float>(c.optim.lr);
  t.optim.weight_decay = static_cast<float>(c.optim.weight_decay);
  t.optim.beta1 = static_cast<float>(c.optim.betas[0]);
  t.optim.beta2 = static_cast<float>(c.optim.betas[1]);
  t.optim.eps = static_cast<float>(c.optim.eps);
  t.optim.warmup_steps = c.optim.warmup_steps;
  t.optim.decay = parse_decay(c.optim.decay);
  t.optim.grad_clip = static_cast<float>(c.optim.grad_clip);
  t.optim.steps = c.optim.steps;
  t.window = c.data.window;
  t.context = f.integers.at("context");
  t.assets = assets;
  t.denoiser.dim = t.window * assets;  // what the trainer sets from them (a model's checkpoint shapes)
  t.denoiser.context = t.context * assets;
  t.batch = c.optim.batch;
  t.seed = c.run.seed;
  return t;
}

DiffusionTrainer::DiffusionTrainer(DiffusionTrainerSpec spec, GenerateFn train_data, gpu::BlasLane lane)
    : spec_(std::move(spec)), train_data_(std::move(train_data)), lane_(lane) {
  FH_EXPECT(spec_.batch >= 1, "DiffusionTrainer: batch must be >= 1");
  FH_EXPECT(spec_.assets >= 1 && spec_.window >= 1 && spec_.context >= 0,
            "DiffusionTrainer: assets and window must be >= 1, context >= 0");
  FH_EXPECT(spec_.optim.steps >= 1, "DiffusionTrainer: optim.steps must be >= 1");
  FH_EXPECT(static_cast<bool>(train_data_), "DiffusionTrainer: train_data must be set");
  if (spec_.sample_batch <= 0) spec_.sample_batch = spec_.batch;
  const cudaStream_t s = lane_.stream;
  const std::int64_t B = spec_.batch, SB = spec_.sample_batch, D = dim(), Dc = context_dim();
  spec_.denoiser.dim = D;
  spec_.denoiser.context = Dc;
  schedule_ = std::make_unique<models::NoiseSchedule>(spec_.schedule, s);
  denoiser_ = std::make_unique<models::Denoiser>(spec_.denoiser);
  sampler_ = std::make_unique<models::DiffusionSampler>(schedule_->host(), spec_.sampler, SB, D);

  denoiser_->declare(arena_);
  arena_.finalize(s);
  std::mt19937_64 rng(spec_.seed);
  denoiser_->init(arena_, rng, s);
  denoiser_->bind(arena_);

  x_ = gpu::DeviceBuffer<float>(n_of(B, spec_.context + spec_.window, spec_.assets));
  x0_ = gpu::DeviceBuffer<float>(n_of(B, D));
  if (Dc > 0) ctx_ = gpu::DeviceBuffer<float>(n_of(B, Dc));
  x_t_ = gpu::DeviceBuffer<float>(n_of(B, D));
  eps_ = gpu::DeviceBuffer<float>(n_of(B, D));
  eps_hat_ = gpu::DeviceBuffer<float>(n_of(B, D));
  d_eps_ = gpu::DeviceBuffer<float>(n_of(B, D));
  t_ = gpu::DeviceBuffer<std::int32_t>(n_of(B));
  feature_t_ = gpu::DeviceBuffer<std::int32_t>(n_of(SB));
  feature_x_t_ = gpu::DeviceBuffer<float>(n_of(SB, D));
  feature_eps_ = gpu::DeviceBuffer<float>(n_of(SB, D));
  feature_eps_hat_ = gpu::DeviceBuffer<float>(n_of(SB, D));
  denoiser_ws_ = gpu::DeviceBuffer<std::byte>(denoiser_->workspace_bytes(B));
  ws_view_ = models::Workspace{denoiser_ws_.data(), B, false};
  sample_ws_ = gpu::DeviceBuffer<std::byte>(denoiser_->workspace_bytes(SB));
  sample_ws_view_ = models::Workspace{sample_ws_.data(), SB, false};
  loss_ws_ = gpu::DeviceBuffer<std::byte>(std::max<std::size_t>(models::epsilon_loss_workspace_bytes(B, D), 1));
  norm_ws_ = gpu::DeviceBuffer<std::byte>(std::max<std::size_t>(gpu::grad_norm_workspace_bytes(arena_.padded_count()), 1));
  scalars_ = gpu::DeviceBuffer<float>(kStepScalarCount);
  eval_loss_ = gpu::DeviceBuffer<float>(1);
  counters_ = gpu::DeviceBuffer<std::uint64_t>(kCounterCount);
  stats_sums_ = gpu::DeviceBuffer<double>(kStatsSums);
  eval_sums_ = gpu::DeviceBuffer<double>(2);
  stats_dev_ = gpu::DeviceBuffer<TrainStats>(1);
  eval_dev_ = gpu::DeviceBuffer<EvalMetrics>(1);
  scalars_.zero(s);
  counters_.zero(s);
  stats_sums_.zero(s);
  FH_CHECK(cudaStreamSynchronize(s));  // set-up: the arena's uploads are done before the first step
}

DiffusionTrainer::~DiffusionTrainer() = default;

void DiffusionTrainer::loss(float* loss, float* d_eps, std::int64_t batch, std::uint64_t seed,
                            const std::uint64_t* counter, gpu::BlasLane lane) {
  const cudaStream_t s = lane.stream;
  const std::int64_t D = dim(), Dc = context_dim(), row = D + Dc;
  // Split each data row [ctx | x0] (device copies, capturable).
  FH_CHECK(cudaMemcpy2DAsync(x0_.data(), n_of(D) * sizeof(float), x_.data() + Dc, n_of(row) * sizeof(float),
                             n_of(D) * sizeof(float), n_of(batch), cudaMemcpyDeviceToDevice, s));
  if (Dc > 0)
    FH_CHECK(cudaMemcpy2DAsync(ctx_.data(), n_of(Dc) * sizeof(float), x_.data(), n_of(row) * sizeof(float),
                               n_of(Dc) * sizeof(float), n_of(batch), cudaMemcpyDeviceToDevice, s));
  models::diffusion_noising(x_t_.data(), eps_.data(), t_.data(), x0_.data(), batch, D, schedule_->device(), seed,
                            counter, s);
  denoiser_->forward(eps_hat_.data(), x_t_.data(), Dc > 0 ? ctx_.data() : nullptr, t_.data(), batch, ws_view_, lane);
  models::epsilon_loss(loss, d_eps, eps_hat_.data(), eps_.data(), batch, D, loss_ws_.data(), s);
}

void DiffusionTrainer::enqueue_step(cudaStream_t s) {
  gpu::BlasLane lane = lane_;
  lane.stream = s;
  const std::int64_t B = spec_.batch;
  const OptimSpec& o = spec_.optim;
  launch_step_lr(scalars_.data() + kLrScalar, counters_.data() + kStep, o.lr, o.warmup_steps, o.steps, o.decay, s);
  WindowBatch b;
  b.x = x_.data();
  train_data_(b, B, spec_.seed, counters_.data() + kDataCounter, s);
  loss(scalars_.data() + kLossScalar, d_eps_.data(), B, spec_.seed, counters_.data() + kDataCounter, lane);
  denoiser_->backward(nullptr, nullptr, d_eps_.data(), B, ws_view_, lane);
  launch_optimizer_step(arena_, o, scalars_.data(), counters_.data(), stats_sums_.data(), norm_ws_.data(), s);
}

void DiffusionTrainer::step() {
  if (!graph_.captured()) graph_.capture(lane_.stream, [&](cudaStream_t cs) { enqueue_step(cs); });
  graph_.replay(lane_.stream);
}

void DiffusionTrainer::step_eager() { enqueue_step(lane_.stream); }

void DiffusionTrainer::evaluate(const GenerateFn& data, std::uint64_t seed, std::int64_t windows) {
  FH_EXPECT(windows >= 1, "evaluate: windows must be >= 1");
  FH_EXPECT(!eval_exit_.pending(), "evaluate: the previous metrics were not read (poll_eval / wait_eval)");
  const cudaStream_t s = lane_.stream;
  eval_sums_.zero(s);
  FH_CHECK(cudaMemsetAsync(counters_.data() + kEvalCounter, 0, sizeof(std::uint64_t), s));
  WindowBatch b;
  b.x = x_.data();
  for (std::int64_t done = 0; done < windows; done += spec_.batch) {
    const std::int64_t n = std::min(spec_.batch, windows - done);
    data(b, n, seed, counters_.data() + kEvalCounter, s);
    loss(eval_loss_.data(), nullptr, n, seed, counters_.data() + kEvalCounter, lane_);
    eval_accumulate_kernel<<<1, 1, 0, s>>>(eval_sums_.data(), counters_.data(), eval_loss_.data(), n);
    FH_CHECK_LAUNCH();
  }
  eval_finish_kernel<<<1, 1, 0, s>>>(eval_dev_.data(), eval_sums_.data());
  FH_CHECK_LAUNCH();
  eval_exit_.publish(eval_dev_.data(), s);
}

bool DiffusionTrainer::poll_eval(EvalMetrics& out) { return eval_exit_.poll(out); }

EvalMetrics DiffusionTrainer::wait_eval() {
  FH_EXPECT(eval_exit_.pending(), "wait_eval: no validation is pending");
  return eval_exit_.wait();
}

void DiffusionTrainer::publish_stats() {
  FH_EXPECT(!stats_exit_.pending(), "publish_stats: the previous statistics were not read (poll_stats / wait_stats)");
  const cudaStream_t s = lane_.stream;
  launch_step_stats(stats_dev_.data(), stats_sums_.data(), counters_.data(), scalars_.data(), s);
  stats_exit_.publish(stats_dev_.data(), s);
}

bool DiffusionTrainer::poll_stats(TrainStats& out) { return stats_exit_.poll(out); }

TrainStats DiffusionTrainer::wait_stats() {
  FH_EXPECT(stats_exit_.pending(), "wait_stats: no statistics are pending");
  return stats_exit_.wait();
}

models::EpsilonFn DiffusionTrainer::epsilon_fn(const float* ctx) {
  FH_EXPECT(context_dim() == 0 || ctx != nullptr, "DiffusionTrainer: a conditioned model samples with a context");
  return [this, ctx](float* eps, const float* x, const std::int32_t* t, std::int64_t batch, cudaStream_t s) {
    gpu::BlasLane lane = lane_;
    lane.stream = s;
    denoiser_->forward(eps, x, ctx, t, batch, sample_ws_view_, lane);
  };
}

void DiffusionTrainer::features(float* embedding, float* score, const float* x0, const float* ctx, std::int64_t batch,
                                std::int32_t step, std::uint64_t seed, const std::uint64_t* counter,
                                bool shared_noise) {
  FH_EXPECT(batch >= 1 && batch <= spec_.sample_batch, "DiffusionTrainer::features: batch outside [1, sample batch]");
  FH_EXPECT(context_dim() == 0 || ctx != nullptr, "DiffusionTrainer::features: a conditioned model needs a context");
  const cudaStream_t s = lane_.stream;
  const std::int64_t D = dim();
  (shared_noise ? models::diffusion_noising_shared_at : models::diffusion_noising_at)(
      feature_x_t_.data(), feature_eps_.data(), feature_t_.data(), x0, batch, D, schedule_->device(), step, seed,
      counter, s);
  denoiser_->forward(feature_eps_hat_.data(), feature_x_t_.data(), ctx, feature_t_.data(), batch, sample_ws_view_,
                     lane_);
  if (score != nullptr) models::row_mean_squared_error(score, feature_eps_hat_.data(), feature_eps_.data(), batch, D, s);
  if (embedding != nullptr) {
    const std::size_t row = n_of(spec_.denoiser.hidden) * sizeof(float);
    FH_CHECK(cudaMemcpyAsync(embedding, denoiser_->last_hidden(sample_ws_view_), row * n_of(batch),
                             cudaMemcpyDeviceToDevice, s));
  }
}

void DiffusionTrainer::sample(float* out, const float* ctx, std::int64_t batch, std::uint64_t seed,
                              const std::uint64_t* counter) {
  FH_EXPECT(batch >= 1 && batch <= spec_.sample_batch, "DiffusionTrainer::sample: batch outside [1, sample batch]");
  sampler_->sample(out, epsilon_fn(ctx), batch, seed, counter, lane_.stream);
}

}  // namespace foxhunt::pretrain
