// Run configs of several agents ([[agent]] tables) and --seeds: each agent reads as a whole run
// config over the shared tables, every problem names the agent, the key and what is allowed, a
// file without [[agent]] reads exactly as before, and --seeds takes distinct non-negative integers.
#include <gtest/gtest.h>

#include <string>

#include "actors/run_config.hpp"
#include "config/error.hpp"

using namespace foxhunt::actors;

namespace {

constexpr const char* kShared = R"([run]
name = "two"
seed = 5
total_env_steps = 100000
[env]
kind = "cartpole"
num_envs = 8
)";

constexpr const char* kDqnAgent = R"(
[[agent]]
name = "dqn"
stream_priority = -1
[agent.replay]
capacity = 5000
batch_size = 32
[agent.learner]
kind = "dqn"
hidden = [32, 32]
[agent.pipeline]
learning_starts = 500
)";

constexpr const char* kPpoAgent = R"(
[[agent]]
name = "ppo"
[agent.learner]
kind = "ppo"
rollout_steps = 16
minibatches = 2
)";

// The problems of a config that must fail (the test fails when it parses).
std::string problems(const std::string& text) {
  try {
    parse_agents_config(text, "agents.toml");
  } catch (const foxhunt::config::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsed without an error:\n" << text;
  return {};
}

}  // namespace

TEST(AgentsConfig, AFileWithoutAgentTablesIsOneUnnamedAgentAsBefore) {
  const std::string text = std::string(kShared) + "[learner]\nkind = \"ppo\"\n";
  const AgentsConfig a = parse_agents_config(text);
  EXPECT_FALSE(a.several);
  ASSERT_EQ(a.agents.size(), 1u);
  EXPECT_EQ(a.agents[0].name, "");
  EXPECT_EQ(resolved_toml(a.agents[0].config), resolved_toml(parse_run_config(text)));
  EXPECT_EQ(a.agents[0].config.pipeline.mode, "sync");  // PPO's default in a file of one agent
}

TEST(AgentsConfig, EachAgentIsAWholeRunOverTheSharedTables) {
  const AgentsConfig a = parse_agents_config(std::string(kShared) + kDqnAgent + kPpoAgent);
  ASSERT_TRUE(a.several);
  ASSERT_EQ(a.agents.size(), 2u);
  const RunConfig& dqn = a.agents[0].config;
  const RunConfig& ppo = a.agents[1].config;
  EXPECT_EQ(a.agents[0].name, "dqn");
  EXPECT_EQ(a.agents[0].stream_priority, -1);
  EXPECT_EQ(a.agents[1].stream_priority, 0);
  for (const RunConfig* c : {&dqn, &ppo}) {
    EXPECT_EQ(c->run.seed, 5u);  // run.seed: the same environment seeds for both
    EXPECT_EQ(c->env.num_envs, 8);
    EXPECT_EQ(c->run.total_env_steps, 100000);
  }
  EXPECT_EQ(dqn.learner.kind, "dqn");
  EXPECT_EQ(dqn.replay.capacity, 5000);
  EXPECT_EQ(dqn.learner.hidden, (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(ppo.learner.kind, "ppo");
  EXPECT_EQ(ppo.learner.rollout_steps, 16);
  EXPECT_EQ(ppo.learner.hidden, (std::vector<std::int64_t>{64, 64}));  // PPO's defaults, not DQN's
  EXPECT_EQ(ppo.pipeline.mode, "actors");  // an agent beside others trains through the actors
  // An agent's resolved config is a file of one agent that reads back to it.
  EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(ppo))), resolved_toml(ppo));
  EXPECT_EQ(parse_run_config(resolved_toml(ppo)).pipeline.mode, "actors");
}

TEST(AgentsConfig, TopLevelTablesAreDefaultsTheAgentsOverride) {
  const std::string text = std::string(kShared) +
                           "[learner]\nkind = \"ppo\"\nlr = 0.001\n"
                           "[[agent]]\nname = \"a\"\nseed = 1\n"
                           "[[agent]]\nname = \"b\"\nseed = 2\n[agent.learner]\nlr = 0.002\n";
  const AgentsConfig a = parse_agents_config(text);
  ASSERT_EQ(a.agents.size(), 2u);
  EXPECT_EQ(a.agents[0].config.run.seed, 1u);
  EXPECT_EQ(a.agents[1].config.run.seed, 2u);
  EXPECT_DOUBLE_EQ(a.agents[0].config.learner.lr, 0.001);
  EXPECT_DOUBLE_EQ(a.agents[1].config.learner.lr, 0.002);
  EXPECT_EQ(a.agents[1].config.learner.kind, "ppo");
}

