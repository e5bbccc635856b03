// Every shipped run config and market config loads, and dqn_cartpole, rainbow_market and
// bdq_market resolve field by field to the settings below: the effective settings these three
// runs are defined by (their learning results in docs/dqn.md and tests/actors were measured with
// them).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "actors/run_config.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/ohlcv_csv.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/shipped_markets.hpp"
#include "tests/support/staged_configs.hpp"

namespace foxhunt::actors {
namespace {

namespace fs = std::filesystem;

const fs::path kConfigs = fs::absolute(foxhunt::test::configs_dir()).lexically_normal();

// Every field of a RunConfig as text (doubles to 17 digits), so two configs compare key by key.
std::map<std::string, std::string> fields(const RunConfig& c) {
  std::map<std::string, std::string> m;
  auto put = [&](const char* k, const auto& v) {
    std::ostringstream s;
    s << std::setprecision(17) << v;
    m[k] = s.str();
  };
  std::string hidden;
  for (auto h : c.learner.hidden) hidden += std::to_string(h) + ",";
  put("run.name", c.run.name), put("run.seed", c.run.seed), put("run.total_env_steps", c.run.total_env_steps);
  put("run.device", c.run.device), put("run.deterministic", c.run.deterministic);
  put("env.kind", c.env.kind), put("env.num_envs", c.env.num_envs), put("env.steps_per_slot", c.env.steps_per_slot);
  put("env.market", c.env.market);
  put("replay.capacity", c.replay.capacity), put("replay.batch_size", c.replay.batch_size);
  put("replay.prioritized", c.replay.prioritized), put("replay.alpha", c.replay.alpha);
  put("replay.beta", c.replay.beta), put("replay.beta_final", c.replay.beta_final);
  put("replay.n_step", c.replay.n_step), put("replay.gamma", c.replay.gamma);
  put("replay.beta_anneal_updates", c.replay.beta_anneal_updates), put("replay.priority_eps", c.replay.priority_eps);
  put("learner.kind", c.learner.kind), put("learner.hidden", hidden), put("learner.lr", c.learner.lr);
  put("learner.dueling", c.learner.dueling), put("learner.double_dqn", c.learner.double_dqn);
  put("learner.loss", c.learner.loss), put("learner.grad_clip", c.learner.grad_clip);
  put("learner.target", c.learner.target), put("learner.tau", c.learner.tau);
  put("learner.epsilon_start", c.learner.epsilon_start), put("learner.epsilon_final", c.learner.epsilon_final);
  put("learner.epsilon_decay_steps", c.learner.epsilon_decay_steps), put("learner.activation", c.learner.activation);
  put("learner.noisy", c.learner.noisy), put("learner.sigma0", c.learner.sigma0), put("learner.atoms", c.learner.atoms);
  put("learner.v_min", c.learner.v_min), put("learner.v_max", c.learner.v_max);
  put("learner.huber_delta", c.learner.huber_delta), put("learner.lr_end", c.learner.lr_end);
  put("learner.lr_anneal_updates", c.learner.lr_anneal_updates), put("learner.adam_eps", c.learner.adam_eps);
  put("learner.adam_beta1", c.learner.adam_beta1), put("learner.adam_beta2", c.learner.adam_beta2);
  put("learner.target_period", c.learner.target_period);
  put("pipeline.replay_ratio", c.pipeline.replay_ratio), put("pipeline.learning_starts", c.pipeline.learning_starts);
  put("pipeline.ratio_slack", c.pipeline.ratio_slack), put("pipeline.slots", c.pipeline.slots);
  put("pipeline.batches", c.pipeline.batches), put("pipeline.sync_every", c.pipeline.sync_every);
  put("pipeline.completions", c.pipeline.completions), put("pipeline.stall_timeout_ms", c.pipeline.stall_timeout_ms);
  put("pipeline.mode", c.pipeline.mode), put("pipeline.policy_lag", c.pipeline.policy_lag);
  put("checkpoint.every_env_steps", c.checkpoint.every_env_steps), put("checkpoint.keep", c.checkpoint.keep);
  put("checkpoint.replay", c.checkpoint.replay);
  put("logging.progress_interval_ms", c.logging.progress_interval_ms);
  put("logging.tensorboard", c.logging.tensorboard), put("logging.jsonl", c.logging.jsonl);
  put("logging.timeline", c.logging.timeline), put("logging.level", c.logging.level);
  return m;
}

void expect_same(const RunConfig& got, const RunConfig& want) {
  const auto g = fields(got), w = fields(want);
  for (const auto& [k, v] : w) EXPECT_EQ(g.at(k), v) << k;
}

TEST(ShippedRunConfigs, EveryRunConfigLoadsAndRoundTrips) {
  int n = 0, several = 0, with_features = 0;
  // A copy beside the stand-in pretrain run the [features] configs name.
  const fs::path root = fs::temp_directory_path() / ("foxhunt_shipped_configs_" + std::to_string(::getpid()));
  const fs::path staged = foxhunt::test::stage_shipped_configs(root);
  for (const auto& e : fs::directory_iterator(staged)) {
    if (!e.is_regular_file() || e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    AgentsConfig agents;
    ASSERT_NO_THROW(agents = load_agents_config(e.path()));
    if (!agents.several) {  // a file of one agent reads as load_run_config reads it
      ASSERT_EQ(agents.agents.size(), 1u);
      expect_same(agents.agents.front().config, load_run_config(e.path()));
    }
    several += agents.several ? 1 : 0;
    for (const AgentConfig& a : agents.agents) {
      SCOPED_TRACE("agent " + a.name);
      const RunConfig& c = a.config;
      if (c.env.kind == "market") {
        EXPECT_NO_THROW(market_config(c));
      }
      with_features += c.features.enabled() ? 1 : 0;
      // The resolved config (what a run directory keeps) reads back to the same settings.
      expect_same(parse_run_config(resolved_toml(c), "resolved"), c);
    }
    ++n;
  }
  EXPECT_GE(n, 6);
  EXPECT_GE(several, 2) << "configs/dqn_and_ppo_ou.toml and a multi-seed example";
  EXPECT_GE(with_features, 2) << "configs/dqn_features_regime.toml and configs/ppo_features_regime.toml";
  std::error_code ec;
  fs::remove_all(root, ec);
}

// configs/dqn_and_ppo_ou.toml: its agents are configs/pipeline_dqn_ou_market.toml's DQN and
// configs/ppo_market.toml's PPO (trained through the actors), over one environment and the same
// seed (the same price paths), for one total of env steps.
TEST(ShippedRunConfigs, DqnAndPpoOuTakesItsAgentsFromTheOneAgentConfigs) {
  const AgentsConfig agents = load_agents_config(kConfigs / "dqn_and_ppo_ou.toml");
  ASSERT_EQ(agents.agents.size(), 2u);
  RunConfig dqn = load_run_config(kConfigs / "pipeline_dqn_ou_market.toml");
  RunConfig ppo = load_run_config(kConfigs / "ppo_market.toml");
  EXPECT_EQ(agents.agents[0].name, "dqn");
  EXPECT_EQ(agents.agents[1].name, "ppo");
  for (RunConfig* c : {&dqn, &ppo}) {
    c->run = agents.agents[0].config.run;
    c->checkpoint = agents.agents[0].config.checkpoint;
  }
  ppo.pipeline.mode = "actors";
  expect_same(agents.agents[0].config, dqn);
  expect_same(agents.agents[1].config, ppo);
  EXPECT_EQ(agents.agents[0].config.run.seed, agents.agents[1].config.run.seed);
}

TEST(ShippedRunConfigs, EveryMarketConfigLoads) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kConfigs / "markets")) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    std::optional<rl::MarketConfig> m;
    EXPECT_NO_THROW(m = test::load_shipped_market(e.path()));
    if (!m) continue;
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(ShippedRunConfigs, DqnCartpoleKeepsTheTranslatedSettings) {
  RunConfig w;
  w.run = {"dqn_cartpole", 1, 500000, 0, false};
  w.env.kind = "cartpole", w.env.num_envs = 1, w.env.steps_per_slot = 1, w.env.market = "";
  w.replay.capacity = 10000, w.replay.batch_size = 128, w.replay.prioritized = false, w.replay.alpha = 0.6;
  w.replay.beta = 0.4, w.replay.beta_final = 1.0, w.replay.n_step = 1, w.replay.gamma = 0.99;
  w.replay.beta_anneal_updates = 0, w.replay.priority_eps = 1e-6;
  w.learner.kind = "dqn", w.learner.hidden = {120, 84}, w.learner.lr = 2.5e-4, w.learner.dueling = false;
  w.learner.double_dqn = false, w.learner.loss = "mse", w.learner.grad_clip = 0.0, w.learner.target = "hard";
  w.learner.tau = 0.005, w.learner.epsilon_start = 1.0, w.learner.epsilon_final = 0.05;
  w.learner.epsilon_decay_steps = 250000, w.learner.activation = "relu", w.learner.noisy = false;
  w.learner.sigma0 = 0.5, w.learner.atoms = 1, w.learner.v_min = -10.0, w.learner.v_max = 10.0;
  w.learner.huber_delta = 1.0, w.learner.lr_end = 2.5e-4, w.learner.lr_anneal_updates = 0;
  w.learner.adam_eps = 1e-8, w.learner.adam_beta1 = 0.9, w.learner.adam_beta2 = 0.999, w.learner.target_period = 50;
  w.pipeline.replay_ratio = 0.1, w.pipeline.learning_starts = 10000, w.pipeline.ratio_slack = 8;
  w.pipeline.slots = 4, w.pipeline.batches = 3, w.pipeline.sync_every = 50, w.pipeline.completions = "polled";
  w.checkpoint.every_env_steps = 50000, w.checkpoint.keep = 5, w.checkpoint.replay = "final";
  w.logging.progress_interval_ms = 500, w.logging.tensorboard = true, w.logging.jsonl = true;
  w.logging.timeline = true, w.logging.level = "info";
  expect_same(load_run_config(kConfigs / "dqn_cartpole.toml"), w);
}

TEST(ShippedRunConfigs, RainbowMarketKeepsTheTranslatedSettings) {
  RunConfig w;
  w.run = {"rainbow_market", 1, 5000000, 0, false};
  w.env.kind = "market", w.env.num_envs = 64, w.env.steps_per_slot = 1;
  w.env.market = (kConfigs / "markets" / "ou_mean_reversion.toml").string();
  w.replay.capacity = 1048576, w.replay.batch_size = 256, w.replay.prioritized = true, w.replay.alpha = 0.5;
  w.replay.beta = 0.4, w.replay.beta_final = 1.0, w.replay.n_step = 3, w.replay.gamma = 0.99;
  w.replay.beta_anneal_updates = 200000, w.replay.priority_eps = 1e-6;
  w.learner.kind = "dqn", w.learner.hidden = {256, 256}, w.learner.lr = 1e-4, w.learner.dueling = true;
  w.learner.double_dqn = true, w.learner.loss = "huber", w.learner.grad_clip = 10.0, w.learner.target = "polyak";
  w.learner.tau = 0.005, w.learner.epsilon_start = 0.0, w.learner.epsilon_final = 0.0;
  w.learner.epsilon_decay_steps = 0, w.learner.activation = "relu", w.learner.noisy = true;
  w.learner.sigma0 = 0.5, w.learner.atoms = 51, w.learner.v_min = -10.0, w.learner.v_max = 10.0;
  w.learner.huber_delta = 1.0, w.learner.lr_end = 1e-4, w.learner.lr_anneal_updates = 0;
  w.learner.adam_eps = 1.5e-4, w.learner.adam_beta1 = 0.9, w.learner.adam_beta2 = 0.999, w.learner.target_period = 1;
  w.pipeline.replay_ratio = 0.015625, w.pipeline.learning_starts = 20000, w.pipeline.ratio_slack = 8;
  w.pipeline.slots = 4, w.pipeline.batches = 3, w.pipeline.sync_every = 1, w.pipeline.completions = "polled";
  w.checkpoint.every_env_steps = 50000, w.checkpoint.keep = 5, w.checkpoint.replay = "final";
  w.logging.progress_interval_ms = 500, w.logging.tensorboard = true, w.logging.jsonl = true;
  w.logging.timeline = true, w.logging.level = "info";
  expect_same(load_run_config(kConfigs / "rainbow_market.toml"), w);
}

TEST(ShippedRunConfigs, BdqMarketKeepsTheTranslatedSettings) {
  RunConfig w;
  w.run = {"bdq_market", 1, 2000000, 0, false};
  w.env.kind = "market", w.env.num_envs = 64, w.env.steps_per_slot = 1;
  w.env.market = (kConfigs / "markets" / "ou8_correlated.toml").string();
  w.replay.capacity = 1048576, w.replay.batch_size = 256, w.replay.prioritized = true, w.replay.alpha = 0.6;
  w.replay.beta = 0.4, w.replay.beta_final = 1.0, w.replay.n_step = 3, w.replay.gamma = 0.99;
  w.replay.beta_anneal_updates = 30000, w.replay.priority_eps = 1e-6;
  w.learner.kind = "dqn", w.learner.hidden = {256, 256}, w.learner.lr = 2.5e-4, w.learner.dueling = true;
  w.learner.double_dqn = true, w.learner.loss = "huber", w.learner.grad_clip = 10.0, w.learner.target = "polyak";
  w.learner.tau = 0.005, w.learner.epsilon_start = 1.0, w.learner.epsilon_final = 0.02;
  w.learner.epsilon_decay_steps = 1000000, w.learner.activation = "relu", w.learner.noisy = false;
  w.learner.sigma0 = 0.5, w.learner.atoms = 1, w.learner.v_min = -10.0, w.learner.v_max = 10.0;
  w.learner.huber_delta = 1.0, w.learner.lr_end = 2.5e-4, w.learner.lr_anneal_updates = 0;
  w.learner.adam_eps = 1.5e-4, w.learner.adam_beta1 = 0.9, w.learner.adam_beta2 = 0.999, w.learner.target_period = 1;
  w.pipeline.replay_ratio = 0.03125, w.pipeline.learning_starts = 20000, w.pipeline.ratio_slack = 8;
  w.pipeline.slots = 4, w.pipeline.batches = 3, w.pipeline.sync_every = 1, w.pipeline.completions = "polled";
  w.checkpoint.every_env_steps = 50000, w.checkpoint.keep = 5, w.checkpoint.replay = "final";
  w.logging.progress_interval_ms = 500, w.logging.tensorboard = true, w.logging.jsonl = true;
  w.logging.timeline = true, w.logging.level = "info";
  const RunConfig c = load_run_config(kConfigs / "bdq_market.toml");
  expect_same(c, w);
  EXPECT_EQ(market_config(c).assets, 8);  // one branch per asset: BDQ heads
}

// The example history (configs/markets/data/example_bars.csv, from scripts/make_example_bars.py)
// trains on 2008-2017 and keeps 2018-2019 and 2020-2021 for validation and test.
TEST(ShippedRunConfigs, DqnExampleBarsReplaysTheExampleHistoryWithASplit) {
  const RunConfig c = load_run_config(kConfigs / "dqn_example_bars.toml");
  const rl::MarketConfig m = market_config(c);
  EXPECT_EQ(m.process, rl::PriceProcess::replay);
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_LT(fs::file_size(m.files[0]), 500u * 1024u) << "the shipped CSV stays small";
  const rl::OhlcvData all = rl::load_ohlcv_all(m);
  EXPECT_GE(all.bars, 3000);
  EXPECT_EQ(rl::format_timestamp(all.timestamps.front()), "2008-01-02");
  ASSERT_TRUE(m.split.given && m.split.has_validation());
  EXPECT_EQ(rl::format_timestamp(all.timestamps[static_cast<std::size_t>(m.split.train_end.bar)]), "2018-01-02");
  EXPECT_EQ(rl::format_timestamp(all.timestamps[static_cast<std::size_t>(m.split.validation_end.bar)]), "2020-01-02");
  EXPECT_EQ(rl::load_ohlcv(m).bars, m.split.train_end.bar) << "training reads the train part only";
}

}  // namespace
}  // namespace foxhunt::actors
