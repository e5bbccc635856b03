#include "rl/ppo/learner.hpp"

#include <algorithm>
#include <string>

#include "gpu/adam.hpp"
#include "gpu/check.hpp"
#include "gpu/gather.hpp"
#include "gpu/grad_norm.hpp"
#include "gpu/launch.cuh"
#include "rl/ppo/minibatch.hpp"

namespace foxhunt::rl::ppo {
namespace {

// Philox stream ids of the learner's draws (the collector's sampling uses its own).
constexpr std::uint32_t kPermutationStream = 0x50504f01u;  // "PPO" 1

enum Counter { kUpdates = 0, kAdamSteps = 1, kPermutations = 2 };
enum Scalar { kLr = 0, kNorm = 1, kScale = 2, kFeaturesLr = 3, kFeaturesNorm = 4, kScalarCount = 5 };

// lr = lr0 + (lr_end - lr0) * min(updates / anneal, 1): CleanRL's frac = 1 - (iteration - 1) / iterations.
__global__ void lr_kernel(float* lr, const std::uint64_t* updates, float lr0, float lr_end, std::int64_t anneal) {
  const double frac = std::min(1.0, static_cast<double>(*updates) / static_cast<double>(anneal));
  *lr = static_cast<float>(lr0 + (static_cast<double>(lr_end) - lr0) * frac);
}

__global__ void kl_check_kernel(std::uint32_t* stop, const LossStats* stats, float target) {
  if (stats->last_approx_kl > target) *stop = 1u;
}

// Counts an applied Adam step (not one skipped by the KL stop).
__global__ void adam_advance_kernel(std::int64_t* step, const std::uint32_t* stop) {
  if (*stop == 0u) *step += 1;
}

__global__ void begin_update_kernel(std::uint32_t* stop, std::uint64_t* adam_steps_at_start, const std::int64_t* step) {
  *stop = 0u;
  *adam_steps_at_start = static_cast<std::uint64_t>(*step);
}

__global__ void finish_stats_kernel(UpdateStats* out, const LossStats* s, const float* lr, const std::int64_t* step,
                                    const std::uint64_t* adam_steps_at_start) {
  const float n = s->minibatches > 0 ? static_cast<float>(s->minibatches) : 1.f;
  out->policy_loss = s->policy_loss / n;
  out->value_loss = s->value_loss / n;
  out->entropy = s->entropy / n;
  out->approx_kl = s->approx_kl / n;
  out->clip_fraction = s->clip_fraction / n;
  out->lr = *lr;
  out->minibatches = static_cast<std::uint32_t>(static_cast<std::uint64_t>(*step) - *adam_steps_at_start);
}

// One block: explained variance 1 - Var(R - V) / Var(R) in double, a fixed-order reduction.
constexpr int kEvThreads = 1024;
__global__ void __launch_bounds__(kEvThreads)
    explained_variance_kernel(UpdateStats* out, const float* values, const float* returns, std::int64_t n) {
  __shared__ double sh[5][kEvThreads / 32];
  double s_r = 0, s_rr = 0, s_d = 0, s_dd = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += kEvThreads) {
    const double r = returns[i], d = r - values[i];
    s_r += r;
    s_rr += r * r;
    s_d += d;
    s_dd += d * d;
  }
  double v[4] = {s_r, s_rr, s_d, s_dd};
  for (int k = 0; k < 4; ++k) {
    for (int o = 16; o > 0; o >>= 1) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
    if ((threadIdx.x & 31) == 0) sh[k][threadIdx.x >> 5] = v[k];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double t[4] = {0, 0, 0, 0};
    for (int w = 0; w < kEvThreads / 32; ++w)
      for (int k = 0; k < 4; ++k) t[k] += sh[k][w];
    const double m_r = t[0] / n, var_r = t[1] / n - m_r * m_r;
    const double m_d = t[2] / n, var_d = t[3] / n - m_d * m_d;
    out->explained_variance = var_r > 0 ? static_cast<float>(1.0 - var_d / var_r) : 0.f;  // numpy's nan -> 0
  }
}

// Recurrent minibatch: the rows (t, j) of the M environments envs[j], time-major, and their resets.
__global__ void sequence_rows_kernel(std::int32_t* __restrict__ rows, std::uint8_t* __restrict__ mb_resets,
                                     const std::int32_t* __restrict__ envs, const std::uint8_t* __restrict__ resets,
                                     std::int64_t steps, std::int64_t num_envs, std::int64_t m) {
  const std::int64_t total = steps * m;
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = k / m, j = k % m;
    const std::int64_t row = t * num_envs + envs[j];
    rows[k] = static_cast<std::int32_t>(row);
    mb_resets[k] = resets[row];
  }
}

