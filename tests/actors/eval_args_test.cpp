// `foxhunt eval` arguments (actors::plan_eval): each bad argument is rejected with a message that
// names the option; a checkpoint or run directory finds its own resolved config; the default eval
// seed differs from the training seed. Plus the printed table's shape. No device needed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/checkpoint_store.hpp"
#include "actors/evaluate.hpp"
#include "actors/train_run.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

// A run directory as `foxhunt train` leaves it: config.resolved.toml and one checkpoint (whose
// learner file is a placeholder: plan_eval only checks that it is there).
struct FakeRun {
  fs::path dir;
  fs::path checkpoint;
  // `env`: the [env] table's body (default CartPole); `dir_in`: where (default a fresh temp folder).
  explicit FakeRun(bool with_config = true, bool attach = false, const std::string& env = "kind = \"cartpole\"\n",
                   fs::path dir_in = {}, int seed = 11)
      : dir(dir_in.empty() ? fs::temp_directory_path() / ("foxhunt_eval_args_test_" + std::to_string(::getpid()))
                           : dir_in) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    RunConfig c =
        parse_run_config("[run]\nseed = " + std::to_string(seed) + "\n[env]\n" + env + "[learner]\nkind = \"dqn\"\n");
    if (with_config) std::ofstream(dir / "config.resolved.toml") << resolved_toml(c);
    CheckpointStore store(dir / "checkpoints");
    if (attach) store.attach("config.resolved.toml", resolved_toml(c));
    checkpoint = store.write(Counters{100, 10, 1},
                             [](const fs::path& d) { std::ofstream(d / "learner.online.safetensors") << "x"; });
  }
  ~FakeRun() { fs::remove_all(dir); }
};

void expect_rejected(const EvalRequest& req, const std::vector<std::string>& mentions) {
  try {
    plan_eval(req);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const auto& m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "message: " << msg;
  }
}

}  // namespace

TEST(EvalArgsTest, RunDirectoryFindsItsLatestCheckpointAndConfig) {
  FakeRun run;
  EvalRequest req;
  req.checkpoints = {run.dir};
  req.episodes = 7;
  EvalPlan plan = plan_eval(req);
  ASSERT_EQ(plan.targets.size(), 1u);
  EXPECT_TRUE(fs::equivalent(plan.targets[0].checkpoint, run.checkpoint));
  EXPECT_TRUE(fs::equivalent(plan.targets[0].config_file, run.dir / "config.resolved.toml"));
  EXPECT_EQ(plan.targets[0].config.run.seed, 11u);
  EXPECT_EQ(plan.report_dir, plan.targets[0].checkpoint / "eval");
  EXPECT_EQ(plan.cost_multipliers, std::vector<double>{1.0});
  EXPECT_EQ(plan.episodes, 7);
  EXPECT_NE(plan.seed, 11u);  // a fresh seed, not the training one
  EXPECT_EQ(plan.seed, eval_seed(11));
  // The checkpoint directory itself works too, and an explicit seed is kept.
  req.checkpoints = {run.checkpoint};
  req.seed = 5;
  plan = plan_eval(req);
  EXPECT_TRUE(fs::equivalent(plan.targets[0].checkpoint, run.checkpoint));
  EXPECT_EQ(plan.seed, 5u);
}

TEST(EvalArgsTest, CheckpointCarriesItsOwnConfig) {
  FakeRun run(/*with_config=*/false, /*attach=*/true);
  ASSERT_TRUE(fs::exists(run.checkpoint / "config.resolved.toml"));
  EvalRequest req;
  req.checkpoints = {run.checkpoint};
  EvalPlan plan = plan_eval(req);
  EXPECT_TRUE(fs::equivalent(plan.targets[0].config_file, run.checkpoint / "config.resolved.toml"));
  EXPECT_EQ(plan.episodes, 100);
}

