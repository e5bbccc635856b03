// Ring contents and n-step assembly against the CPU model: several producers inserting blocks of
// mixed sizes, terminated and truncated episodes mixed, windows that reach back across several
// earlier blocks, and a ring small enough to wrap many times.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/rl/replay_gpu_util.hpp"

namespace foxhunt::rl {
namespace {

using namespace test_model;

struct NStepCase {
  std::int64_t capacity;
  int n_step;
  std::vector<std::int64_t> envs;  // one producer per entry
  int inserts;
  std::int64_t max_steps;
};

class ReplayNStepTest : public test::GpuTest, public ::testing::WithParamInterface<NStepCase> {};

// Compares every stored slot: raw ring contents and the n-step fields.
void expect_ring_matches(const ReplayBuffer& rb, const ReplayModel& model, const TransitionLayout& layout,
                         cudaStream_t stream, int insert_no) {
  const RingView v = rb.ring_view();
  const auto C = static_cast<std::size_t>(rb.capacity());
  const std::int64_t D = layout.obs_dim, A = layout.action_dim;
  const auto ret = test::download(v.returns, C, stream);
  const auto disc = test::download(v.discounts, C, stream);
  const auto boot = test::download(v.bootstrap, C, stream);
  const auto rew = test::download(v.rewards, C, stream);
  const auto obs = test::download(static_cast<const float*>(v.obs), C * D, stream);
  const auto next = test::download(static_cast<const float*>(v.next_obs), C * D, stream);
  const auto act = test::download(v.actions, C * A, stream);
  std::int64_t checked = 0;
  for (std::int64_t s = 0; s < rb.size(); ++s) {
    ASSERT_TRUE(model.stored(s)) << "slot " << s;
    const auto& st = model.at(s);
    const NStepRef ref = model.nstep(s);
    SCOPED_TRACE("insert " + std::to_string(insert_no) + ", slot " + std::to_string(s) + ", producer " +
                 std::to_string(st.producer) + ", step " + std::to_string(st.step) + ", env " + std::to_string(st.env));
    ASSERT_NEAR(ret[s], ref.ret, 1e-5 * (1.0 + std::fabs(ref.ret)));
    ASSERT_NEAR(disc[s], ref.discount, 1e-6);
    ASSERT_EQ(boot[s], ref.bootstrap_slot);
    for (std::int64_t d = 0; d < D; ++d) {
      ASSERT_EQ(obs[s * D + d], st.obs[d]);
      ASSERT_EQ(next[s * D + d], st.next_obs[d]);
    }
    for (std::int64_t a = 0; a < A; ++a) ASSERT_EQ(static_cast<std::int32_t>(act[s * A + a]), st.actions[a]);
    ASSERT_TRUE(std::isfinite(rew[s]));
    ++checked;
  }
  EXPECT_EQ(checked, model.size());
}

TEST_P(ReplayNStepTest, ReturnsDiscountsAndBootstrapSlotsMatchTheCpuModel) {
  SCOPED_TRACE(seed_note());
  const NStepCase& tc = GetParam();
  ReplayConfig cfg;
  cfg.capacity = tc.capacity;
  cfg.layout.obs_dim = 5;  // odd: the scalar copy path
  cfg.layout.action_kind = ActionKind::multi_discrete;
  cfg.layout.action_dim = 2;
  cfg.batch_size = 1;
  cfg.n_step = tc.n_step;
  cfg.gamma = 0.9f;
  ReplayBuffer rb(cfg, stream());
  ReplayModel model(cfg.capacity, cfg.n_step, cfg.gamma);
  std::vector<int> ids;
  for (std::int64_t e : tc.envs) {
    ids.push_back(rb.add_producer(e));
    EXPECT_EQ(model.add_producer(e), ids.back());
  }
  std::uniform_int_distribution<std::int64_t> steps_dist(1, tc.max_steps);
  std::uniform_int_distribution<std::size_t> who(0, ids.size() - 1);
  for (int i = 0; i < tc.inserts; ++i) {
    const std::size_t p = who(rng());
    const std::int64_t envs = tc.envs[p];
    const std::int64_t steps = std::min(steps_dist(rng()), cfg.capacity / envs);
    const HostBlock h = random_block(steps, envs, cfg.layout.obs_dim, cfg.layout.action_dim, rng(), 0.2);
    DeviceBlock d(h, cfg.layout, stream());
    rb.insert(ids[p], d.batch, stream());
    model.insert(ids[p], h);
    FH_CHECK(cudaStreamSynchronize(stream()));
    ASSERT_EQ(rb.size(), model.size());
    expect_ring_matches(rb, model, cfg.layout, stream(), i);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(download_state(rb, stream()).size, model.size());
}

INSTANTIATE_TEST_SUITE_P(Cases, ReplayNStepTest,
                         ::testing::Values(NStepCase{100000, 4, {3, 5}, 40, 9},  // no wrap; windows over several blocks
                                           NStepCase{61, 3, {2, 3, 1}, 60, 7},   // small odd ring, wraps many times
                                           NStepCase{1000, 1, {4}, 20, 30},      // one-step returns
                                           NStepCase{5000, 32, {1, 2}, 120, 2},  // longest window over 1-2 step blocks
                                           NStepCase{4099, 5, {64}, 30, 20}));   // blocks of up to 1280 rows, wrapping

}  // namespace
}  // namespace foxhunt::rl
