#include "rl/ppo/trainer.hpp"

#include <string>

#include "gpu/check.hpp"
#include "rl/ppo/gae.hpp"
#include "rl/ppo/minibatch.hpp"

namespace foxhunt::rl::ppo {
namespace {

constexpr std::uint32_t kActStream = 0x50504f02u;  // Philox stream of the rollout's action draws

void copy_d2d(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  if (bytes > 0) FH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

}  // namespace

HeadShape head_for(const ActionSpace& space, HeadShape::Bound bound) {
  HeadShape h;
  if (space.kind == ActionSpace::Kind::discrete) {
    h.kind = HeadShape::Kind::categorical;
    h.branches = space.branches;
    h.choices = space.choices;
  } else {
    h.kind = HeadShape::Kind::gaussian;
    h.dim = space.dim;
    h.low = space.low;
    h.high = space.high;
    h.bound = bound;
  }
  return h;
}

PpoTrainer::PpoTrainer(const PpoConfig& config, VecEnv& env, gpu::BlasLane lane)
    : config_(config),
      env_(env),
      learner_(config, env.obs_dim(), lane),
      rollout_(config.rollout_steps, config.num_envs, env.obs_dim(), config.head, lane.stream),
      head_(static_cast<std::size_t>(config.num_envs * config.head.width())),
      act_counter_(1) {
  FH_EXPECT(env.num_envs() == config.num_envs, "PpoTrainer: config.num_envs (" + std::to_string(config.num_envs) +
                                                   ") differs from the environment's (" +
                                                   std::to_string(env.num_envs()) + ")");
  const HeadShape want = head_for(env.action_space(), config.head.bound);
  FH_EXPECT(want.kind == config.head.kind && want.width() == config.head.width() &&
                want.action_width() == config.head.action_width(),
            "PpoTrainer: config.head does not fit the environment's action space");
  act_counter_.zero(lane.stream);
}

void PpoTrainer::reset(std::uint64_t seed) {
  const cudaStream_t s = learner_.lane().stream;
  env_.reset(rollout_.next_obs.data(), gpu::DType::f32, seed, s);
}

void PpoTrainer::enqueue_collect(cudaStream_t s) {
  Rollout& r = rollout_;
  ActorCritic& net = learner_.network();
  gpu::BlasLane lane = learner_.lane();
  lane.stream = s;
  const models::Workspace& ws = learner_.act_workspace();
  const std::int64_t N = r.num_envs, C = r.obs_dim, T = r.steps;
  const HeadShape& h = config_.head;
  const bool gaussian = h.kind == HeadShape::Kind::gaussian;
  const auto row_bytes = static_cast<std::size_t>(N * C) * sizeof(float);

  copy_d2d(r.obs.data(), r.next_obs.data(), row_bytes, s);
  for (std::int64_t t = 0; t < T; ++t) {
    float* obs_t = r.obs.data() + t * N * C;
    float* value_t = r.values.data() + t * N;
    net.forward(head_.data(), value_t, obs_t, N, ws, lane);
    sample_actions(gaussian ? nullptr : r.discrete.data() + t * N * h.branches,
                   gaussian ? r.raw.data() + t * N * h.dim : nullptr, r.env_actions.data(),
                   r.logp.data() + t * N, head_.data(), net.log_std(), N, h, config_.seed, kActStream,
                   act_counter_.data(), s);
    advance_counter(act_counter_.data(), s);

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
  }
  // Values of every row's final observation (only truncated rows read theirs) and of the last.
  net.forward(nullptr, r.bootstrap.data(), r.final_obs.data(), T * N, ws, lane);
  net.forward(nullptr, r.next_value.data(), r.next_obs.data(), N, ws, lane);
  gae(r.advantages.data(), r.returns.data(), r.rewards.data(), r.values.data(), r.bootstrap.data(),
      r.next_value.data(), r.terminated.data(), r.truncated.data(), T, N, config_.gamma, config_.gae_lambda, s);
  learner_.record_explained_variance(r, s);
}

void PpoTrainer::collect() {
  const cudaStream_t s = learner_.lane().stream;
  if (!collect_graph_.captured()) collect_graph_.capture(s, [&](cudaStream_t cs) { enqueue_collect(cs); });
  collect_graph_.replay(s);
}

void PpoTrainer::iterate() {
  collect();
  learner_.update(rollout_);
  ++iterations_;
}

void PpoTrainer::iterate_eager() {
  enqueue_collect(learner_.lane().stream);
  learner_.update_eager(rollout_);
  ++iterations_;
}

void PpoTrainer::publish_stats() {
  if (pending_) return;
  const cudaStream_t s = learner_.lane().stream;
  env_.export_stats(episodes_exit_, true, s);
  learner_.publish_stats(s);
  pending_ = true;
}

bool PpoTrainer::poll_stats(TrainerStats& out) {
  if (!pending_ || !learner_.stats().ready()) return false;  // the update's exit is published last
  out.episodes = episodes_exit_.wait();
  out.update = learner_.stats().wait();
  pending_ = false;
  return true;
}

TrainerStats PpoTrainer::wait_stats() {
  if (!pending_) publish_stats();
  TrainerStats out;
  out.episodes = episodes_exit_.wait();
  out.update = learner_.stats().wait();
  pending_ = false;
  return out;
}

}  // namespace foxhunt::rl::ppo
