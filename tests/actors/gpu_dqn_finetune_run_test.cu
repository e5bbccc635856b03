// DQN agents with a fine-tuned feature extractor ([features] mode = "finetune") through `foxhunt
// train`'s actors (actors/dqn_stages.hpp): a short deterministic run of a Rainbow-style agent
// (C51 + noisy + dueling + double, 3-step, prioritized) on the two-regime market, and of a BDQ
// agent (two assets: two action branches) on a two-asset version of it:
//   - the run completes with finite learner metrics and no skipped update; the learner's extractor
//     moved away from the pretrained weights, and the collector acts with a published copy of it
//     (not the pretrained weights either);
//   - every final checkpoint carries the learner's extractor with its Adam moments
//     (learner.features.safetensors) and the collector's acting copy
//     (collector.features.safetensors); a stopped and resumed run ends bitwise equal to the
//     uninterrupted one;
//   - `foxhunt eval` acts through the fine-tuned extractor, and refuses a checkpoint without it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/dqn_stages.hpp"
#include "actors/evaluate.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/stage_factory.hpp"
#include "actors/train_run.hpp"
#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "pretrain/model_factory.hpp"
#include "pretrain/window_feature_extractor.hpp"
#include "rl/envs/market.hpp"
#include "tests/support/feature_checkpoint.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

// configs/markets/regime2.toml with `assets` assets (the same regime chain drives both) and an
// observation window of 16 returns.
std::string regime_market(int assets) {
  auto row = [&](double v) {
    std::ostringstream r;
    r << "[";
    for (int a = 0; a < assets; ++a) r << (a ? ", " : "") << v;
    r << "]";
    return r.str();
  };
  std::ostringstream t;
  t << "[market]\nassets = " << assets << "\ndt = 0.003968253968253968\nepisode_length = 256\nwindow = 16\n"
    << "initial_cash = 1000000.0\n[process]\nkind = \"gbm\"\ninitial_price = 100.0\n[process.regimes]\n"
    << "transition = [[0.98, 0.02], [0.02, 0.98]]\nmu = [" << row(0.10) << ", " << row(-0.30) << "]\n"
    << "sigma = [" << row(0.10) << ", " << row(0.30) << "]\n"
    << "[execution]\nfee_bps = 1.0\nhalf_spread_bps = 1.0\nposition_limit = " << (assets > 1 ? 0.5 : 1.0)
    << "\nleverage_cap = 1.0\n[action]\nkind = \"discrete\"\nlevels = [-1.0, 0.0, 1.0]\n"
    << "[reward]\nkind = \"log_return\"\nscale = 100.0\n";
  return t.str();
}

struct Agent {
  const char* name;
  int assets;
  const char* learner;  // the [learner] keys beyond kind and hidden
};

const Agent kAgents[] = {
    {"Rainbow", 1, "dueling = true\ndouble_dqn = true\nnoisy = true\natoms = 51\nv_min = -10.0\nv_max = 10.0\n"},
    {"Bdq", 2, "dueling = true\ndouble_dqn = true\n"},
};

class DqnFinetuneRun : public test::GpuTest, public ::testing::WithParamInterface<Agent> {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    root_ = fs::temp_directory_path() / ("foxhunt_dqn_finetune_run_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(root_);
    fs::create_directories(root_ / "pre");
    std::ofstream(root_ / "market.toml") << regime_market(GetParam().assets);
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
    test::GpuTest::TearDown();
  }
  // An LSTM regime checkpoint on root_/market.toml with random weights, as `foxhunt pretrain`
  // writes one (root_/pre).
  pretrain::FeatureSource checkpoint() {
    const fs::path dir = root_ / "pre";
    std::ostringstream t;
    t << "[model]\nkind = \"lstm\"\nhidden = 8\n[data]\nsource = \"market\"\nmarket = \""
      << (root_ / "market.toml").string() << "\"\nwindow = 16\n[task]\nkind = \"regime\"\n";
    return test::write_feature_checkpoint(dir, t.str(), seed_, stream());
  }
  // A deterministic run of the agent on root_/market.toml, 16 envs, fine-tuning root_/pre at
  // lr_scale 0.5.
  TrainOutcome train(const std::string& name, std::int64_t total, const std::optional<fs::path>& resume = {}) {
    std::ostringstream t;
    t << "[run]\nseed = 4\ndeterministic = true\ntotal_env_steps = " << total
      << "\n[env]\nkind = \"market\"\nnum_envs = 16\nmarket = \"market.toml\"\n"
      << "[replay]\ncapacity = 16384\nbatch_size = 64\nn_step = 3\nprioritized = true\nbeta = 0.5\nbeta_final = 0.5\n"
      << "[learner]\nkind = \"dqn\"\nhidden = [32, 32]\nlr = 0.0005\n"
      << GetParam().learner << "target = \"polyak\"\ntau = 0.01\nepsilon_decay_steps = 4000\n"
      << "[features]\ncheckpoint = \"pre\"\nmode = \"finetune\"\nlr_scale = 0.5\n"
      << "[pipeline]\nreplay_ratio = 0.125\nlearning_starts = 1024\nsync_every = 2\nslots = 2\nbatches = 2\n"
      << "[checkpoint]\nevery_env_steps = 0\nreplay = \"final\"\n"
      << "[logging]\ntimeline = false\ntensorboard = false\nprogress_interval_ms = 100\n";
    std::ofstream(root_ / (name + ".toml")) << t.str();
    TrainRequest req;
    req.config = load_run_config(root_ / (name + ".toml"));
    req.run_dir = root_ / name;
    req.resume = resume;
    req.console = false;
    TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    return out;
  }
  fs::path root_;
};

