// The data-parallel learners on one device: a DqnLearner and a PpoLearner joined to an NCCL
// communicator of world size 1 with the collective path forced on (DataParallel::always) give bit
// for bit the parameters, Adam moments, target network and counters of the same learner without
// one — eagerly and through the captured graphs, across skipped updates (DQN's NaN guard) and KL
// stops (PPO). With two or more devices, DQN replicas on every device stay bitwise equal (skips
// otherwise; tests/gpu/nccl_test.cu has the collectives' multi-rank test).
#include "models/fd_support.hpp"

#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "gpu/data_parallel.hpp"
#include "gpu/device.hpp"
#include "gpu/nccl.hpp"
#include "rl/dqn/learner.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/ppo/trainer.hpp"

namespace foxhunt::rl {
namespace {

class DataParallelTest : public test::LaneTest {};

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> arena_bytes(gpu::ParameterArena& a, cudaStream_t s) {
  std::vector<float> out;
  for (const float* p : {a.params(), a.adam_m(), a.adam_v()}) {
    const auto h = test::download(p, static_cast<std::size_t>(a.padded_count()), s);
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

DqnLearnerConfig dqn_config(bool noisy, std::int64_t atoms, std::uint64_t seed) {
  DqnLearnerConfig c;
  c.net.obs_dim = 6;
  c.net.hidden = {32, 32};
  c.net.actions = 4;
  c.net.atoms = atoms;
  c.net.dueling = atoms == 1;
  c.net.noisy = noisy;
  c.batch = 16;
  c.schedule.lr_start = c.schedule.lr_end = 1e-3f;
  c.max_grad_norm = 1.f;  // small: the clip acts on the all-reduced gradients
  c.tau = 0.05f;
  c.seed = seed;
  return c;
}

struct DeviceBatch {
  std::vector<float> obs, returns;
  gpu::DeviceBuffer<float> d_obs, d_ret, d_disc, d_w;
  gpu::DeviceBuffer<std::int32_t> d_act;
  DqnBatch view;
  DeviceBatch(const DqnLearnerConfig& c, std::mt19937_64& rng, cudaStream_t s) {
    const auto B = static_cast<std::size_t>(c.batch), O = static_cast<std::size_t>(c.net.obs_dim);
    obs = test::random_uniform(2 * B * O, -1.f, 1.f, rng);  // [s; s'] as a SampledBatch lays them out
    returns = test::random_uniform(B, -1.f, 1.f, rng);
    std::vector<std::int32_t> actions(B);
    for (auto& a : actions) a = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.net.actions));
    d_obs = test::upload(obs, s);
    d_ret = test::upload(returns, s);
    d_disc = test::upload(test::random_uniform(B, 0.f, 0.97f, rng), s);
    d_w = test::upload(test::random_uniform(B, 0.3f, 1.f, rng), s);
    d_act = test::upload(actions, s);
    view = DqnBatch{d_obs.data(), d_act.data(), d_ret.data(), d_disc.data(), d_obs.data() + B * O, d_w.data(),
                    nullptr, c.batch};
  }
};

void expect_same_dqn(DqnLearner& a, DqnLearner& b, cudaStream_t s) {
  EXPECT_TRUE(bits_equal(arena_bytes(a.online_arena(), s), arena_bytes(b.online_arena(), s)));
  const auto nt = static_cast<std::size_t>(a.target_arena().padded_count());
  EXPECT_TRUE(bits_equal(test::download(a.target_arena().params(), nt, s),
                         test::download(b.target_arena().params(), nt, s)));
  const DqnState x = test::download(a.state(), 1, s)[0], y = test::download(b.state(), 1, s)[0];
  EXPECT_EQ(std::memcmp(&x, &y, sizeof x), 0) << "DqnState differs";
  const auto B = static_cast<std::size_t>(a.config().batch);
  EXPECT_TRUE(bits_equal(test::download(a.priorities(), B, s), test::download(b.priorities(), B, s)));
}

TEST_F(DataParallelTest, DqnWorldOneThroughTheAllReduceIsBitwiseTheSingleLearner) {
  SCOPED_TRACE(seed_note());
  gpu::NcclCommunicator comm(gpu::nccl_id_from_hex(gpu::to_hex(gpu::nccl_unique_id())), 1, 0);
  for (const auto& [noisy, atoms] : {std::pair{true, std::int64_t{1}}, std::pair{false, std::int64_t{11}}}) {
    SCOPED_TRACE(std::string(noisy ? "noisy dueling" : "C51"));
    const DqnLearnerConfig cfg = dqn_config(noisy, atoms, seed_);
    DqnLearner plain(cfg, lane()), replica(cfg, lane());
    replica.join(gpu::DataParallel{&comm, 4096, true});
    ASSERT_TRUE(replica.data_parallel().active());
    std::mt19937_64 r(rng()());
    DeviceBatch batch(cfg, r, s());
    // Eager updates, one of them skipped (a NaN return): the agreed skip leaves both untouched.
    plain.update(batch.view);
    replica.update(batch.view);
    std::vector<float> nan_returns = batch.returns;
    nan_returns[2] = std::numeric_limits<float>::quiet_NaN();
    batch.d_ret.upload(std::span<const float>(nan_returns), s());
    plain.update(batch.view);
    replica.update(batch.view);
    EXPECT_EQ(test::download(replica.state(), 1, s())[0].skips_total, 1u);
    batch.d_ret.upload(std::span<const float>(batch.returns), s());
    // Then the captured graphs.
    plain.capture(batch.view);
    replica.capture(batch.view);
    for (int i = 0; i < 20; ++i) {
      plain.replay();
      replica.replay();
    }
    expect_same_dqn(plain, replica, s());
    EXPECT_EQ(test::download(replica.state(), 1, s())[0].updates_applied, 21);
  }
}

TEST_F(DataParallelTest, DqnInactiveJoinChangesNothing) {
  const DqnLearnerConfig cfg = dqn_config(false, 1, seed_);
  DqnLearner plain(cfg, lane()), joined(cfg, lane());
  gpu::NcclCommunicator comm(gpu::nccl_unique_id(), 1, 0);
  joined.join(gpu::DataParallel{&comm, 0, false});  // world 1 without the hook: not a replica
  EXPECT_FALSE(joined.data_parallel().active());
  std::mt19937_64 r(rng()());
  DeviceBatch batch(cfg, r, s());
  plain.capture(batch.view);
  joined.capture(batch.view);
  EXPECT_EQ(plain.graph_nodes(), joined.graph_nodes());  // no collective in the graph
  for (int i = 0; i < 5; ++i) {
    plain.replay();
    joined.replay();
  }
  expect_same_dqn(plain, joined, s());
}

TEST_F(DataParallelTest, PpoWorldOneThroughTheAllReduceIsBitwiseTheSingleLearner) {
  SCOPED_TRACE(seed_note());
  gpu::NcclCommunicator comm(gpu::nccl_unique_id(), 1, 0);
  // target_kl tiny: every update stops after its first epoch (the agreed KL flag); 0: no stop.
  for (const float target_kl : {1e-12f, 0.f}) {
    SCOPED_TRACE("target_kl " + std::to_string(target_kl));
    ppo::PpoConfig c;
    c.num_envs = 16;
    c.rollout_steps = 16;
    c.epochs = 3;
    c.minibatches = 4;
    c.hidden = {32, 32};
    c.head = ppo::head_for(CartPoleEnv(16).action_space());
    c.lr = 1e-3f;
    c.anneal_iterations = 10;
    c.target_kl = target_kl;
    c.seed = seed_;
    for (const bool fused : {true, false}) {
      SCOPED_TRACE(fused ? "fused" : "GEMM path");
      c.fused_kernels = fused;
      CartPoleEnv env_a(16), env_b(16);
      ppo::PpoTrainer plain(c, env_a, lane()), replica(c, env_b, lane());
      replica.learner().join(gpu::DataParallel{&comm, 1 << 12, true});
      ASSERT_TRUE(replica.learner().data_parallel().active());
      plain.reset(seed_ + 1);
      replica.reset(seed_ + 1);
      for (int i = 0; i < 3; ++i) {
        plain.iterate();
        replica.iterate();
      }
      EXPECT_TRUE(bits_equal(arena_bytes(plain.learner().arena(), s()), arena_bytes(replica.learner().arena(), s())));
      EXPECT_EQ(test::download(plain.learner().counters(), ppo::PpoLearner::kCounterCount, s()),
                test::download(replica.learner().counters(), ppo::PpoLearner::kCounterCount, s()));
      const auto a = plain.wait_stats(), b = replica.wait_stats();
      EXPECT_EQ(a.update.minibatches, b.update.minibatches);
      if (target_kl > 0) EXPECT_EQ(b.update.minibatches, static_cast<std::uint32_t>(c.minibatches));
      EXPECT_EQ(a.update.policy_loss, b.update.policy_loss);
    }
  }
}

// Every device one rank (one thread each), each learner built from its own seed and fed its own
// batches: after joining (rank 0's weights broadcast) and 10 captured updates every replica holds
// the same bytes (parameters, Adam moments, target), and they are not rank 0's weights had it
// trained alone (the gradients were exchanged). Skips with fewer than two devices.
TEST(DataParallelMultiGpuTest, DqnReplicasStayBitwiseEqual) {
  std::string why;
  const int devices = gpu::device_count(&why);
  if (devices < 2)
    GTEST_SKIP() << "needs >= 2 CUDA devices (one rank per device; two ranks sharing one GPU are not a valid NCCL "
                    "setup), found "
                 << devices << (why.empty() ? "" : ": " + why);
  const std::uint64_t seed = test::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (FOXHUNT_TEST_SEED)");
  const int world = devices;
  const gpu::NcclId id = gpu::nccl_unique_id();
  std::vector<std::vector<float>> state(static_cast<std::size_t>(world) + 1);  // + rank 0 alone
  std::vector<std::string> errors(state.size());
  const auto run_rank = [&](int r, bool alone) {
    try {
      FH_CHECK(cudaSetDevice(r));
      gpu::DeviceContext ctx(r, 1);
      const cudaStream_t s = ctx.stream(0);
      const DqnLearnerConfig cfg = dqn_config(false, 1, seed + static_cast<std::uint64_t>(r));
      DqnLearner learner(cfg, ctx.blas(0));
      std::unique_ptr<gpu::NcclCommunicator> comm;
      if (!alone) {
        comm = std::make_unique<gpu::NcclCommunicator>(id, world, r);
        learner.join(gpu::DataParallel{comm.get(), 0, false});
      }
      std::mt19937_64 rng(seed * 7919 + static_cast<std::uint64_t>(r));
      DeviceBatch batch(cfg, rng, s);
      learner.capture(batch.view);
      for (int i = 0; i < 10; ++i) learner.replay();
      auto bytes = arena_bytes(learner.online_arena(), s);
      const auto nt = static_cast<std::size_t>(learner.target_arena().padded_count());
      const auto target = test::download(learner.target_arena().params(), nt, s);
      bytes.insert(bytes.end(), target.begin(), target.end());
      state[alone ? static_cast<std::size_t>(world) : static_cast<std::size_t>(r)] = std::move(bytes);
    } catch (const std::exception& e) {
      errors[alone ? static_cast<std::size_t>(world) : static_cast<std::size_t>(r)] = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(run_rank, r, false);
  for (auto& t : threads) t.join();
  run_rank(0, true);
  for (std::size_t r = 0; r < state.size(); ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  for (int r = 1; r < world; ++r) EXPECT_TRUE(bits_equal(state[static_cast<std::size_t>(r)], state[0])) << "rank " << r;
  EXPECT_FALSE(bits_equal(state[0], state[static_cast<std::size_t>(world)])) << "the replicas trained as rank 0 alone";
}

}  // namespace
}  // namespace foxhunt::rl
