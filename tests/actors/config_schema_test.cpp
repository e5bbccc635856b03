// `foxhunt train --config` reads both shipped schemas: the actor pipeline's (RunConfig) and the
// synchronous DqnTrainer's (rl::DqnRunConfig), translated by run_config_from_dqn. Pins that the
// DQN-family keys added to [learner]/[replay] leave the mapping of every configs/pipeline_*.toml
// unchanged (the structs before this change, rebuilt here by the old mapping, field by field).
// No device needed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"
#include "rl/dqn/config.hpp"

using namespace foxhunt::actors;
namespace fs = std::filesystem;
namespace rl = foxhunt::rl;

namespace {

fs::path configs_dir() { return fs::path(__FILE__).parent_path() / ".." / ".." / "configs"; }

std::vector<fs::path> shipped(const std::string& prefix = "") {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(configs_dir()))
    if (e.is_regular_file() && e.path().extension() == ".toml" && e.path().filename().string().rfind(prefix, 0) == 0)
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The mapping as it was before the DQN-family keys (commit 038afe6's stage_factory.cpp).
std::int64_t old_expected_updates(const RunConfig& c) {
  const double u = c.pipeline.replay_ratio *
                   static_cast<double>(std::max<std::int64_t>(0, c.run.total_env_steps - c.pipeline.learning_starts));
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(u)));
}
rl::DqnLearnerConfig old_learner_config(const RunConfig& c, std::int64_t obs_dim, std::int64_t branches,
                                        std::int64_t actions) {
  rl::DqnLearnerConfig lc;
  lc.net.obs_dim = obs_dim;
  lc.net.hidden = c.learner.hidden;
  lc.net.branches = branches;
  lc.net.actions = actions;
  lc.net.dueling = c.learner.dueling;
  lc.batch = c.replay.batch_size;
  lc.double_q = c.learner.double_dqn;
  lc.loss = c.learner.loss == "mse" ? rl::TdLoss::mse : rl::TdLoss::huber;
  lc.schedule.epsilon_start = static_cast<float>(c.learner.epsilon_start);
  lc.schedule.epsilon_end = static_cast<float>(c.learner.epsilon_final);
  lc.schedule.epsilon_steps = c.learner.epsilon_decay_steps;
  lc.schedule.beta_start = static_cast<float>(c.replay.beta);
  lc.schedule.beta_end = static_cast<float>(c.replay.beta_final);
  lc.schedule.beta_updates = old_expected_updates(c);
  lc.schedule.lr_start = lc.schedule.lr_end = static_cast<float>(c.learner.lr);
  lc.max_grad_norm = static_cast<float>(c.learner.grad_clip);
  const bool hard = c.learner.target == "hard";
  lc.tau = hard ? 1.f : static_cast<float>(c.learner.tau);
  lc.target_period = hard ? c.pipeline.sync_every : 1;
  lc.seed = c.run.seed;
  lc.act_rows = c.env.num_envs;
  return lc;
}
rl::ReplayConfig old_replay_config(const RunConfig& c, std::int64_t obs_dim, std::int64_t branches) {
  rl::ReplayConfig rc;
  rc.capacity = c.replay.capacity;
  rc.layout.obs_dim = obs_dim;
  rc.layout.obs_dtype = foxhunt::gpu::DType::f32;
  rc.layout.action_kind = branches > 1 ? rl::ActionKind::multi_discrete : rl::ActionKind::discrete;
  rc.layout.action_dim = branches;
  rc.mode = c.replay.prioritized ? rl::SamplingMode::prioritized : rl::SamplingMode::uniform;
  rc.batch_size = c.replay.batch_size;
  rc.n_step = static_cast<int>(c.replay.n_step);
  rc.gamma = static_cast<float>(c.replay.gamma);
  rc.alpha = static_cast<float>(c.replay.alpha);
  rc.beta = static_cast<float>(c.replay.beta);
  rc.beta_final = static_cast<float>(c.replay.beta_final);
  rc.beta_anneal_steps = old_expected_updates(c);
  rc.seed = c.run.seed;
  return rc;
}

// Bit-for-bit float comparison (EXPECT_EQ on floats would accept -0 == 0 and reject nan == nan).
#define EXPECT_SAME_BITS(a, b) EXPECT_EQ(std::memcmp(&(a), &(b), sizeof(a)), 0) << #a " = " << (a) << " vs " << (b)

