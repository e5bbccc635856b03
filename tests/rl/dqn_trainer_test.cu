// DqnTrainer end to end on a toy task that needs no other module: a vectorized contextual bandit
// (observation: 4 random features; reward 1 for choosing the index of the largest feature; every
// step terminates) and a small uniform ring replay, both written here as device kernels. The
// greedy policy must pick the best arm on >= 90% of fresh contexts: acting, insertion, the captured
// update graph (sample -> update -> priority hook) and the schedules all have to work for that.
#include "models/fd_support.hpp"

#include <string>
#include <vector>

#include "gpu/philox.cuh"
#include "rl/dqn/trainer.hpp"

namespace foxhunt::rl {
namespace {

constexpr std::int64_t kDim = 4;

__global__ void contexts_kernel(float* obs, std::int64_t n, std::uint64_t seed, std::uint64_t* counter) {
  const std::uint64_t c = *counter;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float4 u = gpu::uniform4(seed, static_cast<std::uint32_t>(i), c);
    obs[i * kDim + 0] = 2 * u.x - 1;
    obs[i * kDim + 1] = 2 * u.y - 1;
    obs[i * kDim + 2] = 2 * u.z - 1;
    obs[i * kDim + 3] = 2 * u.w - 1;
  }
}
__global__ void bump(std::uint64_t* counter) { *counter += 1; }
__global__ void bandit_step_kernel(float* reward, std::uint8_t* term, std::uint8_t* trunc, float* final_obs,
                                   const float* obs, const std::int32_t* actions, std::int64_t n) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    int best = 0;
    for (int k = 1; k < kDim; ++k)
      if (obs[i * kDim + k] > obs[i * kDim + best]) best = k;
    reward[i] = actions[i] == best ? 1.f : 0.f;
    term[i] = 1;
    trunc[i] = 0;
    for (int k = 0; k < kDim; ++k) final_obs[i * kDim + k] = obs[i * kDim + k];
  }
}

struct Ring {
  std::int64_t cap;
  gpu::DeviceBuffer<float> obs, next, ret, disc;
  gpu::DeviceBuffer<std::int32_t> act;
  gpu::DeviceBuffer<std::uint64_t> head, counter;  // transitions ever inserted; sampler counter
};

__global__ void ring_insert_kernel(float* r_obs, float* r_next, float* r_ret, float* r_disc, std::int32_t* r_act,
                                   const std::uint64_t* head, std::int64_t cap, const float* obs, const float* next,
                                   const std::int32_t* act, const float* reward, const std::uint8_t* term,
                                   std::int64_t n, float gamma) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const auto slot = static_cast<std::int64_t>((*head + static_cast<std::uint64_t>(i)) % cap);
    for (int k = 0; k < kDim; ++k) {
      r_obs[slot * kDim + k] = obs[i * kDim + k];
      r_next[slot * kDim + k] = next[i * kDim + k];
    }
    r_act[slot] = act[i];
    r_ret[slot] = reward[i];
    r_disc[slot] = term[i] ? 0.f : gamma;
  }
}
__global__ void advance_head(std::uint64_t* head, std::int64_t n) { *head += static_cast<std::uint64_t>(n); }

__global__ void ring_sample_kernel(float* obs, float* next, std::int32_t* act, float* ret, float* disc, float* w,
                                   std::int32_t* idx, const float* r_obs, const float* r_next,
                                   const std::int32_t* r_act, const float* r_ret, const float* r_disc,
                                   const std::uint64_t* head, std::uint64_t* counter, std::int64_t cap,
                                   std::int64_t batch) {
  const std::uint64_t size = *head < static_cast<std::uint64_t>(cap) ? *head : static_cast<std::uint64_t>(cap);
  const std::uint64_t c = *counter;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const uint4 r = gpu::random_bits4(99, 5, (c << 20) + static_cast<std::uint64_t>(i));
    const auto j = static_cast<std::int64_t>((static_cast<std::uint64_t>(r.x) * size) >> 32);
    idx[i] = static_cast<std::int32_t>(j);
    for (int k = 0; k < kDim; ++k) {
      obs[i * kDim + k] = r_obs[j * kDim + k];
      next[i * kDim + k] = r_next[j * kDim + k];
    }
    act[i] = r_act[j];
    ret[i] = r_ret[j];
    disc[i] = r_disc[j];
    w[i] = 1.f;
  }
}

class DqnTrainerTest : public test::LaneTest {};

