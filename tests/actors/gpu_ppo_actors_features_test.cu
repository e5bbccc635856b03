// PPO with [features] through the actor runtime (pipeline.mode = "actors", actors/ppo_gpu_stages.hpp)
// on the device, with a small pretrained regime LSTM on configs/markets/regime2.toml:
//   PpoActorsFeatures.LagZeroEqualsTheSynchronousLoop: 4 iterations through the actors with
//     policy_lag 0 end with checkpoint files byte for byte equal to the synchronous loop's, with the
//     extractor frozen in the collector (learner.safetensors, ppo.state with the extractor's
//     per-environment state, env.state) and fine-tuned in the learner (those and
//     features.safetensors: the extractor trained as the network's first module, acted with through
//     the copy published with the policy);
//   PpoActorsFeatures.ResumeContinuesBitExactly: N -> stop -> 2N through the actors equals the
//     uninterrupted 2N run (and two uninterrupted runs are equal), frozen and fine-tuned, policy_lag
//     0 and 1; the collector's acting network and acting extractor (policy.safetensors,
//     policy.features.safetensors) equal the learner's weights at lag 0 and are one update behind
//     them at lag 1;
//   PpoActorsFeatures.ShippedRegimeConfigTrainsThroughTheActors: configs/ppo_features_regime.toml
//     with pipeline.mode = "actors" (policy_lag 1) and an extractor of the shipped shape (LSTM 64 on
//     64 returns, random weights) trains 2 iterations to a final checkpoint that checks as
//     resumable;
//   PpoActorsFeatures.SplitPlacementEqualsAll: placement "split" (docs/distributed.md) with the
//     collector on the learner's GPU ends byte for byte as "all", frozen and fine-tuned, policy_lag
//     1 (the extractor's acting copy travels in the policy buffers on the collector's device);
//   PpoActorsFeatures.SplitAcrossTwoGpusEqualsOneGpu: the same with the collector on device 1
//     (skips with "needs 2 GPUs" otherwise).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "actors/checkpoint_check.hpp"
#include "actors/pretrain_run.hpp"
#include "actors/train_run.hpp"
#include "gpu/arena.hpp"
#include "gpu/device.hpp"
#include "gpu/safetensors.hpp"
#include "models/dense.hpp"
#include "pretrain/feature_source.hpp"
#include "pretrain/model_factory.hpp"
#include "tests/support/feature_checkpoint.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/staged_configs.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

using foxhunt::test::bytes_of;

constexpr const char* kFinetune = "mode = \"finetune\"\nlr_scale = 0.5\n";

// Whether every parameter of arena file `a` (Adam's moments aside) is in `b` with the same bytes.
bool same_weights(const fs::path& a, const fs::path& b) {
  const std::vector<std::byte> ab = gpu::read_file_bytes(a), bb = gpu::read_file_bytes(b);
  const gpu::SafetensorsFile fa = gpu::parse_safetensors(ab, a.string()), fb = gpu::parse_safetensors(bb, b.string());
  bool any = false;
  for (const gpu::SafetensorsEntry& e : fa.entries) {
    if (e.name.starts_with("adam_m.") || e.name.starts_with("adam_v.")) continue;
    const gpu::SafetensorsEntry* o = fb.find(e.name);
    EXPECT_NE(o, nullptr) << e.name << " of " << a << " is not in " << b;
    if (o == nullptr) return false;
    const auto x = fa.bytes(e), y = fb.bytes(*o);
    if (x.size() != y.size() || !std::equal(x.begin(), x.end(), y.begin())) return false;
    any = true;
  }
  EXPECT_TRUE(any) << a << " holds no parameters";
  return any;
}