void expect_same(const rl::DqnLearnerConfig& a, const rl::DqnLearnerConfig& b) {
  EXPECT_EQ(a.net.obs_dim, b.net.obs_dim);
  EXPECT_EQ(a.net.hidden, b.net.hidden);
  EXPECT_EQ(a.net.act, b.net.act);
  EXPECT_EQ(a.net.branches, b.net.branches);
  EXPECT_EQ(a.net.actions, b.net.actions);
  EXPECT_EQ(a.net.atoms, b.net.atoms);
  EXPECT_SAME_BITS(a.net.v_min, b.net.v_min);
  EXPECT_SAME_BITS(a.net.v_max, b.net.v_max);
  EXPECT_EQ(a.net.dueling, b.net.dueling);
  EXPECT_EQ(a.net.noisy, b.net.noisy);
  EXPECT_SAME_BITS(a.net.sigma0, b.net.sigma0);
  EXPECT_EQ(a.net.math, b.net.math);
  EXPECT_EQ(a.net.fused_heads, b.net.fused_heads);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.double_q, b.double_q);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_SAME_BITS(a.huber_delta, b.huber_delta);
  EXPECT_SAME_BITS(a.adam.lr, b.adam.lr);
  EXPECT_SAME_BITS(a.adam.beta1, b.adam.beta1);
  EXPECT_SAME_BITS(a.adam.beta2, b.adam.beta2);
  EXPECT_SAME_BITS(a.adam.eps, b.adam.eps);
  EXPECT_SAME_BITS(a.adam.weight_decay, b.adam.weight_decay);
  EXPECT_EQ(a.adam.decoupled, b.adam.decoupled);
  EXPECT_SAME_BITS(a.schedule.epsilon_start, b.schedule.epsilon_start);
  EXPECT_SAME_BITS(a.schedule.epsilon_end, b.schedule.epsilon_end);
  EXPECT_EQ(a.schedule.epsilon_steps, b.schedule.epsilon_steps);
  EXPECT_SAME_BITS(a.schedule.beta_start, b.schedule.beta_start);
  EXPECT_SAME_BITS(a.schedule.beta_end, b.schedule.beta_end);
  EXPECT_EQ(a.schedule.beta_updates, b.schedule.beta_updates);
  EXPECT_SAME_BITS(a.schedule.lr_start, b.schedule.lr_start);
  EXPECT_SAME_BITS(a.schedule.lr_end, b.schedule.lr_end);
  EXPECT_EQ(a.schedule.lr_updates, b.schedule.lr_updates);
  EXPECT_SAME_BITS(a.max_grad_norm, b.max_grad_norm);
  EXPECT_SAME_BITS(a.tau, b.tau);
  EXPECT_EQ(a.target_period, b.target_period);
  EXPECT_SAME_BITS(a.priority_eps, b.priority_eps);
  EXPECT_SAME_BITS(a.skip_priority, b.skip_priority);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.act_rows, b.act_rows);
}

void expect_same(const rl::ReplayConfig& a, const rl::ReplayConfig& b) {
  EXPECT_EQ(a.capacity, b.capacity);
  EXPECT_EQ(a.layout.obs_dim, b.layout.obs_dim);
  EXPECT_EQ(a.layout.obs_dtype, b.layout.obs_dtype);
  EXPECT_EQ(a.layout.action_kind, b.layout.action_kind);
  EXPECT_EQ(a.layout.action_dim, b.layout.action_dim);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.batch_size, b.batch_size);
  EXPECT_EQ(a.n_step, b.n_step);
  EXPECT_SAME_BITS(a.gamma, b.gamma);
  EXPECT_SAME_BITS(a.alpha, b.alpha);
  EXPECT_SAME_BITS(a.beta, b.beta);
  EXPECT_SAME_BITS(a.beta_final, b.beta_final);
  EXPECT_EQ(a.beta_anneal_steps, b.beta_anneal_steps);
  EXPECT_SAME_BITS(a.eps, b.eps);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.rng_stream, b.rng_stream);
}

// A scratch folder for config files (markets/ links to the shipped market files).
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("foxhunt_config_schema_test_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir / name) << text;
    return dir / name;
  }
};

