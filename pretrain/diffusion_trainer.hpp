#pragma once
// DiffusionTrainer: a DDPM over windows of returns (models/diffusion), trained on the device.
//
//   data x (B, context + window, assets) -> ctx (B, context x assets) | x0 (B, window x assets)
//   x_t, eps, t = diffusion_noising(x0) -> eps_hat = denoiser(x_t, ctx, t) -> epsilon loss
//
// One training step, captured once as a CUDA graph and replayed (zero host synchronizations, zero
// device-to-host copies), with PretrainTrainer's schedule, clip and AdamW (pretrain/trainer.hpp):
//   lr from the device step counter; the batch of (seed, *data_counter); noising with the draws of
//   (seed, *data_counter); forward, loss, backward; global gradient norm and clip; AdamW;
//   step += 1, data_counter += 1; the loss and norm into the statistics window.
// Parameters: the denoiser's ("model.<...>") in one arena, initialized from std::mt19937_64(seed).
// Validation (evaluate): the epsilon loss over `windows` held-out windows of another seed from
// counter 0, noised with the draws of that seed and counter, so every validation sees the same
// windows, steps and noise (EvalMetrics.loss = .mse; the other metrics NaN).
// Features (features): a window's embedding (the denoiser's last hidden state) and its anomaly score
// (the denoising error at one fixed step: x0 noised at that step with the draws of (seed, *counter),
// the mean squared error of the predicted noise), for up to the sample batch of windows; with
// shared_noise every window gets the draws of row 0, as the frozen feature extractor's
// (pretrain/diffusion_feature_extractor.hpp).
// Sampling (sample): the configured sampler (models/diffusion/sampler.hpp) with the denoiser, on
// the trainer's stream, capturable.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/exit.hpp"
#include "gpu/graph.hpp"
#include "models/diffusion/denoiser.hpp"
#include "models/diffusion/sampler.hpp"
#include "models/diffusion/schedule.hpp"
#include "models/module.hpp"
#include "pretrain/config.hpp"
#include "pretrain/tasks.hpp"
#include "pretrain/trainer.hpp"

namespace foxhunt::pretrain {

struct DiffusionTrainerSpec {
  models::DenoiserSpec denoiser;  // name, hidden, blocks, expand, embed, math (dim, context: set here)
  models::ScheduleSpec schedule;
  models::SamplerSpec sampler;
  OptimSpec optim;
  std::int64_t window = 32;   // returns per generated window
  std::int64_t context = 0;   // returns of the conditioning window before it (0: unconditional)
  std::int64_t assets = 1;
  std::int64_t batch = 256;   // training windows per step
  std::int64_t sample_batch = 0;  // most windows per sample() call (0: batch)
  std::uint64_t seed = 1;
};

// The spec of a `foxhunt pretrain` run with [model] kind = "diffusion" (pretrain/config.hpp; the
// family keys of pretrain/model_factory.cpp) on data of `assets` assets, the denoiser's widths
// (dim, context) included.
DiffusionTrainerSpec diffusion_trainer_spec(const PretrainConfig& c, std::int64_t assets);

class DiffusionTrainer {
 public:
  // Counter slots: as PretrainTrainer's (the checkpoint's counters array has the same layout).
  enum Counter : int { kStep = 0, kDataCounter = 1, kEvalCounter = 2, kWindowStart = 3, kCounterCount = 4 };
  static constexpr std::size_t kStatsSums = 2;

  // train_data: windows of context + window returns.
  DiffusionTrainer(DiffusionTrainerSpec spec, GenerateFn train_data, gpu::BlasLane lane);
  ~DiffusionTrainer();
  DiffusionTrainer(const DiffusionTrainer&) = delete;
  DiffusionTrainer& operator=(const DiffusionTrainer&) = delete;

  void step();        // the captured graph's replay (captured at the first call)
  void step_eager();  // the same work enqueued directly