class PpoActorsFeatures : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    dir_ = fs::temp_directory_path() / ("foxhunt_ppo_actors_features_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
    test::GpuTest::TearDown();
  }

  // A 30-step pretraining of a small LSTM regime classifier on configs/markets/regime2.toml (its
  // final checkpoint, at dir_/pre).
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

  // The run config text: PPO on regime2 (16 envs x 32 steps an iteration) with [features] from
  // dir_/pre and the extra `features` lines; pipeline.mode `mode` ("actors": with policy_lag `lag`);
  // `distributed`: a [distributed] table's lines (none: placement "all").
  std::string run_text(std::int64_t total, const std::string& mode, int lag, const std::string& features,
                       const std::string& distributed = "") const {
    std::ostringstream t;
    t << "[run]\nseed = 4\ntotal_env_steps = " << total << "\n[env]\nkind = \"market\"\nnum_envs = 16\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\n"
      << "[learner]\nkind = \"ppo\"\nrollout_steps = 32\nminibatches = 4\nhidden = [32, 32]\nlr = 0.001\nlr_end = 0.001\n"
      << "[features]\ncheckpoint = \"pre\"\n" << features << "[pipeline]\nmode = \"" << mode << "\"\n";
    if (mode == "actors") t << "policy_lag = " << lag << "\n";
    t << "[checkpoint]\nevery_env_steps = 0\n[logging]\ntimeline = false\ntensorboard = false\n"
      << "progress_interval_ms = 100\n";
    if (!distributed.empty()) t << "[distributed]\n" << distributed;
    return t.str();
  }

  // A `foxhunt train` run named `name`; its final checkpoint (empty on failure).
  fs::path train(const std::string& name, const std::string& text, const std::optional<fs::path>& resume = {}) {
    std::ofstream(dir_ / (name + ".toml")) << text;
    TrainRequest req;
    req.config = load_run_config(dir_ / (name + ".toml"));
    req.run_dir = dir_ / name;
    req.resume = resume;
    req.console = false;
    const TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    return out.result.final_checkpoint.value_or(fs::path());
  }

  // The problems check_checkpoint finds in `ckpt` for the run config `text` with room left to train.
  std::vector<std::string> problems(const std::string& text, const fs::path& ckpt) {
    std::ofstream(dir_ / "check.toml") << text;
    RunConfig c = load_run_config(dir_ / "check.toml");
    c.run.total_env_steps *= 4;
    return check_checkpoint(c, ckpt);
  }

  // Placement "split" with the collector on `collector_device` against "all" (below).
  void expect_split_equals_all(int collector_device);

  fs::path dir_;
};

TEST_F(PpoActorsFeatures, LagZeroEqualsTheSynchronousLoop) {
  SCOPED_TRACE(seed_note());
  ASSERT_FALSE(pretrain_run().empty());
  constexpr std::int64_t kSteps = 16 * 32 * 4;  // 4 iterations
  for (const bool finetune : {false, true}) {
    SCOPED_TRACE(finetune ? "finetune" : "frozen");
    const std::string tag = finetune ? "tuned_" : "frozen_";
    const std::string features = finetune ? kFinetune : "";
    const fs::path sync = train(tag + "sync", run_text(kSteps, "sync", 0, features));
    const std::string actors_text = run_text(kSteps, "actors", 0, features);
    const fs::path actors = train(tag + "actors", actors_text);
    ASSERT_FALSE(sync.empty());
    ASSERT_FALSE(actors.empty());
    // The actors' checkpoint has every array the configuration declares (the extractor's
    // per-environment state in ppo.state when frozen, features.safetensors when fine-tuned).
    for (const std::string& p : problems(actors_text, actors)) ADD_FAILURE() << p;
    std::vector<std::string> files{"learner.safetensors", "ppo.state", "env.state"};
    if (finetune) files.emplace_back("features.safetensors");
    for (const std::string& f : files) {
      SCOPED_TRACE(f);
      const auto a = bytes_of(sync / f), b = bytes_of(actors / f);
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == b) << "the actors' lag-0 run differs from the synchronous loop";
    }
    if (finetune) EXPECT_TRUE(fs::exists(actors / "policy.features.safetensors"));
  }
}

TEST_F(PpoActorsFeatures, ResumeContinuesBitExactly) {
  SCOPED_TRACE(seed_note());
  ASSERT_FALSE(pretrain_run().empty());
  constexpr std::int64_t kN = 16 * 32 * 3;  // 3 iterations
  for (const bool finetune : {false, true}) {
    for (const int lag : {0, 1}) {
      SCOPED_TRACE(std::string(finetune ? "finetune" : "frozen") + ", policy_lag " + std::to_string(lag));
      const std::string tag = std::string(finetune ? "tuned" : "frozen") + std::to_string(lag) + "_";
      const std::string features = finetune ? kFinetune : "";
      const fs::path half = train(tag + "half", run_text(kN, "actors", lag, features));
      ASSERT_FALSE(half.empty());
      const fs::path resumed = train(tag + "resumed", run_text(2 * kN, "actors", lag, features), half);
      const fs::path whole = train(tag + "whole", run_text(2 * kN, "actors", lag, features));
      // A second uninterrupted run tells a resume defect apart from a run that is not deterministic.
      const fs::path again = train(tag + "again", run_text(2 * kN, "actors", lag, features));
      std::vector<std::string> files{"learner.safetensors", "ppo.state", "env.state", "policy.safetensors",
                                     "counters.json"};
      if (finetune) {
        files.emplace_back("features.safetensors");
        files.emplace_back("policy.features.safetensors");
      }
      for (const std::string& f : files) {
        SCOPED_TRACE(f);
        const auto a = bytes_of(resumed / f), b = bytes_of(whole / f), c = bytes_of(again / f);
        ASSERT_FALSE(a.empty());
        EXPECT_TRUE(b == c) << "two uninterrupted runs differ (the run is not deterministic)";
        EXPECT_TRUE(a == b) << "the resumed run differs from the uninterrupted one";
        if (f != "counters.json") EXPECT_FALSE(bytes_of(half / f) == b) << "nothing changed after the resume";
      }
      // The collector ends holding the version due next: the learner's weights at lag 0, one update
      // behind at lag 1, the extractor's copy swapped with the network's.
      EXPECT_EQ(same_weights(whole / "policy.safetensors", whole / "learner.safetensors"), lag == 0);
      if (finetune)
        EXPECT_EQ(same_weights(whole / "policy.features.safetensors", whole / "features.safetensors"), lag == 0);
    }
  }
}