TEST(EvalArgsTest, BadArgumentsAreRejectedNamingTheOption) {
  FakeRun run;
  EvalRequest req;
  expect_rejected(req, {"--checkpoint", "missing"});
  req.checkpoints = {run.dir / "nope"};
  expect_rejected(req, {"--checkpoint", "no such directory"});
  fs::create_directories(run.dir / "empty");
  req.checkpoints = {run.dir / "empty"};
  expect_rejected(req, {"--checkpoint", "no checkpoint"});
  req.checkpoints = {run.dir};
  req.episodes = 0;
  expect_rejected(req, {"--episodes", "[1, "});
  req.episodes = kMaxEvalEpisodes + 1;
  expect_rejected(req, {"--episodes"});
  req.episodes = 10;
  req.config = run.dir / "missing.toml";
  expect_rejected(req, {"--config", "no such file"});
  std::ofstream(run.dir / "bad.toml") << "[learner]\nlr = -1\n";
  req.config = run.dir / "bad.toml";
  expect_rejected(req, {"--config", "learner.lr"});
  // A checkpoint without learner files.
  fs::remove(run.checkpoint / "learner.online.safetensors");
  req.config.reset();
  expect_rejected(req, {"--checkpoint", "learner.online.safetensors"});
}

TEST(EvalArgsTest, NoConfigAnywhereIsRejected) {
  FakeRun run(/*with_config=*/false);
  EvalRequest req;
  req.checkpoints = {run.dir};
  expect_rejected(req, {"--config", "config.resolved.toml"});
}

TEST(EvalArgsTest, TableHasOneLinePerPolicyWithTheMarketColumns) {
  EvalReport r;
  r.market = true;
  r.episodes = 4;
  r.steps = 256;
  r.seed = 9;
  r.rows.push_back({"greedy", 0, 1.0, {}});
  r.rows.back().stats.episodes = 4;
  r.rows.back().stats.mean_sharpe = 1.25;
  r.rows.push_back({"buy_and_hold", -1, 1.0, {}});
  const std::string t = format_eval_table(r);
  for (const char* s : {"greedy", "buy_and_hold", "Sharpe", "max drawdown", "turnover", "1.250", "eval seed 9"})
    EXPECT_NE(t.find(s), std::string::npos) << s << " in\n" << t;
  r.market = false;
  const std::string c = format_eval_table(r);
  EXPECT_EQ(c.find("Sharpe"), std::string::npos) << c;
  EXPECT_NE(c.find("mean return"), std::string::npos) << c;
}

namespace {

std::string market_env(const std::string& file) {
  return "kind = \"market\"\nmarket = \"" + (foxhunt::test::configs_dir() / "markets" / file).string() + "\"\n";
}

fs::path temp_root(const std::string& name) {
  return fs::temp_directory_path() / ("foxhunt_eval_plan_" + name + "_" + std::to_string(::getpid()));
}

}  // namespace

TEST(EvalArgsTest, CostMultipliersParseAndRejectNamingTheFlag) {
  EXPECT_EQ(parse_cost_multipliers("0,1,2,5"), (std::vector<double>{0, 1, 2, 5}));
  EXPECT_EQ(parse_cost_multipliers(" 0.5 , 1 "), (std::vector<double>{0.5, 1}));
  EXPECT_EQ(parse_cost_multipliers("1"), std::vector<double>{1});
  for (const char* bad : {"", "1,", "-1", "a", "1,,2", "1;2", "nan", "inf", "1e9", "1,1", "2,2.0"}) {
    try {
      parse_cost_multipliers(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--cost-multipliers"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 1000]"), std::string::npos) << msg;
    }
  }
}

TEST(EvalArgsTest, CartPoleHasNoCostsToScale) {
  FakeRun run;
  EvalRequest req;
  req.checkpoints = {run.dir};
  req.cost_multipliers = {0, 1};
  expect_rejected(req, {"--cost-multipliers", "cartpole", "allowed: 1"});
}

TEST(EvalArgsTest, SeveralCheckpointsShareTheFirstOnesSeedAndReportDir) {
  const fs::path root = temp_root("several");
  fs::remove_all(root);
  {
    FakeRun a(true, false, market_env("ou_mean_reversion.toml"), root / "a", 3);
    FakeRun b(true, false, market_env("ou_mean_reversion.toml"), root / "b", 4);
    EvalRequest req;
    req.checkpoints = {a.dir, b.dir};
    req.cost_multipliers = {0, 1, 2, 5};
    EvalPlan plan = plan_eval(req);
    ASSERT_EQ(plan.targets.size(), 2u);
    EXPECT_TRUE(fs::equivalent(plan.targets[1].checkpoint, b.checkpoint));
    EXPECT_EQ(plan.seed, eval_seed(3));  // one set of paths for every checkpoint
    EXPECT_EQ(plan.report_dir, plan.targets[0].checkpoint / "eval");
    EXPECT_EQ(plan.cost_multipliers.size(), 4u);
    req.report_dir = root / "out";
    EXPECT_EQ(plan_eval(req).report_dir, root / "out");
    // The same checkpoint twice is refused.
    req.checkpoints = {a.dir, a.checkpoint};
    expect_rejected(req, {"--checkpoint", "given twice"});
  }
  fs::remove_all(root);
}

