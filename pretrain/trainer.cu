#include "pretrain/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpu/check.hpp"
#include "gpu/gather.hpp"
#include "gpu/grad_norm.hpp"
#include "pretrain/hmm_filter.hpp"
#include "pretrain/linear_baseline.hpp"
#include "pretrain/step_kernels.hpp"

namespace foxhunt::pretrain {
namespace {

// The shared step kernels (pretrain/step_kernels.hpp) index the counters by this layout.
static_assert(PretrainTrainer::kStep == kStepIndex && PretrainTrainer::kDataCounter == kDataIndex &&
              PretrainTrainer::kEvalCounter == kEvalIndex && PretrainTrainer::kWindowStart == kWindowStartIndex &&
              PretrainTrainer::kCounterCount == kStepCounterCount);

__global__ void eval_advance_kernel(std::uint64_t* counters) { counters[PretrainTrainer::kEvalCounter] += 1; }

std::size_t n_of(std::int64_t a, std::int64_t b = 1, std::int64_t c = 1) { return static_cast<std::size_t>(a * b * c); }

}  // namespace

Decay parse_decay(const std::string& name) {
  if (name == "cosine") return Decay::cosine;
  if (name == "linear") return Decay::linear;
  if (name == "none") return Decay::none;
  throw std::invalid_argument("optim.decay = \"" + name + "\": must be one of \"cosine\" | \"linear\" | \"none\"");
}

PretrainTrainer::PretrainTrainer(TrainerSpec spec, GenerateFn train_data, gpu::BlasLane lane)
    : spec_(std::move(spec)), train_data_(std::move(train_data)), lane_(lane), metrics_(spec_.task) {
  FH_EXPECT(spec_.batch >= 1, "PretrainTrainer: batch must be >= 1");
  FH_EXPECT(spec_.assets >= 1 && spec_.window.window >= 1, "PretrainTrainer: assets and window must be >= 1");
  FH_EXPECT(spec_.optim.steps >= 1, "PretrainTrainer: optim.steps must be >= 1");
  FH_EXPECT(static_cast<bool>(train_data_), "PretrainTrainer: train_data must be set");
  const cudaStream_t s = lane_.stream;
  spec_.model.in = spec_.assets;
  spec_.model.sequence_length = spec_.window.window;
  model_ = make_model(spec_.model);
  models::DenseSpec hs;
  hs.name = "head";
  hs.in = model_->out_features();
  hs.out = spec_.task.outputs();
  hs.math = spec_.model.math;
  head_ = std::make_unique<models::Dense>(hs);

  model_->declare(arena_);
  head_->declare(arena_);
  arena_.finalize(s);
  std::mt19937_64 rng(spec_.seed);
  model_->init(arena_, rng, s);
  head_->init(arena_, rng, s);
  model_->bind(arena_);
  head_->bind(arena_);

  const std::int64_t B = spec_.batch, T = spec_.window.window, A = spec_.assets;
  const std::int64_t F = model_->out_features(), O = spec_.task.outputs();
  x_ = gpu::DeviceBuffer<float>(n_of(B, T, A));
  const TaskKind k = spec_.task.kind;
  if (k == TaskKind::returns || k == TaskKind::direction)
    next_returns_ = gpu::DeviceBuffer<float>(n_of(B, spec_.window.horizon, A));
  if (k == TaskKind::volatility) realized_vol_ = gpu::DeviceBuffer<float>(n_of(B, A));
  if (k == TaskKind::regime) regime_ = gpu::DeviceBuffer<std::int32_t>(n_of(B));
  train_batch_ = make_batch();
  features_ = gpu::DeviceBuffer<float>(n_of(B, T, F));
  d_features_ = gpu::DeviceBuffer<float>(n_of(B, T, F));
  last_ = gpu::DeviceBuffer<float>(n_of(B, F));
  d_last_ = gpu::DeviceBuffer<float>(n_of(B, F));
  head_out_ = gpu::DeviceBuffer<float>(n_of(B, O));
  d_head_ = gpu::DeviceBuffer<float>(n_of(B, O));
  model_ws_ = models::OwnedWorkspace(*model_, B);
  head_ws_ = models::OwnedWorkspace(*head_, B);
  norm_ws_ = gpu::DeviceBuffer<std::byte>(std::max<std::size_t>(gpu::grad_norm_workspace_bytes(arena_.padded_count()), 1));
  scalars_ = gpu::DeviceBuffer<float>(kStepScalarCount);
  counters_ = gpu::DeviceBuffer<std::uint64_t>(kCounterCount);
  hmm_correct_ = gpu::DeviceBuffer<std::uint64_t>(1);
  stats_sums_ = gpu::DeviceBuffer<double>(kStatsSums);
  stats_dev_ = gpu::DeviceBuffer<TrainStats>(1);
  eval_dev_ = gpu::DeviceBuffer<EvalMetrics>(1);
  scalars_.zero(s);
  counters_.zero(s);
  hmm_correct_.zero(s);
  stats_sums_.zero(s);
  FH_CHECK(cudaStreamSynchronize(s));  // set-up: the arena's uploads are done before the first step
}

PretrainTrainer::~PretrainTrainer() = default;

WindowBatch PretrainTrainer::make_batch() {
  WindowBatch b;
  b.x = x_.data();
  b.next_returns = next_returns_.empty() ? nullptr : next_returns_.data();
  b.realized_vol = realized_vol_.empty() ? nullptr : realized_vol_.data();
  b.regime = regime_.empty() ? nullptr : regime_.data();
  return b;
}

TaskTargets PretrainTrainer::targets_of(const WindowBatch& b) const {
  TaskTargets t;
  switch (spec_.task.kind) {
    case TaskKind::returns:
    case TaskKind::direction:
      t.values = b.next_returns;
      t.stride = spec_.window.horizon * spec_.assets;
      break;
    case TaskKind::volatility:
      t.values = b.realized_vol;
      t.stride = spec_.assets;
      break;
    case TaskKind::regime:
      t.classes = b.regime;
      break;
  }
  return t;
}

void PretrainTrainer::forward(const float* x, std::int64_t batch, bool eval, gpu::BlasLane lane) {
  const std::int64_t T = spec_.window.window, F = model_->out_features();
  model_->forward(features_.data(), x, batch, eval, model_ws_.view, lane);
  gpu::gather_columns(last_.data(), features_.data(), batch, F, T * F, (T - 1) * F, lane.stream);  // the last step
  head_->forward(head_out_.data(), last_.data(), batch, eval, head_ws_.view, lane);
}

void PretrainTrainer::enqueue_step(cudaStream_t s) {
  gpu::BlasLane lane = lane_;
  lane.stream = s;
  const std::int64_t B = spec_.batch, T = spec_.window.window, F = model_->out_features();
  const OptimSpec& o = spec_.optim;
  launch_step_lr(scalars_.data() + kLrScalar, counters_.data() + kStep, o.lr, o.warmup_steps, o.steps, o.decay, s);
  train_data_(train_batch_, B, spec_.seed, counters_.data() + kDataCounter, s);
  forward(train_batch_.x, B, false, lane);
  task_loss(d_head_.data(), scalars_.data() + kLossScalar, head_out_.data(), targets_of(train_batch_), B, spec_.task, s);
  head_->backward(d_last_.data(), d_head_.data(), last_.data(), B, head_ws_.view, lane, nullptr);
  gpu::expand_columns(d_features_.data(), d_last_.data(), B, F, T * F, (T - 1) * F, s);  // zero before the last step
  model_->backward(nullptr, d_features_.data(), train_batch_.x, B, model_ws_.view, lane, nullptr);
  launch_optimizer_step(arena_, o, scalars_.data(), counters_.data(), stats_sums_.data(), norm_ws_.data(), s);
}

void PretrainTrainer::step() {
  if (!graph_.captured()) graph_.capture(lane_.stream, [&](cudaStream_t cs) { enqueue_step(cs); });
  graph_.replay(lane_.stream);
}

void PretrainTrainer::step_eager() { enqueue_step(lane_.stream); }

void PretrainTrainer::fit_linear_baseline(LinearBaseline& linear, const GenerateFn& data, std::uint64_t seed,
                                          std::int64_t samples) {
  FH_EXPECT(spec_.task.regression(), "fit_linear_baseline: the task is not a regression");
  FH_EXPECT(samples >= 1, "fit_linear_baseline: samples must be >= 1");
  const cudaStream_t s = lane_.stream;
  WindowBatch b = make_batch();
  const TaskTargets t = targets_of(b);
  FH_CHECK(cudaMemsetAsync(counters_.data() + kEvalCounter, 0, sizeof(std::uint64_t), s));
  linear.reset_fit(s);
  for (std::int64_t done = 0; done < samples; done += spec_.batch) {
    const std::int64_t n = std::min(spec_.batch, samples - done);
    data(b, n, seed, counters_.data() + kEvalCounter, s);
    linear.accumulate(b.x, t.values, n, s);
    eval_advance_kernel<<<1, 1, 0, s>>>(counters_.data());
    FH_CHECK_LAUNCH();
  }
  linear.solve(s);
}

void PretrainTrainer::evaluate(const GenerateFn& data, std::uint64_t seed, std::int64_t windows, LinearBaseline* linear,
                               HmmFilter* hmm, const BatchHook& after_forward) {
  FH_EXPECT(windows >= 1, "evaluate: windows must be >= 1");
  FH_EXPECT(!eval_exit_.pending(), "evaluate: the previous metrics were not read (poll_eval / wait_eval)");
  FH_EXPECT(hmm == nullptr || spec_.task.kind == TaskKind::regime, "evaluate: the HMM baseline needs the regime task");
  FH_EXPECT(linear == nullptr || spec_.task.regression(), "evaluate: the linear baseline needs a regression task");
  const cudaStream_t s = lane_.stream;
  WindowBatch b = make_batch();
  const TaskTargets t = targets_of(b);
  metrics_.reset(s);
  if (linear != nullptr) linear->reset_eval(s);
  hmm_correct_.zero(s);
  FH_CHECK(cudaMemsetAsync(counters_.data() + kEvalCounter, 0, sizeof(std::uint64_t), s));
  for (std::int64_t done = 0; done < windows; done += spec_.batch) {
    const std::int64_t n = std::min(spec_.batch, windows - done);
    data(b, n, seed, counters_.data() + kEvalCounter, s);
    forward(b.x, n, true, lane_);
    if (after_forward) after_forward(n, s);
    metrics_.accumulate(head_out_.data(), t, n, s);
    if (linear != nullptr) linear->evaluate(b.x, t.values, n, s);
    if (hmm != nullptr) hmm->accuracy(hmm_correct_.data(), b.x, b.regime, n, s);
    eval_advance_kernel<<<1, 1, 0, s>>>(counters_.data());
    FH_CHECK_LAUNCH();
  }
  if (linear != nullptr) linear->finish_eval(s);
  metrics_.finish(eval_dev_.data(), linear != nullptr ? linear->r2() : nullptr,
                  hmm != nullptr ? hmm_correct_.data() : nullptr, s);
  eval_exit_.publish(eval_dev_.data(), s);
}

bool PretrainTrainer::poll_eval(EvalMetrics& out) { return eval_exit_.poll(out); }

EvalMetrics PretrainTrainer::wait_eval() {
  FH_EXPECT(eval_exit_.pending(), "wait_eval: no validation is pending");
  return eval_exit_.wait();
}

void PretrainTrainer::publish_stats() {
  FH_EXPECT(!stats_exit_.pending(), "publish_stats: the previous statistics were not read (poll_stats / wait_stats)");
  const cudaStream_t s = lane_.stream;
  launch_step_stats(stats_dev_.data(), stats_sums_.data(), counters_.data(), scalars_.data(), s);
  stats_exit_.publish(stats_dev_.data(), s);
}

bool PretrainTrainer::poll_stats(TrainStats& out) { return stats_exit_.poll(out); }

TrainStats PretrainTrainer::wait_stats() {
  FH_EXPECT(stats_exit_.pending(), "wait_stats: no statistics are pending");
  return stats_exit_.wait();
}

}  // namespace foxhunt::pretrain
