// Several agents in one run (actors::run_agents) on fake stages over simulated devices (CPU only):
// DQN and PPO agents share one supervisor and complete together, each keeping its own counts and
// checkpoints; a stop ends every agent with its final checkpoint; one agent's failure (a stage
// exception, a killed actor, a stall) stops them all, names the agent, and every agent still
// writes its checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>

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

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("foxhunt_agents_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

PipelineConfig dqn_config(std::int64_t total) {
  PipelineConfig c;
  c.total_env_steps = total;
  c.learning_starts = 64;
  c.replay_ratio = 0.5;
  c.ratio_slack = 4;
  c.sync_every = 5;
  return c;
}

PpoPipelineConfig ppo_config(std::int64_t rollouts, int lag = 1) {
  PpoPipelineConfig c;
  c.total_rollouts = rollouts;
  c.policy_lag = lag;
  return c;
}

// Two DQN agents and a PPO agent, each with its own checkpoint store under `dir`.
struct ThreeAgents {
  FakePipeline dqn_a, dqn_b;
  FakePpoAgent ppo;
  std::shared_ptr<StageSet> set_a, set_b, set_p;
  std::vector<AgentSpec> specs;
  ThreeAgents(const fs::path& dir, PipelineConfig a, PipelineConfig b, PpoPipelineConfig p, FakeKnobs knobs_b = {})
      : dqn_a(1, FakeKnobs{}),
        dqn_b(2, knobs_b),
        ppo(3, [&] {
          FakePpoKnobs k;
          k.policy_lag = p.policy_lag;
          return k;
        }()) {
    set_a = make_dqn_stage_set(a, dqn_a.stages);
    set_b = make_dqn_stage_set(b, dqn_b.stages);
    set_p = make_ppo_stage_set(p, ppo.stages);
    specs = {{"dqn_a", set_a.get(), std::make_shared<CheckpointStore>(dir / "dqn_a"), nullptr},
             {"dqn_b", set_b.get(), std::make_shared<CheckpointStore>(dir / "dqn_b"), nullptr},
             {"ppo", set_p.get(), std::make_shared<CheckpointStore>(dir / "ppo"), nullptr}};
  }
  std::string violations() const {
    std::string s;
    for (const auto* m : {dqn_a.memory.get(), dqn_b.memory.get()})
      for (const auto& v : m->messages) s += v + "\n";
    for (const auto& v : ppo.memory->messages) s += v + "\n";
    return s;
  }
  int violation_count() const {
    return dqn_a.memory->violations.load() + dqn_b.memory->violations.load() + ppo.memory->violations.load();
  }
};

AgentsResult run_with_deadline(const std::vector<AgentSpec>& specs, const RunHooks& hooks) {
  auto fut = std::async(std::launch::async, [&] { return run_agents(specs, hooks); });
  if (fut.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "run_agents did not return within 60 s (hang)";
    std::abort();
  }
  return fut.get();
}

RunHooks quick_hooks() {
  RunHooks h;
  h.progress_interval = std::chrono::milliseconds(10);
  h.stall_timeout = std::chrono::seconds(20);
  return h;
}

std::int64_t learner_params(const fs::path& checkpoint) {
  std::ifstream in(checkpoint / "learner.txt");
  std::int64_t params = -1;
  in >> params;
  return params;
}

}  // namespace