  void evaluate(const GenerateFn& data, std::uint64_t seed, std::int64_t windows);
  bool eval_pending() const noexcept { return eval_exit_.pending(); }
  bool poll_eval(EvalMetrics& out);
  EvalMetrics wait_eval();

  void publish_stats();
  bool stats_pending() const noexcept { return stats_exit_.pending(); }
  bool poll_stats(TrainStats& out);
  TrainStats wait_stats();

  // out (B, window x assets) samples, conditioned on ctx (B, context x assets) when context > 0
  // (ignored otherwise); z of (seed, *counter); 1 <= B <= sample batch.
  void sample(float* out, const float* ctx, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter);
  // embedding (B, hidden) and score (B), either nullable, of the windows x0 (B, window x assets)
  // with their ctx (B, context x assets; ignored when context = 0), noised at `step` in [0, T);
  // 1 <= B <= sample batch. shared_noise: every row noised with row 0's draws
  // (models::diffusion_noising_shared_at), so a window's features depend on the window alone.
  void features(float* embedding, float* score, const float* x0, const float* ctx, std::int64_t batch,
                std::int32_t step, std::uint64_t seed, const std::uint64_t* counter, bool shared_noise = false);
  // The denoiser as the sampler's epsilon function, conditioned on ctx (tests, inversion).
  models::EpsilonFn epsilon_fn(const float* ctx);

  gpu::ParameterArena& arena() noexcept { return arena_; }
  models::Denoiser& denoiser() noexcept { return *denoiser_; }
  models::DiffusionSampler& sampler() noexcept { return *sampler_; }
  const models::NoiseSchedule& schedule() const noexcept { return *schedule_; }
  std::uint64_t* counters() noexcept { return counters_.data(); }
  double* stats_sums() noexcept { return stats_sums_.data(); }
  const DiffusionTrainerSpec& spec() const noexcept { return spec_; }
  std::int64_t dim() const noexcept { return spec_.window * spec_.assets; }
  std::int64_t context_dim() const noexcept { return spec_.context * spec_.assets; }
  // Device scalars of the last step: [lr, grad norm, clip scale, loss].
  const float* scalars() const noexcept { return scalars_.data(); }
  cudaStream_t stream() const noexcept { return lane_.stream; }

 private:
  void enqueue_step(cudaStream_t s);
  // data x (B, context + window, A) -> ctx_ and x0_; then the noised batch and the loss of
  // (seed, *counter) into *loss, with the gradient when d_eps is not null.
  void loss(float* loss, float* d_eps, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter,
            gpu::BlasLane lane);

  DiffusionTrainerSpec spec_;
  GenerateFn train_data_;
  gpu::BlasLane lane_;
  std::unique_ptr<models::NoiseSchedule> schedule_;
  std::unique_ptr<models::Denoiser> denoiser_;
  std::unique_ptr<models::DiffusionSampler> sampler_;
  gpu::ParameterArena arena_;

  gpu::DeviceBuffer<float> x_, x0_, ctx_, x_t_, eps_, eps_hat_, d_eps_;
  gpu::DeviceBuffer<std::int32_t> t_, feature_t_;
  gpu::DeviceBuffer<float> feature_x_t_, feature_eps_, feature_eps_hat_;  // (sample batch, D)
  gpu::DeviceBuffer<std::byte> denoiser_ws_, sample_ws_, loss_ws_, norm_ws_;
  models::Workspace ws_view_, sample_ws_view_;
  gpu::DeviceBuffer<float> scalars_, eval_loss_;
  gpu::DeviceBuffer<std::uint64_t> counters_;
  gpu::DeviceBuffer<double> stats_sums_, eval_sums_;
  gpu::DeviceBuffer<TrainStats> stats_dev_;
  gpu::DeviceBuffer<EvalMetrics> eval_dev_;
  gpu::PendingExit<TrainStats> stats_exit_;
  gpu::PendingExit<EvalMetrics> eval_exit_;
  gpu::CudaGraph graph_;
};

}  // namespace foxhunt::pretrain
