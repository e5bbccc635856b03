// DqnPolicy against the learner it acts for: the same initial weights, and after a learner update
// and a weight load the same Q values and the same actions (greedy, epsilon-greedy, noisy, BDQ) bit
// for bit over several env steps; its checkpoint round trip, and a learner's checkpoint files (the
// collector's former acting-learner format) loading into it.
#include "models/fd_support.hpp"

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "rl/dqn/learner.hpp"
#include "rl/dqn/policy.hpp"

namespace foxhunt::rl {
namespace {

class DqnPolicyTest : public test::LaneTest {
 protected:
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("foxhunt_dqn_policy_" + std::to_string(::getpid()));
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    test::LaneTest::TearDown();
  }
};

DqnLearnerConfig config(bool noisy, std::int64_t D) {
  DqnLearnerConfig c;
  c.net.obs_dim = 5;
  c.net.hidden = {24, 16};
  c.net.branches = D;
  c.net.actions = 3;
  c.net.dueling = true;
  c.net.noisy = noisy;
  c.batch = 8;
  c.schedule.epsilon_start = 0.6f;
  c.schedule.epsilon_end = 0.1f;
  c.schedule.epsilon_steps = 200;
  c.seed = 77;
  c.act_rows = 40;
  return c;
}

template <class T>
std::vector<std::uint32_t> bits(const T* p, std::size_t n, cudaStream_t s) {
  const auto h = test::download(p, n, s);
  std::vector<std::uint32_t> b(n);
  std::memcpy(b.data(), h.data(), n * 4);
  return b;
}

// One eager learner update on a random batch (the online weights move away from their init).
void update_once(DqnLearner& l, std::mt19937_64& rng, cudaStream_t s) {
  const DqnLearnerConfig& c = l.config();
  const auto B = static_cast<std::size_t>(c.batch), O = static_cast<std::size_t>(c.net.obs_dim);
  auto obs = test::upload(test::random_uniform(2 * B * O, -1.f, 1.f, rng), s);
  auto ret = test::upload(test::random_uniform(B, -1.f, 1.f, rng), s);
  auto disc = test::upload(test::random_uniform(B, 0.f, 0.9f, rng), s);
  std::vector<std::int32_t> a(B * static_cast<std::size_t>(c.net.branches));
  for (auto& x : a) x = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.net.actions));
  auto act = test::upload(a, s);
  l.update(DqnBatch{obs.data(), act.data(), ret.data(), disc.data(), obs.data() + B * O, nullptr, nullptr, c.batch});
  FH_CHECK(cudaStreamSynchronize(s));
}

TEST_F(DqnPolicyTest, ActsAsItsLearnerBitwise) {
  SCOPED_TRACE(seed_note());
  for (const auto& [noisy, D] : {std::pair<bool, std::int64_t>{false, 1}, {true, 1}, {false, 3}}) {
    SCOPED_TRACE(std::string(noisy ? "noisy" : "epsilon-greedy") + ", D " + std::to_string(D));
    const DqnLearnerConfig c = config(noisy, D);
    DqnLearner learner(c, lane());
    DqnPolicy policy(dqn_policy_config(c), lane());
    const auto n = static_cast<std::size_t>(policy.floats());
    ASSERT_EQ(policy.floats(), learner.online_arena().padded_count());
    EXPECT_EQ(bits(policy.params(), n, s()), bits(learner.online_arena().params(), n, s())) << "initial weights";
    update_once(learner, rng(), s());
    policy.load_weights(learner.online_arena().params(), learner.online_arena().padded_count());
    const std::int64_t rows = c.act_rows;
    gpu::DeviceBuffer<std::int32_t> a_l(static_cast<std::size_t>(rows * D)), a_p(a_l.size());
    for (int step = 0; step < 12; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      auto obs =
          test::upload(test::random_uniform(static_cast<std::size_t>(rows * c.net.obs_dim), -1.f, 1.f, rng()), s());
      const bool eval = step % 4 == 3;
      learner.act(a_l.data(), obs.data(), rows, eval);
      policy.act(a_p.data(), obs.data(), rows, eval);
      const auto q_n = static_cast<std::size_t>(rows * D * c.net.actions);
      ASSERT_EQ(bits(policy.q(), q_n, s()), bits(learner.act_q(), q_n, s())) << "Q";
      ASSERT_EQ(test::download(a_p, s()), test::download(a_l, s())) << "actions";
      learner.after_env_step(rows);
      policy.after_env_step(rows);
    }
    const DqnState sl = test::download(learner.state(), 1, s())[0], sp = test::download(policy.state(), 1, s())[0];
    EXPECT_EQ(sp.env_steps, sl.env_steps);
    EXPECT_EQ(sp.act_counter, sl.act_counter);
    EXPECT_EQ(sp.act_noise_counter, sl.act_noise_counter);
    EXPECT_EQ(sp.epsilon, sl.epsilon);
  }
}

// save -> load into a fresh policy: the same weights, state and next actions. A learner's files
// of one stem load too (the weights of its online arena, its state).
TEST_F(DqnPolicyTest, CheckpointRoundTripAndLearnerFiles) {
  SCOPED_TRACE(seed_note());
  std::filesystem::create_directories(dir_);
  const DqnLearnerConfig c = config(false, 1);
  DqnLearner learner(c, lane());
  update_once(learner, rng(), s());
  learner.after_env_step(33);
  learner.save(dir_ / "learner");
  DqnPolicy from_learner(dqn_policy_config(c), lane());
  from_learner.load(dir_ / "learner");
  const auto n = static_cast<std::size_t>(from_learner.floats());
  EXPECT_EQ(bits(from_learner.params(), n, s()), bits(learner.online_arena().params(), n, s()));
  const DqnState sl = test::download(learner.state(), 1, s())[0];
  const DqnState sf = test::download(from_learner.state(), 1, s())[0];
  EXPECT_EQ(std::memcmp(&sl, &sf, sizeof sl), 0) << "state";

  from_learner.after_env_step(7);
  from_learner.save(dir_ / "policy");
  DqnPolicy restored(dqn_policy_config(c), lane());
  restored.load(dir_ / "policy");
  EXPECT_EQ(bits(restored.params(), n, s()), bits(from_learner.params(), n, s()));
  const DqnState a = test::download(from_learner.state(), 1, s())[0], b = test::download(restored.state(), 1, s())[0];
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "state";
  auto obs =
      test::upload(test::random_uniform(static_cast<std::size_t>(c.act_rows * c.net.obs_dim), -1.f, 1.f, rng()), s());
  gpu::DeviceBuffer<std::int32_t> x(static_cast<std::size_t>(c.act_rows)), y(x.size());
  from_learner.act(x.data(), obs.data(), c.act_rows, false);
  restored.act(y.data(), obs.data(), c.act_rows, false);
  EXPECT_EQ(test::download(x, s()), test::download(y, s()));

  DqnPolicy weights_only(dqn_policy_config(c), lane());
  weights_only.load_weights(dir_ / "learner.online.safetensors");
  EXPECT_EQ(bits(weights_only.params(), n, s()), bits(learner.online_arena().params(), n, s()));
}

}  // namespace
}  // namespace foxhunt::rl
