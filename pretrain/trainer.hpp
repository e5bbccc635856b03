#pragma once
// PretrainTrainer: supervised training of a sequence model on the device.
//
//   x (B, T, C) -> model (a RecurrentModule) -> features (B, T, F) -> the last step (B, F)
//     -> head (models::Dense, identity) -> out (B, O) -> the task's loss (pretrain/tasks.hpp)
//
// One training step, captured once as a CUDA graph and replayed (zero host synchronizations, zero
// device-to-host copies):
//   lr from the device step counter s (0-based index of this update):
//     s < warmup:  lr0 (s + 1) / warmup
//     after:       p = min(1, (s - warmup) / max(1, steps - warmup));
//                  cosine lr0 (1 + cos(pi p)) / 2 | linear lr0 (1 - p) | none lr0
//   data: the training source's batch of (seed, *data_counter)
//   forward, loss and its gradient, backward (the arena's gradients are overwritten)
//   global gradient norm (gpu/grad_norm); clip scale min(1, clip / (norm + 1e-6)) when clip > 0
//   AdamW (gpu/adam, decoupled weight decay, lr and step from the device)
//   step += 1, data_counter += 1; the loss and norm into the statistics window.
// Parameters: the model's ("model.<...>") and the head's ("head.weight", "head.bias") in one
// arena, initialized from std::mt19937_64(seed) in that order.
// Validation (evaluate): `windows` held-out windows of another source or seed from counter 0, so
// every validation sees the same windows; the model's metrics (TaskMetrics) and, on the same
// windows, the linear baseline's R^2 (regression) or the HMM filter's accuracy (regime). The
// metrics and the training statistics leave the device only through exits (gpu/exit.hpp).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/exit.hpp"
#include "gpu/graph.hpp"
#include "models/dense.hpp"
#include "models/module.hpp"
#include "pretrain/market_windows.hpp"
#include "pretrain/model_factory.hpp"
#include "pretrain/tasks.hpp"

namespace foxhunt::pretrain {

class LinearBaseline;
class HmmFilter;

// A source of batches: the windows of (seed, *counter) into `out` (MarketWindows::generate,
// CsvWindows::generate). counter: a device uint64 the source reads and does not change.
using GenerateFn = std::function<void(const WindowBatch& out, std::int64_t batch, std::uint64_t seed,
                                      const std::uint64_t* counter, cudaStream_t stream)>;

enum class Decay : std::uint8_t { cosine, linear, none };

struct OptimSpec {
  float lr = 1e-3f, weight_decay = 0.01f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  std::int64_t warmup_steps = 0;
  Decay decay = Decay::cosine;
  float grad_clip = 1.0f;  // 0: no clip
  std::int64_t steps = 1;  // the schedule's length
};

struct TrainerSpec {
  ModelSpec model;  // model.in = assets, model.sequence_length = window.window
  TaskSpec task;
  OptimSpec optim;
  WindowSpec window;
  std::int64_t assets = 1;
  std::int64_t batch = 256;
  std::uint64_t seed = 1;  // the parameters' initialization and the training data's Philox seed
};

// The training statistics window as it leaves the device: means over the steps since the last
// publish (loss, grad_norm) and the state at the publish.
struct TrainStats {
  double loss = 0, grad_norm = 0, lr = 0;
  std::uint64_t step = 0, steps = 0;  // steps: in the window
};

// The scalar from a config's decay name ("cosine" | "linear" | "none").
Decay parse_decay(const std::string& name);

class PretrainTrainer {
 public:
  // Slots of counters() (uint64), all kept by a checkpoint: the training steps applied, the
  // training data's counter, the validation / fit data's counter, the statistics window's first step.
  enum Counter : int { kStep = 0, kDataCounter = 1, kEvalCounter = 2, kWindowStart = 3, kCounterCount = 4 };

  PretrainTrainer(TrainerSpec spec, GenerateFn train_data, gpu::BlasLane lane);
  ~PretrainTrainer();
  PretrainTrainer(const PretrainTrainer&) = delete;
  PretrainTrainer& operator=(const PretrainTrainer&) = delete;