TEST_F(PpoActorsFeatures, ShippedRegimeConfigTrainsThroughTheActors) {
  SCOPED_TRACE(seed_note());
  const fs::path configs = test::stage_shipped_configs(dir_ / "shipped");
  // The stand-in pretrain run gets weights of the declared shapes (random), so the device loads it.
  const fs::path pre = dir_ / "shipped" / "runs" / "regime-lstm";
  const pretrain::FeatureSource src = pretrain::load_feature_source(pre);
  test::write_initialized_feature_weights(pre, src, seed_, stream());
  const fs::path file = configs / "ppo_features_regime.toml";
  std::ofstream(file, std::ios::app) << "\n[pipeline]\nmode = \"actors\"\npolicy_lag = 1\n";
  TrainRequest req;
  req.config = load_run_config(file);
  ASSERT_EQ(req.config.pipeline.mode, "actors");
  ASSERT_EQ(req.config.features.mode, "frozen");
  const std::int64_t rows = req.config.env.num_envs * req.config.learner.rollout_steps;
  req.config.run.total_env_steps = 2 * rows;
  req.config.logging.timeline = false;
  req.config.logging.tensorboard = false;
  req.run_dir = dir_ / "run";
  req.console = false;
  const TrainOutcome out = run_training(req);
  ASSERT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << out.result.outcome.reason;
  ASSERT_TRUE(out.result.final_checkpoint.has_value()) << out.result.checkpoint_error;
  EXPECT_EQ(out.result.counters.env_steps, 2 * rows);
  const fs::path ckpt = *out.result.final_checkpoint;
  EXPECT_TRUE(fs::exists(ckpt / "features" / "model.safetensors"));
  RunConfig more = req.config;
  more.run.total_env_steps = 4 * rows;
  for (const std::string& p : check_checkpoint(more, ckpt)) ADD_FAILURE() << p;
}

// Placement "split" against "all": every checkpoint file byte for byte, frozen and fine-tuned.
void PpoActorsFeatures::expect_split_equals_all(int collector_device) {
  ASSERT_FALSE(pretrain_run().empty());
  constexpr std::int64_t kSteps = 16 * 32 * 3;  // 3 iterations
  const std::string split = "placement = \"split\"\ncollector_device = " + std::to_string(collector_device) + "\n";
  for (const bool finetune : {false, true}) {
    SCOPED_TRACE(finetune ? "finetune" : "frozen");
    const std::string tag = std::string(finetune ? "tuned" : "frozen") + "_d" + std::to_string(collector_device) + "_";
    const std::string features = finetune ? kFinetune : "";
    const fs::path all = train(tag + "all", run_text(kSteps, "actors", 1, features));
    const fs::path s = train(tag + "split", run_text(kSteps, "actors", 1, features, split));
    ASSERT_FALSE(all.empty());
    ASSERT_FALSE(s.empty());
    std::vector<std::string> files{"learner.safetensors", "ppo.state", "env.state", "policy.safetensors",
                                   "counters.json"};
    if (finetune) {
      files.emplace_back("features.safetensors");
      files.emplace_back("policy.features.safetensors");
    }
    for (const std::string& f : files) {
      SCOPED_TRACE(f);
      const auto a = bytes_of(all / f), b = bytes_of(s / f);
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == b) << "the split run differs from the \"all\" run";
    }
  }
}

TEST_F(PpoActorsFeatures, SplitPlacementEqualsAll) {
  SCOPED_TRACE(seed_note());
  expect_split_equals_all(0);
}

TEST_F(PpoActorsFeatures, SplitAcrossTwoGpusEqualsOneGpu) {
  if (gpu::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  SCOPED_TRACE(seed_note());
  expect_split_equals_all(1);
}

}  // namespace
