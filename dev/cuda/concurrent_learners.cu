// K standard DQN learners' update graphs replayed at once, each on its own stream: how many
// independent learners (the seeds of `foxhunt train --seeds`) one GPU runs side by side, without the
// actor runtime. Built with FOXHUNT_BUILD_DEV=ON as foxhunt_dev_concurrent_learners; run it on a GPU
// host with no arguments, and again with CUDA_DEVICE_MAX_CONNECTIONS=32 (the hardware work queues
// the driver maps streams onto; 8 by default).
//
// Why: 8 seeds of configs/pipeline_dqn_ou_market.toml through the runtime reach 2.0x one seed's
// env-steps/s, and one seed's time is almost all its learner's update graph (hidden 256-256,
// batch 256, prioritized replay of 2^20). If K graphs on K streams also stop near 2x here, the bound
// is the GPU (kernel concurrency); if they scale, it is the host side of the runtime.
//
// Each learner: the shape of that config (obs 64, 9 actions, dueling, double Q, Huber, Polyak), its
// own replay filled with random transitions, its update captured as one graph (sample -> update ->
// priorities). Launch modes: "one thread" (the K graphs launched round-robin from this thread) and
// "K threads" (one host thread per learner, as the actor runtime's learners launch). Aggregate
// updates/s = K x reps / wall, against K = 1 in the same process.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/stream.hpp"
#include "gpu/launch.cuh"
#include "gpu/rng.hpp"
#include "rl/dqn/learner.hpp"
#include "rl/dqn/replay_hooks.hpp"
#include "rl/replay/replay_buffer.hpp"

using namespace foxhunt;