std::size_t n(std::int64_t a, std::int64_t b = 1) { return static_cast<std::size_t>(a * b); }

}  // namespace

PpoLearner::PpoLearner(const PpoConfig& config, std::int64_t obs_dim, gpu::BlasLane lane,
                       TrainableObsFeatures* features, float features_lr_scale, TrainableObsFeatures* features_critic)
    : config_(config),
      lane_(lane),
      net_(config, obs_dim),
      features_(features),
      features_critic_(features_critic),
      features_lr_scale_(features_lr_scale),
      stats_exit_() {
  const cudaStream_t s = lane.stream;
  FH_EXPECT(features_critic_ == nullptr || (features_ != nullptr && !config_.shared_trunk),
            "PpoLearner: a critic's extractor of its own needs the actor's and separate actor and critic networks "
            "(shared_trunk = false)");
  for (TrainableObsFeatures* f : {features_, features_critic_}) {
    if (f == nullptr) continue;
    FH_EXPECT(f->obs_dim() == obs_dim && f->max_train_rows() >= config_.minibatch_rows(),
              "PpoLearner: the trainable extractor is for " + std::to_string(f->obs_dim()) +
                  "-column observations and minibatches of up to " + std::to_string(f->max_train_rows()) +
                  " rows; the learner has " + std::to_string(obs_dim) + " and " +
                  std::to_string(config_.minibatch_rows()));
    extractors_.push_back(f);
  }
  net_.declare(arena_);
  arena_.finalize(s);
  std::mt19937_64 rng(config_.seed);
  net_.init(arena_, rng, s);
  net_.bind(arena_);
  if (config_.fused_kernels && features_ == nullptr && fused_unsupported_reason(config_, obs_dim).empty())
    fused_ = std::make_unique<FusedActorCritic>(net_, config_);

  const std::int64_t rows = config_.batch_rows(), mb = config_.minibatch_rows();
  const HeadShape& h = config_.head;
  if (net_.recurrent()) {
    // Acting and bootstrapping: steps of N rows. Training: T x M sequences.
    const std::int64_t M = config_.num_envs / config_.minibatches;
    act_ws_.storage = gpu::DeviceBuffer<std::byte>(net_.workspace_bytes(config_.num_envs));
    act_ws_.view = models::Workspace{act_ws_.storage.data(), config_.num_envs, false};
    train_ws_ = gpu::DeviceBuffer<std::byte>(net_.sequence_workspace_bytes(config_.rollout_steps, M));
    train_view_ = models::Workspace{train_ws_.data(), M, false};
    mb_state0_ = gpu::DeviceBuffer<float>(n(M, net_.state_features()));
    mb_rows_ = gpu::DeviceBuffer<std::int32_t>(n(mb));
    mb_resets_ = gpu::DeviceBuffer<std::uint8_t>(n(mb));
    perm_ = gpu::DeviceBuffer<std::int32_t>(n(config_.num_envs));
    perm_ws_ = gpu::DeviceBuffer<std::byte>(permutation_workspace_bytes(config_.num_envs));
  } else {
    act_ws_.storage = gpu::DeviceBuffer<std::byte>(net_.workspace_bytes(rows));
    act_ws_.view = models::Workspace{act_ws_.storage.data(), rows, false};
    if (!fused_) {
      train_ws_ = gpu::DeviceBuffer<std::byte>(net_.workspace_bytes(mb));
      train_view_ = models::Workspace{train_ws_.data(), mb, false};
    }
    perm_ = gpu::DeviceBuffer<std::int32_t>(n(rows));
    perm_ws_ = gpu::DeviceBuffer<std::byte>(permutation_workspace_bytes(rows));
  }
  if (fused_) {
    // The fused minibatch reads the rollout in place: none of the GEMM path's minibatch buffers.
    fused_ws_ = gpu::DeviceBuffer<std::byte>(fused_->minibatch_workspace_bytes(mb));
    adv_norms_ = gpu::DeviceBuffer<float>(n(config_.minibatches, 2));
  } else {
    mb_obs_ = gpu::DeviceBuffer<float>(n(mb, obs_dim));
    if (h.kind == HeadShape::Kind::gaussian)
      mb_raw_ = gpu::DeviceBuffer<float>(n(mb, h.dim));
    else
      mb_discrete_ = gpu::DeviceBuffer<std::int32_t>(n(mb, h.branches));
    for (auto* b : {&mb_logp_, &mb_adv_, &mb_ret_, &mb_val_, &mb_value_, &d_value_})
      *b = gpu::DeviceBuffer<float>(n(mb));
    mb_head_ = gpu::DeviceBuffer<float>(n(mb, h.width()));
    d_head_ = gpu::DeviceBuffer<float>(n(mb, h.width()));
    loss_ws_ = gpu::DeviceBuffer<std::byte>(policy_loss_workspace_bytes(mb, h));
  }
  norm_ws_ = gpu::DeviceBuffer<std::byte>(gpu::grad_norm_workspace_bytes(arena_.padded_count()));
  if (features_ != nullptr) {
    d_obs_ = gpu::DeviceBuffer<float>(n(mb, obs_dim));
    d_obs_scratch_ = gpu::DeviceBuffer<float>(n(mb, obs_dim));
    std::size_t norm_bytes = 0;  // one workspace, the extractors' norms run one after the other
    for (TrainableObsFeatures* f : extractors_)
      norm_bytes = std::max(norm_bytes, gpu::grad_norm_workspace_bytes(f->arena().padded_count()));
    features_norm_ws_ = gpu::DeviceBuffer<std::byte>(norm_bytes);
  }
  if (features_critic_ != nullptr) {
    mb_obs_critic_ = gpu::DeviceBuffer<float>(n(mb, obs_dim));
    d_obs_critic_ = gpu::DeviceBuffer<float>(n(mb, obs_dim));
  }
  scalars_ = gpu::DeviceBuffer<float>(kScalarCount);
  kl_stop_ = gpu::DeviceBuffer<std::uint32_t>(1);
  counters_ = gpu::DeviceBuffer<std::uint64_t>(kCounterCount + 1);  // + the Adam step count at the update's start
  loss_stats_ = gpu::DeviceBuffer<LossStats>(1);
  update_stats_ = gpu::DeviceBuffer<UpdateStats>(1);
  for (auto* b : {&scalars_}) b->zero(s);
  kl_stop_.zero(s);
  counters_.zero(s);
  update_stats_.zero(s);
  zero_loss_stats(loss_stats_.data(), s);

  adam_.beta1 = config_.adam_beta1;
  adam_.beta2 = config_.adam_beta2;
  adam_.eps = config_.adam_eps;
  adam_.weight_decay = 0.f;
  adam_.decoupled = false;
}