std::vector<float> params_of(gpu::ParameterArena& a, cudaStream_t s) {
  return test::download(a.params(), static_cast<std::size_t>(a.padded_count()), s);
}

TEST_P(DqnFinetuneRun, TrainsTheExtractorResumesBitwiseAndEvaluates) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  constexpr std::int64_t kN = 16 * 256;
  const TrainOutcome half = train("half", kN);
  ASSERT_TRUE(half.result.final_checkpoint);
  const fs::path ckpt = *half.result.final_checkpoint;
  EXPECT_GT(half.result.counters.updates, 0);
  const std::string learner_features = std::string("learner") + rl::DqnLearner::kFeaturesSuffix;
  EXPECT_TRUE(fs::exists(ckpt / learner_features));
  EXPECT_TRUE(fs::exists(ckpt / DqnCollectorStage::kTunedFeaturesFile));

  const TrainOutcome resumed = train("resumed", 2 * kN, ckpt);
  const TrainOutcome whole = train("whole", 2 * kN);
  ASSERT_TRUE(resumed.result.final_checkpoint && whole.result.final_checkpoint);
  EXPECT_EQ(resumed.result.counters.updates, whole.result.counters.updates);
  for (const std::string f :
       {std::string("learner.online.safetensors"), std::string("learner.state.bin"), learner_features,
        std::string(DqnCollectorStage::kTunedFeaturesFile), std::string("collector.env.bin"),
        std::string("collector.obs.bin"), std::string(GpuReplayStage::kCheckpointFile)}) {
    EXPECT_EQ(test::differing_bytes(*resumed.result.final_checkpoint / f, *whole.result.final_checkpoint / f), 0)
        << f << " differs between the resumed and the uninterrupted run";
    EXPECT_GT(test::differing_bytes(ckpt / f, *whole.result.final_checkpoint / f), 0) << f << ": nothing changed";
  }

  // Finite metrics, no skipped update; both extractors moved away from the pretrained weights.
  auto learner = std::dynamic_pointer_cast<DqnLearnerStage>(whole.stages.learner);
  auto collector = std::dynamic_pointer_cast<DqnCollectorStage>(whole.stages.collector);
  ASSERT_NE(learner, nullptr);
  ASSERT_NE(collector, nullptr);
  rl::DqnState st{};
  FH_CHECK(cudaMemcpy(&st, learner->learner().state(), sizeof st, cudaMemcpyDeviceToHost));
  EXPECT_GT(st.updates_applied, 0);
  EXPECT_EQ(st.skips_total, 0u);
  EXPECT_EQ(st.params_nonfinite, 0u);
  EXPECT_TRUE(std::isfinite(st.loss) && std::isfinite(st.grad_norm) && std::isfinite(st.q_mean))
      << "loss " << st.loss << ", grad norm " << st.grad_norm << ", q_mean " << st.q_mean;
  ASSERT_NE(learner->learner().features(), nullptr);
  ASSERT_NE(collector->tuned_features(), nullptr);
  rl::MarketConfig mc = src.market;
  mc.window = 16;
  mc.extra_features = static_cast<int>(src.embedding);
  pretrain::WindowFeatureExtractor fresh(src, pretrain::FeatureOutput::embedding, mc, 1, 1, stream());
  const auto pretrained = params_of(fresh.arena(), stream());
  const auto tuned = params_of(learner->learner().features()->arena(), learner->stream());
  const auto acting = params_of(collector->tuned_features()->arena(), collector->stream());
  ASSERT_EQ(tuned.size(), pretrained.size());
  ASSERT_EQ(acting.size(), pretrained.size());
  for (float v : tuned) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(std::memcmp(tuned.data(), pretrained.data(), tuned.size() * sizeof(float)), 0)
      << "training left the learner's extractor at the pretrained weights";
  EXPECT_NE(std::memcmp(acting.data(), pretrained.data(), acting.size() * sizeof(float)), 0)
      << "the collector still acts with the pretrained extractor";

  EvalRequest ereq;
  ereq.checkpoints = {*whole.result.final_checkpoint};
  ereq.episodes = 32;
  const EvalReport report = evaluate(plan_eval(ereq));
  bool greedy = false;
  for (const EvalRow& r : report.rows)
    if (r.policy == "greedy") {
      greedy = true;
      EXPECT_EQ(r.stats.episodes, 32.0);
      EXPECT_TRUE(std::isfinite(r.stats.mean_sharpe));
    }
  EXPECT_TRUE(greedy);
  std::printf("%s", format_eval_table(report).c_str());

  // Without its fine-tuned extractor the checkpoint is refused, naming the file.
  fs::remove(*whole.result.final_checkpoint / learner_features);
  try {
    evaluate(plan_eval(ereq));
    FAIL() << "a checkpoint without its fine-tuned extractor was evaluated";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(learner_features), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Agents, DqnFinetuneRun, ::testing::ValuesIn(kAgents),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