TEST(AgentsConfig, AnAgentsProblemNamesTheAgentTheKeyTheLineAndTheAllowedValues) {
  std::string text = std::string(kShared) + kDqnAgent + kPpoAgent;
  text.replace(text.find("rollout_steps = 16"), 18, "rollout_steps = 0");
  const std::string e = problems(text);
  EXPECT_NE(e.find("[[agent]] 2 \"ppo\": agents.toml:"), std::string::npos) << e;
  EXPECT_NE(e.find("learner.rollout_steps = 0: must be an integer in [1, 65536]"), std::string::npos) << e;
  EXPECT_EQ(e.find("[[agent]] 1"), std::string::npos) << "the DQN agent has no problem\n" << e;
}

TEST(AgentsConfig, ASharedProblemIsReportedOnce) {
  std::string text = std::string(kShared) + kDqnAgent + kPpoAgent;
  text.replace(text.find("num_envs = 8"), 12, "num_envs = 0");
  const std::string e = problems(text);
  const std::string line = "env.num_envs = 0: must be an integer in [1, 16777216]";
  ASSERT_NE(e.find(line), std::string::npos) << e;
  EXPECT_EQ(e.find(line, e.find(line) + 1), std::string::npos) << "reported twice:\n" << e;
  EXPECT_EQ(e.find("[[agent]] 1 \"dqn\": agents.toml:7"), std::string::npos) << e;
}

TEST(AgentsConfig, AgentKeysAreChecked) {
  // name missing, name repeated, a bad name, a priority out of range, an unknown key and table.
  EXPECT_NE(problems(std::string(kShared) + "[[agent]]\n[agent.learner]\nkind = \"ppo\"\n").find("agent.name: missing"),
            std::string::npos);
  std::string twice = std::string(kShared) + kPpoAgent + kPpoAgent;
  std::string e = problems(twice);
  EXPECT_NE(e.find("[[agent]] 2 \"ppo\": agent.name = \"ppo\": already the name of [[agent]] 1"), std::string::npos)
      << e;
  std::string bad = std::string(kShared) + kPpoAgent;
  bad.replace(bad.find("name = \"ppo\""), 12, "name = \"a/b\"\nstream_priority = 3\nsed = 2\n[agent.env]\nnum_envs = 2");
  e = problems(bad);
  EXPECT_NE(e.find("agent.name = \"a/b\": must be a plain name"), std::string::npos) << e;
  EXPECT_NE(e.find("agent.stream_priority = 3: must be an integer in [-8, 0]"), std::string::npos) << e;
  EXPECT_NE(e.find("agent.sed: unknown key; did you mean 'seed'?"), std::string::npos) << e;
  EXPECT_NE(e.find("[agent.env]: unknown table"), std::string::npos) << e;
  // [[agent]] must be tables.
  e = problems("agent = [1, 2]\n" + std::string(kShared));  // a top-level key: before any table
  EXPECT_NE(e.find("must be one or more [[agent]] tables"), std::string::npos) << e;
}

TEST(AgentsConfig, AgentsMustBeAbleToRunTogether) {
  // PPO's synchronous loop runs one agent.
  std::string text = std::string(kShared) + kDqnAgent + kPpoAgent + "[agent.pipeline]\nmode = \"sync\"\n";
  std::string e = problems(text);
  EXPECT_NE(e.find("[[agent]] 2 \"ppo\""), std::string::npos) << e;
  EXPECT_NE(e.find("pipeline.mode = \"sync\""), std::string::npos) << e;
  EXPECT_NE(e.find("trains through the actors"), std::string::npos) << e;
  // One completion mechanism per process.
  text = std::string(kShared) + kDqnAgent + kPpoAgent + "[agent.pipeline]\ncompletions = \"hostfn\"\n";
  e = problems(text);
  EXPECT_NE(e.find("pipeline.completions = \"hostfn\""), std::string::npos) << e;
  EXPECT_NE(e.find("\"polled\""), std::string::npos) << e;
  // A DQN agent beside a PPO one (segments) needs its replay buffer in the segment checkpoints.
  text = std::string(kShared) + "[checkpoint]\nreplay = \"never\"\n" + kDqnAgent + kPpoAgent;
  e = problems(text);
  EXPECT_NE(e.find("checkpoint.replay = \"never\""), std::string::npos) << e;
}