void PpoLearner::fused_minibatch(Rollout& r, const std::int32_t* rows, int index, cudaStream_t s) {
  const HeadShape& h = config_.head;
  FusedMinibatchInputs in{};
  in.obs = r.obs.data();
  in.discrete = h.gaussian() ? nullptr : r.discrete.data();
  in.raw = h.gaussian() ? r.raw.data() : nullptr;
  in.logp = r.logp.data();
  in.advantages = r.advantages.data();
  in.returns = r.returns.data();
  in.values = r.values.data();
  fused_->minibatch(loss_stats_.data(), in, rows, config_.minibatch_rows(),
                    config_.normalize_advantages ? adv_norms_.data() + 2 * index : nullptr, fused_ws_.data(), s);
}

void PpoLearner::minibatch(Rollout& r, const std::int32_t* units, int index, cudaStream_t s) {
  if (fused_) return fused_minibatch(r, units, index, s);
  const HeadShape& h = config_.head;
  const std::int64_t mb = config_.minibatch_rows();
  const std::int32_t* rows = units;  // feed-forward: rows; recurrent: environments
  const std::int64_t M = config_.num_envs / config_.minibatches;
  if (net_.recurrent()) {
    sequence_rows_kernel<<<gpu::grid_stride_blocks(mb), gpu::kBlock, 0, s>>>(mb_rows_.data(), mb_resets_.data(), units,
                                                                             r.resets.data(), r.steps, r.num_envs, M);
    FH_CHECK_LAUNCH();
    net_.gather_state(mb_state0_.data(), r.state0.data(), units, M, r.num_envs, s);
    rows = mb_rows_.data();
  }
  GatherSpec in{};
  in.obs = r.obs.data();
  in.obs_dtype = gpu::DType::f32;
  in.obs_dim = r.obs_dim;
  in.discrete = h.kind == HeadShape::Kind::gaussian ? nullptr : r.discrete.data();
  in.raw = h.kind == HeadShape::Kind::gaussian ? r.raw.data() : nullptr;
  in.action_width = h.action_width();
  in.logp = r.logp.data();
  in.advantages = r.advantages.data();
  in.returns = r.returns.data();
  in.values = r.values.data();
  GatherOut out{mb_obs_.data(), mb_discrete_.data(), mb_raw_.data(), mb_logp_.data(),
                mb_adv_.data(), mb_ret_.data(),      mb_val_.data()};
  gather_minibatch(out, in, rows, mb, s);

  gpu::BlasLane lane = lane_;
  lane.stream = s;
  // The extractor's features of these observations (a recurrent policy's: every row of the
  // minibatch's whole sequences) with its current weights, into the gathered copy; a critic's
  // extractor of its own writes its features into a second copy.
  const float* obs_critic = nullptr;
  if (features_critic_ != nullptr) {
    FH_CHECK(cudaMemcpyAsync(mb_obs_critic_.data(), mb_obs_.data(), mb_obs_critic_.bytes(), cudaMemcpyDeviceToDevice,
                             s));
    features_critic_->train_forward(mb_obs_critic_.data(), mb, lane);
    obs_critic = mb_obs_critic_.data();
  }
  if (features_ != nullptr) features_->train_forward(mb_obs_.data(), mb, lane);
  if (net_.recurrent())
    net_.forward_sequence(mb_head_.data(), mb_value_.data(), mb_obs_.data(), mb_state0_.data(), mb_resets_.data(),
                          r.steps, M, train_view_, lane, obs_critic);
  else
    net_.forward(mb_head_.data(), mb_value_.data(), mb_obs_.data(), mb, train_view_, lane, obs_critic);
  ppo_policy_loss(d_head_.data(), net_.log_std_grad(), loss_stats_.data(), mb_head_.data(), net_.log_std(),
                  mb_discrete_.data(), mb_raw_.data(), mb_logp_.data(), mb_adv_.data(), mb, h, config_.clip,
                  config_.ent_coef, config_.normalize_advantages, loss_ws_.data(), s);
  ppo_value_loss(d_value_.data(), loss_stats_.data(), mb_value_.data(), mb_val_.data(), mb_ret_.data(), mb,
                 config_.clip, config_.clip_value, config_.vf_coef, s);
  if (net_.recurrent())
    net_.backward_sequence(d_head_.data(), d_value_.data(), mb_obs_.data(), mb_state0_.data(), mb_resets_.data(),
                           r.steps, M, train_view_, lane, d_obs_.data(), d_obs_scratch_.data(), obs_critic,
                           d_obs_critic_.data());
  else
    net_.backward(d_head_.data(), d_value_.data(), mb_obs_.data(), mb, train_view_, lane, d_obs_.data(),
                  d_obs_scratch_.data(), obs_critic, d_obs_critic_.data());
  if (features_ != nullptr) features_->train_backward(d_obs_.data(), mb, lane);
  if (features_critic_ != nullptr) features_critic_->train_backward(d_obs_critic_.data(), mb, lane);
}

