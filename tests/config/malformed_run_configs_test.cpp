// A table of malformed run configs, each loaded from a file the way `foxhunt train` loads it and
// each rejected with a message that names the file, the line of the offending key (where the
// problem has one), the key and what is allowed. No GPU is needed: every check runs on the host.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "config/reader.hpp"

namespace foxhunt::actors {
namespace {

namespace fs = std::filesystem;

// A run config: [run] (name "t" unless `run` names it), [env], [learner] (kind "dqn"), then `more`.
std::string cfg(const std::string& run = "name = \"t\"\n", const std::string& env = "kind = \"cartpole\"\n",
                const std::string& learner = "", const std::string& more = "") {
  return "[run]\n" + run + "[env]\n" + env + "[learner]\nkind = \"dqn\"\n" + learner + more;
}

// A PPO run on CartPole: env and learner keys appended to their tables.
std::string ppo(const std::string& env = "", const std::string& learner = "", const std::string& run = "",
                const std::string& more = "") {
  return "[run]\nname = \"t\"\n" + run + "[env]\nkind = \"cartpole\"\n" + env + "[learner]\nkind = \"ppo\"\n" +
         learner + more;
}

const std::string kMarket = R"([market]
assets = 1
episode_length = 64
window = 8
[process]
kind = "ou"
initial_price = 100.0
kappa = 5.0
sigma = 0.2
)";

struct Case {
  std::string name;
  std::string text;                            // run.toml
  std::string at;                              // text whose line the message must name ("" = none)
  std::vector<std::string> parts;              // the message must contain each
  std::map<std::string, std::string> files{};  // written beside run.toml first
};

std::string market_env(const std::string& file) { return "kind = \"market\"\nmarket = \"" + file + "\"\n"; }

std::vector<Case> cases() {
  std::string bad_market = kMarket;  // kappa on line 8, sigma on line 9
  bad_market.replace(bad_market.find("kappa = 5.0"), 11, "kappa = -5.0");
  bad_market.replace(bad_market.find("sigma = 0.2"), 11, "sigma = \"x\"");
  const std::string two_assets =
      "[market]\nassets = 2\n[process]\nkind = \"ou\"\ninitial_price = 1.0\nkappa = 5.0\nsigma = 0.2\n";
  return {
      // syntax
      {"syntax_double_equals",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "lr = = 3\n"),
       "lr = = 3",
       {"TOML syntax error"}},
      {"syntax_unterminated_string", cfg("name = \"abc\n"), "name = \"abc", {"TOML syntax error"}},
      {"syntax_table_twice", cfg() + "[env]\nnum_envs = 2\n", "[env]\nnum_envs = 2", {"TOML syntax error"}},
      // unknown keys and tables
      {"unknown_key_did_you_mean",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\nbatch_sise = 64\n"),
       "batch_sise",
       {"replay.batch_sise: unknown key; did you mean 'batch_size'?"}},
      {"misspelled_table",
       cfg() + "[replya]\nbatch_size = 64\n",
       "[replya]",
       {"[replya]: unknown table; did you mean 'replay'?"}},
      {"misspelled_table_transposed",
       cfg() + "[pipleine]\nslots = 2\n",
       "[pipleine]",
       {"[pipleine]: unknown table; did you mean 'pipeline'?"}},
      {"key_outside_tables", "seed = 3\n" + cfg(), "seed = 3", {"seed: unknown key outside any table", "'run.seed'"}},
      {"key_in_the_wrong_table",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "batch_size = 64\n"),
       "batch_size",
       {"learner.batch_size: unknown key; did you mean 'replay.batch_size'?"}},
      {"unknown_key_lists_the_known",
       cfg("name = \"t\"\ncolour = 1\n"),
       "colour",
       {"run.colour: unknown key", "known in [run]:", "total_env_steps"}},
      {"inline_ou_key_removed",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\nkappa = 5.0\n"),
       "kappa",
       {"env.kappa: unknown key"}},
      // types
      {"string_for_integer",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\nbatch_size = \"64\"\n"),
       "batch_size",
       {"replay.batch_size = \"64\": must be an integer in [1, 1048576]"}},
      {"float_for_integer",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\nbatch_size = 128.0\n"),
       "batch_size",
       {"replay.batch_size = 128.0: must be an integer in [1, 1048576]"}},
      {"exponent_for_integer",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\nnum_envs = 1e3\n"),
       "num_envs",
       {"env.num_envs = 1e3: must be an integer"}},
      {"string_for_boolean",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\nprioritized = \"yes\"\n"),
       "prioritized",
       {"replay.prioritized = \"yes\": must be a boolean, true or false"}},
      {"number_for_choice",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "target = 1\n"),
       "target = 1",
       {"learner.target = 1: must be one of \"hard\" | \"polyak\""}},
      {"integer_for_list",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "hidden = 64\n"),
       "hidden",
       {"learner.hidden = 64: must be a list of 1 to 8 integers"}},
      {"value_for_table", "replay = 3\n" + cfg(), "replay = 3", {"replay = 3: must be a table"}},
      {"string_for_number",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "lr = \"fast\"\n"),
       "lr = ",
       {"learner.lr = \"fast\": must be a number in (0, 1]"}},
      // ranges and choices
      {"integer_out_of_range",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\nbatch_size = 0\n"),
       "batch_size",
       {"replay.batch_size = 0: must be an integer in [1, 1048576]"}},
      {"stall_timeout_negative",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[pipeline]\nstall_timeout_ms = -1\n"),
       "stall_timeout_ms",
       {"pipeline.stall_timeout_ms = -1: must be an integer in [0, 604800000]"}},
      {"stall_timeout_beyond_a_week",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[pipeline]\nstall_timeout_ms = 604800001\n"),
       "stall_timeout_ms",
       {"pipeline.stall_timeout_ms = 604800001: must be an integer in [0, 604800000]"}},
      {"stall_timeout_not_an_integer",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[pipeline]\nstall_timeout_ms = \"10m\"\n"),
       "stall_timeout_ms",
       {"pipeline.stall_timeout_ms = \"10m\": must be an integer in [0, 604800000]"}},
      {"stall_timeout_with_sync_ppo",
       ppo("", "", "", "[pipeline]\nstall_timeout_ms = 1000\n"),
       "stall_timeout_ms",
       {"pipeline.stall_timeout_ms = 1000: has no effect with pipeline.mode = \"sync\""}},
      {"number_out_of_range",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\ngamma = 1.5\n"),
       "gamma",
       {"replay.gamma = 1.5: must be a number in [0, 1]"}},
      {"number_not_finite",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\ngamma = nan\n"),
       "gamma",
       {"replay.gamma = nan: must be a finite number"}},
      {"open_bound",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "lr = 0.0\n"),
       "lr = 0.0",
       {"learner.lr = 0.0: must be a number in (0, 1]"}},
      {"list_entry_out_of_range",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "hidden = [64, 0]\n"),
       "hidden",
       {"learner.hidden = [64, 0]: must be a list of 1 to 8 integers in [1, 65536]"}},
      {"unknown_choice",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "loss = \"l1\"\n"),
       "loss",
       {"learner.loss = \"l1\": must be one of \"huber\" | \"mse\""}},
      {"inline_ou_market_removed",
       cfg("name = \"t\"\n", "kind = \"ou_market\"\n"),
       "ou_market",
       {"env.kind = \"ou_market\": must be one of \"cartpole\" | \"market\""}},
      {"learner_kind_unknown",
       "[run]\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"a2c\"\n",
       "\"a2c\"",
       {"learner.kind = \"a2c\": must be one of \"dqn\" | \"ppo\""}},
      // run.name
      {"run_name_with_slash",
       cfg("name = \"../escape\"\n"),
       "name",
       {"run.name = \"../escape\": must be a plain name"}},
      {"run_name_dot_dot", cfg("name = \"..\"\n"), "name", {"run.name = \"..\": must be a plain name"}},
      {"run_name_absolute", cfg("name = \"/tmp/x\"\n"), "name", {"run.name = \"/tmp/x\": must be a plain name"}},
      // missing tables and keys
      {"empty_file", "", "", {"[run]: missing table", "[env]: missing table", "[learner]: missing table"}},
      {"no_env_table", "[run]\n[learner]\nkind = \"dqn\"\n", "", {"[env]: missing table"}},
      {"no_run_table", "[env]\nkind = \"cartpole\"\n[learner]\nkind = \"dqn\"\n", "", {"[run]: missing table"}},
      {"no_learner_kind",
       "[run]\n[env]\nkind = \"cartpole\"\n[learner]\nlr = 0.001\n",
       "[learner]",
       {"learner.kind: missing in [learner]; must be one of \"dqn\" | \"ppo\""}},
      {"no_env_kind",
       "[run]\n[env]\nnum_envs = 4\n[learner]\nkind = \"dqn\"\n",
       "[env]",
       {"env.kind: missing in [env]"}},
      {"market_kind_without_market",
       cfg("name = \"t\"\n", "kind = \"market\"\n"),
       "[env]",
       {"env.market: missing in [env]"}},
      // contradictions and keys without effect
      {"learning_starts_beyond_the_run",
       cfg("name = \"t\"\ntotal_env_steps = 5000\n", "kind = \"cartpole\"\n", "",
           "[pipeline]\nlearning_starts = 10000\n"),
       "learning_starts",
       {"pipeline.learning_starts = 10000, run.total_env_steps = 5000"}},
      {"tau_with_a_hard_target",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "target = \"hard\"\ntau = 0.01\n"),
       "tau",
       {"learner.tau = 0.01: has no effect with learner.target = \"hard\""}},
      {"replay_always_without_periodic_checkpoints",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[checkpoint]\nevery_env_steps = 0\nreplay = \"always\"\n"),
       "replay = ",
       {"checkpoint.replay = \"always\", checkpoint.every_env_steps = 0"}},
      // PPO
      {"ppo_minibatches_not_dividing_the_rollout",
       ppo("num_envs = 3\n", "rollout_steps = 5\nminibatches = 4\n"),
       "minibatches",
       {"learner.minibatches = 4, learner.rollout_steps = 5", "must be a multiple of learner.minibatches"}},
      {"ppo_rollout_beyond_the_run",
       ppo("num_envs = 64\n", "rollout_steps = 128\n", "total_env_steps = 1000\n"),
       "rollout_steps",
       {"learner.rollout_steps = 128, run.total_env_steps = 1000"}},
      {"ppo_with_a_dqn_key",
       ppo("", "epsilon_start = 0.5\n"),
       "epsilon_start",
       {"learner.epsilon_start = 0.5: has no effect with learner.kind = \"ppo\""}},
      {"ppo_with_a_replay_key",
       ppo("", "", "", "[replay]\nbatch_size = 64\n"),
       "batch_size",
       {"replay.batch_size = 64: has no effect with learner.kind = \"ppo\""}},
      {"dqn_with_a_ppo_key",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "rollout_steps = 64\n"),
       "rollout_steps",
       {"learner.rollout_steps = 64: has no effect with learner.kind = \"dqn\""}},
      {"ppo_gelu",
       ppo("", "activation = \"gelu\"\n"),
       "gelu",
       {"learner.activation = \"gelu\": must be one of \"tanh\" | \"relu\""}},
      {"ppo_math_unknown",
       ppo("", "math = \"fp8\"\n"),
       "fp8",
       {"learner.math = \"fp8\": must be one of \"fp32\" | \"tf32\" | \"bf16\""}},
      {"c51_support_without_c51",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "v_min = -5.0\n"),
       "v_min",
       {"learner.v_min = -5.0: has no effect with learner.atoms = 1"}},
      {"sigma0_without_noisy",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "sigma0 = 0.3\n"),
       "sigma0",
       {"learner.sigma0 = 0.3: has no effect with learner.noisy = false"}},
      {"huber_delta_with_mse",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "loss = \"mse\"\nhuber_delta = 2.0\n"),
       "huber_delta",
       {"learner.huber_delta = 2.0: has no effect with learner.loss = \"mse\""}},
      {"loss_with_c51",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "atoms = 51\nloss = \"mse\"\n"),
       "loss",
       {"learner.loss = \"mse\": has no effect with learner.atoms = 51"}},
      {"alpha_without_priorities",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\nprioritized = false\nalpha = 0.5\n"),
       "alpha",
       {"replay.alpha = 0.5: has no effect with replay.prioritized = false"}},
      {"beta_final_without_priorities",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\nprioritized = false\nbeta_final = 0.9\n"),
       "beta_final",
       {"replay.beta_final = 0.9: has no effect with replay.prioritized = false"}},
      {"lr_end_without_anneal",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "lr_end = 0.0001\n"),
       "lr_end",
       {"learner.lr_end = 0.0001: has no effect with learner.lr_anneal_updates = 0"}},
      {"epsilon_rises",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "epsilon_start = 0.1\nepsilon_final = 0.5\n"),
       "epsilon_final",
       {"learner.epsilon_final = 0.5, learner.epsilon_start = 0.1"}},
      {"capacity_below_learning_starts",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\n", "", "[replay]\ncapacity = 500\n"),
       "capacity",
       {"replay.capacity = 500, pipeline.learning_starts = 1000"}},
      {"market_file_for_cartpole",
       cfg("name = \"t\"\n", "kind = \"cartpole\"\nmarket = \"m.toml\"\n"),
       "market =",
       {"env.market = \"m.toml\": has no effect with env.kind = \"cartpole\""}},
      // market files
      {"missing_market_file",
       cfg("name = \"t\"\n", market_env("markets/none.toml")),
       "market =",
       {"env.market = \"markets/none.toml\"", "markets/none.toml does not exist"}},
      {"market_path_is_a_directory",
       cfg("name = \"t\"\n", market_env("markets")),
       "market =",
       {"env.market = \"markets\"", "is a directory"},
       {{"markets/ok.toml", kMarket}}},
      {"market_path_is_a_symlink_loop",
       cfg("name = \"t\"\n", market_env("loop.toml")),
       "market =",
       {"env.market = \"loop.toml\"", "loop.toml is a symlink loop"}},
      {"bad_market_parameters",
       cfg("name = \"t\"\n", market_env("markets/bad.toml")),
       "market =",
       {"env.market = \"markets/bad.toml\": the market file", "bad.toml:8: process.kappa = -5.0: must be in (0, 10000]",
        "bad.toml:9: process.sigma = \"x\""},
       {{"markets/bad.toml", bad_market}}},
      {"market_key_misspelled",
       cfg("name = \"t\"\n", market_env("m.toml")),
       "market =",
       {"m.toml:11: execution.fee_bp: unknown key; did you mean 'fee_bps'?"},
       {{"m.toml", kMarket + "[execution]\nfee_bp = 1.0\n"}}},
      {"replay_market_with_a_missing_csv",
       cfg("name = \"t\"\n", market_env("r.toml")),
       "market =",
       {"r.toml:6: replay.files = [\"nope.csv\"]", "nope.csv does not exist"},
       {{"r.toml", "[market]\nassets = 1\n[process]\nkind = \"replay\"\n[replay]\nfiles = [\"nope.csv\"]\n"}}},
      {"continuous_market",
       cfg("name = \"t\"\n", market_env("c.toml")),
       "market =",
       {"env.market = \"c.toml\"", "action.kind = \"continuous\" cannot run in the DQN pipeline"},
       {{"c.toml", kMarket + "[action]\nkind = \"continuous\"\n"}}},
      {"c51_on_several_assets",
       cfg("name = \"t\"\n", market_env("two.toml"), "atoms = 51\n"),
       "atoms",
       {"learner.atoms = 51: C51 has one branch", "has 2 assets"},
       {{"two.toml", two_assets}}},
  };
}

