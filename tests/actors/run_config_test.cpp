// `foxhunt train` configuration: a table of malformed configs, each rejected with a message that
// names the key (and the allowed range or set); good configs round-trip through the resolved TOML.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "actors/run_config.hpp"

using namespace foxhunt::actors;

TEST(RunConfigTest, EmptyConfigGivesDefaults) {
  RunConfig c = parse_run_config("");
  EXPECT_EQ(c.env.kind, "cartpole");
  EXPECT_EQ(c.replay.batch_size, 128);
  EXPECT_EQ(c.learner.hidden, (std::vector<std::int64_t>{256, 256}));
}

TEST(RunConfigTest, ReadsValuesAndResolvedTomlRoundTrips) {
  const char* text = R"(
[run]
name = "ou"
seed = 7
total_env_steps = 200000
[env]
kind = "ou_market"
num_envs = 256
kappa = 3
[replay]
capacity = 50000
batch_size = 64
prioritized = false
[learner]
hidden = [64, 32]
lr = 0.0005
target = "polyak"
tau = 0.01
[pipeline]
replay_ratio = 0.125
learning_starts = 2000
)";
  RunConfig c = parse_run_config(text);
  EXPECT_EQ(c.run.name, "ou");
  EXPECT_EQ(c.run.seed, 7u);
  EXPECT_EQ(c.env.kind, "ou_market");
  EXPECT_DOUBLE_EQ(c.env.kappa, 3.0);  // an integer where a number is expected is fine
  EXPECT_FALSE(c.replay.prioritized);
  EXPECT_EQ(c.learner.hidden, (std::vector<std::int64_t>{64, 32}));
  EXPECT_DOUBLE_EQ(c.pipeline.replay_ratio, 0.125);
  const std::string resolved = resolved_toml(c);
  RunConfig back = parse_run_config(resolved, "resolved");
  EXPECT_EQ(resolved_toml(back), resolved);
  EXPECT_EQ(back.run.seed, 7u);
  EXPECT_DOUBLE_EQ(back.learner.tau, 0.01);
  EXPECT_NE(resolved.find("epsilon_decay_steps"), std::string::npos);  // defaults are written out
  PipelineConfig p = c.pipeline_config();
  EXPECT_EQ(p.total_env_steps, 200000);
  EXPECT_EQ(p.learning_starts, 2000);
}

struct BadConfig {
  const char* toml;
  std::vector<const char*> must_mention;
};

TEST(RunConfigTest, MalformedConfigsAreRejectedNamingTheKey) {
  const std::vector<BadConfig> table = {
      {"[run]\nnmae = \"x\"\n", {"run.nmae", "unknown key"}},
      {"[runn]\nname = \"x\"\n", {"runn", "unknown section"}},
      {"seed = 3\n", {"seed", "unknown"}},
      {"[run]\ntotal_env_steps = 0\n", {"run.total_env_steps", "[1, "}},
      {"[run]\ntotal_env_steps = \"many\"\n", {"run.total_env_steps", "integer"}},
      {"[run]\nseed = -1\n", {"run.seed"}},
      {"[run]\nname = \"\"\n", {"run.name", "non-empty"}},
      {"[run]\ndeterministic = 1\n", {"run.deterministic", "true or false"}},
      {"[env]\nkind = \"pong\"\n", {"env.kind", "cartpole | ou_market"}},
      {"[env]\nnum_envs = 0\n", {"env.num_envs", "[1, 16777216]"}},
      {"[env]\nsigma = 0\n", {"env.sigma", "(0, 10]"}},
      {"[env]\nsigma = nan\n", {"env.sigma"}},
      {"[replay]\nalpha = -1\n", {"replay.alpha", "[0, 10]"}},
      {"[replay]\nbeta = 1.5\n", {"replay.beta", "[0, 1]"}},
      {"[replay]\ngamma = 1.01\n", {"replay.gamma", "[0, 1]"}},
      {"[replay]\nn_step = 0\n", {"replay.n_step", "[1, 32]"}},
      {"[replay]\ncapacity = 10\n", {"replay.capacity", "pipeline.learning_starts"}},
      {"[learner]\nhidden = []\n", {"learner.hidden", "list of 1 to 8"}},
      {"[learner]\nhidden = [64, -1]\n", {"learner.hidden"}},
      {"[learner]\nhidden = 64\n", {"learner.hidden"}},
      {"[learner]\nlr = 0\n", {"learner.lr", "(0, 1]"}},
      {"[learner]\nloss = \"l1\"\n", {"learner.loss", "huber | mse"}},
      {"[learner]\nepsilon_start = 0.1\nepsilon_final = 0.5\n", {"learner.epsilon_final", "learner.epsilon_start"}},
      {"[learner]\nepsilon_decay_steps = -1\n", {"learner.epsilon_decay_steps", "[0, "}},
      {"[learner]\nnoisy = 1\n", {"learner.noisy", "true or false"}},
      {"[learner]\natoms = 2000\n", {"learner.atoms", "[1, 1024]"}},
      {"[pipeline]\nreplay_ratio = 0\n", {"pipeline.replay_ratio", "(0, 1024]"}},
      {"[pipeline]\nlearning_starts = 10\n", {"pipeline.learning_starts", "replay.batch_size"}},
      {"[pipeline]\nslots = 0\n", {"pipeline.slots", "[1, 64]"}},
      {"[pipeline]\nsync_every = 0\n", {"pipeline.sync_every"}},
      {"[pipeline]\ncompletions = \"fast\"\n", {"pipeline.completions"}},
      {"[checkpoint]\nevery_env_steps = -5\n", {"checkpoint.every_env_steps"}},
      {"[checkpoint]\nkeep = -1\n", {"checkpoint.keep", "[0, "}},
      {"[checkpoint]\nreplay = \"sometimes\"\n", {"checkpoint.replay", "final | always | never"}},
      {"[checkpoint]\nreplay = true\n", {"checkpoint.replay", "final | always | never"}},
      {"[logging]\nlevel = \"loud\"\n", {"logging.level", "trace | debug | info | warn | error"}},
      {"[logging]\nprogress_interval_ms = 1\n", {"logging.progress_interval_ms", "[50, "}},
      {"run = 5\n", {"run", "must be a table"}},
      {"[env]\nkind = \"market\"\n", {"env.market", "missing"}},
      {"[env]\nkind = \"cartpole\"\nmarket = \"m.toml\"\n", {"env.market", "cartpole"}},
      {"[env]\nkind = \"market\"\nmarket = \"m.toml\"\nkappa = 2\n", {"env.kappa", "env.market"}},
      {"[env]\nmarket = 3\n", {"env.market", "string"}},
      {"[run\nname = 1\n", {"TOML syntax error", "cfg.toml:1"}},
  };
  for (const auto& bad : table) {
    SCOPED_TRACE(bad.toml);
    try {
      parse_run_config(bad.toml, "cfg.toml");
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      for (const char* m : bad.must_mention) EXPECT_NE(msg.find(m), std::string::npos) << "message: " << msg;
    }
  }
}

