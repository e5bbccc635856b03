// The learner watchdog of the actor runtime (RunHooks/AgentSpec::learner_stall_timeout) on fake
// stages (CPU only): a learner whose GPU work stops completing (FakeDevice::hang: a kernel that
// never ends, a collective waiting for a dead peer) fails the run within the timeout plus the
// bounded quiesce, naming the learner; a slow learner whose completions keep coming is not
// flagged; 0 turns the watchdog off (the general stall then ends the run, still without hanging).
// Several agents: tests/actors/agents_runtime_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <string>

#include "actors/pipeline.hpp"
#include "actors/ppo_pipeline.hpp"
#include "tests/actors/fake_ppo_stages.hpp"
#include "tests/actors/fake_stages.hpp"

namespace fs = std::filesystem;
using namespace foxhunt::actors;
using foxhunt::actors::test::FakeKnobs;
using foxhunt::actors::test::FakePipeline;
using foxhunt::actors::test::FakePpoAgent;
using foxhunt::actors::test::FakePpoKnobs;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kTimeout{200};

// Runs the agent on another thread and aborts the test if it hangs (nothing else recovers).
RunResult run_with_deadline(StageSet& set, const RunHooks& hooks) {
  auto fut = std::async(std::launch::async, [&] { return run_stage_set(set, hooks); });
  if (fut.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "run_stage_set did not return within 60 s (hang)";
    std::abort();
  }
  return fut.get();
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("foxhunt_watchdog_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

PipelineConfig endless() {
  PipelineConfig c;
  c.total_env_steps = 1'000'000'000;
  c.learning_starts = 64;
  c.replay_ratio = 0.5;
  c.ratio_slack = 4;
  c.sync_every = 5;
  return c;
}

// The general stall far away: only the learner watchdog can end these runs.
RunHooks watched_hooks() {
  RunHooks h;
  h.progress_interval = milliseconds(10);
  h.stall_timeout = std::chrono::seconds(20);
  h.learner_stall_timeout = kTimeout;
  return h;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

TEST(LearnerWatchdog, DqnLearnerWhoseWorkNeverCompletesFailsTheRunWithinTheBound) {
  FakeKnobs k;
  k.hang_on_update = 20;
  FakePipeline p(81, k);
  auto set = make_dqn_stage_set(endless(), p.stages);
  const fs::path dir = fresh_dir("dqn");
  RunHooks hooks = watched_hooks();
  hooks.store = std::make_shared<CheckpointStore>(dir);
  std::string hook_reason;
  int hook_calls = 0;
  hooks.on_learner_stall = [&](const std::string& why) {
    hook_reason = why;
    ++hook_calls;
  };
  const RunResult r = run_with_deadline(*set, hooks);
  const auto ended = Clock::now();
  const auto hung_at = p.device->hung_at();
  p.device->release_hangs();  // the threads left blocked on the hung stream go before the stages

  ASSERT_NE(hung_at, Clock::time_point{}) << "the learner's stream never hung";
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("learner made no progress for 0.2 s: its GPU work did not complete"),
            std::string::npos)
      << r.outcome.reason;
  EXPECT_TRUE(r.learner_stalled);
  EXPECT_EQ(hook_calls, 1);
  EXPECT_EQ(hook_reason, r.outcome.reason);
  EXPECT_EQ(r.exit_code(), 1);
  // Not before the timeout; after it, at most a few progress intervals, the quiesce's bound
  // (= the timeout here) and scheduling slack.
  const double waited = ms_between(hung_at, ended);
  EXPECT_GE(waited, static_cast<double>(kTimeout.count()));
  EXPECT_LT(waited, 2.0 * static_cast<double>(kTimeout.count()) + 1500.0);
  // The hung stream cannot be read: no final checkpoint, and the message says why and what is left.
  EXPECT_TRUE(r.undrained);
  EXPECT_FALSE(r.final_checkpoint.has_value());
  EXPECT_NE(r.checkpoint_error.find("did not complete within 0.2 s after the stall"), std::string::npos)
      << r.checkpoint_error;
  EXPECT_NE(r.checkpoint_error.find("the latest good checkpoint is none"), std::string::npos) << r.checkpoint_error;
  EXPECT_GE(r.counters.updates, 20);
  EXPECT_EQ(p.memory->violations.load(), 0);
  fs::remove_all(dir);
}

TEST(LearnerWatchdog, PpoLearnerWhoseWorkNeverCompletesFailsTheRun) {
  FakePpoKnobs k;
  k.policy_lag = 1;
  k.hang_on_update = 5;
  FakePpoAgent agent(82, k);
  PpoPipelineConfig cfg;
  cfg.total_rollouts = 1'000'000'000;
  cfg.policy_lag = 1;
  auto set = make_ppo_stage_set(cfg, agent.stages);
  const RunResult r = run_with_deadline(*set, watched_hooks());
  agent.device->release_hangs();
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("learner made no progress for 0.2 s: its GPU work did not complete"),
            std::string::npos)
      << r.outcome.reason;
  EXPECT_TRUE(r.learner_stalled);
  EXPECT_EQ(agent.memory->violations.load(), 0);
}

TEST(LearnerWatchdog, SlowLearnerWhoseCompletionsKeepComingIsNotFlagged) {
  FakeKnobs k;
  k.update_sleep_ms = 40;  // every update: 40 ms of "kernel", the learner busy for far longer in all
  FakePipeline p(83, k);
  PipelineConfig cfg = endless();
  cfg.total_env_steps = 240;
  cfg.replay_ratio = 0.25;
  auto set = make_dqn_stage_set(cfg, p.stages);
  RunHooks hooks = watched_hooks();
  hooks.learner_stall_timeout = milliseconds(300);
  const auto start = Clock::now();
  const RunResult r = run_with_deadline(*set, hooks);
  const double took = ms_between(start, Clock::now());
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
  EXPECT_FALSE(r.learner_stalled);
  EXPECT_FALSE(r.undrained);
  EXPECT_GE(r.counters.updates, 30);
  // Meaningful only if the learner was busy for several timeouts in all.
  EXPECT_GT(took, 3.0 * 300.0);
  EXPECT_EQ(p.memory->violations.load(), 0);
}

TEST(LearnerWatchdog, ZeroTurnsItOffAndTheGeneralStallStillEndsTheRun) {
  FakeKnobs k;
  k.hang_on_update = 20;
  FakePipeline p(84, k);
  auto set = make_dqn_stage_set(endless(), p.stages);
  RunHooks hooks = watched_hooks();
  hooks.learner_stall_timeout = milliseconds(0);
  hooks.stall_timeout = milliseconds(300);
  bool hook_called = false;
  hooks.on_learner_stall = [&](const std::string&) { hook_called = true; };
  const RunResult r = run_with_deadline(*set, hooks);
  p.device->release_hangs();
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  // The replay ratio holds the collector once the learner lags: neither steps nor updates move.
  EXPECT_NE(r.outcome.reason.find("stalled: no environment step or update for 0.3 s"), std::string::npos)
      << r.outcome.reason;
  EXPECT_EQ(r.outcome.reason.find("learner made no progress"), std::string::npos) << r.outcome.reason;
  EXPECT_FALSE(r.learner_stalled);
  EXPECT_FALSE(hook_called);
  EXPECT_TRUE(r.undrained);  // the quiesce after a stall is bounded too: the run ended
}

TEST(LearnerWatchdog, LearnerWatchdogTakesPrecedenceOverAShorterGeneralStall) {
  // The general stall would fire first; while the learner has work outstanding the (longer)
  // learner watchdog decides instead, so the configured stall_timeout_ms is what counts.
  FakeKnobs k;
  k.hang_on_update = 20;
  FakePipeline p(85, k);
  auto set = make_dqn_stage_set(endless(), p.stages);
  RunHooks hooks = watched_hooks();
  hooks.stall_timeout = milliseconds(100);
  hooks.learner_stall_timeout = milliseconds(400);
  const RunResult r = run_with_deadline(*set, hooks);
  const auto ended = Clock::now();
  const auto hung_at = p.device->hung_at();
  p.device->release_hangs();
  EXPECT_NE(r.outcome.reason.find("learner made no progress for 0.4 s"), std::string::npos) << r.outcome.reason;
  EXPECT_GE(ms_between(hung_at, ended), 400.0);
}
