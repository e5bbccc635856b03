#include "rl/dqn/replay_hooks.hpp"

#include "gpu/check.hpp"

namespace foxhunt::rl {

DqnBatch dqn_batch_view(SampledBatch& out) { return dqn_batch_view(out.view()); }

DqnBatch dqn_batch_view(const SampledBatchView& v) {
  return DqnBatch{
      v.obs,  static_cast<const std::int32_t*>(v.actions), v.returns, v.discounts, v.next_obs, v.weights, v.indices,
      v.batch};
}

DqnReplayHooks make_replay_hooks(ReplayBuffer& rb, SampledBatch& out, std::int64_t num_envs) {
  const TransitionLayout layout = rb.config().layout;
  FH_EXPECT(layout.obs_dtype == gpu::DType::f32 || layout.obs_dtype == gpu::DType::bf16,
            "make_replay_hooks: replay.layout.obs_dtype must be f32 or bf16");
  FH_EXPECT(layout.action_kind != ActionKind::continuous,
            "make_replay_hooks: replay.layout.action_kind must be discrete or multi_discrete for DQN");
  const int producer = rb.add_producer(num_envs);
  DqnReplayHooks h;
  h.batch = dqn_batch_view(out);
  h.insert = [&rb, producer, num_envs, layout](const float* obs, const std::int32_t* actions, const float* reward,
                                               const std::uint8_t* terminated, const std::uint8_t* truncated,
                                               const float* next_obs, cudaStream_t s) {
    TransitionBatch b;
    b.layout = layout;
    b.layout.obs_dtype = gpu::DType::f32;  // what the trainer hands over (cast on insert if stored as bf16)
    b.steps = 1;
    b.envs = num_envs;
    b.obs = obs;
    b.next_obs = next_obs;
    b.actions = actions;
    b.rewards = reward;
    b.terminated = terminated;
    b.truncated = truncated;
    rb.insert(producer, b, s);
  };
  h.sample = [&rb, &out](cudaStream_t s) { rb.sample(out.view(), s); };
  h.update_priorities = [&rb](const std::int32_t* indices, const float* priorities, std::int64_t n, cudaStream_t s) {
    rb.update_priorities(indices, priorities, n, s);
  };
  return h;
}

}  // namespace foxhunt::rl
