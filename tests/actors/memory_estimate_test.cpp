// actors::estimate_memory against a hand computation for one small config.
#include "actors/memory_estimate.hpp"

#include <gtest/gtest.h>

#include "actors/stage_factory.hpp"
#include "actors/transition_slot.hpp"
#include "gpu/context.hpp"
#include "rl/envs/episode_stats.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;

TEST(MemoryEstimate, SmallCartPoleByHand) {
  const RunConfig c = parse_run_config(
      "[run]\ntotal_env_steps = 10000\n"
      "[env]\nkind = \"cartpole\"\nnum_envs = 4\n"
      "[replay]\ncapacity = 100\nbatch_size = 16\nprioritized = false\n"
      "[learner]\nkind = \"dqn\"\nhidden = [8]\ndueling = false\ndouble_dqn = false\n"
      "[pipeline]\nslots = 2\nbatches = 1\nlearning_starts = 100\n"
      "[checkpoint]\nevery_env_steps = 0\n[logging]\nlevel = \"info\"\n",
      "memory_test");
  const MemoryEstimate m = estimate_memory(c);
  // Q-network 4 -> 8 -> 2: trunk.0.weight (8, 4) = 32, trunk.0.bias 8, head.weight (2, 8) = 16,
  // head.bias 2; each tensor starts at a multiple of 64 floats (256-byte alignment): 4 x 64.
  EXPECT_EQ(m.parameters, 256);
  const std::size_t P = 256 * 4;  // bytes of one parameter copy
  // Per row: 2 x 8 (pre-activation, activation) + 3 x 8 (backward scratch) + 4 x (2 + 1) heads.
  EXPECT_EQ(workspace_floats_per_row({8}, 2), 52);
  const std::size_t row = 52 * 4;
  // One DqnLearner: 8 parameter copies (two arenas x params, grads, m, v); rows: online 16 +
  // target 16 + acting 4; the per-row losses 16 x (3 + 2) floats.
  const std::size_t learner_object = 8 * P + (16 + 16 + 4) * row + 16 * 5 * 4;
  EXPECT_EQ(learner_object, 8192u + 7488u + 320u);
  EXPECT_EQ(m.learner, learner_object + 6 * P);  // + 4 snapshots + 2 published copies

  const rl::ReplayConfig rc = dqn_replay_config(c, 4, 1);
  const std::size_t transition = rc.layout.bytes_per_transition();
  EXPECT_EQ(m.replay, rc.device_bytes() + 1 * 16 * (transition + 12));

  const TransitionSlotLayout slot = TransitionSlotLayout::make(1, 4, rc.layout);
  const std::size_t env_state = 4 * (16 + 4 + 8 + sizeof(rl::EpisodeAccum));
  EXPECT_EQ(m.collector, learner_object + 2 * slot.bytes + 3 * 4 * 4 * 4 + env_state);
  EXPECT_EQ(m.fixed, 2 * gpu::DeviceContext::kDefaultWorkspace + kGraphAllowanceBytes);
  EXPECT_EQ(m.total(), m.replay + m.learner + m.collector + m.fixed);

  const std::string table = format_memory_table(m);
  for (const char* row_name : {"replay", "learner", "collector", "fixed", "total"})
    EXPECT_NE(table.find(row_name), std::string::npos) << table;
  EXPECT_NE(table.find(std::to_string(m.total()) + " bytes"), std::string::npos) << table;
}

TEST(MemoryEstimate, GrowsWithCapacityAndWidth) {
  RunConfig c;
  c.replay.capacity = 1'000;
  const MemoryEstimate small = estimate_memory(c);
  c.replay.capacity = 1'000'000;
  const MemoryEstimate big = estimate_memory(c);
  EXPECT_GT(big.replay, small.replay + 999'000u * 4u * 8u);  // at least obs + next_obs per transition
  c.learner.hidden = {1024, 1024};
  EXPECT_GT(estimate_memory(c).learner, 8u * 1024u * 1024u * 4u);  // 8 copies of > 1M parameters
}
