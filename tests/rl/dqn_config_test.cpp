// DQN run configuration: the shipped configs parse and validate; unknown tables and keys, wrong
// types and out-of-range values are rejected with the key (and the allowed range) in the message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "rl/dqn/config.hpp"
#include "rl/dqn/state.hpp"
#include "rl/envs/market_config.hpp"

namespace foxhunt::rl {
namespace {

// $FOXHUNT_CONFIGS, else the installed tree (<exe>/../share/foxhunt/configs), else the sources.
std::filesystem::path configs_dir() {
  if (const char* env = std::getenv("FOXHUNT_CONFIGS")) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path() / ".." / "share" / "foxhunt" / "configs";
    if (std::filesystem::exists(installed / "dqn_cartpole.toml")) return installed.lexically_normal();
  }
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "configs";
}

TEST(DqnConfig, ShippedConfigsLoad) {
  const auto dir = configs_dir();
  ASSERT_TRUE(std::filesystem::exists(dir / "dqn_cartpole.toml")) << dir;
  const DqnRunConfig cp = load_dqn_config(dir / "dqn_cartpole.toml");
  EXPECT_EQ(cp.env, "cartpole");
  EXPECT_EQ(cp.hidden, (std::vector<std::int64_t>{120, 84}));
  EXPECT_EQ(cp.batch, 128);
  EXPECT_FALSE(cp.double_q);
  EXPECT_EQ(cp.loss, "mse");
  EXPECT_EQ(cp.target_period, 50);
  EXPECT_EQ(cp.capacity, 10000);
  EXPECT_EQ(cp.learning_starts, 10000);
  EXPECT_EQ(cp.train_every, 10);
  EXPECT_DOUBLE_EQ(cp.lr, 2.5e-4);

  const DqnRunConfig rb = load_dqn_config(dir / "rainbow_market.toml");
  EXPECT_EQ(rb.env, "market");
  EXPECT_TRUE(rb.dueling && rb.noisy && rb.double_q && rb.prioritized);
  EXPECT_EQ(rb.atoms, 51);
  EXPECT_EQ(rb.n_step, 3);
  EXPECT_EQ(std::filesystem::path(rb.market_config), (dir / "markets/ou_mean_reversion.toml").lexically_normal());
  EXPECT_NO_THROW(load_market_config(rb.market_config));

  const DqnRunConfig bdq = load_dqn_config(dir / "bdq_market.toml");
  EXPECT_TRUE(bdq.branching);
  EXPECT_EQ(bdq.atoms, 1);
  EXPECT_GT(load_market_config(bdq.market_config).assets, 1);
}

void expect_rejected(const std::string& toml, const std::string& needle) {
  try {
    parse_dqn_config(toml, "test.toml");
    ADD_FAILURE() << "accepted:\n" << toml;
  } catch (const DqnConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what() << "\nwant: " << needle;
  }
}

TEST(DqnConfig, DefaultsAreValid) { EXPECT_NO_THROW(parse_dqn_config("", "empty.toml")); }

TEST(DqnConfig, UnknownTablesAndKeysAreRejected) {
  expect_rejected("[optimizer]\nlr = 1e-3\n", "optimizer: unknown table");
  expect_rejected("[dqn]\nlearning_rate = 1e-3\n", "dqn.learning_rate: unknown key");
  expect_rejected("[network]\nhiden = [64]\n", "network.hiden: unknown key; allowed here: hidden");
  expect_rejected("[dqn]\nlearning_rate = 1e-3\n", "test.toml:2");  // the line of the offending key
}

TEST(DqnConfig, WrongTypesAreRejected) {
  expect_rejected("[dqn]\nbatch = 12.5\n", "dqn.batch: must be an integer");
  expect_rejected("[dqn]\ndouble = 1\n", "dqn.double: must be true or false");
  expect_rejected("[network]\nhidden = [64, \"a\"]\n", "network.hidden: must be an array of integers");
  expect_rejected("[dqn]\nloss = 3\n", "dqn.loss: must be a string");
  expect_rejected("[dqn\n", "TOML parse error");
}

TEST(DqnConfig, OutOfRangeValuesNameKeyAndRange) {
  expect_rejected("[dqn]\ntau = 0\n", "dqn.tau must be in (0, 1], got 0");
  expect_rejected("[dqn]\ntau = 1.5\n", "dqn.tau must be in (0, 1]");
  expect_rejected("[dqn]\ngamma = -0.1\n", "dqn.gamma must be in [0, 1]");
  expect_rejected("[dqn]\nlr = 0\n", "dqn.lr must be in (0, 1]");
  expect_rejected("[dqn]\nbatch = 0\n", "dqn.batch must be in [1, ");
  expect_rejected("[dqn]\nn_step = 33\n", "dqn.n_step must be in [1, 32]");
  expect_rejected("[dqn]\nloss = \"l1\"\n", "dqn.loss must be one of huber, mse");
  expect_rejected("[dqn]\nadam_beta2 = 1.0\n", "dqn.adam_beta2 must be in [0, 1)");
  expect_rejected("[dqn]\ntarget_period = 0\n", "dqn.target_period must be in [1, ");
  expect_rejected("[dqn]\nseed = -1\n", "dqn.seed: must be >= 0");
  expect_rejected("[network]\natoms = 0\n", "network.atoms must be in [2, 1024]");
  expect_rejected("[network]\nv_min = 5.0\nv_max = 5.0\n", "network.v_max must be > network.v_min");
  expect_rejected("[network]\nhidden = []\n", "network.hidden must be a list of 1 to 8 layer widths");
  expect_rejected("[network]\nhidden = [64, 0]\n", "network.hidden must be in [1, 65536]");
  expect_rejected("[network]\nactivation = \"tanh\"\n", "network.activation must be one of relu, gelu");
  expect_rejected("[network]\natoms = 51\nbranching = true\n", "network.branching must be false");
  expect_rejected("[env]\nkind = \"atari\"\n", "env.kind must be one of cartpole, market");
  expect_rejected("[env]\nkind = \"market\"\n", "env.market_config must be set");
  expect_rejected("[env]\nnum_envs = 0\n", "env.num_envs must be in [1, 65536]");
  expect_rejected("[replay]\ncapacity = 64\n[dqn]\nbatch = 128\n", "replay.capacity must be in [128, ");
  expect_rejected("[replay]\nbeta = 2\n", "replay.beta must be in [0, 1]");
  expect_rejected("[replay]\npriority_eps = 0\n", "replay.priority_eps must be in (0, 1]");
  expect_rejected("[train]\nlearning_starts = 10\n", "train.learning_starts must be in [128, ");
  expect_rejected("[train]\nupdates_per_train = 0\n", "train.updates_per_train must be in [1, 1024]");
  expect_rejected("[dqn]\nepsilon_end = 1.01\n", "dqn.epsilon_end must be in [0, 1]");
}

TEST(DqnConfig, LinearScheduleReference) {
  EXPECT_FLOAT_EQ(linear_schedule(1.f, 0.05f, 0, 100), 1.f);
  EXPECT_FLOAT_EQ(linear_schedule(1.f, 0.05f, 50, 100), 0.525f);
  EXPECT_FLOAT_EQ(linear_schedule(1.f, 0.05f, 100, 100), 0.05f);
  EXPECT_FLOAT_EQ(linear_schedule(1.f, 0.05f, 1000, 100), 0.05f);
  EXPECT_FLOAT_EQ(linear_schedule(0.4f, 1.f, 7, 0), 1.f);
}

}  // namespace
}  // namespace foxhunt::rl
