// actors::estimate_memory against a hand computation for one small config, and its [features] line.
#include "actors/memory_estimate.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "actors/stage_factory.hpp"
#include "actors/transition_slot.hpp"
#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "pretrain/feature_source.hpp"
#include "pretrain/tuned_features.hpp"
#include "rl/envs/episode_stats.hpp"
#include "tests/support/staged_configs.hpp"

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

TEST(MemoryEstimate, SplitPlacementCountsTheStagingSlotsWithReplay) {
  const std::string text =
      "[run]\ntotal_env_steps = 10000\n"
      "[env]\nkind = \"cartpole\"\nnum_envs = 4\nsteps_per_slot = 3\n"
      "[replay]\ncapacity = 100\nbatch_size = 16\n"
      "[learner]\nkind = \"dqn\"\nhidden = [8]\n"
      "[pipeline]\nslots = 5\nlearning_starts = 100\n";
  const MemoryEstimate all = estimate_memory(parse_run_config(text, "memory_test"));
  const MemoryEstimate split =
      estimate_memory(parse_run_config(text + "[distributed]\nplacement = \"split\"\n", "memory_test"));
  const rl::ReplayConfig rc = dqn_replay_config(parse_run_config(text, "memory_test"), 4, 1);
  const TransitionSlotLayout slot = TransitionSlotLayout::make(3, 4, rc.layout);
  EXPECT_EQ(split.replay, all.replay + 5 * slot.bytes);  // one staging copy per collector slot
  EXPECT_EQ(split.learner, all.learner);
  EXPECT_EQ(split.collector, all.collector);
  EXPECT_EQ(split.total(), all.total() + 5 * slot.bytes);
}

TEST(MemoryEstimate, PpoSplitCountsOneStagingRolloutPerSlotWithTheLearner) {
  const std::string base =
      "[run]\ntotal_env_steps = 10000\n"
      "[env]\nkind = \"cartpole\"\nnum_envs = 4\n"
      "[learner]\nkind = \"ppo\"\nhidden = [8]\nrollout_steps = 16\nminibatches = 2\n";
  for (const int lag : {0, 1}) {
    SCOPED_TRACE("policy_lag " + std::to_string(lag));
    const std::string text = base + "[pipeline]\nmode = \"actors\"\npolicy_lag = " + std::to_string(lag) + "\n";
    const MemoryEstimate all = estimate_memory(parse_run_config(text, "memory_test"));
    const MemoryEstimate split =
        estimate_memory(parse_run_config(text + "[distributed]\nplacement = \"split\"\n", "memory_test"));
    // The collector's rollout estimate: 64 rows x (2 x 4 observation columns + 10 per-step floats
    // + 1 action) floats; the learner stages one copy per slot (policy_lag + 1).
    const std::size_t rollout = 64 * (2 * 4 + 10 + 1) * 4;
    EXPECT_EQ(split.collector, all.collector);
    EXPECT_EQ(split.learner, all.learner + static_cast<std::size_t>(lag + 1) * rollout);
    EXPECT_EQ(split.total(), all.total() + static_cast<std::size_t>(lag + 1) * rollout);
    EXPECT_GE(all.collector, rollout);  // the slot the staging copies mirror
  }
}

// per_device: one share on run.device unless the collector sits on another device; then the replay
// and learner on run.device and the collector on its own, each with a context and the allowance.
TEST(MemoryEstimate, PerDeviceSharesFollowThePlacement) {
  const std::string text =
      "[run]\ntotal_env_steps = 10000\ndevice = 2\n"
      "[env]\nkind = \"cartpole\"\nnum_envs = 4\n"
      "[replay]\ncapacity = 100\nbatch_size = 16\n"
      "[learner]\nkind = \"dqn\"\nhidden = [8]\n"
      "[pipeline]\nslots = 5\nlearning_starts = 100\n";
  const RunConfig all = parse_run_config(text, "memory_test");
  const MemoryEstimate a = estimate_memory(all);
  const auto one = per_device(all, a);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].device, 2);
  EXPECT_EQ(one[0].bytes, a.total());

  const RunConfig same = parse_run_config(text + "[distributed]\nplacement = \"split\"\n", "memory_test");
  ASSERT_EQ(per_device(same, estimate_memory(same)).size(), 1u);  // collector_device -1: run.device

  const RunConfig split =
      parse_run_config(text + "[distributed]\nplacement = \"split\"\ncollector_device = 0\n", "memory_test");
  const MemoryEstimate m = estimate_memory(split);
  const auto two = per_device(split, m);
  ASSERT_EQ(two.size(), 2u);
  const std::size_t context = gpu::DeviceContext::kDefaultWorkspace + kGraphAllowanceBytes;
  EXPECT_EQ(two[0].device, 2);
  EXPECT_EQ(two[0].bytes, m.replay + m.learner + context);
  EXPECT_EQ(two[0].roles, "replay, learner");
  EXPECT_EQ(two[1].device, 0);
  EXPECT_EQ(two[1].bytes, m.collector + context);
  EXPECT_EQ(two[1].roles, "collector");
  EXPECT_LT(two[0].bytes, m.total());
  EXPECT_LT(two[1].bytes, m.total());
}