TEST(AgentsRuntime, SeveralAgentsShareOneSupervisorAndCompleteTogether) {
  const fs::path dir = fresh_dir("complete");
  // Different lengths: the short agent finishes first and waits (idle) for the others.
  ThreeAgents t(dir, dqn_config(600), dqn_config(2400), ppo_config(60));
  RunHooks hooks = quick_hooks();
  std::map<std::string, caf::actor> actors;
  std::mutex m;
  hooks.on_started = [&](caf::actor, const std::map<std::string, caf::actor>& ch) {
    std::lock_guard lock(m);
    actors = ch;
  };
  std::vector<std::size_t> snapshot_sizes;
  hooks.on_agents_progress = [&](const std::vector<ProgressSnapshot>& s) { snapshot_sizes.push_back(s.size()); };
  const AgentsResult r = run_with_deadline(t.specs, hooks);
  ASSERT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(t.violation_count(), 0) << t.violations();
  {
    std::lock_guard lock(m);
    for (const char* name : {"dqn_a/collector", "dqn_a/replay", "dqn_a/learner", "dqn_a/target_sync",
                             "dqn_b/collector", "ppo/collector", "ppo/learner"})
      EXPECT_EQ(actors.count(name), 1u) << name;
    EXPECT_EQ(actors.size(), 10u);
  }
  ASSERT_FALSE(snapshot_sizes.empty());
  for (std::size_t n : snapshot_sizes) EXPECT_EQ(n, 3u);
  ASSERT_EQ(r.agents.size(), 3u);
  EXPECT_GE(r.agents[0].counters.env_steps, 600);
  EXPECT_LT(r.agents[0].counters.env_steps, 2400) << "the short agent ran on after it finished";
  EXPECT_GE(r.agents[1].counters.env_steps, 2400);
  EXPECT_EQ(r.agents[2].counters.updates, 60);
  EXPECT_EQ(t.ppo.memory->updates_applied, 60);
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(r.agents[i].name);
    EXPECT_TRUE(r.agents[i].finished);
    ASSERT_TRUE(r.agents[i].final_checkpoint.has_value()) << r.agents[i].checkpoint_error;
    // Each in its own store, with its own counts.
    EXPECT_EQ(r.agents[i].final_checkpoint->parent_path(), dir / r.agents[i].name);
    const Counters c = CheckpointStore::read_counters(*r.agents[i].final_checkpoint);
    EXPECT_EQ(c.env_steps, r.agents[i].counters.env_steps);
    EXPECT_EQ(c.updates, r.agents[i].counters.updates);
    EXPECT_EQ(learner_params(*r.agents[i].final_checkpoint), r.agents[i].counters.updates);
  }
  fs::remove_all(dir);
}

