// `foxhunt pretrain` -> `foxhunt train` with [features] -> `foxhunt eval`, on the device: a small
// pretrained regime model attached as the frozen extractor of a synchronous PPO run on the
// two-regime market trains end to end; its checkpoints carry the extractor (features/, the
// pretrain weights byte for byte) and its per-environment state (ppo.state), so a stopped and
// resumed run ends bitwise equal to the uninterrupted one; `foxhunt eval` of the checkpoint acts
// through the carried extractor (and refuses the checkpoint once it is removed), beside the regime
// oracle. The same with mode = "finetune" (feed-forward and LSTM policies): the fine-tuned
// extractor and its Adam moments (features.safetensors) resume bitwise too, and evaluation acts
// through them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "actors/checkpoint_check.hpp"
#include "actors/evaluate.hpp"
#include "actors/pretrain_run.hpp"
#include "actors/train_run.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

class FeaturesRun : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    dir_ = fs::temp_directory_path() / ("foxhunt_features_run_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
    test::GpuTest::TearDown();
  }

  // A 30-step pretraining of a small LSTM regime classifier on configs/markets/regime2.toml.
  fs::path pretrain_run() {
    std::ostringstream t;
    t << "[model]\nkind = \"lstm\"\nhidden = 8\n[data]\nsource = \"market\"\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\nwindow = 32\n[task]\nkind = \"regime\"\n"
      << "[optim]\nlr = 0.003\nwarmup_steps = 5\nbatch = 64\nsteps = 30\n"
      << "[run]\nseed = 2\neval_every = 30\neval_windows = 256\nlog_every = 10\n";
    std::ofstream(dir_ / "pre.toml") << t.str();
    PretrainRequest req;
    req.config = pretrain::load_pretrain_config(dir_ / "pre.toml");
    req.run_dir = dir_ / "pre";
    req.console = false;
    const PretrainOutcome out = run_pretraining(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value());
    return out.result.final_checkpoint.value_or(fs::path());
  }

  TrainOutcome train(const std::string& name, std::int64_t total, const std::optional<fs::path>& resume = {},
                     const std::string& features = "", const std::string& learner = "") {
    std::ostringstream t;
    t << "[run]\nseed = 4\ntotal_env_steps = " << total << "\n[env]\nkind = \"market\"\nnum_envs = 16\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\n"
      << "[learner]\nkind = \"ppo\"\nrollout_steps = 32\nminibatches = 4\nhidden = [32, 32]\nlr = 0.001\nlr_end = 0.001\n"
      << learner << "[features]\ncheckpoint = \"pre\"\n" << features
      << "[checkpoint]\nevery_env_steps = 0\n[logging]\ntimeline = false\ntensorboard = false\n";
    std::ofstream(dir_ / (name + ".toml")) << t.str();
    TrainRequest req;
    req.config = load_run_config(dir_ / (name + ".toml"));
    req.run_dir = dir_ / name;
    req.resume = resume;
    req.console = false;
    TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    return out;
  }

  fs::path dir_;
};

TEST_F(FeaturesRun, TrainsCarriesTheExtractorResumesBitwiseAndEvaluates) {
  SCOPED_TRACE(seed_note());
  const fs::path pre = pretrain_run();
  ASSERT_FALSE(pre.empty());
  constexpr std::int64_t kN = 16 * 32 * 4;  // 4 iterations
  const TrainOutcome half = train("half", kN);
  ASSERT_TRUE(half.result.final_checkpoint);
  const fs::path ckpt = *half.result.final_checkpoint;
  // The checkpoint carries the extractor: the pretrain weights, byte for byte.
  EXPECT_EQ(test::differing_bytes(ckpt / "features" / "model.safetensors", pre / "model.safetensors"), 0);
  EXPECT_TRUE(fs::exists(ckpt / "features" / "config.resolved.toml"));
  EXPECT_TRUE(fs::exists(ckpt / "features" / "market.resolved.toml"));

  const TrainOutcome resumed = train("resumed", 2 * kN, ckpt);
  const TrainOutcome whole = train("whole", 2 * kN);
  ASSERT_TRUE(resumed.result.final_checkpoint && whole.result.final_checkpoint);
  for (const char* f : {"learner.safetensors", "ppo.state", "env.state"}) {
    EXPECT_EQ(test::differing_bytes(*resumed.result.final_checkpoint / f, *whole.result.final_checkpoint / f), 0)
        << f << " differs between the resumed and the uninterrupted run";
    EXPECT_GT(test::differing_bytes(ckpt / f, *whole.result.final_checkpoint / f), 0) << f << ": nothing changed";
  }

  EvalRequest ereq;
  ereq.checkpoints = {*whole.result.final_checkpoint};
  ereq.episodes = 64;
  const EvalReport report = evaluate(plan_eval(ereq));
  bool greedy = false, oracle = false;
  for (const EvalRow& r : report.rows) {
    if (r.policy == "greedy") {
      greedy = true;
      EXPECT_EQ(r.stats.episodes, 64.0);
      EXPECT_TRUE(std::isfinite(r.stats.mean_sharpe));
    }
    if (r.policy == "regime_oracle") {
      oracle = true;
      EXPECT_GT(r.stats.mean_sharpe, 0.0);
    }
  }
  EXPECT_TRUE(greedy);
  EXPECT_TRUE(oracle);
  std::printf("%s", format_eval_table(report).c_str());

  // Without its extractor the checkpoint is refused, naming the key.
  fs::remove_all(*whole.result.final_checkpoint / "features");
  try {
    evaluate(plan_eval(ereq));
    FAIL() << "a checkpoint without its extractor was evaluated";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("features.checkpoint"), std::string::npos) << e.what();
  }
}