TEST(MemoryEstimate, PpoThroughTheActorsCountsEveryRolloutSlot) {
  const std::string base =
      "[run]\ntotal_env_steps = 10000\n"
      "[env]\nkind = \"cartpole\"\nnum_envs = 4\n"
      "[learner]\nkind = \"ppo\"\nhidden = [8]\nrollout_steps = 16\nminibatches = 2\n";
  const std::size_t rollout = 64 * (2 * 4 + 10 + 1) * 4;  // as in the test above
  const auto collector = [&](const std::string& pipeline) {
    return estimate_memory(parse_run_config(base + "[pipeline]\n" + pipeline, "memory_test")).collector;
  };
  const std::size_t sync = collector("mode = \"sync\"\n");
  EXPECT_EQ(collector("mode = \"actors\"\npolicy_lag = 0\n"), sync);            // one slot, as the loop's rollout
  EXPECT_EQ(collector("mode = \"actors\"\npolicy_lag = 1\n"), sync + rollout);  // two slots
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

namespace {

// The shipped [features] run configs, staged beside a stand-in of the pretrain run they name (an
// LSTM of width 64 over the regime2 market's assets, its regime head: tests/support/staged_configs.hpp).
RunConfig shipped_features_config(const char* name) {
  static const std::filesystem::path dir = test::stage_shipped_configs(
      std::filesystem::temp_directory_path() / ("foxhunt_memory_estimate_" + std::to_string(::getpid())));
  return load_run_config(dir / name);
}

RunConfig without_features(RunConfig c) {
  c.features.checkpoint.clear();
  return c;
}

// One copy of the extractor's parameters (model and head), in bytes.
std::size_t feature_parameter_bytes(const RunConfig& c) {
  gpu::ParameterArena arena;  // declarations only
  pretrain::declare_tuned_parameters(*feature_source(c), market_config(c), arena);
  return static_cast<std::size_t>(arena.padded_count()) * sizeof(float);
}

}  // namespace

// A frozen extractor is its own "features" line: at least its arena (four parameter-sized arrays),
// and the run's total exceeds the same run without [features] by at least that much.
TEST(MemoryEstimate, FeaturesLineCountsTheFrozenExtractor) {
  for (const char* name : {"dqn_features_regime.toml", "ppo_features_regime.toml"}) {
    SCOPED_TRACE(name);
    const RunConfig c = shipped_features_config(name);
    ASSERT_TRUE(c.features.enabled());
    ASSERT_EQ(c.features.mode, "frozen");
    const MemoryEstimate with = estimate_memory(c), without = estimate_memory(without_features(c));
    const std::size_t P = feature_parameter_bytes(c);
    EXPECT_GT(P, 64u * 64u * 4u * sizeof(float));  // the LSTM's recurrent weights alone: (4 x 64, 64)
    EXPECT_EQ(without.features, 0u);
    EXPECT_GE(with.features, 4 * P);
    EXPECT_GE(with.total(), without.total() + 4 * P);
    EXPECT_EQ(with.total(), with.replay + with.learner + with.collector + with.fixed + with.features);
    const std::string table = format_memory_table(with);
    EXPECT_NE(table.find("  features"), std::string::npos) << table;
    EXPECT_NE(table.find(std::to_string(with.features) + " bytes"), std::string::npos) << table;
    EXPECT_EQ(format_memory_table(without).find("features"), std::string::npos);
  }
}

// The collector's part of [features]: all of a frozen extractor (it computes them), the acting copy
// of a fine-tuned one; per_device puts it on the collector's device.
TEST(MemoryEstimate, CollectorFeaturesAreTheCollectorsPart) {
  for (const char* name : {"dqn_features_regime.toml", "ppo_features_regime.toml"}) {
    SCOPED_TRACE(name);
    RunConfig c = shipped_features_config(name);
    const MemoryEstimate frozen = estimate_memory(c);
    EXPECT_GT(frozen.features, 0u);
    EXPECT_EQ(frozen.collector_features, frozen.features);
    c.features.mode = "finetune";
    c.pipeline.mode = "actors";
    const MemoryEstimate tuned = estimate_memory(c);
    EXPECT_GT(tuned.collector_features, 0u);
    EXPECT_LT(tuned.collector_features, tuned.features);
    c.distributed.placement = "split";
    c.distributed.collector_device = c.run.device + 1;
    const MemoryEstimate split = estimate_memory(c);
    const auto shares = per_device(c, split);
    ASSERT_EQ(shares.size(), 2u);
    const std::size_t context = gpu::DeviceContext::kDefaultWorkspace + kGraphAllowanceBytes;
    EXPECT_EQ(shares[1].bytes, split.collector + split.collector_features + context);
    EXPECT_EQ(shares[0].bytes + shares[1].bytes, split.total() - split.fixed + 2 * context);
  }
}

// Per-environment state and buffers: four times the environments, at least three more times the
// per-environment embedding rows (64 floats each), and no less than the parameters.
TEST(MemoryEstimate, FeaturesGrowWithNumEnvs) {
  for (const char* name : {"dqn_features_regime.toml", "ppo_features_regime.toml"}) {
    for (const char* mode : {"frozen", "finetune"}) {
      SCOPED_TRACE(std::string(name) + " " + mode);
      RunConfig c = shipped_features_config(name);
      c.features.mode = mode;
      const std::size_t small = estimate_memory(c).features;
      const auto n = static_cast<std::size_t>(c.env.num_envs);
      c.env.num_envs *= 4;
      const std::size_t big = estimate_memory(c).features;
      EXPECT_GE(big, small + 3 * n * 64 * sizeof(float));
    }
  }
}

// Fine-tuning keeps the training buffers and the learner's copies besides an acting copy: more than
// the frozen extractor by at least one more arena (the acting copy's); PPO with separate actor and
// critic extractors by at least one more again.
TEST(MemoryEstimate, FinetuneFeaturesExceedFrozen) {
  for (const char* name : {"dqn_features_regime.toml", "ppo_features_regime.toml"}) {
    SCOPED_TRACE(name);
    RunConfig c = shipped_features_config(name);
    const std::size_t P = feature_parameter_bytes(c);
    const std::size_t frozen = estimate_memory(c).features;
    c.features.mode = "finetune";
    if (c.learner.kind == "ppo") c.pipeline.mode = "actors";  // the learner's extractor and the acting copy
    const std::size_t finetune = estimate_memory(c).features;
    EXPECT_GE(finetune, frozen + 4 * P);
    if (c.learner.kind == "ppo") {
      c.pipeline.mode = "sync";
      const std::size_t shared = estimate_memory(c).features;
      EXPECT_LT(shared, finetune);  // no acting copy in the synchronous loop
      c.features.shared = false;
      EXPECT_GE(estimate_memory(c).features, shared + 4 * P);
    }
  }
}

// The window extractor's training rows: each holds at least its input window, its hidden sequence
// (forward and gradient), its last hidden state (forward and gradient) and its output gradient.
TEST(MemoryEstimate, TunedFeaturesGrowWithTrainingRows) {
  const RunConfig c = shipped_features_config("ppo_features_regime.toml");
  const auto src = feature_source(c);
  const rl::MarketConfig market = market_config(c);
  const pretrain::FeatureOutput out = pretrain::FeatureOutput::embedding;
  const std::size_t one = pretrain::tuned_features_bytes(*src, out, market, 8, 1);
  const std::size_t many = pretrain::tuned_features_bytes(*src, out, market, 8, 101);
  const auto T = static_cast<std::size_t>(market.window), A = static_cast<std::size_t>(market.assets);
  const std::size_t per_row = (T * A + 2 * T * 64 + 2 * 64 + 64) * sizeof(float);
  EXPECT_GE(many, one + 100 * per_row);
  EXPECT_GE(one, 4 * feature_parameter_bytes(c));
}