void PpoLearner::optimizer_step(cudaStream_t s) {
  const float* scale = nullptr;
  if (config_.max_grad_norm > 0) {
    gpu::global_grad_norm(scalars_.data() + kNorm, arena_.grads(), arena_.padded_count(), norm_ws_.data(), s);
    for (TrainableObsFeatures* f : extractors_) {
      gpu::ParameterArena& fa = f->arena();
      gpu::global_grad_norm(scalars_.data() + kFeaturesNorm, fa.grads(), fa.padded_count(), features_norm_ws_.data(),
                            s);
      gpu::combine_norms(scalars_.data() + kNorm, scalars_.data() + kFeaturesNorm, s);
    }
    gpu::clip_scale(scalars_.data() + kScale, scalars_.data() + kNorm, config_.max_grad_norm, s);
    scale = scalars_.data() + kScale;
  }
  auto* adam_steps = reinterpret_cast<std::int64_t*>(counters_.data() + kAdamSteps);
  gpu::adam_step_device(arena_.params(), arena_.adam_m(), arena_.adam_v(), arena_.grads(), arena_.padded_count(), adam_,
                        scalars_.data() + kLr, adam_steps, scale, kl_stop_.data(), s);
  for (TrainableObsFeatures* f : extractors_) {
    gpu::ParameterArena& fa = f->arena();
    gpu::adam_step_device(fa.params(), fa.adam_m(), fa.adam_v(), fa.grads(), fa.padded_count(), adam_,
                          scalars_.data() + kFeaturesLr, adam_steps, scale, kl_stop_.data(), s);
  }
  adam_advance_kernel<<<1, 1, 0, s>>>(adam_steps, kl_stop_.data());
  FH_CHECK_LAUNCH();
}