TEST(AgentsRuntime, StopEndsEveryAgentWithItsFinalCheckpoint) {
  const fs::path dir = fresh_dir("stop");
  ThreeAgents t(dir, dqn_config(1'000'000'000), dqn_config(1'000'000'000), ppo_config(1'000'000'000));
  std::atomic<int> stop_flag{0};
  RunHooks hooks = quick_hooks();
  hooks.stop_signal = &stop_flag;
  hooks.on_agents_progress = [&](const std::vector<ProgressSnapshot>& s) {
    bool all = true;
    for (const auto& a : s) all = all && a.updates_done > 20;
    if (all) stop_flag = 1;  // as the SIGINT handler does
  };
  const AgentsResult r = run_with_deadline(t.specs, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::stopped);
  EXPECT_NE(r.outcome.reason.find("SIGINT"), std::string::npos) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(t.violation_count(), 0) << t.violations();
  for (const AgentResult& a : r.agents) {
    SCOPED_TRACE(a.name);
    EXPECT_FALSE(a.finished);
    EXPECT_GT(a.counters.updates, 20);
    ASSERT_TRUE(a.final_checkpoint.has_value()) << a.checkpoint_error;
    const auto latest = CheckpointStore::latest(dir / a.name);
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(*latest, *a.final_checkpoint);
    const Counters c = CheckpointStore::read_counters(*latest);
    EXPECT_EQ(c.env_steps, a.counters.env_steps);
    EXPECT_EQ(c.updates, a.counters.updates);
    EXPECT_EQ(learner_params(*latest), a.counters.updates);  // the state the counters describe
  }
  fs::remove_all(dir);
}

TEST(AgentsRuntime, OneAgentsStageExceptionStopsAllCleanly) {
  const fs::path dir = fresh_dir("exception");
  FakeKnobs bad;
  bad.throw_on_collect = 40;
  ThreeAgents t(dir, dqn_config(1'000'000'000), dqn_config(1'000'000'000), ppo_config(1'000'000'000), bad);
  const AgentsResult r = run_with_deadline(t.specs, quick_hooks());
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("dqn_b/collector failed"), std::string::npos) << r.outcome.reason;
  EXPECT_NE(r.outcome.reason.find("injected CUDA error"), std::string::npos) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(t.violation_count(), 0) << t.violations();
  for (const AgentResult& a : r.agents) {
    SCOPED_TRACE(a.name);
    ASSERT_TRUE(a.final_checkpoint.has_value()) << a.checkpoint_error;
    EXPECT_NO_THROW(CheckpointStore::read_counters(*a.final_checkpoint));
    EXPECT_EQ(learner_params(*a.final_checkpoint), a.counters.updates);
  }
  fs::remove_all(dir);
}

TEST(AgentsRuntime, OneAgentsKilledActorStopsAll) {
  for (const char* victim : {"ppo/learner", "dqn_a/replay"}) {
    SCOPED_TRACE(victim);
    const fs::path dir = fresh_dir("kill");
    ThreeAgents t(dir, dqn_config(1'000'000'000), dqn_config(1'000'000'000), ppo_config(1'000'000'000));
    RunHooks hooks = quick_hooks();
    std::mutex m;
    caf::actor target;
    hooks.on_started = [&](caf::actor, const std::map<std::string, caf::actor>& ch) {
      std::lock_guard lock(m);
      target = ch.at(victim);
    };
    bool sent = false;
    hooks.on_agents_progress = [&](const std::vector<ProgressSnapshot>& s) {
      if (sent || s[0].updates_done < 20 || s[2].updates_done < 5) return;
      sent = true;
      std::lock_guard lock(m);
      caf::anon_send_exit(target, caf::exit_reason::kill);
    };
    const AgentsResult r = run_with_deadline(t.specs, hooks);
    EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
    EXPECT_NE(r.outcome.reason.find(std::string(victim) + " failed"), std::string::npos) << r.outcome.reason;
    EXPECT_EQ(r.exit_code(), 1);
    EXPECT_EQ(t.violation_count(), 0) << t.violations();
    for (const AgentResult& a : r.agents) EXPECT_TRUE(a.final_checkpoint.has_value()) << a.name << a.checkpoint_error;
    fs::remove_all(dir);
  }
}

TEST(AgentsRuntime, AStallOfOneAgentIsNamedWhileOthersProgress) {
  FakeKnobs stuck;
  stuck.drop_collect_callbacks = true;  // this agent's slots never reach replay
  const fs::path dir = fresh_dir("stall");
  ThreeAgents t(dir, dqn_config(1'000'000'000), dqn_config(1'000'000'000), ppo_config(1'000'000'000), stuck);
  RunHooks hooks = quick_hooks();
  hooks.stall_timeout = std::chrono::milliseconds(400);
  const AgentsResult r = run_with_deadline(t.specs, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("stalled (agent dqn_b)"), std::string::npos) << r.outcome.reason;
  EXPECT_TRUE(r.agents[0].final_checkpoint.has_value()) << r.agents[0].checkpoint_error;
  EXPECT_TRUE(r.agents[2].final_checkpoint.has_value()) << r.agents[2].checkpoint_error;
  fs::remove_all(dir);
}

TEST(AgentsRuntime, ALearnerStallOfOneAgentStopsAllAndTheOthersCheckpoint) {
  FakeKnobs hung;
  hung.hang_on_update = 20;  // dqn_b's learner stream never completes from its 20th update on
  const fs::path dir = fresh_dir("learner_stall");
  ThreeAgents t(dir, dqn_config(1'000'000'000), dqn_config(1'000'000'000), ppo_config(1'000'000'000), hung);
  for (AgentSpec& s : t.specs) s.learner_stall_timeout = std::chrono::milliseconds(200);
  const AgentsResult r = run_with_deadline(t.specs, quick_hooks());
  t.dqn_b.device->release_hangs();  // the threads left blocked on the hung stream go before the stages
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("learner (agent dqn_b) made no progress for 0.2 s: its GPU work did not complete"),
            std::string::npos)
      << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_TRUE(r.undrained);
  ASSERT_EQ(r.agents.size(), 3u);
  EXPECT_TRUE(r.agents[1].learner_stalled);
  EXPECT_FALSE(r.agents[1].final_checkpoint.has_value());
  EXPECT_NE(r.agents[1].checkpoint_error.find("no final checkpoint (agent dqn_b): the state is unreadable"),
            std::string::npos)
      << r.agents[1].checkpoint_error;
  // The others stopped cleanly: their streams drained, their final checkpoints written.
  for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
    EXPECT_FALSE(r.agents[i].learner_stalled) << r.agents[i].name;
    EXPECT_TRUE(r.agents[i].final_checkpoint.has_value()) << r.agents[i].name << ": " << r.agents[i].checkpoint_error;
  }
  EXPECT_EQ(t.violation_count(), 0) << t.violations();
  fs::remove_all(dir);
}

TEST(AgentsRuntime, RejectsUnnamedOrRepeatedAgents) {
  const fs::path dir = fresh_dir("names");
  ThreeAgents t(dir, dqn_config(600), dqn_config(600), ppo_config(10));
  std::vector<AgentSpec> specs = t.specs;
  specs[1].name = "dqn_a";
  EXPECT_THROW(run_agents(specs, quick_hooks()), std::invalid_argument);
  specs[1].name = "";
  EXPECT_THROW(run_agents(specs, quick_hooks()), std::invalid_argument);
  fs::remove_all(dir);
}