// A feed-forward and an LSTM policy (the extractor in front of its trunk and LSTM), and separate
// extractors for actor and critic (shared = false, with an LSTM policy): the critic's
// (features_critic.safetensors) resumes bitwise too, and the checkpoint check requires it.
TEST_F(FeaturesRun, FinetunedExtractorResumesBitwiseAndEvaluates) {
  SCOPED_TRACE(seed_note());
  const fs::path pre = pretrain_run();
  ASSERT_FALSE(pre.empty());
  const std::string finetune = "mode = \"finetune\"\nlr_scale = 0.5\n";
  constexpr std::int64_t kN = 16 * 32 * 4;  // 4 iterations
  struct Case {
    const char* tag;
    bool lstm, separate;
  };
  for (const Case& c : {Case{"ff_", false, false}, Case{"lstm_", true, false}, Case{"sep_lstm_", true, true}}) {
    SCOPED_TRACE(std::string(c.lstm ? "LSTM policy" : "feed-forward policy") +
                 (c.separate ? ", separate extractors" : ""));
    const std::string learner = c.lstm ? "lstm_hidden = 16\n" : "";
    const std::string features = finetune + (c.separate ? "shared = false\n" : "");
    const std::string tag = c.tag;
    const TrainOutcome half = train(tag + "half", kN, {}, features, learner);
    ASSERT_TRUE(half.result.final_checkpoint);
    const fs::path ckpt = *half.result.final_checkpoint;
    ASSERT_TRUE(fs::exists(ckpt / "features.safetensors"));
    EXPECT_EQ(fs::exists(ckpt / "features_critic.safetensors"), c.separate);
    if (c.separate) {
      EXPECT_GT(test::differing_bytes(ckpt / "features.safetensors", ckpt / "features_critic.safetensors"), 0)
          << "the actor's and the critic's extractors are the same";
    }
    const TrainOutcome resumed = train(tag + "resumed", 2 * kN, ckpt, features, learner);
    const TrainOutcome whole = train(tag + "whole", 2 * kN, {}, features, learner);
    ASSERT_TRUE(resumed.result.final_checkpoint && whole.result.final_checkpoint);
    std::vector<std::string> files{"learner.safetensors", "features.safetensors", "ppo.state", "env.state"};
    if (c.separate) files.emplace_back("features_critic.safetensors");
    for (const std::string& f : files) {
      EXPECT_EQ(test::differing_bytes(*resumed.result.final_checkpoint / f, *whole.result.final_checkpoint / f), 0)
          << f << " differs between the resumed and the uninterrupted run";
      EXPECT_GT(test::differing_bytes(ckpt / f, *whole.result.final_checkpoint / f), 0) << f << ": nothing changed";
    }
    EvalRequest ereq;
    ereq.checkpoints = {*whole.result.final_checkpoint};
    ereq.episodes = 64;
    const EvalReport report = evaluate(plan_eval(ereq));
    bool greedy = false;
    for (const EvalRow& r : report.rows)
      if (r.policy == "greedy") {
        greedy = true;
        EXPECT_EQ(r.stats.episodes, 64.0);
        EXPECT_TRUE(std::isfinite(r.stats.mean_sharpe));
      }
    EXPECT_TRUE(greedy);
    // Without its fine-tuned weights the checkpoint is refused, naming the file.
    fs::remove(*whole.result.final_checkpoint / "features.safetensors");
    try {
      evaluate(plan_eval(ereq));
      FAIL() << "a fine-tuned checkpoint without features.safetensors was evaluated";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("features.safetensors"), std::string::npos) << e.what();
    }
    if (c.separate) {
      // A checkpoint without the critic's extractor does not resume, naming the file.
      const RunConfig rc = load_run_config(dir_ / (tag + "resumed.toml"));
      EXPECT_TRUE(check_checkpoint(rc, ckpt).empty());
      fs::remove(ckpt / "features_critic.safetensors");
      const std::vector<std::string> problems = check_checkpoint(rc, ckpt);
      ASSERT_EQ(problems.size(), 1u);
      EXPECT_NE(problems.front().find("features_critic.safetensors"), std::string::npos) << problems.front();
    }
  }
}

}  // namespace