TEST(EvalArgsTest, AMultiSeedParentExpandsToItsRunsInNameOrder) {
  const fs::path root = temp_root("parent");
  fs::remove_all(root);
  {
    FakeRun s2(true, false, market_env("ou_mean_reversion.toml"), root / "seed2", 2);
    FakeRun s1(true, false, market_env("ou_mean_reversion.toml"), root / "seed1", 1);
    fs::create_directories(root / "notes");  // not a run: skipped
    EvalRequest req;
    req.checkpoints = {root};
    EvalPlan plan = plan_eval(req);
    ASSERT_EQ(plan.targets.size(), 2u);
    EXPECT_TRUE(fs::equivalent(plan.targets[0].checkpoint, s1.checkpoint));
    EXPECT_TRUE(fs::equivalent(plan.targets[1].checkpoint, s2.checkpoint));
    EXPECT_EQ(plan.report_dir, root / "eval");
    EXPECT_EQ(plan.seed, eval_seed(1));
  }
  fs::remove_all(root);
}

TEST(EvalArgsTest, CheckpointsOnDifferentMarketsAreRefused) {
  const fs::path root = temp_root("markets");
  fs::remove_all(root);
  {
    FakeRun a(true, false, market_env("ou_mean_reversion.toml"), root / "a");
    FakeRun b(true, false, market_env("ou8_correlated.toml"), root / "b");
    EvalRequest req;
    req.checkpoints = {a.dir, b.dir};
    expect_rejected(req, {"--checkpoint", "differs", "same environment"});
  }
  fs::remove_all(root);
}

// --split: a replay market with [split] evaluates its test part by default; a part the market
// does not have, or any part but train of a simulated market or CartPole, is refused naming it.
TEST(EvalArgsTest, SplitDefaultsToTestAndRefusesMissingParts) {
  const fs::path root = temp_root("split");
  fs::remove_all(root);
  {
    FakeRun bars(true, false, market_env("example_bars.toml"), root / "bars");
    EvalRequest req;
    req.checkpoints = {bars.dir};
    EXPECT_EQ(plan_eval(req).split, foxhunt::rl::Split::test);
    req.split = foxhunt::rl::Split::validation;
    EXPECT_EQ(plan_eval(req).split, foxhunt::rl::Split::validation);

    FakeRun ou(true, false, market_env("ou_mean_reversion.toml"), root / "ou");
    EvalRequest sim;
    sim.checkpoints = {ou.dir};
    EXPECT_EQ(plan_eval(sim).split, foxhunt::rl::Split::train);
    sim.split = foxhunt::rl::Split::test;
    expect_rejected(sim, {"--split test", "only replay markets"});

    FakeRun cp;
    EvalRequest cart;
    cart.checkpoints = {cp.dir};
    cart.split = foxhunt::rl::Split::validation;
    expect_rejected(cart, {"--split validation", "cartpole", "allowed: train"});
  }
  fs::remove_all(root);
}

