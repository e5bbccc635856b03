// `foxhunt train` configuration: values are read, defaults fill the rest, the resolved TOML
// round-trips (keys without effect written as comments), and env.market is resolved against the
// config's folder. The malformed configs are in tests/config/malformed_run_configs_test.cpp.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "actors/run_config.hpp"

using namespace foxhunt::actors;

namespace {
constexpr const char* kMinimal = "[run]\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"dqn\"\n";
}  // namespace

TEST(RunConfigTest, MinimalConfigGivesDefaults) {
  RunConfig c = parse_run_config(kMinimal);
  EXPECT_EQ(c.env.kind, "cartpole");
  EXPECT_EQ(c.learner.kind, "dqn");
  EXPECT_EQ(c.run.name, "run");
  EXPECT_EQ(c.replay.batch_size, 128);
  EXPECT_EQ(c.learner.hidden, (std::vector<std::int64_t>{256, 256}));
}

TEST(RunConfigTest, ReadsValuesAndResolvedTomlRoundTrips) {
  const char* text = R"(
[run]
name = "ou.v2-a_1"
seed = 7
total_env_steps = 200000
[env]
kind = "cartpole"
num_envs = 256
[replay]
capacity = 50000
batch_size = 64
prioritized = false
[learner]
kind = "dqn"
hidden = [64, 32]
lr = 0.0005
target = "polyak"
tau = 1
[pipeline]
replay_ratio = 0.125
learning_starts = 2000
)";
  RunConfig c = parse_run_config(text);
  EXPECT_EQ(c.run.name, "ou.v2-a_1");
  EXPECT_EQ(c.run.seed, 7u);
  EXPECT_DOUBLE_EQ(c.learner.tau, 1.0);  // an integer where a number is expected is fine
  EXPECT_FALSE(c.replay.prioritized);
  EXPECT_EQ(c.learner.hidden, (std::vector<std::int64_t>{64, 32}));
  EXPECT_DOUBLE_EQ(c.pipeline.replay_ratio, 0.125);
  const std::string resolved = resolved_toml(c);
  RunConfig back = parse_run_config(resolved, "resolved");
  EXPECT_EQ(resolved_toml(back), resolved);
  EXPECT_EQ(back.run.seed, 7u);
  EXPECT_DOUBLE_EQ(back.learner.tau, 1.0);
  EXPECT_NE(resolved.find("\nepsilon_decay_steps = 100000\n"), std::string::npos) << resolved;  // defaults written
  // Keys without effect are comments naming why: uniform replay has no priorities.
  EXPECT_NE(resolved.find("# alpha = 0.6  # no effect with replay.prioritized = false"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("# sigma0 = 0.5  # no effect with learner.noisy = false"), std::string::npos) << resolved;
  PipelineConfig p = c.pipeline_config();
  EXPECT_EQ(p.total_env_steps, 200000);
  EXPECT_EQ(p.learning_starts, 2000);
}