TEST(AgentsConfig, KeysOfTheAgentTableAreListed) {
  const std::vector<std::string> keys = run_config_keys();
  for (const char* k : {"agent.name", "agent.seed", "agent.stream_priority", "learner.kind"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

TEST(Seeds, DistinctNonNegativeIntegers) {
  EXPECT_EQ(parse_seeds("1,2,3"), (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(parse_seeds("0, 7"), (std::vector<std::uint64_t>{0, 7}));
  for (const char* bad : {"", "1,,2", "1,x", "-1", "1,1", "1.5", "+2", "2,", "99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    try {
      parse_seeds(bad);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--seeds"), std::string::npos) << m;
      EXPECT_NE(m.find("distinct non-negative integers"), std::string::npos) << m;
    }
  }
  std::string many;
  for (int i = 0; i < 65; ++i) many += (i ? "," : "") + std::to_string(i);
  EXPECT_THROW(parse_seeds(many), std::invalid_argument);
}

TEST(Seeds, EveryAgentOncePerSeed) {
  const AgentsConfig one = parse_agents_config(std::string(kShared) + "[learner]\nkind = \"ppo\"\n[pipeline]\nmode = \"actors\"\n");
  const AgentsConfig s = with_seeds(one, {4, 9});
  ASSERT_TRUE(s.several);
  ASSERT_EQ(s.agents.size(), 2u);
  EXPECT_EQ(s.agents[0].name, "seed4");
  EXPECT_EQ(s.agents[1].name, "seed9");
  EXPECT_EQ(s.agents[0].config.run.seed, 4u);
  EXPECT_EQ(s.agents[1].config.run.seed, 9u);
  const AgentsConfig two = with_seeds(parse_agents_config(std::string(kShared) + kDqnAgent + kPpoAgent), {1, 2});
  ASSERT_EQ(two.agents.size(), 4u);
  EXPECT_EQ(two.agents[0].name, "dqn-seed1");
  EXPECT_EQ(two.agents[3].name, "ppo-seed2");
  EXPECT_EQ(two.agents[0].stream_priority, -1);
  // PPO's synchronous loop (the default of a file of one agent) cannot run beside others.
  const AgentsConfig sync = parse_agents_config(std::string(kShared) + "[learner]\nkind = \"ppo\"\n");
  try {
    with_seeds(sync, {1, 2});
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.mode = \"actors\""), std::string::npos) << e.what();
  }
}

TEST(AgentsConfig, EachAgentHasItsOwnLearnerWatchdogTimeout) {
  // The shared [pipeline] sets the default; one agent's [agent.pipeline] overrides it (a PPO agent
  // trains through the actors beside others, so its learner is watched too).
  const std::string text = std::string(kShared) + "[pipeline]\nstall_timeout_ms = 120000\n" + kDqnAgent + kPpoAgent +
                           "[agent.pipeline]\nstall_timeout_ms = 0\n";
  const AgentsConfig c = parse_agents_config(text, "agents.toml");
  ASSERT_EQ(c.agents.size(), 2u);
  EXPECT_EQ(c.agents[0].config.pipeline.stall_timeout_ms, 120'000);
  EXPECT_EQ(c.agents[1].config.pipeline.stall_timeout_ms, 0);
  const std::string e = problems(std::string(kShared) + kDqnAgent + "stall_timeout_ms = -5\n" + kPpoAgent);
  EXPECT_NE(e.find("pipeline.stall_timeout_ms = -5: must be an integer in [0, 604800000]"), std::string::npos) << e;
  EXPECT_NE(e.find("\"dqn\""), std::string::npos) << e;
}
