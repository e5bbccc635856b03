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

using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

// A run directory as `foxhunt train` leaves it: config.resolved.toml and one checkpoint (whose
// learner file is a placeholder: plan_eval only checks that it is there).
struct FakeRun {
  fs::path dir = fs::temp_directory_path() / ("foxhunt_eval_args_test_" + std::to_string(::getpid()));
  fs::path checkpoint;
  explicit FakeRun(bool with_config = true, bool attach = false) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    RunConfig c = parse_run_config("[run]\nseed = 11\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"dqn\"\n");
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
  req.checkpoint = run.dir;
  req.episodes = 7;
  EvalPlan plan = plan_eval(req);
  EXPECT_TRUE(fs::equivalent(plan.checkpoint, run.checkpoint));
  EXPECT_TRUE(fs::equivalent(plan.config_file, run.dir / "config.resolved.toml"));
  EXPECT_EQ(plan.config.run.seed, 11u);
  EXPECT_EQ(plan.episodes, 7);
  EXPECT_NE(plan.seed, 11u);  // a fresh seed, not the training one
  EXPECT_EQ(plan.seed, eval_seed(11));
  // The checkpoint directory itself works too, and an explicit seed is kept.
  req.checkpoint = run.checkpoint;
  req.seed = 5;
  plan = plan_eval(req);
  EXPECT_TRUE(fs::equivalent(plan.checkpoint, run.checkpoint));
  EXPECT_EQ(plan.seed, 5u);
}

TEST(EvalArgsTest, CheckpointCarriesItsOwnConfig) {
  FakeRun run(/*with_config=*/false, /*attach=*/true);
  ASSERT_TRUE(fs::exists(run.checkpoint / "config.resolved.toml"));
  EvalRequest req;
  req.checkpoint = run.checkpoint;
  EvalPlan plan = plan_eval(req);
  EXPECT_TRUE(fs::equivalent(plan.config_file, run.checkpoint / "config.resolved.toml"));
  EXPECT_EQ(plan.episodes, 100);
}

TEST(EvalArgsTest, BadArgumentsAreRejectedNamingTheOption) {
  FakeRun run;
  EvalRequest req;
  expect_rejected(req, {"--checkpoint", "missing"});
  req.checkpoint = run.dir / "nope";
  expect_rejected(req, {"--checkpoint", "no such directory"});
  fs::create_directories(run.dir / "empty");
  req.checkpoint = run.dir / "empty";
  expect_rejected(req, {"--checkpoint", "no checkpoint"});
  req.checkpoint = run.dir;
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
  req.checkpoint = run.dir;
  expect_rejected(req, {"--config", "config.resolved.toml"});
}

TEST(EvalArgsTest, TableHasOneLinePerPolicyWithTheMarketColumns) {
  EvalReport r;
  r.market = true;
  r.episodes = 4;
  r.steps = 256;
  r.seed = 9;
  r.rows.push_back({"greedy", {}});
  r.rows.back().stats.episodes = 4;
  r.rows.back().stats.mean_sharpe = 1.25;
  r.rows.push_back({"buy_and_hold", {}});
  const std::string t = format_eval_table(r);
  for (const char* s : {"greedy", "buy_and_hold", "Sharpe", "max drawdown", "turnover", "1.250", "eval seed 9"})
    EXPECT_NE(t.find(s), std::string::npos) << s << " in\n" << t;
  r.market = false;
  const std::string c = format_eval_table(r);
  EXPECT_EQ(c.find("Sharpe"), std::string::npos) << c;
  EXPECT_NE(c.find("mean return"), std::string::npos) << c;
}