TEST(RunConfigTest, StallTimeoutDefaultsToTenMinutesAndZeroTurnsItOff) {
  EXPECT_EQ(parse_run_config(kMinimal).pipeline.stall_timeout_ms, 600'000);
  const RunConfig off = parse_run_config(std::string(kMinimal) + "[pipeline]\nstall_timeout_ms = 0\n");
  EXPECT_EQ(off.pipeline.stall_timeout_ms, 0);
  const std::string resolved = resolved_toml(off);
  EXPECT_NE(resolved.find("\nstall_timeout_ms = 0\n"), std::string::npos) << resolved;
  EXPECT_EQ(parse_run_config(resolved, "resolved").pipeline.stall_timeout_ms, 0);
  const RunConfig quick = parse_run_config(std::string(kMinimal) + "[pipeline]\nstall_timeout_ms = 200\n");
  EXPECT_EQ(quick.pipeline.stall_timeout_ms, 200);
}

// run.host_threads: 0 (the default) gives 4 scheduler threads for one agent and 2 per agent for
// several; a positive value is taken as it is; out of range is refused naming the key.
TEST(RunConfigTest, HostThreadsSetTheSchedulerThreads) {
  const RunConfig automatic = parse_run_config(kMinimal);
  EXPECT_EQ(automatic.run.host_threads, 0);
  EXPECT_EQ(scheduler_threads(automatic, 1), 4);
  EXPECT_EQ(scheduler_threads(automatic, 2), 4);
  EXPECT_EQ(scheduler_threads(automatic, 8), 16);
  const std::string text = "[run]\nhost_threads = 6\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"dqn\"\n";
  const RunConfig six = parse_run_config(text);
  EXPECT_EQ(scheduler_threads(six, 1), 6);
  EXPECT_EQ(scheduler_threads(six, 8), 6);
  const std::string resolved = resolved_toml(six);
  EXPECT_NE(resolved.find("\nhost_threads = 6\n"), std::string::npos) << resolved;
  EXPECT_EQ(parse_run_config(resolved, "resolved").run.host_threads, 6);
  try {
    parse_run_config("[run]\nhost_threads = -1\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"dqn\"\n", "h.toml");
    FAIL() << "host_threads = -1 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("run.host_threads = -1: must be an integer in [0, 1024]"), std::string::npos)
        << e.what();
  }
}

TEST(RunConfigTest, ListsTheKeysItAccepts) {
  const std::vector<std::string> keys = run_config_keys();
  for (const char* k : {"run.name", "env.kind", "env.market", "learner.kind", "replay.batch_size", "logging.level"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  for (const char* k : {"env.kappa", "env.episode_length", "dqn.batch"})
    EXPECT_EQ(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

namespace {
// A scratch folder with a run config and a market file beside it.
struct MarketFiles {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("foxhunt_run_config_test_" + std::to_string(::getpid()));
  MarketFiles() { std::filesystem::create_directories(dir / "markets"); }
  ~MarketFiles() { std::filesystem::remove_all(dir); }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return dir / name;
  }
};
constexpr const char* kOuMarket = R"(
[market]
assets = 1
episode_length = 64
window = 8
[process]
kind = "ou"
initial_price = 100.0
kappa = 5.0
sigma = 0.2
[action]
kind = "discrete"
levels = [-1.0, 0.0, 1.0]
)";
}  // namespace

TEST(RunConfigTest, MarketFileIsResolvedAgainstTheConfigFolder) {
  MarketFiles f;
  f.write("markets/ou.toml", kOuMarket);
  const auto cfg =
      f.write("run.toml", "[run]\n[env]\nkind = \"market\"\nmarket = \"markets/ou.toml\"\n[learner]\nkind = \"dqn\"\n");
  RunConfig c = load_run_config(cfg);
  EXPECT_TRUE(std::filesystem::path(c.env.market).is_absolute()) << c.env.market;
  EXPECT_TRUE(std::filesystem::equivalent(c.env.market, f.dir / "markets" / "ou.toml"));
  foxhunt::rl::MarketConfig m = market_config(c);
  EXPECT_EQ(m.episode_length, 64);
  EXPECT_EQ(m.window, 8);
  EXPECT_EQ(m.levels.size(), 3u);
  // The resolved config (what the run directory keeps) names the same absolute file.
  RunConfig back = parse_run_config(resolved_toml(c), "resolved");
  EXPECT_EQ(back.env.market, c.env.market);
  EXPECT_EQ(market_config(back).window, 8);
  EXPECT_THROW(market_config(parse_run_config(kMinimal)), std::invalid_argument);  // cartpole: not a market
}

TEST(RunConfigTest, ConfigPathThatIsADirectoryOrMissingIsNamed) {
  MarketFiles f;
  for (const auto& p : {f.dir, f.dir / "none.toml"}) {
    try {
      load_run_config(p);
      ADD_FAILURE() << "accepted " << p;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
  }
}

namespace {
constexpr const char* kPpo = "[run]\n[env]\nkind = \"cartpole\"\nnum_envs = 4\n[learner]\nkind = \"ppo\"\n";

std::string config_error(const std::string& text) {
  try {
    parse_run_config(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(RunConfigTest, PipelineModeDefaultsByLearnerKind) {
  EXPECT_EQ(parse_run_config(kMinimal).pipeline.mode, "actors");
  const RunConfig ppo = parse_run_config(kPpo);
  EXPECT_EQ(ppo.pipeline.mode, "sync");
  EXPECT_EQ(ppo.pipeline.policy_lag, 0);
  const RunConfig actors =
      parse_run_config(std::string(kPpo) + "[pipeline]\nmode = \"actors\"\npolicy_lag = 1\ncompletions = \"hostfn\"\n");
  EXPECT_EQ(actors.pipeline.mode, "actors");
  EXPECT_EQ(actors.pipeline.policy_lag, 1);
  EXPECT_EQ(actors.pipeline.completions, "hostfn");
  // The resolved config keeps the mode and the lag.
  const RunConfig again = parse_run_config(resolved_toml(actors), "resolved");
  EXPECT_EQ(again.pipeline.mode, "actors");
  EXPECT_EQ(again.pipeline.policy_lag, 1);
  for (const char* k : {"pipeline.mode", "pipeline.policy_lag"}) {
    const std::vector<std::string> keys = run_config_keys();
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  }
}

TEST(RunConfigTest, PipelineModeAndPolicyLagAreValidated) {
  std::string e = config_error(std::string(kMinimal) + "[pipeline]\nmode = \"sync\"\n");
  EXPECT_NE(e.find("pipeline.mode"), std::string::npos) << e;
  EXPECT_NE(e.find("DQN trains through the actors only"), std::string::npos) << e;
  e = config_error(std::string(kPpo) + "[pipeline]\nmode = \"async\"\n");
  EXPECT_NE(e.find("pipeline.mode"), std::string::npos) << e;
  EXPECT_NE(e.find("sync"), std::string::npos) << e;
  e = config_error(std::string(kPpo) + "[pipeline]\nmode = \"actors\"\npolicy_lag = 2\n");
  EXPECT_NE(e.find("pipeline.policy_lag"), std::string::npos) << e;
  // The lag only means something for PPO through the actors.
  e = config_error(std::string(kPpo) + "[pipeline]\npolicy_lag = 1\n");
  EXPECT_NE(e.find("pipeline.policy_lag"), std::string::npos) << e;
  EXPECT_NE(e.find("pipeline.mode"), std::string::npos) << e;
  e = config_error(std::string(kMinimal) + "[pipeline]\npolicy_lag = 0\n");
  EXPECT_NE(e.find("pipeline.policy_lag"), std::string::npos) << e;
  // PPO has no replay ratio or slots, whatever the mode; completions only through the actors.
  e = config_error(std::string(kPpo) + "[pipeline]\nmode = \"actors\"\nreplay_ratio = 0.5\n");
  EXPECT_NE(e.find("pipeline.replay_ratio"), std::string::npos) << e;
  e = config_error(std::string(kPpo) + "[pipeline]\ncompletions = \"hostfn\"\n");
  EXPECT_NE(e.find("pipeline.completions"), std::string::npos) << e;
}