TEST_F(DqnTrainerTest, LearnsContextualBandit) {
  SCOPED_TRACE(seed_note());
  const std::int64_t N = 32, B = 64, kEval = 1000;
  DqnLearnerConfig cfg;
  cfg.net.obs_dim = kDim;
  cfg.net.hidden = {64, 64};
  cfg.net.actions = kDim;
  cfg.net.dueling = true;
  cfg.batch = B;
  cfg.schedule.lr_start = cfg.schedule.lr_end = 1e-3f;
  cfg.schedule.epsilon_start = 1.f;
  cfg.schedule.epsilon_end = 0.05f;
  cfg.schedule.epsilon_steps = 10000;
  cfg.tau = 0.01f;
  cfg.seed = seed_;
  cfg.act_rows = kEval;
  DqnLearner learner(cfg, lane());
  const cudaStream_t st = s();

  gpu::DeviceBuffer<std::uint64_t> env_counter(1);
  env_counter.zero(st);
  const std::uint64_t env_seed = rng()();
  DqnEnvHooks env;
  env.num_envs = N;
  env.obs_dim = kDim;
  env.reset = [&](float* obs, std::uint64_t, cudaStream_t cs) {
    contexts_kernel<<<1, 128, 0, cs>>>(obs, N, env_seed, env_counter.data());
    bump<<<1, 1, 0, cs>>>(env_counter.data());
  };
  // The bandit reads the current observation: the trainer's obs() at step time.
  DqnTrainer* trainer_ptr = nullptr;
  env.step = [&](float* next_obs, float* reward, std::uint8_t* term, std::uint8_t* trunc, float* final_obs,
                 const std::int32_t* actions, cudaStream_t cs) {
    bandit_step_kernel<<<1, 128, 0, cs>>>(reward, term, trunc, final_obs, trainer_ptr->obs(), actions, N);
    contexts_kernel<<<1, 128, 0, cs>>>(next_obs, N, env_seed, env_counter.data());
    bump<<<1, 1, 0, cs>>>(env_counter.data());
  };

  Ring ring{4096,
            gpu::DeviceBuffer<float>(4096 * kDim),
            gpu::DeviceBuffer<float>(4096 * kDim),
            gpu::DeviceBuffer<float>(4096),
            gpu::DeviceBuffer<float>(4096),
            gpu::DeviceBuffer<std::int32_t>(4096),
            gpu::DeviceBuffer<std::uint64_t>(1),
            gpu::DeviceBuffer<std::uint64_t>(1)};
  ring.head.zero(st);
  ring.counter.zero(st);
  gpu::DeviceBuffer<float> b_obs(B * kDim), b_next(B * kDim), b_ret(B), b_disc(B), b_w(B);
  gpu::DeviceBuffer<std::int32_t> b_act(B), b_idx(B);
  std::int64_t priority_calls = 0;
  DqnReplayHooks replay;
  replay.batch =
      DqnBatch{b_obs.data(), b_act.data(), b_ret.data(), b_disc.data(), b_next.data(), b_w.data(), b_idx.data(), B};
  replay.insert = [&](const float* obs, const std::int32_t* act, const float* reward, const std::uint8_t* term,
                      const std::uint8_t*, const float* next, cudaStream_t cs) {
    ring_insert_kernel<<<1, 128, 0, cs>>>(ring.obs.data(), ring.next.data(), ring.ret.data(), ring.disc.data(),
                                          ring.act.data(), ring.head.data(), ring.cap, obs, next, act, reward, term, N,
                                          0.99f);
    advance_head<<<1, 1, 0, cs>>>(ring.head.data(), N);
  };
  replay.sample = [&](cudaStream_t cs) {
    ring_sample_kernel<<<1, 128, 0, cs>>>(b_obs.data(), b_next.data(), b_act.data(), b_ret.data(), b_disc.data(),
                                          b_w.data(), b_idx.data(), ring.obs.data(), ring.next.data(), ring.act.data(),
                                          ring.ret.data(), ring.disc.data(), ring.head.data(), ring.counter.data(),
                                          ring.cap, B);
    bump<<<1, 1, 0, cs>>>(ring.counter.data());
  };
  replay.update_priorities = [&](const std::int32_t*, const float*, std::int64_t n, cudaStream_t) {
    EXPECT_EQ(n, B);
    ++priority_calls;  // host side: runs once, at capture
  };

  DqnTrainer trainer(learner, env, replay, DqnTrainSchedule{512, 32, 4});
  trainer_ptr = &trainer;
  trainer.reset(1);
  trainer.run(20000);
  EXPECT_EQ(trainer.transitions(), 20000);
  EXPECT_EQ(trainer.updates(), (20000 - 512 + 32) / 32 * 4);
  EXPECT_EQ(priority_calls, 1);  // captured once, replayed since

  // Greedy policy on fresh contexts.
  gpu::DeviceBuffer<float> eval_obs(kEval * kDim);
  gpu::DeviceBuffer<std::int32_t> eval_act(kEval);
  contexts_kernel<<<4, 256, 0, st>>>(eval_obs.data(), kEval, env_seed ^ 0x5555, env_counter.data());
  learner.act(eval_act.data(), eval_obs.data(), kEval, true);
  const auto obs = test::download(eval_obs, st);
  const auto act = test::download(eval_act, st);
  int correct = 0;
  for (std::int64_t i = 0; i < kEval; ++i) {
    int best = 0;
    for (int k = 1; k < kDim; ++k)
      if (obs[i * kDim + k] > obs[i * kDim + best]) best = k;
    correct += act[i] == best;
  }
  learner.publish_metrics();
  const DqnState m = learner.metrics().wait();
  EXPECT_GE(correct, 900) << "greedy accuracy " << correct << "/1000; loss " << m.loss << " skips " << m.skips_total;
  EXPECT_EQ(m.env_steps, 20000);
  EXPECT_EQ(m.skips_total, 0u);
  EXPECT_NEAR(m.epsilon, 0.05f, 1e-6f);
}

}  // namespace
}  // namespace foxhunt::rl
