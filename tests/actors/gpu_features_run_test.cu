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

// A feed-forward and an LSTM policy (the extractor in front of its trunk and LSTM).
TEST_F(FeaturesRun, FinetunedExtractorResumesBitwiseAndEvaluates) {
  SCOPED_TRACE(seed_note());
  const fs::path pre = pretrain_run();
  ASSERT_FALSE(pre.empty());
  const std::string finetune = "mode = \"finetune\"\nlr_scale = 0.5\n";
  constexpr std::int64_t kN = 16 * 32 * 4;  // 4 iterations
  for (const bool lstm : {false, true}) {
    SCOPED_TRACE(lstm ? "LSTM policy" : "feed-forward policy");
    const std::string learner = lstm ? "lstm_hidden = 16\n" : "";
    const std::string tag = lstm ? "lstm_" : "ff_";
    const TrainOutcome half = train(tag + "half", kN, {}, finetune, learner);
    ASSERT_TRUE(half.result.final_checkpoint);
    const fs::path ckpt = *half.result.final_checkpoint;
    ASSERT_TRUE(fs::exists(ckpt / "features.safetensors"));
    const TrainOutcome resumed = train(tag + "resumed", 2 * kN, ckpt, finetune, learner);
    const TrainOutcome whole = train(tag + "whole", 2 * kN, {}, finetune, learner);
    ASSERT_TRUE(resumed.result.final_checkpoint && whole.result.final_checkpoint);
    for (const char* f : {"learner.safetensors", "features.safetensors", "ppo.state", "env.state"}) {
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
  }
}

}  // namespace
