#include "rl/dqn/learner.hpp"

#include <cmath>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

#include "gpu/adam.hpp"
#include "gpu/atomic_file.hpp"
#include "gpu/check.hpp"
#include "gpu/checkpoint_io.hpp"
#include "gpu/grad_norm.hpp"
#include "gpu/nonfinite.hpp"
#include "gpu/reduce.hpp"
#include "models/c51.hpp"
#include "rl/dqn/fused.hpp"

namespace foxhunt::rl {
namespace {

constexpr std::uint32_t kTargetNoiseStreams = 0x200;  // kOnlineNoiseStreams, kActStream: rl/dqn/policy.hpp

bool finite_in(float x, float lo, float hi) { return std::isfinite(x) && x >= lo && x <= hi; }

}  // namespace

void validate(const DqnLearnerConfig& c) {
  models::validate(c.net);
  FH_EXPECT(c.batch >= 1, "dqn.batch must be >= 1, got " + std::to_string(c.batch));
  FH_EXPECT(c.act_rows >= 1, "dqn.act_rows must be >= 1, got " + std::to_string(c.act_rows));
  FH_EXPECT(c.loss == TdLoss::mse || (std::isfinite(c.huber_delta) && c.huber_delta > 0.f),
            "dqn.huber_delta must be finite and > 0, got " + std::to_string(c.huber_delta));
  FH_EXPECT(finite_in(c.adam.beta1, 0.f, 0.999999f), "dqn.adam.beta1 must be in [0, 1)");
  FH_EXPECT(finite_in(c.adam.beta2, 0.f, 0.999999f), "dqn.adam.beta2 must be in [0, 1)");
  FH_EXPECT(finite_in(c.adam.eps, 0.f, 1.f), "dqn.adam.eps must be in [0, 1]");
  FH_EXPECT(finite_in(c.adam.weight_decay, 0.f, 1.f), "dqn.adam.weight_decay must be in [0, 1]");
  const auto& s = c.schedule;
  FH_EXPECT(finite_in(s.epsilon_start, 0.f, 1.f) && finite_in(s.epsilon_end, 0.f, 1.f),
            "dqn.epsilon_start and dqn.epsilon_end must be in [0, 1]");
  FH_EXPECT(finite_in(s.beta_start, 0.f, 1.f) && finite_in(s.beta_end, 0.f, 1.f),
            "dqn.beta_start and dqn.beta_end must be in [0, 1]");
  FH_EXPECT(finite_in(s.lr_start, 0.f, 1.f) && finite_in(s.lr_end, 0.f, 1.f) && s.lr_start > 0.f,
            "dqn.lr_start must be in (0, 1] and dqn.lr_end in [0, 1]");
  FH_EXPECT(s.epsilon_steps >= 0 && s.beta_updates >= 0 && s.lr_updates >= 0,
            "dqn schedule durations (epsilon_steps, beta_updates, lr_updates) must be >= 0");
  FH_EXPECT(std::isfinite(c.max_grad_norm), "dqn.max_grad_norm must be finite (<= 0 disables clipping)");
  FH_EXPECT(c.tau > 0.f && c.tau <= 1.f, "dqn.tau must be in (0, 1], got " + std::to_string(c.tau));
  FH_EXPECT(c.target_period >= 1, "dqn.target_period must be >= 1, got " + std::to_string(c.target_period));
  FH_EXPECT(finite_in(c.priority_eps, 0.f, 1.f), "dqn.priority_eps must be in [0, 1]");
  FH_EXPECT(std::isfinite(c.skip_priority) && c.skip_priority > 0.f, "dqn.skip_priority must be finite and > 0");
}

DqnPolicyConfig dqn_policy_config(const DqnLearnerConfig& c) {
  return DqnPolicyConfig{c.net, c.schedule, c.seed, c.act_rows};
}

DqnLearner::DqnLearner(const DqnLearnerConfig& config, gpu::BlasLane lane, TrainableObsFeatures* features,
                       float features_lr_scale)
    : config_(config), lane_(lane), features_(features), features_lr_scale_(features_lr_scale) {
  validate(config_);
  FH_EXPECT(lane_.stream != nullptr, "DqnLearner: needs a created stream (graph capture), not the default stream");
  if (features_ != nullptr) {
    FH_EXPECT(features_->obs_dim() == config_.net.obs_dim && features_->max_train_rows() >= config_.batch,
              "DqnLearner: the trainable extractor is for " + std::to_string(features_->obs_dim()) +
                  "-column observations and batches of up to " + std::to_string(features_->max_train_rows()) +
                  " rows; the learner has " + std::to_string(config_.net.obs_dim) + " and " +
                  std::to_string(config_.batch));
    FH_EXPECT(std::isfinite(features_lr_scale_) && features_lr_scale_ > 0.f,
              "DqnLearner: features_lr_scale must be finite and > 0, got " + std::to_string(features_lr_scale_));
  }
  const cudaStream_t s = lane_.stream;
  online_ = std::make_unique<models::QNetwork>(config_.net, "", kOnlineNoiseStreams);
  target_ = std::make_unique<models::QNetwork>(config_.net, "", kTargetNoiseStreams);
  online_->declare(online_arena_);
  target_->declare(target_arena_);
  online_arena_.finalize(s);
  target_arena_.finalize(s);
  std::mt19937_64 rng(config_.seed);
  online_->init(online_arena_, rng, s);
  FH_CHECK(cudaMemcpyAsync(target_arena_.params(), online_arena_.params(),
                           static_cast<std::size_t>(online_arena_.padded_count()) * sizeof(float),
                           cudaMemcpyDeviceToDevice, s));
  online_->bind(online_arena_);
  target_->bind(target_arena_);

  if (lane_.workspace_bytes > 0) side_workspace_ = gpu::DeviceBuffer<std::byte>(lane_.workspace_bytes);

  const std::int64_t B = config_.batch;
  // Double DQN: rows [s; s']. true: the buffers of the side-lane backward.
  ws_ = online_->make_workspace(config_.double_q ? 2 * B : B, true);
  if (config_.double_q) obs2_ = gpu::DeviceBuffer<float>(static_cast<std::size_t>(2 * B * config_.net.obs_dim));
  ws_target_ = target_->make_workspace(B);
  act_ws_ = online_->make_workspace(config_.act_rows);
  const auto Bz = static_cast<std::size_t>(B);
  y_ = gpu::DeviceBuffer<float>(Bz);
  d_logits_ = gpu::DeviceBuffer<float>(Bz * static_cast<std::size_t>(online_->outputs()));
  sample_loss_ = gpu::DeviceBuffer<float>(Bz);
  weighted_loss_ = gpu::DeviceBuffer<float>(Bz);
  priorities_ = gpu::DeviceBuffer<float>(Bz);
  if (config_.net.atoms > 1) m_ = gpu::DeviceBuffer<float>(Bz * static_cast<std::size_t>(config_.net.atoms));
  next_actions_ = gpu::DeviceBuffer<std::int32_t>(Bz * static_cast<std::size_t>(config_.net.branches));
  reduce_ws_ = gpu::DeviceBuffer<std::byte>(std::max<std::size_t>(gpu::reduce_workspace_bytes(B), 16));
  norm_ws_ = gpu::DeviceBuffer<std::byte>(dqn_grad_guard_workspace_bytes(online_arena_.padded_count()));
  FH_CHECK(cudaMemsetAsync(norm_ws_.data(), 0, norm_ws_.bytes(), s));  // dqn_grad_guard's counter starts at 0
  end_ws_ = gpu::DeviceBuffer<std::byte>(kDqnEndWorkspaceBytes);
  FH_CHECK(cudaMemsetAsync(end_ws_.data(), 0, end_ws_.bytes(), s));  // and dqn_adam_end_and_target_update's
  if (features_ != nullptr) {
    const auto rows = static_cast<std::size_t>(B * config_.net.obs_dim);
    features_obs_ = gpu::DeviceBuffer<float>(2 * rows);
    d_obs_ = gpu::DeviceBuffer<float>(rows);
    features_scalars_ = gpu::DeviceBuffer<float>(2);
    features_scalars_.zero(s);
    features_norm_ws_ = gpu::DeviceBuffer<std::byte>(gpu::grad_norm_workspace_bytes(features_->arena().padded_count()));
  }
  td_ws_ = gpu::DeviceBuffer<std::byte>(std::max<std::size_t>(dqn_td_fused_workspace_bytes(B), 16));
  FH_CHECK(cudaMemsetAsync(td_ws_.data(), 0, td_ws_.bytes(), s));  // and dqn_td_fused's (several blocks)

  DqnState init{};
  init.relu_units = online_->relu_units();
  init.epsilon = config_.schedule.epsilon_start;
  init.beta = config_.schedule.beta_start;
  init.lr = config_.schedule.lr_start;
  state_ = gpu::DeviceBuffer<DqnState>(1);
  state_.upload(std::span<const DqnState>(&init, 1), s);
  FH_CHECK(cudaStreamSynchronize(s));  // set-up: host values above must be uploaded before they die
}

void DqnLearner::record_update(const DqnBatch& batch, cudaStream_t s, const std::function<void(cudaStream_t)>& after) {
  const auto& c = config_;
  FH_EXPECT(batch.size == c.batch, "DqnLearner: batch.size must equal config.batch (" + std::to_string(c.batch) +
                                       "), got " + std::to_string(batch.size));
  FH_EXPECT(batch.obs && batch.actions && batch.returns && batch.discounts && batch.next_obs,
            "DqnLearner: batch obs, actions, returns, discounts and next_obs must be set");
  const std::int64_t B = c.batch, D = c.net.branches, A = c.net.actions, Z = c.net.atoms;
  gpu::BlasLane lane = lane_;
  lane.stream = s;
  DqnState* st = state_.data();

  // Begin (schedules, counter resets). Without noise nothing reads the state before the TD kernel
  // and the dead-unit count, so the begin runs on its own branch beside the forwards.
  const bool begin_aside = !c.net.noisy;
  if (begin_aside) {
    begin_fork_.record(s);
    begin_lane_.wait(begin_fork_);
    dqn_begin_update(st, c.schedule, begin_lane_);
    begin_done_.record(begin_lane_);
  } else {
    dqn_begin_update(st, c.schedule, s);
    online_->resample_noise(c.seed, &st->noise_counter, s);
    target_->resample_noise(c.seed, &st->noise_counter, s);
  }

  // Forwards. Double DQN: online(s) and online(s') (which only selects the bootstrap action) use the
  // same weights and noise, so they run as ONE forward over the stacked 2B rows [s; s']: rows [0, B)
  // of ws_ are exactly what a B-row forward of s leaves (row-major activations and ReLU masks), so
  // the backward, the dead-unit count and the loss read them unchanged. The target forward reads
  // only its own weights and workspace: it runs beside the online forward on the side stream.
  const float* obs = batch.obs;
  const float* next_obs = batch.next_obs;
  if (features_ != nullptr) {
    // The extractor's features with its current weights, in a copy (replay's storage keeps what
    // the collector wrote). s' first: the target network has no extractor of its own, so the
    // bootstrap reads the online extractor's features of s', without gradient (cheaper than a
    // target copy, and at lr_scale the extractor moves slowly). s last: train_backward reads the
    // activations of the last train_forward.
    float* rows = features_obs_.data();
    dqn_stack_rows(rows, batch.obs, batch.next_obs, B * c.net.obs_dim, s);
    features_->train_forward(rows + B * c.net.obs_dim, B, lane);
    features_->train_forward(rows, B, lane);
    obs = rows;
    next_obs = rows + B * c.net.obs_dim;
  }
  gpu::BlasLane side_lane = lane;
  side_lane.stream = side_;
  side_lane.workspace = side_workspace_.data();
  side_lane.workspace_bytes = side_workspace_.bytes();
  forked_.record(s);
  side_.wait(forked_);
  target_->forward(ws_target_, next_obs, B, false, side_lane);
  target_done_.record(side_);
  const float* q_select = target_->q(ws_target_);
  if (c.double_q) {
    const float* rows = obs;  // [s; s'] as they lie in a SampledBatch (or the features' copy), else stacked here
    if (next_obs != obs + B * c.net.obs_dim) {
      dqn_stack_rows(obs2_.data(), obs, next_obs, B * c.net.obs_dim, s);
      rows = obs2_.data();
    }
    online_->forward(ws_, rows, 2 * B, false, lane);
    q_select = online_->q(ws_) + B * D * A;  // Q(s') (B, D, A): the second half of the 2B rows
  } else {
    online_->forward(ws_, obs, B, false, lane);
  }
  // The dead-unit count reads the online forward's ReLU masks and writes only state->dead_units:
  // it runs on the side stream beside the loss and the backward.
  online_done_.record(s);
  side_.wait(online_done_);
  if (begin_aside) side_.wait(begin_done_);  // the begin zeroes the count
  online_->count_dead_units(&st->dead_units, ws_, B, side_);
  side_done_.record(side_);
  FH_CHECK(cudaStreamWaitEvent(s, target_done_, 0));
  if (begin_aside) FH_CHECK(cudaStreamWaitEvent(s, begin_done_, 0));

  if (Z == 1) {
    // One block: targets, TD loss, d_q, priorities, state->loss / q_mean and the loss guard.
    dqn_td_fused(d_logits_.data(), priorities_.data(), st, online_->q(ws_), q_select, target_->q(ws_target_),
                 batch.actions, batch.returns, batch.discounts, batch.weights, B, D, A, c.loss, c.huber_delta,
                 c.priority_eps, td_ws_.data(), s);
  } else {
    greedy_actions(next_actions_.data(), q_select, B, 1, A, s);
    models::c51_project(m_.data(), target_->probs(ws_target_), next_actions_.data(), batch.returns, batch.discounts, B,
                        A, Z, c.net.v_min, c.net.v_max, s);
    models::c51_cross_entropy(d_logits_.data(), sample_loss_.data(), online_->logits(ws_), batch.actions, m_.data(),
                              batch.weights, B, A, Z, s);
    weighted_loss_priorities(weighted_loss_.data(), priorities_.data(), sample_loss_.data(), batch.weights, B,
                             c.priority_eps, s);
    gpu::reduce_sum(&st->loss, weighted_loss_.data(), B, reduce_ws_.data(), s);
    taken_q_mean(&st->q_mean, online_->q(ws_), batch.actions, B, D, A, s);
    gpu::flag_nonfinite(&st->skip, &st->loss, 1, s);
  }
  // The backward's parameter gradients (heads, trunk weight GEMMs) run on the side stream behind the
  // dead-unit count; the backward joins it back into s before it returns, and nothing reads the
  // gradients before the guard below. side_lane's workspace is free again: the target forward that
  // used it is earlier on the same stream.
  const models::SideLane backward_side{side_lane, backward_fork_, backward_join_};
  online_->backward(ws_, d_logits_.data(), obs, B, lane, &backward_side,
                    features_ != nullptr ? d_obs_.data() : nullptr);
  if (features_ != nullptr) features_->train_backward(d_obs_.data(), B, lane);
  FH_CHECK(cudaStreamWaitEvent(s, side_done_, 0));  // the side stream rejoins (a capture must end joined)

  // Data-parallel: the mean gradient of every replica, and one skip decision. After the mean,
  // every replica holds the same gradients, so the guard's gradient checks agree by themselves;
  // the loss flag (set by the TD kernel from this replica's batch) is agreed here, before the guard
  // folds the gradient flag into it.
  if (dp_.active()) {
    dp_.comm->all_reduce_mean(online_arena_.grads(), online_arena_.padded_count(), s, dp_.bucket_floats());
    if (features_ != nullptr)
      dp_.comm->all_reduce_mean(features_->arena().grads(), features_->arena().padded_count(), s, dp_.bucket_floats());
    dp_.comm->max_u32(&st->skip, 1, s);
  }
  // The extractor's gradients join the guard: a non-finite one skips both arenas' steps (flagged
  // before the guard, which then writes the skip priorities), and its norm joins the online norm.
  float* features_lr = features_scalars_.data();
  float* features_norm = features_lr + 1;
  if (features_ != nullptr) {
    gpu::ParameterArena& fa = features_->arena();
    gpu::flag_nonfinite(&st->skip, fa.grads(), fa.padded_count(), s);
    gpu::global_grad_norm(features_norm, fa.grads(), fa.padded_count(), features_norm_ws_.data(), s);
  }

  // Guard: a non-finite loss or gradient skips Adam and the target update (bit-exact).
  // One kernel: non-finite gradient flag, global norm, clip scale, and the safe priorities of a
  // skipped update: priorities_ is final when it ends.
  const std::int64_t n = online_arena_.padded_count();
  dqn_grad_guard(st, priorities_.data(), online_arena_.grads(), n, c.max_grad_norm, B, c.skip_priority, norm_ws_.data(),
                 s);
  if (features_ != nullptr) {
    // The global norm over both arenas, and the clip scale from it (the guard's was the online one's).
    gpu::combine_norms(&st->grad_norm, features_norm, s);
    if (c.max_grad_norm > 0.f) gpu::clip_scale(&st->clip_scale, &st->grad_norm, c.max_grad_norm, s);
  }
  if (after) {  // the priority update, beside Adam and the target update
    after_fork_.record(s);
    side_.wait(after_fork_);
    after(side_);
    after_done_.record(side_);
  }
  // The extractor's Adam first: it reads the online step count (updates_applied) before the end of
  // the update advances it, so both arenas take step number updates_applied + 1.
  if (features_ != nullptr) {
    gpu::ParameterArena& fa = features_->arena();
    gpu::scale_lr(features_lr, &st->lr, features_lr_scale_, s);
    gpu::adam_step_device(fa.params(), fa.adam_m(), fa.adam_v(), fa.grads(), fa.padded_count(), c.adam, features_lr,
                          &st->updates_applied, c.max_grad_norm > 0.f ? &st->clip_scale : nullptr, &st->skip, s);
  }
  // Adam (lr and step from the state, skipped bit-exactly on skip), the end of the update
  // (counters), the target update (hard every K / Polyak) and the non-finite-parameter check in
  // one pass over the flat buffers.
  dqn_adam_end_and_target_update(st, online_arena_.params(), online_arena_.adam_m(), online_arena_.adam_v(),
                                 target_arena_.params(), nullptr, online_arena_.grads(), n, B, c.adam,
                                 c.max_grad_norm > 0.f, c.skip_priority, c.tau, c.target_period, end_ws_.data(), s);
  if (after) FH_CHECK(cudaStreamWaitEvent(s, after_done_, 0));
}

void DqnLearner::join(const gpu::DataParallel& dp) {
  FH_EXPECT(!graph_.captured(), "DqnLearner::join: before the first capture");
  dp_ = dp;
  if (!dp_.active()) return;
  const cudaStream_t s = lane_.stream;
  const std::int64_t n = online_arena_.padded_count(), nt = target_arena_.padded_count();
  for (float* a : {online_arena_.params(), online_arena_.adam_m(), online_arena_.adam_v()})
    dp_.comm->broadcast(a, n, 0, s);
  dp_.comm->broadcast(target_arena_.params(), nt, 0, s);
  if (features_ != nullptr) {
    gpu::ParameterArena& fa = features_->arena();
    for (float* a : {fa.params(), fa.adam_m(), fa.adam_v()}) dp_.comm->broadcast(a, fa.padded_count(), 0, s);
  }
  FH_CHECK(cudaStreamSynchronize(s));  // set-up: every replica starts from the same weights
}

void DqnLearner::update(const DqnBatch& batch) { record_update(batch, lane_.stream); }

void DqnLearner::capture(const DqnBatch& batch, const std::function<void(cudaStream_t)>& before,
                         const std::function<void(cudaStream_t)>& after) {
  capture(graph_, batch, before, after);
}

void DqnLearner::capture(gpu::CudaGraph& graph, const DqnBatch& batch, const std::function<void(cudaStream_t)>& before,
                         const std::function<void(cudaStream_t)>& after) {
  graph.capture(lane_.stream, [&](cudaStream_t cs) {
    if (before) before(cs);
    record_update(batch, cs, after);
  });
}

void DqnLearner::replay() {
  FH_EXPECT(graph_.captured(), "DqnLearner::replay before capture");
  graph_.replay(lane_.stream);
}

void DqnLearner::act(std::int32_t* actions, const float* obs, std::int64_t rows, bool eval) {
  FH_EXPECT(rows >= 1 && rows <= config_.act_rows,
            "DqnLearner::act: rows must be in [1, act_rows = " + std::to_string(config_.act_rows) + "], got " +
                std::to_string(rows));
  dqn_act(actions, *online_, act_ws_, state_.data(), obs, rows, eval, config_.seed, lane_);
}

void DqnLearner::after_env_step(std::int64_t num_envs) {
  dqn_after_env_step(state_.data(), config_.schedule, num_envs, lane_.stream);
}

void DqnLearner::publish_metrics() { metrics_.publish(state_.data(), lane_.stream); }

void DqnLearner::save(const std::filesystem::path& stem) {
  const cudaStream_t s = lane_.stream;
  online_arena_.save(stem.string() + ".online.safetensors", s, true);
  target_arena_.save(stem.string() + ".target.safetensors", s, false);
  if (features_ != nullptr) features_->arena().save(stem.string() + kFeaturesSuffix, s, true);
  // Checkpoint I/O: the one sanctioned device-to-host copy besides the exit.
  DqnState host{};
  FH_CHECK(cudaStreamSynchronize(s));
  gpu::checkpoint_read(&host, state_.data(), sizeof host, s);
  // Temp file + fsync + rename: a failed or interrupted save leaves the previous state file whole.
  gpu::write_file_atomically(stem.string() + ".state.bin", {std::as_bytes(std::span<const DqnState>(&host, 1))},
                             "DqnLearner state");
}

void DqnLearner::load(const std::filesystem::path& stem) {
  const cudaStream_t s = lane_.stream;
  std::ifstream f(stem.string() + ".state.bin", std::ios::binary);
  DqnState host{};
  f.read(reinterpret_cast<char*>(&host), sizeof host);
  if (!f || f.gcount() != static_cast<std::streamsize>(sizeof host))
    throw std::runtime_error("DqnLearner::load: cannot read " + stem.string() + ".state.bin (" +
                             std::to_string(sizeof host) + " bytes expected)");
  if (!online_arena_.load(stem.string() + ".online.safetensors", s))
    throw std::runtime_error("DqnLearner::load: " + stem.string() + ".online.safetensors has no optimizer state");
  target_arena_.load(stem.string() + ".target.safetensors", s);
  if (features_ != nullptr && !features_->arena().load(stem.string() + kFeaturesSuffix, s))
    throw std::runtime_error("DqnLearner::load: " + stem.string() + kFeaturesSuffix +
                             " has no optimizer state (a fine-tuned extractor's checkpoint carries its Adam moments)");
  state_.upload(std::span<const DqnState>(&host, 1), s);
  FH_CHECK(cudaStreamSynchronize(s));
}

void DqnLearner::copy_state_to(DqnLearner& dst, cudaStream_t stream) {
  FH_EXPECT(&dst != this, "DqnLearner::copy_state_to: dst must be another learner");
  FH_EXPECT(dst.online_arena_.padded_count() == online_arena_.padded_count() &&
                dst.target_arena_.padded_count() == target_arena_.padded_count(),
            "DqnLearner::copy_state_to: dst must be built from the same network spec");
  FH_EXPECT(
      (features_ == nullptr) == (dst.features_ == nullptr) &&
          (features_ == nullptr || features_->arena().padded_count() == dst.features_->arena().padded_count()),
      "DqnLearner::copy_state_to: dst must have a trainable extractor of the same shape exactly when this has one");
  const auto bytes = [](const gpu::ParameterArena& a) {
    return static_cast<std::size_t>(a.padded_count()) * sizeof(float);
  };
  const std::size_t ob = bytes(online_arena_), tb = bytes(target_arena_);
  if (ob > 0) {
    FH_CHECK(cudaMemcpyAsync(dst.online_arena_.params(), online_arena_.params(), ob, cudaMemcpyDeviceToDevice, stream));
    FH_CHECK(cudaMemcpyAsync(dst.online_arena_.adam_m(), online_arena_.adam_m(), ob, cudaMemcpyDeviceToDevice, stream));
    FH_CHECK(cudaMemcpyAsync(dst.online_arena_.adam_v(), online_arena_.adam_v(), ob, cudaMemcpyDeviceToDevice, stream));
  }
  if (tb > 0)
    FH_CHECK(cudaMemcpyAsync(dst.target_arena_.params(), target_arena_.params(), tb, cudaMemcpyDeviceToDevice, stream));
  FH_CHECK(cudaMemcpyAsync(dst.state_.data(), state_.data(), sizeof(DqnState), cudaMemcpyDeviceToDevice, stream));
  if (features_ != nullptr) {
    gpu::ParameterArena &from = features_->arena(), &to = dst.features_->arena();
    const std::size_t fb = bytes(from);
    if (fb > 0) {
      FH_CHECK(cudaMemcpyAsync(to.params(), from.params(), fb, cudaMemcpyDeviceToDevice, stream));
      FH_CHECK(cudaMemcpyAsync(to.adam_m(), from.adam_m(), fb, cudaMemcpyDeviceToDevice, stream));
      FH_CHECK(cudaMemcpyAsync(to.adam_v(), from.adam_v(), fb, cudaMemcpyDeviceToDevice, stream));
    }
  }
}

}  // namespace foxhunt::rl