class MalformedRunConfig : public ::testing::TestWithParam<Case> {
 protected:
  fs::path dir =
      fs::temp_directory_path() / ("foxhunt_malformed_" + std::to_string(::getpid()) + "_" + GetParam().name);
  void SetUp() override {
    fs::remove_all(dir);
    fs::create_directories(dir / "markets");
    fs::create_symlink(dir / "loop.toml", dir / "loop.toml");
  }
  void TearDown() override { fs::remove_all(dir); }
};

TEST_P(MalformedRunConfig, IsRejectedNamingFileLineAndKey) {
  const Case& c = GetParam();
  for (const auto& [name, text] : c.files) std::ofstream(dir / name) << text;
  const fs::path file = dir / "run.toml";
  std::ofstream(file) << c.text;
  const std::vector<std::string>& parts = c.parts;
  std::string where = file.string();
  if (!c.at.empty()) {
    const std::size_t pos = c.text.find(c.at);
    ASSERT_NE(pos, std::string::npos) << c.at;
    where +=
        ":" + std::to_string(1 + std::count(c.text.begin(), c.text.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
  }
  try {
    load_run_config(file);
    FAIL() << "accepted:\n" << c.text;
  } catch (const config::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(where + ":"), std::string::npos) << "no \"" << where << ":\" in:\n" << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "no \"" << p << "\" in:\n" << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, MalformedRunConfig, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(MalformedRunConfigTable, HasAtLeastFortyCases) { EXPECT_GE(cases().size(), 40u); }

TEST(MalformedRunConfigTable, EveryProblemOfAFileIsReportedInOnePass) {
  try {
    parse_run_config(cfg("name = \"a/b\"\n", "kind = \"cartpole\"\n", "lr = 2.0\nfoo = 1\n",
                         "[replay]\nbatch_size = 128.0\ngamma = -1.0\n"),
                     "many.toml");
    FAIL() << "accepted";
  } catch (const config::Error& e) {
    EXPECT_EQ(e.errors().size(), 5u) << e.what();
    const std::string msg = e.what();
    for (const char* p :
         {"many.toml: invalid configuration (5 problems)", "many.toml:2: run.name", "many.toml:7: learner.lr = 2.0",
          "many.toml:8: learner.foo", "many.toml:10: replay.batch_size", "many.toml:11: replay.gamma = -1.0"})
      EXPECT_NE(msg.find(p), std::string::npos) << p << " in:\n" << msg;
  }
}

}  // namespace
}  // namespace foxhunt::actors