TEST(RunConfigTest, CheckpointReplayKey) {
  EXPECT_EQ(parse_run_config("").checkpoint.replay, "final");  // today's behaviour by default
  for (const char* v : {"final", "always", "never"}) {
    SCOPED_TRACE(v);
    const RunConfig c = parse_run_config(std::string("[checkpoint]\nreplay = \"") + v + "\"\n");
    EXPECT_EQ(c.checkpoint.replay, v);
    const std::string resolved = resolved_toml(c);
    EXPECT_NE(resolved.find(std::string("replay = '") + v + "'"), std::string::npos) << resolved;
    EXPECT_EQ(parse_run_config(resolved, "resolved").checkpoint.replay, v);
  }
}

TEST(RunConfigTest, ReportsEveryProblemAtOnce) {
  try {
    parse_run_config("[replay]\nalpha = -1\nbeta = 2\n[learner]\nlr = -3\nfoo = 1\n", "x.toml");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const char* k : {"replay.alpha", "replay.beta", "learner.lr", "learner.foo"})
      EXPECT_NE(msg.find(k), std::string::npos) << msg;
  }
}

TEST(RunConfigTest, ShippedConfigsAreValid) {
  const auto dir = std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "configs";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    // pipeline_*.toml are in this schema; the others (DqnTrainer's schema) are translated
    // (tests/actors/config_schema_test.cpp checks the translation)
    if (!e.is_regular_file() || e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW(load_run_config(e.path()));
    ++n;
  }
  EXPECT_GE(n, 6);
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
  const auto cfg = f.write("run.toml", "[env]\nkind = \"market\"\nmarket = \"markets/ou.toml\"\n");
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
}

TEST(RunConfigTest, InlineOuMarketKeysBuildTheBenchmarkMarket) {
  RunConfig c = parse_run_config("[env]\nkind = \"ou_market\"\nkappa = 3\nsigma = 0.3\nepisode_length = 100\n");
  foxhunt::rl::MarketConfig m = market_config(c);
  EXPECT_EQ(m.process, foxhunt::rl::PriceProcess::ou);
  ASSERT_EQ(m.kappa.size(), 1u);
  EXPECT_DOUBLE_EQ(m.kappa[0], 3.0);
  EXPECT_DOUBLE_EQ(m.sigma[0], 0.3);
  EXPECT_EQ(m.episode_length, 100);
  EXPECT_THROW(market_config(parse_run_config("")), std::invalid_argument);  // cartpole: not a market
}

TEST(RunConfigTest, BadMarketFilesAreRejectedNamingTheKeys) {
  MarketFiles f;
  std::string continuous = kOuMarket;
  continuous.replace(continuous.find("kind = \"discrete\""), 17, "kind = \"continuous\"");
  continuous.replace(continuous.find("levels = [-1.0, 0.0, 1.0]"), 25, "");
  f.write("markets/cont.toml", continuous);
  std::string bad_kappa = kOuMarket;
  bad_kappa.replace(bad_kappa.find("kappa = 5.0"), 11, "kappa = -5.0");
  f.write("markets/bad.toml", bad_kappa);
  const std::vector<std::pair<std::string, std::vector<const char*>>> table = {
      {"markets/none.toml", {"env.market", "no such file"}},
      {"markets/cont.toml", {"env.market", "continuous"}},
      {"markets/bad.toml", {"env.market", "process.kappa"}},
  };
  for (const auto& [file, mentions] : table) {
    SCOPED_TRACE(file);
    const auto cfg = f.write("run.toml", "[env]\nkind = \"market\"\nmarket = \"" + file + "\"\n");
    try {
      load_run_config(cfg);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      for (const char* m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "message: " << msg;
    }
  }
}
