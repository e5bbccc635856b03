#include "rl/ppo/collector.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "rl/ppo/gae.hpp"
#include "rl/ppo/minibatch.hpp"

namespace foxhunt::rl::ppo {
namespace {

constexpr std::uint32_t kActStream = 0x50504f02u;  // Philox stream of the rollout's action draws

void copy_d2d(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  if (bytes > 0) FH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

__global__ void done_mask_kernel(std::uint8_t* __restrict__ done, const std::uint8_t* __restrict__ terminated,
                                 const std::uint8_t* __restrict__ truncated, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    done[i] = (terminated[i] | truncated[i]) != 0 ? 1 : 0;
}

// done = terminated | truncated: the environments whose next step starts an episode.
void done_mask(std::uint8_t* done, const std::uint8_t* terminated, const std::uint8_t* truncated, std::int64_t n,
               cudaStream_t s) {
  done_mask_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, s>>>(done, terminated, truncated, n);
  FH_CHECK_LAUNCH();
}

}  // namespace

RolloutCollector::RolloutCollector(const PpoConfig& config, VecEnv& env, PpoLearner& acting,
                                   bool record_explained_variance, cudaStream_t stream)
    : config_(config),
      env_(env),
      acting_(acting),
      record_ev_(record_explained_variance),
      head_(static_cast<std::size_t>(config.num_envs * config.head.width())),
      act_counter_(1) {
  FH_EXPECT(env.num_envs() == config.num_envs, "RolloutCollector: config.num_envs (" +
                                                   std::to_string(config.num_envs) +
                                                   ") differs from the environment's (" +
                                                   std::to_string(env.num_envs()) + ")");
  act_counter_.zero(stream);
  if (config.normalize_rewards) reward_norm_.emplace(config.num_envs, config.gamma, stream);
}

void RolloutCollector::set_features(ObsFeatures* features) {
  if (features != nullptr)
    FH_EXPECT(features->num_envs() == config_.num_envs && features->obs_dim() == env_.obs_dim(),
              "RolloutCollector::set_features: the extractor is for " + std::to_string(features->num_envs()) + " x " +
                  std::to_string(features->obs_dim()) + " observations, the environment writes " +
                  std::to_string(config_.num_envs) + " x " + std::to_string(env_.obs_dim()));
  features_ = features;
  graphs_.clear();
}

void RolloutCollector::set_critic_features(TrainableObsFeatures* features) {
  if (features != nullptr) {
    FH_EXPECT(features->num_envs() == config_.num_envs && features->obs_dim() == env_.obs_dim(),
              "RolloutCollector::set_critic_features: the extractor is for " + std::to_string(features->num_envs()) +
                  " x " + std::to_string(features->obs_dim()) + " observations, the environment writes " +
                  std::to_string(config_.num_envs) + " x " + std::to_string(env_.obs_dim()));
    FH_EXPECT(!config_.shared_trunk && acting_.fused() == nullptr,
              "RolloutCollector::set_critic_features: needs separate actor and critic networks on the GEMM path");
    critic_obs_ = gpu::DeviceBuffer<float>(static_cast<std::size_t>(config_.num_envs * env_.obs_dim()));
  }
  critic_features_ = features;
  graphs_.clear();
}

void RolloutCollector::reset(std::uint64_t seed, Rollout& carry, cudaStream_t s) {
  env_.reset(carry.next_obs.data(), gpu::DType::f32, seed, s);
  if (features_ != nullptr) {
    gpu::BlasLane lane = acting_.lane();
    lane.stream = s;
    features_->step(carry.next_obs.data(), nullptr, nullptr, lane);  // every row starts an episode
  }
  if (reward_norm_) reward_norm_->reset(s);
  if (acting_.network().recurrent()) {
    carry.state.zero(s);
    carry.last_done.zero(s);
  }
}

void RolloutCollector::enqueue(Rollout& r, Rollout& from, cudaStream_t s) {
  ActorCritic& net = acting_.network();
  gpu::BlasLane lane = acting_.lane();
  lane.stream = s;
  const models::Workspace& ws = acting_.act_workspace();
  const std::int64_t N = r.num_envs, C = r.obs_dim, T = r.steps;
  const HeadShape& h = config_.head;
  const bool gaussian = h.kind == HeadShape::Kind::gaussian;
  const auto row_bytes = static_cast<std::size_t>(N * C) * sizeof(float);
  const bool recurrent = net.recurrent();
  const auto state_bytes = static_cast<std::size_t>(N * net.state_features()) * sizeof(float);
  const FusedActorCritic* fused = acting_.fused();
  // The rows a value reads: `rows` as they are, or (a critic's extractor of its own) a copy with
  // the critic's features, valid until the next call. A value-only call passes them as its obs
  // (the critic reads obs when obs_critic is null).
  auto critic_rows = [&](const float* rows) -> const float* {
    if (critic_features_ == nullptr) return rows;
    copy_d2d(critic_obs_.data(), rows, row_bytes, s);
    critic_features_->peek(critic_obs_.data(), lane);
    return critic_obs_.data();
  };
  const bool critic_copy = critic_features_ != nullptr;

  if (&from != &r) {  // the carried state of the rollout filled last
    copy_d2d(r.next_obs.data(), from.next_obs.data(), row_bytes, s);
    if (recurrent) {
      copy_d2d(r.state.data(), from.state.data(), state_bytes, s);
      copy_d2d(r.last_done.data(), from.last_done.data(), static_cast<std::size_t>(N), s);
    }
  }
  copy_d2d(r.obs.data(), r.next_obs.data(), row_bytes, s);
  // A trainable extractor changed since the carried observation's features were written (the
  // update in between): the first step acts on them with the current weights.
  if (auto* trainable = dynamic_cast<TrainableObsFeatures*>(features_))
    trainable->step(r.obs.data(), nullptr, nullptr, lane);
  if (recurrent) {
    copy_d2d(r.state0.data(), r.state.data(), state_bytes, s);
    copy_d2d(r.resets.data(), r.last_done.data(), static_cast<std::size_t>(N), s);
  }
  for (std::int64_t t = 0; t < T; ++t) {
    float* obs_t = r.obs.data() + t * N * C;
    float* value_t = r.values.data() + t * N;
    std::int32_t* discrete_t = gaussian ? nullptr : r.discrete.data() + t * N * h.branches;
    float* raw_t = gaussian ? r.raw.data() + t * N * h.dim : nullptr;
    if (fused) {
      // One launch; the draw counter advances by T after the loop (the same numbers).
      fused->act(FusedActOutputs{discrete_t, raw_t, r.env_actions.data(), r.logp.data() + t * N, value_t}, obs_t, N,
                 config_.seed, kActStream, act_counter_.data(), static_cast<std::uint64_t>(t), s);
    } else {
      const float* obs_critic = critic_copy ? critic_rows(obs_t) : nullptr;
      if (recurrent)
        net.step(head_.data(), value_t, r.state.data(), obs_t, r.resets.data() + t * N, N, ws, lane, obs_critic);
      else
        net.forward(head_.data(), value_t, obs_t, N, ws, lane, obs_critic);
      sample_actions(discrete_t, raw_t, r.env_actions.data(), r.logp.data() + t * N, head_.data(), net.log_std(), N, h,
                     config_.seed, kActStream, act_counter_.data(), s);
      advance_counter(act_counter_.data(), s);
    }

    StepOutputs out;
    out.obs = t + 1 < T ? static_cast<void*>(r.obs.data() + (t + 1) * N * C) : r.next_obs.data();
    out.reward = r.rewards.data() + t * N;
    out.terminated = r.terminated.data() + t * N;
    out.truncated = r.truncated.data() + t * N;
    out.final_obs = r.final_obs.data() + t * N * C;
    out.obs_dtype = gpu::DType::f32;
    ActionInput in;
    if (gaussian)
      in.continuous = r.env_actions.data();
    else
      in.discrete = r.discrete.data() + t * N * h.branches;
    env_.step(out, in, 1, s);
    if (reward_norm_) reward_norm_->apply(out.reward, out.terminated, out.truncated, s);
    if (features_ != nullptr) {
      // The final observations continue the old episodes (a copy of the state), then the next
      // observations step the state, reset where an episode ended.
      features_->peek(static_cast<float*>(out.final_obs), lane);
      features_->step(static_cast<float*>(out.obs), out.terminated, out.truncated, lane);
    }
    if (recurrent) {
      // V(final obs) continues the old episode: one step from a copy of the state after step t.
      copy_d2d(r.scratch_state.data(), r.state.data(), state_bytes, s);
      net.step(nullptr, r.bootstrap.data() + t * N, r.scratch_state.data(), critic_rows(r.final_obs.data() + t * N * C),
               nullptr, N, ws, lane);
      done_mask(t + 1 < T ? r.resets.data() + (t + 1) * N : r.last_done.data(), out.terminated, out.truncated, N, s);
    } else if (critic_copy) {
      // Feed-forward: the step's bootstrap values here, each from its own critic copy.
      net.forward(nullptr, r.bootstrap.data() + t * N, critic_rows(r.final_obs.data() + t * N * C), N, ws, lane);
    }
  }
  if (recurrent) {
    copy_d2d(r.scratch_state.data(), r.state.data(), state_bytes, s);
    net.step(nullptr, r.next_value.data(), r.scratch_state.data(), critic_rows(r.next_obs.data()), r.last_done.data(), N,
             ws, lane);
  } else if (fused) {
    advance_counter(act_counter_.data(), s, static_cast<std::uint64_t>(T));
    fused->values(r.bootstrap.data(), r.final_obs.data(), T * N, s);
    fused->values(r.next_value.data(), r.next_obs.data(), N, s);
  } else if (critic_copy) {
    net.forward(nullptr, r.next_value.data(), critic_rows(r.next_obs.data()), N, ws, lane);
  } else {
    // Values of every row's final observation (only truncated rows read theirs) and of the last.
    net.forward(nullptr, r.bootstrap.data(), r.final_obs.data(), T * N, ws, lane);
    net.forward(nullptr, r.next_value.data(), r.next_obs.data(), N, ws, lane);
  }
  gae(r.advantages.data(), r.returns.data(), r.rewards.data(), r.values.data(), r.bootstrap.data(), r.next_value.data(),
      r.terminated.data(), r.truncated.data(), T, N, config_.gamma, config_.gae_lambda, s);
  if (record_ev_) acting_.record_explained_variance(r, s);
}

void RolloutCollector::collect(Rollout& rollout, Rollout& from, cudaStream_t s) {
  auto it = graphs_.find(&rollout);
  if (it == graphs_.end() || it->second.first != &from) {
    gpu::CudaGraph g;
    g.capture(s, [&](cudaStream_t cs) { enqueue(rollout, from, cs); });
    it = graphs_.insert_or_assign(&rollout, std::make_pair(&from, std::move(g))).first;
  }
  it->second.second.replay(s);
}

void RolloutCollector::collect_eager(Rollout& rollout, Rollout& from, cudaStream_t s) { enqueue(rollout, from, s); }

std::size_t RolloutCollector::graph_nodes(const Rollout& rollout) const {
  auto it = graphs_.find(&rollout);
  return it == graphs_.end() ? 0 : it->second.second.node_count();
}

}  // namespace foxhunt::rl::ppo