std::string message_of(const fs::path& file) {
  try {
    load_run_config(file);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST(ConfigSchemaTest, PipelineConfigsMapExactlyAsBefore) {
  const auto files = shipped("pipeline_");
  ASSERT_GE(files.size(), 3u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    bool translated = true;
    const RunConfig c = load_run_config(f, &translated);
    EXPECT_FALSE(translated);
    // Shapes of the shipped environments: CartPole (4 obs, 2 actions), one asset (5 levels), 8 assets.
    for (auto [obs, branches, actions] :
         {std::tuple<std::int64_t, std::int64_t, std::int64_t>{4, 1, 2}, {37, 1, 5}, {80, 8, 5}}) {
      SCOPED_TRACE("obs " + std::to_string(obs) + " branches " + std::to_string(branches));
      expect_same(dqn_learner_config(c, obs, branches, actions), old_learner_config(c, obs, branches, actions));
      expect_same(dqn_replay_config(c, obs, branches), old_replay_config(c, obs, branches));
    }
    // PipelineConfig (its mapping is unchanged code; pinned all the same).
    const PipelineConfig p = c.pipeline_config();
    EXPECT_EQ(p.total_env_steps, c.run.total_env_steps);
    EXPECT_EQ(p.learning_starts, c.pipeline.learning_starts);
    EXPECT_EQ(p.replay_ratio, c.pipeline.replay_ratio);
    EXPECT_EQ(p.ratio_slack, c.pipeline.ratio_slack);
    EXPECT_EQ(p.sync_every, c.pipeline.sync_every);
    EXPECT_EQ(p.checkpoint_every, c.checkpoint.every_env_steps);
    EXPECT_EQ(p.deterministic, c.run.deterministic);
    // The new keys resolve to their neutral defaults.
    EXPECT_EQ(c.learner.activation, "relu");
    EXPECT_FALSE(c.learner.noisy);
    EXPECT_EQ(c.learner.atoms, 1);
    EXPECT_EQ(c.learner.target_period, 0);
    EXPECT_EQ(c.learner.lr_anneal_updates, 0);
    EXPECT_EQ(c.learner.lr_end, c.learner.lr);
    EXPECT_EQ(c.replay.beta_anneal_updates, 0);
  }
}

TEST(ConfigSchemaTest, EveryShippedConfigLoads) {
  const auto files = shipped();
  ASSERT_GE(files.size(), 6u);
  int dqn = 0;
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    bool translated = false;
    RunConfig c;
    ASSERT_NO_THROW(c = load_run_config(f, &translated));
    EXPECT_EQ(translated, f.filename().string().rfind("pipeline_", 0) != 0);
    dqn += translated;
    EXPECT_EQ(translated, detect_config_schema(read(f), f.string()) == "dqn");
    // What the run directory keeps reads back to the same configuration.
    const std::string resolved = resolved_toml(c);
    EXPECT_EQ(resolved_toml(parse_run_config(resolved, "resolved")), resolved);
  }
  EXPECT_GE(dqn, 3);
}

// Every DqnRunConfig field against its pipeline key, on each shipped DQN-trainer file.
TEST(ConfigSchemaTest, TranslationMapsEveryField) {
  int n = 0;
  for (const auto& f : shipped()) {
    if (f.filename().string().rfind("pipeline_", 0) == 0) continue;
    SCOPED_TRACE(f.string());
    ++n;
    const rl::DqnRunConfig d = rl::load_dqn_config(f);
    const RunConfig c = load_run_config(f);
    EXPECT_EQ(c.run.name, f.stem().string());
    EXPECT_EQ(c.run.seed, d.seed);
    EXPECT_EQ(c.run.total_env_steps, d.total_steps);
    EXPECT_EQ(c.env.kind, d.env);
    EXPECT_EQ(c.env.num_envs, d.num_envs);
    EXPECT_EQ(c.env.steps_per_slot, 1);
    if (d.env == "market") {
      EXPECT_TRUE(fs::path(c.env.market).is_absolute());
      EXPECT_TRUE(fs::equivalent(c.env.market, d.market_config)) << c.env.market << " vs " << d.market_config;
    } else {
      EXPECT_EQ(c.env.market, "");
    }
    EXPECT_EQ(c.learner.hidden, d.hidden);
    EXPECT_EQ(c.learner.activation, d.activation);
    EXPECT_EQ(c.learner.dueling, d.dueling);
    EXPECT_EQ(c.learner.noisy, d.noisy);
    EXPECT_EQ(c.learner.sigma0, d.sigma0);
    EXPECT_EQ(c.learner.atoms, d.atoms);
    EXPECT_EQ(c.learner.v_min, d.v_min);
    EXPECT_EQ(c.learner.v_max, d.v_max);
    EXPECT_EQ(c.replay.batch_size, d.batch);
    EXPECT_EQ(c.replay.gamma, d.gamma);
    EXPECT_EQ(c.replay.n_step, d.n_step);
    EXPECT_EQ(c.learner.double_dqn, d.double_q);
    if (d.atoms == 1) {
      EXPECT_EQ(c.learner.loss, d.loss);
    }
    EXPECT_EQ(c.learner.huber_delta, d.huber_delta);
    EXPECT_EQ(c.learner.lr, d.lr);
    EXPECT_EQ(c.learner.lr_end, d.lr_end >= 0 ? d.lr_end : d.lr);
    EXPECT_EQ(c.learner.lr_anneal_updates, d.lr_anneal_updates);
    EXPECT_EQ(c.learner.adam_eps, d.adam_eps);
    EXPECT_EQ(c.learner.adam_beta1, d.adam_beta1);
    EXPECT_EQ(c.learner.adam_beta2, d.adam_beta2);
    EXPECT_EQ(c.learner.grad_clip, d.max_grad_norm);
    EXPECT_EQ(c.learner.target, d.tau == 1.0 ? "hard" : "polyak");
    if (d.tau < 1.0) {
      EXPECT_EQ(c.learner.tau, d.tau);
    }
    EXPECT_EQ(c.learner.target_period, d.target_period);
    EXPECT_EQ(c.pipeline.sync_every, d.target_period);
    EXPECT_EQ(c.learner.epsilon_start, d.epsilon_start);
    EXPECT_EQ(c.learner.epsilon_final, d.epsilon_end);
    EXPECT_EQ(c.learner.epsilon_decay_steps, d.epsilon_steps);
    EXPECT_EQ(c.replay.capacity, d.capacity);
    EXPECT_EQ(c.replay.prioritized, d.prioritized);
    EXPECT_EQ(c.replay.alpha, d.alpha);
    EXPECT_EQ(c.replay.beta, d.beta);
    EXPECT_EQ(c.replay.beta_final, d.beta_final);
    EXPECT_EQ(c.replay.beta_anneal_updates, d.beta_anneal_updates);
    EXPECT_EQ(c.replay.priority_eps, d.priority_eps);
    EXPECT_EQ(c.pipeline.learning_starts, d.learning_starts);
    EXPECT_DOUBLE_EQ(c.pipeline.replay_ratio,
                     static_cast<double>(d.updates_per_train) / static_cast<double>(d.train_every));

    // ... and on into the learner and replay configs the stages are built from.
    const std::int64_t branches = d.branching ? 8 : 1;  // bdq_market: ou8_correlated (8 assets)
    const rl::DqnLearnerConfig lc = dqn_learner_config(c, 16, branches, 5);
    EXPECT_NO_THROW(rl::validate(lc));
    EXPECT_EQ(lc.net.act, d.activation == "gelu" ? foxhunt::gpu::Activation::gelu : foxhunt::gpu::Activation::relu);
    EXPECT_EQ(lc.net.noisy, d.noisy);
    EXPECT_EQ(lc.net.atoms, d.atoms);
    EXPECT_EQ(lc.net.v_min, static_cast<float>(d.v_min));
    EXPECT_EQ(lc.net.sigma0, static_cast<float>(d.sigma0));
    EXPECT_EQ(lc.adam.eps, static_cast<float>(d.adam_eps));
    EXPECT_EQ(lc.huber_delta, static_cast<float>(d.huber_delta));
    EXPECT_EQ(lc.tau, static_cast<float>(d.tau));
    EXPECT_EQ(lc.target_period, d.target_period);
    EXPECT_EQ(lc.max_grad_norm, static_cast<float>(d.max_grad_norm));
    EXPECT_EQ(lc.loss, d.loss == "mse" ? rl::TdLoss::mse : rl::TdLoss::huber);
    EXPECT_EQ(lc.schedule.lr_start, static_cast<float>(d.lr));
    EXPECT_EQ(lc.schedule.epsilon_steps, d.epsilon_steps);
    EXPECT_EQ(lc.batch, d.batch);
    EXPECT_EQ(lc.seed, d.seed);
    const rl::ReplayConfig rc = dqn_replay_config(c, 16, branches);
    EXPECT_EQ(rc.mode, d.prioritized ? rl::SamplingMode::prioritized : rl::SamplingMode::uniform);
    EXPECT_EQ(rc.eps, static_cast<float>(d.priority_eps));
    const std::int64_t beta_len = d.beta_anneal_updates > 0 ? d.beta_anneal_updates : expected_updates(c);
    EXPECT_EQ(rc.beta_anneal_steps, beta_len);
    EXPECT_EQ(lc.schedule.beta_updates, beta_len);
  }
  EXPECT_GE(n, 3);
}

TEST(ConfigSchemaTest, SpotChecksOfTheShippedTranslations) {
  const RunConfig cart = load_run_config(configs_dir() / "dqn_cartpole.toml");
  EXPECT_EQ(cart.learner.target, "hard");
  EXPECT_EQ(cart.pipeline.sync_every, 50);
  EXPECT_DOUBLE_EQ(cart.pipeline.replay_ratio, 0.1);  // train_every 10
  EXPECT_EQ(cart.learner.loss, "mse");
  EXPECT_EQ(cart.replay.capacity, 10000);
  const RunConfig rainbow = load_run_config(configs_dir() / "rainbow_market.toml");
  EXPECT_TRUE(rainbow.learner.noisy);
  EXPECT_EQ(rainbow.learner.atoms, 51);
  EXPECT_EQ(rainbow.learner.target, "polyak");
  EXPECT_DOUBLE_EQ(rainbow.learner.tau, 0.005);
  EXPECT_DOUBLE_EQ(rainbow.pipeline.replay_ratio, 1.0 / 64.0);
  EXPECT_EQ(rainbow.replay.beta_anneal_updates, 200000);
  EXPECT_EQ(rainbow.learner.epsilon_decay_steps, 0);
  EXPECT_EQ(rainbow.env.kind, "market");
  EXPECT_EQ(market_config(rainbow).assets, 1);
  const RunConfig bdq = load_run_config(configs_dir() / "bdq_market.toml");
  EXPECT_EQ(market_config(bdq).assets, 8);
  EXPECT_DOUBLE_EQ(bdq.learner.adam_eps, 1.5e-4);
}

TEST(ConfigSchemaTest, MixedSchemasAreRejectedNamingTheTables) {
  Scratch s;
  const auto f = s.write("mixed.toml", "[run]\nname = \"x\"\n[dqn]\nbatch = 32\n[train]\ntotal_steps = 100\n");
  const std::string msg = message_of(f);
  for (const char* m : {"mixed.toml", "[dqn]", "[train]", "[run]", "mixes"})
    EXPECT_NE(msg.find(m), std::string::npos) << msg;
  EXPECT_THROW(detect_config_schema("[learner]\nlr = 0.1\n[network]\nhidden = [8]\n"), std::invalid_argument);
  EXPECT_EQ(detect_config_schema("[env]\nnum_envs = 2\n"), "pipeline");  // shared tables only
  EXPECT_EQ(detect_config_schema("[dqn]\nbatch = 32\n"), "dqn");
}

TEST(ConfigSchemaTest, UntranslatableDqnConfigsAreRejectedNamingTheKey) {
  Scratch s;
  const std::string market = (fs::absolute(configs_dir()) / "markets").lexically_normal().string();
  const std::vector<std::pair<std::string, std::vector<const char*>>> table = {
      // A multi-asset market without branching would need a joint action space.
      {"[env]\nkind = \"market\"\nmarket_config = \"" + market +
           "/gbm8_correlated.toml\"\n[network]\nbranching = false\n",
       {"network.branching", "joint action space"}},
      {"[dqn]\nepsilon_start = 0.1\nepsilon_end = 0.5\n", {"dqn.epsilon_end", "dqn.epsilon_start"}},
      // Ranges the pipeline checks more tightly name the pipeline key and say it was translated.
      {"[dqn]\nmax_grad_norm = 1e8\n", {"learner.grad_clip", "translated from the DQN-trainer schema"}},
      // The DqnRunConfig parser's own errors come through unchanged.
      {"[dqn]\nbogus = 1\n", {"dqn.bogus", "unknown key"}},
      {"[network]\natoms = 51\nbranching = true\n", {"network.branching"}},
  };
  for (const auto& [text, mentions] : table) {
    SCOPED_TRACE(text);
    const std::string msg = message_of(s.write("bad.toml", text));
    for (const char* m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "message: " << msg;
  }
}

TEST(ConfigSchemaTest, NewLearnerKeysAreValidatedAndMapped) {
  const std::vector<std::pair<const char*, std::vector<const char*>>> bad = {
      {"[learner]\nactivation = \"tanh\"\n", {"learner.activation", "relu | gelu"}},
      {"[learner]\natoms = 0\n", {"learner.atoms", "[1, 1024]"}},
      {"[learner]\natoms = 51\nloss = \"mse\"\n", {"learner.loss", "C51"}},
      {"[learner]\nv_min = 5\nv_max = 5\n", {"learner.v_max", "learner.v_min"}},
      {"[learner]\nsigma0 = -1\n", {"learner.sigma0", "[0, 10]"}},
      {"[learner]\nhuber_delta = 0\n", {"learner.huber_delta", "(0, 1e+06]"}},
      {"[learner]\nadam_beta1 = 1\n", {"learner.adam_beta1"}},
      {"[learner]\nadam_eps = -1\n", {"learner.adam_eps"}},
      {"[learner]\nlr_end = 0.0001\n", {"learner.lr_end", "learner.lr_anneal_updates"}},
      {"[learner]\ntarget_period = -1\n", {"learner.target_period"}},
      {"[replay]\npriority_eps = 0\n", {"replay.priority_eps", "(0, 1]"}},
      {"[replay]\nbeta_anneal_updates = -1\n", {"replay.beta_anneal_updates"}},
  };
  for (const auto& [text, mentions] : bad) {
    SCOPED_TRACE(text);
    try {
      parse_run_config(text, "cfg.toml");
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      for (const char* m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "message: " << msg;
    }
  }
  const RunConfig c = parse_run_config(R"(
[learner]
activation = "gelu"
noisy = true
sigma0 = 0.4
atoms = 21
v_min = -5
v_max = 7
huber_delta = 2.5
lr = 0.001
lr_end = 0.0001
lr_anneal_updates = 1000
adam_eps = 0.00015
adam_beta1 = 0.8
adam_beta2 = 0.99
target = "polyak"
tau = 0.01
target_period = 4
[replay]
beta_anneal_updates = 777
priority_eps = 0.001
)");
  const rl::DqnLearnerConfig lc = dqn_learner_config(c, 6, 1, 3);
  EXPECT_NO_THROW(rl::validate(lc));
  EXPECT_EQ(lc.net.act, foxhunt::gpu::Activation::gelu);
  EXPECT_TRUE(lc.net.noisy);
  EXPECT_EQ(lc.net.sigma0, 0.4f);
  EXPECT_EQ(lc.net.atoms, 21);
  EXPECT_EQ(lc.net.v_min, -5.f);
  EXPECT_EQ(lc.net.v_max, 7.f);
  EXPECT_EQ(lc.huber_delta, 2.5f);
  EXPECT_EQ(lc.schedule.lr_start, 0.001f);
  EXPECT_EQ(lc.schedule.lr_end, 0.0001f);
  EXPECT_EQ(lc.schedule.lr_updates, 1000);
  EXPECT_EQ(lc.adam.eps, 0.00015f);
  EXPECT_EQ(lc.adam.beta1, 0.8f);
  EXPECT_EQ(lc.adam.beta2, 0.99f);
  EXPECT_EQ(lc.tau, 0.01f);
  EXPECT_EQ(lc.target_period, 4);
  EXPECT_EQ(lc.schedule.beta_updates, 777);
  const rl::ReplayConfig rc = dqn_replay_config(c, 6, 1);
  EXPECT_EQ(rc.beta_anneal_steps, 777);
  EXPECT_EQ(rc.eps, 0.001f);
  // Round trip of the new keys.
  const RunConfig back = parse_run_config(resolved_toml(c), "resolved");
  EXPECT_EQ(resolved_toml(back), resolved_toml(c));
  EXPECT_EQ(back.learner.atoms, 21);
  EXPECT_EQ(back.learner.lr_end, 0.0001);
  // Hard targets default to pipeline.sync_every; learner.target_period overrides.
  RunConfig h = parse_run_config("[pipeline]\nsync_every = 7\n");
  EXPECT_EQ(dqn_learner_config(h, 4, 1, 2).target_period, 7);
  h.learner.target_period = 3;
  EXPECT_EQ(dqn_learner_config(h, 4, 1, 2).target_period, 3);
}

TEST(ConfigSchemaTest, C51OnAMultiAssetMarketIsRejected) {
  Scratch s;
  const std::string market =
      (fs::absolute(configs_dir()) / "markets" / "gbm8_correlated.toml").lexically_normal().string();
  const auto f = s.write("c51.toml", "[env]\nkind = \"market\"\nmarket = \"" + market + "\"\n[learner]\natoms = 51\n");
  const std::string msg = message_of(f);
  EXPECT_NE(msg.find("learner.atoms"), std::string::npos) << msg;
  EXPECT_NE(msg.find("one branch"), std::string::npos) << msg;
}
