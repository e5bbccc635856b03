// PPO through the actor runtime on fake stages (CPU only): rollout slots and policy buffers are
// never rewritten while queued work reads them, every rollout acts with exactly the policy
// version its lag makes due (0: synchronous PPO, 1: one rollout ahead), the run ends holding the
// version due next, a resumed run continues the versions, and a failing stage ends the run cleanly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "actors/ppo_pipeline.hpp"
#include "tests/actors/fake_ppo_stages.hpp"

namespace fs = std::filesystem;
using namespace foxhunt::actors;
using foxhunt::actors::test::FakePpoAgent;
using foxhunt::actors::test::FakePpoKnobs;

namespace {

RunResult run_with_deadline(const PpoPipelineConfig& cfg, const PpoStages& stages, const RunHooks& hooks) {
  auto fut = std::async(std::launch::async, [&] { return run_ppo_pipeline(cfg, stages, hooks); });
  if (fut.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "run_ppo_pipeline did not return within 60 s (hang)";
    std::abort();
  }
  return fut.get();
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("foxhunt_ppo_actors_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

RunHooks quick_hooks() {
  RunHooks h;
  h.progress_interval = std::chrono::milliseconds(20);
  h.stall_timeout = std::chrono::seconds(20);
  return h;
}

class PpoProtocol : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(PpoProtocol, SlotsAndPoliciesAreNeverRewrittenWhileReadAndVersionsFollowTheLag) {
  const int lag = GetParam();
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    FakePpoKnobs k;
    k.policy_lag = lag;
    FakePpoAgent a(seed, k);
    PpoPipelineConfig cfg;
    cfg.total_rollouts = 60;
    cfg.policy_lag = lag;
    const fs::path dir = fresh_dir("lag" + std::to_string(lag));
    RunHooks hooks = quick_hooks();
    hooks.store = std::make_shared<CheckpointStore>(dir / "checkpoints");
    const RunResult r = run_with_deadline(cfg, a.stages, hooks);
    ASSERT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
    EXPECT_EQ(a.memory->violations.load(), 0) << a.memory->report();
    EXPECT_EQ(a.memory->updates_applied, 60);
    ASSERT_EQ(a.memory->acted.size(), 60u);
    for (const auto& [i, v] : a.memory->acted) EXPECT_EQ(v, std::max<std::int64_t>(0, i - lag)) << "rollout " << i;
    // The run ends holding the version its next rollout would use.
    EXPECT_EQ(a.memory->acting, 60 - lag);
    EXPECT_EQ(r.counters.env_steps, 60 * k.steps_per_rollout);
    EXPECT_EQ(r.counters.updates, 60);
    EXPECT_EQ(r.counters.policy_version, 60 - lag);
    ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
    std::ifstream learner(*r.final_checkpoint / "learner.txt"), collector(*r.final_checkpoint / "collector.txt");
    std::int64_t params = -1, acting = -1;
    learner >> params;
    collector >> acting;
    EXPECT_EQ(params, 60);
    EXPECT_EQ(acting, 60 - lag);
    fs::remove_all(dir);
  }
}

TEST_P(PpoProtocol, AResumedRunContinuesTheVersions) {
  const int lag = GetParam();
  FakePpoKnobs k;
  k.policy_lag = lag;
  k.start_rollouts = 10;
  k.restored_version = 10 - lag;  // what the uninterrupted run held after 10 rollouts
  FakePpoAgent a(7, k);
  PpoPipelineConfig cfg;
  cfg.total_rollouts = 30;
  cfg.policy_lag = lag;
  cfg.start = {10 * k.steps_per_rollout, 10, 10 - lag};
  const RunResult r = run_with_deadline(cfg, a.stages, quick_hooks());
  ASSERT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
  EXPECT_EQ(a.memory->violations.load(), 0) << a.memory->report();
  EXPECT_EQ(a.memory->updates_applied, 20);
  ASSERT_EQ(a.memory->acted.size(), 20u);
  for (const auto& [i, v] : a.memory->acted) {
    EXPECT_GE(i, 10);
    EXPECT_EQ(v, i - lag) << "rollout " << i;
  }
  EXPECT_EQ(r.counters.updates, 30);
  EXPECT_EQ(r.counters.env_steps, 30 * k.steps_per_rollout);
}

TEST_P(PpoProtocol, AFailingCollectEndsTheRunCleanlyWithACheckpoint) {
  FakePpoKnobs k;
  k.policy_lag = GetParam();
  k.throw_on_collect = 7;
  FakePpoAgent a(11, k);
  PpoPipelineConfig cfg;
  cfg.total_rollouts = 50;
  cfg.policy_lag = k.policy_lag;
  const fs::path dir = fresh_dir("fault" + std::to_string(k.policy_lag));
  RunHooks hooks = quick_hooks();
  hooks.store = std::make_shared<CheckpointStore>(dir / "checkpoints");
  const RunResult r = run_with_deadline(cfg, a.stages, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("collector"), std::string::npos) << r.outcome.reason;
  EXPECT_NE(r.outcome.reason.find("injected CUDA error"), std::string::npos) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(a.memory->violations.load(), 0) << a.memory->report();
  EXPECT_LT(r.counters.updates, 7);
  fs::remove_all(dir);
}

TEST_P(PpoProtocol, AStopSignalEndsTheRunWithAFinalCheckpoint) {
  FakePpoKnobs k;
  k.policy_lag = GetParam();
  FakePpoAgent a(5, k, 200);
  PpoPipelineConfig cfg;
  cfg.total_rollouts = 1'000'000;  // far more than the stop lets run
  cfg.policy_lag = k.policy_lag;
  const fs::path dir = fresh_dir("stop" + std::to_string(k.policy_lag));
  std::atomic<int> stop{0};
  RunHooks hooks = quick_hooks();
  hooks.store = std::make_shared<CheckpointStore>(dir / "checkpoints");
  hooks.stop_signal = &stop;
  hooks.on_progress = [&stop](const ProgressSnapshot& s) {
    if (s.counters.updates >= 5) stop.store(1);
  };
  const RunResult r = run_with_deadline(cfg, a.stages, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::stopped) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(a.memory->violations.load(), 0) << a.memory->report();
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  EXPECT_TRUE(fs::exists(*r.final_checkpoint / "learner.txt"));
  EXPECT_GE(r.counters.updates, 5);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Lags, PpoProtocol, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) { return "lag" + std::to_string(i.param); });

TEST(PpoProtocolConfig, RejectsWhatTheProtocolCannotRun) {
  FakePpoKnobs k;
  FakePpoAgent a(1, k);
  PpoPipelineConfig cfg;
  cfg.total_rollouts = 4;
  cfg.policy_lag = 1;  // one rollout slot cannot run one ahead
  EXPECT_THROW(run_ppo_pipeline(cfg, a.stages, RunHooks{}), std::invalid_argument);
  cfg.policy_lag = 2;
  EXPECT_THROW(run_ppo_pipeline(cfg, a.stages, RunHooks{}), std::invalid_argument);
  cfg.policy_lag = 0;
  cfg.total_rollouts = 0;
  EXPECT_THROW(run_ppo_pipeline(cfg, a.stages, RunHooks{}), std::invalid_argument);
  cfg.total_rollouts = 4;
  cfg.start.env_steps = 3;  // not a whole rollout
  EXPECT_THROW(run_ppo_pipeline(cfg, a.stages, RunHooks{}), std::invalid_argument);
  PpoStages missing = a.stages;
  missing.learner = nullptr;
  cfg.start = {};
  EXPECT_THROW(run_ppo_pipeline(cfg, missing, RunHooks{}), std::invalid_argument);
}