namespace {

constexpr std::int64_t kCapacity = std::int64_t{1} << 20;
constexpr std::int64_t kObs = 64, kActions = 9, kBatch = 256, kHidden = 256;
constexpr int kReps = 2000;

__global__ void fill_actions(std::int32_t* out, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<std::int32_t>((i * 2654435761ll) % kActions);
}

struct Learner {
  std::unique_ptr<rl::ReplayBuffer> replay;
  rl::SampledBatch batch;
  std::unique_ptr<rl::DqnLearner> learner;
};

Learner make_learner(gpu::DeviceContext& ctx, int lane, int seed) {
  const cudaStream_t s = ctx.stream(lane);
  rl::ReplayConfig rc;
  rc.capacity = kCapacity;
  rc.layout.obs_dim = kObs;
  rc.layout.obs_dtype = gpu::DType::f32;
  rc.mode = rl::SamplingMode::prioritized;
  rc.batch_size = kBatch;
  rc.n_step = 3;
  rc.gamma = 0.99f;
  rc.alpha = 0.6f;
  rc.beta = 0.4f;
  rc.seed = static_cast<std::uint64_t>(seed);
  Learner l;
  l.replay = std::make_unique<rl::ReplayBuffer>(rc, s);
  constexpr std::int64_t kSteps = 16, kEnvs = 4096, kRows = kSteps * kEnvs;
  gpu::DeviceBuffer<float> obs(kRows * kObs), next(kRows * kObs), rew(kRows);
  gpu::DeviceBuffer<std::int32_t> act(kRows);
  gpu::DeviceBuffer<std::uint8_t> term(kRows), trunc(kRows);
  gpu::fill_uniform(obs.data(), kRows * kObs, -1.f, 1.f, seed, 0, 0, s);
  gpu::fill_uniform(next.data(), kRows * kObs, -1.f, 1.f, seed, 1, 0, s);
  gpu::fill_uniform(rew.data(), kRows, -1.f, 1.f, seed, 2, 0, s);
  fill_actions<<<gpu::grid_stride_blocks(kRows), gpu::kBlock, 0, s>>>(act.data(), kRows);
  FH_CHECK_LAUNCH();
  FH_CHECK(cudaMemsetAsync(term.data(), 0, kRows, s));
  FH_CHECK(cudaMemsetAsync(trunc.data(), 0, kRows, s));
  const int producer = l.replay->add_producer(kEnvs);
  rl::TransitionBatch tb;
  tb.layout = rc.layout;
  tb.steps = kSteps;
  tb.envs = kEnvs;
  tb.obs = obs.data();
  tb.next_obs = next.data();
  tb.actions = act.data();
  tb.rewards = rew.data();
  tb.terminated = term.data();
  tb.truncated = trunc.data();
  for (std::int64_t n = 0; n < kCapacity + kRows; n += kRows) l.replay->insert(producer, tb, s);
  FH_CHECK(cudaStreamSynchronize(s));

  l.batch = l.replay->allocate_batch(kBatch);
  rl::DqnLearnerConfig c;
  c.net.obs_dim = kObs;
  c.net.hidden = {kHidden, kHidden};
  c.net.actions = kActions;
  c.net.dueling = true;
  c.batch = kBatch;
  c.double_q = true;
  c.loss = rl::TdLoss::huber;
  c.schedule.lr_start = c.schedule.lr_end = 3e-4f;
  c.max_grad_norm = 10.f;
  c.tau = 0.005f;
  c.priority_eps = 0.f;
  c.seed = static_cast<std::uint64_t>(seed);
  l.learner = std::make_unique<rl::DqnLearner>(c, ctx.blas(lane));
  rl::ReplayBuffer* rb = l.replay.get();
  rl::SampledBatch* out = &l.batch;
  rl::DqnLearner* learner = l.learner.get();
  l.learner->capture(
      rl::dqn_batch_view(l.batch), [rb, out](cudaStream_t cs) { rb->sample(out->view(), cs); },
      [rb, out, learner](cudaStream_t cs) {
        rb->update_priorities(out->view().indices, learner->priorities(), kBatch, cs);
      });
  return l;
}

// Wall ms of reps replays of each of the first k learners, launched round-robin from this thread
// (threads = false) or from one thread per learner.
double time_k(std::vector<Learner>& ls, int k, bool threads) {
  for (int i = 0; i < k; ++i)
    for (int r = 0; r < 20; ++r) ls[i].learner->replay();
  FH_CHECK(cudaDeviceSynchronize());
  gpu::Event start(true), stop(true);
  const cudaStream_t s0 = ls[0].learner->stream();
  start.record(s0);
  std::vector<gpu::Event> joined(static_cast<std::size_t>(k));
  for (int i = 1; i < k; ++i) FH_CHECK(cudaStreamWaitEvent(ls[i].learner->stream(), start.get(), 0));
  if (threads) {
    std::vector<std::thread> pool;
    for (int i = 0; i < k; ++i)
      pool.emplace_back([&ls, i] {
        FH_CHECK(cudaSetDevice(0));
        for (int r = 0; r < kReps; ++r) ls[i].learner->replay();
      });
    for (auto& t : pool) t.join();
  } else {
    for (int r = 0; r < kReps; ++r)
      for (int i = 0; i < k; ++i) ls[i].learner->replay();
  }
  for (int i = 1; i < k; ++i) {
    joined[i].record(ls[i].learner->stream());
    FH_CHECK(cudaStreamWaitEvent(s0, joined[i].get(), 0));
  }
  stop.record(s0);
  stop.synchronize();
  return gpu::Event::elapsed_ms(start, stop);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("concurrent_learners: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  FH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const char* conn = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::printf("concurrent DQN learners (hidden %lld-%lld, batch %lld, one graph per update) on %s, "
              "CUDA_DEVICE_MAX_CONNECTIONS=%s\n",
              static_cast<long long>(kHidden), static_cast<long long>(kHidden), static_cast<long long>(kBatch),
              prop.name, conn != nullptr ? conn : "unset (8)");
  constexpr int kMax = 8;
  gpu::DeviceContext ctx(0, kMax);
  std::vector<Learner> ls;
  for (int i = 0; i < kMax; ++i) ls.push_back(make_learner(ctx, i, i + 1));
  std::printf("%-12s %4s %12s %12s %10s\n", "launch", "K", "wall ms", "agg upd/s", "x K=1");
  for (bool threads : {false, true}) {
    double one = 0;
    for (int k : {1, 2, 4, 8}) {
      const double ms = time_k(ls, k, threads);
      const double ups = k * kReps / (ms * 1e-3);
      if (k == 1) one = ups;
      std::printf("%-12s %4d %12.1f %12.0f %10.2f\n", threads ? "K threads" : "one thread", k, ms, ups, ups / one);
    }
  }
  return 0;
}