  // One training step: the captured graph's replay (captured at the first call).
  void step();
  // The same work enqueued directly (tests: graph replay == eager).
  void step_eager();

  // Fits `linear` on `samples` windows of (data, seed) from counter 0 (set-up: eager, no sync).
  void fit_linear_baseline(LinearBaseline& linear, const GenerateFn& data, std::uint64_t seed, std::int64_t samples);
  // Called after each validation batch's forward with its row count, on the trainer's stream, while
  // model_workspace() holds that forward (TftInterpretation::accumulate).
  using BatchHook = std::function<void(std::int64_t batch, cudaStream_t stream)>;

  // Validation over `windows` windows of (data, seed) from counter 0; linear / hmm (nullable): the
  // baselines on the same windows. Publishes the metrics (poll_eval / wait_eval); read the previous
  // one first.
  void evaluate(const GenerateFn& data, std::uint64_t seed, std::int64_t windows, LinearBaseline* linear,
                HmmFilter* hmm, const BatchHook& after_forward = {});
  bool eval_pending() const noexcept { return eval_exit_.pending(); }
  bool poll_eval(EvalMetrics& out);
  EvalMetrics wait_eval();

  // Publishes the statistics window and starts the next one (poll_stats / wait_stats).
  void publish_stats();
  bool stats_pending() const noexcept { return stats_exit_.pending(); }
  bool poll_stats(TrainStats& out);
  TrainStats wait_stats();

  gpu::ParameterArena& arena() noexcept { return arena_; }
  models::RecurrentModule& model() noexcept { return *model_; }
  const models::Workspace& model_workspace() const noexcept { return model_ws_.view; }
  models::Dense& head() noexcept { return *head_; }
  // Device state a checkpoint keeps beside the arena: kCounterCount uint64, kStatsSums doubles.
  std::uint64_t* counters() noexcept { return counters_.data(); }
  double* stats_sums() noexcept { return stats_sums_.data(); }
  static constexpr std::size_t kStatsSums = 2;  // loss sum, grad-norm sum of the window
  const TrainerSpec& spec() const noexcept { return spec_; }
  // Device scalars of the last step: [lr, grad norm, clip scale, loss].
  const float* scalars() const noexcept { return scalars_.data(); }
  // The last training batch and the head's output (tests).
  const WindowBatch& batch() const noexcept { return train_batch_; }
  const float* head_out() const noexcept { return head_out_.data(); }
  cudaStream_t stream() const noexcept { return lane_.stream; }

 private:
  void enqueue_step(cudaStream_t s);
  // model -> last step -> head on the batch in x, eval mode or not.
  void forward(const float* x, std::int64_t batch, bool eval, gpu::BlasLane lane);
  TaskTargets targets_of(const WindowBatch& b) const;
  WindowBatch make_batch();

  TrainerSpec spec_;
  GenerateFn train_data_;
  gpu::BlasLane lane_;
  std::unique_ptr<models::RecurrentModule> model_;
  std::unique_ptr<models::Dense> head_;
  gpu::ParameterArena arena_;
  TaskMetrics metrics_;

  gpu::DeviceBuffer<float> x_, next_returns_, realized_vol_;
  gpu::DeviceBuffer<std::int32_t> regime_;
  WindowBatch train_batch_;
  gpu::DeviceBuffer<float> features_, last_, head_out_, d_head_, d_last_, d_features_;
  models::OwnedWorkspace model_ws_, head_ws_;
  gpu::DeviceBuffer<std::byte> norm_ws_;
  gpu::DeviceBuffer<float> scalars_;
  gpu::DeviceBuffer<std::uint64_t> counters_, hmm_correct_;
  gpu::DeviceBuffer<double> stats_sums_;
  gpu::DeviceBuffer<TrainStats> stats_dev_;
  gpu::DeviceBuffer<EvalMetrics> eval_dev_;
  gpu::PendingExit<TrainStats> stats_exit_;
  gpu::PendingExit<EvalMetrics> eval_exit_;
  gpu::CudaGraph graph_;
};

}  // namespace foxhunt::pretrain