// A run of several agents (<run>/agents/<name>/ as `foxhunt train` leaves it) expands to every
// agent's latest checkpoint in name order, each target named by its agent, and reports into
// <run>/eval; an agent's directory given on its own is named too.
TEST(EvalArgsTest, ARunOfSeveralAgentsExpandsToEveryAgent) {
  const fs::path root = temp_root("agents");
  fs::remove_all(root);
  {
    const fs::path run = root / "run";
    FakeRun ppo(true, false, market_env("ou_mean_reversion.toml"), run / "agents" / "ppo", 1);
    FakeRun dqn(true, false, market_env("ou_mean_reversion.toml"), run / "agents" / "dqn", 1);
    fs::create_directories(run / "tensorboard");  // the run's own folders are not agents
    fs::create_directories(run / "agents" / "eval");
    EvalRequest req;
    req.checkpoints = {run};
    EvalPlan plan = plan_eval(req);
    ASSERT_EQ(plan.targets.size(), 2u);
    EXPECT_TRUE(fs::equivalent(plan.targets[0].checkpoint, dqn.checkpoint));
    EXPECT_TRUE(fs::equivalent(plan.targets[1].checkpoint, ppo.checkpoint));
    EXPECT_EQ(plan.targets[0].agent, "dqn");
    EXPECT_EQ(plan.targets[1].agent, "ppo");
    EXPECT_TRUE(fs::equivalent(plan.targets[0].config_file, dqn.dir / "config.resolved.toml"));
    EXPECT_EQ(plan.report_dir, run / "eval");
    EXPECT_EQ(plan.seed, eval_seed(1));  // one set of paths for every agent
    // One agent's directory: that agent, named; a run of one agent has no name.
    req.checkpoints = {run / "agents" / "ppo"};
    plan = plan_eval(req);
    ASSERT_EQ(plan.targets.size(), 1u);
    EXPECT_EQ(plan.targets[0].agent, "ppo");
    EXPECT_EQ(agent_of_checkpoint(dqn.checkpoint), "dqn");
    EXPECT_EQ(agent_of_checkpoint(dqn.checkpoint / ""), "dqn");
    FakeRun single(true, false, market_env("ou_mean_reversion.toml"), root / "single", 1);
    EXPECT_EQ(agent_of_checkpoint(single.checkpoint), "");
    // The run beside another checkpoint: the run's agents, then that one.
    req.checkpoints = {run, single.dir};
    plan = plan_eval(req);
    ASSERT_EQ(plan.targets.size(), 3u);
    EXPECT_EQ(plan.targets[2].agent, "");
    EXPECT_EQ(plan.report_dir, run / "eval");
    // An agent given again beside its run is refused.
    req.checkpoints = {run, run / "agents" / "dqn"};
    expect_rejected(req, {"--checkpoint", "given twice"});
  }
  fs::remove_all(root);
}

// The printed table and the report name an agent's rows by its name; an aggregate never mixes
// learner kinds.
TEST(EvalArgsTest, AgentsAreLabelledByNameAndAggregatedByKind) {
  namespace report = foxhunt::report;
  report::Report rep;
  rep.cost_multipliers = {1.0};
  rep.columns = {{"sharpe", "Sharpe", report::Unit::number}};
  rep.checkpoints = {{"/r/agents/dqn/checkpoints/step_1", "c", 1, "dqn", "dqn"},
                     {"/r/agents/ppo/checkpoints/step_1", "c", 1, "ppo", "ppo"},
                     {"/s/checkpoints/step_1", "c", 1, "dqn", ""}};
  for (int k = 0; k < 3; ++k) {
    report::PolicyRun run;
    run.policy = "greedy";
    run.agent = true;
    run.checkpoint = k;
    run.episodes = {{0.5 + k, 1.0 + k}};
    rep.runs.push_back(run);
  }
  report::PolicyRun hold;
  hold.policy = "buy_and_hold";
  hold.episodes = {{0.1, 0.2}};
  rep.runs.push_back(hold);
  report::summarize(rep);
  EXPECT_EQ(report::run_label(rep, rep.runs[0]), "greedy[dqn]");
  EXPECT_EQ(report::run_label(rep, rep.runs[1]), "greedy[ppo]");
  EXPECT_EQ(report::run_label(rep, rep.runs[2]), "greedy[3]");
  EXPECT_EQ(report::run_label(rep, rep.runs[3]), "buy_and_hold");
  ASSERT_EQ(rep.aggregates.size(), 2u);  // dqn over checkpoints 1 and 3, ppo over 2
  EXPECT_EQ(rep.aggregates[0].learner, "dqn");
  EXPECT_EQ(rep.aggregates[0].values[0], (std::vector<double>{0.75, 2.75}));
  EXPECT_EQ(rep.aggregates[1].learner, "ppo");
  EXPECT_EQ(rep.aggregates[1].values[0].size(), 1u);
  // Two runs' agents of the same name fall back to indices.
  rep.checkpoints[2].agent = "dqn";
  EXPECT_EQ(report::run_label(rep, rep.runs[0]), "greedy[1]");
  EXPECT_EQ(report::run_label(rep, rep.runs[1]), "greedy[ppo]");
}