void PpoLearner::enqueue_update(Rollout& r, cudaStream_t s) {
  FH_EXPECT(r.steps == config_.rollout_steps && r.num_envs == config_.num_envs,
            "PpoLearner::update: the rollout's shape differs from the config's");
  auto* adam_steps = reinterpret_cast<std::int64_t*>(counters_.data() + kAdamSteps);
  lr_kernel<<<1, 1, 0, s>>>(scalars_.data() + kLr, counters_.data() + kUpdates, config_.lr, config_.lr_end,
                            std::max<std::int64_t>(config_.anneal_iterations, 1));
  FH_CHECK_LAUNCH();
  if (features_ != nullptr) {
    gpu::scale_lr(scalars_.data() + kFeaturesLr, scalars_.data() + kLr, features_lr_scale_, s);
  }
  begin_update_kernel<<<1, 1, 0, s>>>(kl_stop_.data(), counters_.data() + kCounterCount, adam_steps);
  FH_CHECK_LAUNCH();
  zero_loss_stats(loss_stats_.data(), s);
  const std::int64_t units = net_.recurrent() ? config_.num_envs : config_.batch_rows();
  const std::int64_t per_mb = units / config_.minibatches;
  for (int e = 0; e < config_.epochs; ++e) {
    random_permutation(perm_.data(), units, config_.seed, kPermutationStream, counters_.data() + kPermutations,
                       perm_ws_.data(), s);
    advance_counter(counters_.data() + kPermutations, s);
    if (fused_ && config_.normalize_advantages)
      fused_->advantage_norms(adv_norms_.data(), r.advantages.data(), perm_.data(), per_mb, config_.minibatches, s);
    for (int m = 0; m < config_.minibatches; ++m) {
      minibatch(r, perm_.data() + m * per_mb, m, s);
      // Data-parallel: the mean gradient of every replica (the same on each), so the norm, the
      // clip and Adam agree without further exchange.
      if (dp_.active()) {
        dp_.comm->all_reduce_mean(arena_.grads(), arena_.padded_count(), s, dp_.bucket_floats());
        for (TrainableObsFeatures* f : extractors_)
          dp_.comm->all_reduce_mean(f->arena().grads(), f->arena().padded_count(), s, dp_.bucket_floats());
      }
      optimizer_step(s);
    }
    if (config_.target_kl > 0) {
      kl_check_kernel<<<1, 1, 0, s>>>(kl_stop_.data(), loss_stats_.data(), config_.target_kl);
      FH_CHECK_LAUNCH();
      // Each replica measured the KL on its own minibatch: any replica over the target stops all.
      if (dp_.active()) dp_.comm->max_u32(kl_stop_.data(), 1, s);
    }
  }
  finish_stats_kernel<<<1, 1, 0, s>>>(update_stats_.data(), loss_stats_.data(), scalars_.data() + kLr, adam_steps,
                                      counters_.data() + kCounterCount);
  FH_CHECK_LAUNCH();
  advance_counter(counters_.data() + kUpdates, s);
}

void PpoLearner::join(const gpu::DataParallel& dp) {
  FH_EXPECT(graphs_.empty(), "PpoLearner::join: before the first update");
  dp_ = dp;
  if (!dp_.active()) return;
  const cudaStream_t s = lane_.stream;
  for (float* a : {arena_.params(), arena_.adam_m(), arena_.adam_v()}) dp_.comm->broadcast(a, arena_.padded_count(), 0, s);
  for (TrainableObsFeatures* f : extractors_) {
    gpu::ParameterArena& fa = f->arena();
    for (float* a : {fa.params(), fa.adam_m(), fa.adam_v()}) dp_.comm->broadcast(a, fa.padded_count(), 0, s);
  }
  FH_CHECK(cudaStreamSynchronize(s));  // set-up: every replica starts from the same weights
}

void PpoLearner::update(Rollout& r) {
  for (const auto& [rollout, graph] : graphs_)
    if (rollout == &r) {
      graph.replay(lane_.stream);
      return;
    }
  gpu::CudaGraph graph;
  graph.capture(lane_.stream, [&](cudaStream_t cs) { enqueue_update(r, cs); });
  graphs_.emplace_back(&r, std::move(graph));
  graphs_.back().second.replay(lane_.stream);
}

void PpoLearner::update_eager(Rollout& r) { enqueue_update(r, lane_.stream); }

void PpoLearner::record_explained_variance(const Rollout& r, cudaStream_t s) {
  explained_variance_kernel<<<1, kEvThreads, 0, s>>>(update_stats_.data(), r.values.data(), r.returns.data(), r.rows());
  FH_CHECK_LAUNCH();
}

void PpoLearner::publish_stats(cudaStream_t s) { stats_exit_.publish(update_stats_.data(), s); }

}  // namespace foxhunt::rl::ppo
