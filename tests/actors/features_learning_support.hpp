#pragma once
// Shared by the learning suites of [features] (issue 20: gpu_features_learning_test.cu,
// gpu_feature_families_learning_test.cu, gpu_features_finetune_learning_test.cu): the two-regime
// market they all learn on, the in-process `foxhunt pretrain` of a family's regime classifier, a
// `foxhunt train` run of DQN or PPO with or without [features], `foxhunt eval` on fresh paths, and
// the per-episode Sharpe columns of the report.
//
// The market: configs/markets/regime2.toml's regimes (volatility 10% / 30%, 0.98 persistence,
// about 50 steps a regime), with the drifts at 3x each regime's volatility (+30% calm, -90%
// turbulent: an annualized Sharpe of 3 long in calm and short in turbulence, so the regime
// oracle's is clearly positive and the profitable position flips with the hidden regime). The
// observation's return window is a parameter: 1 return (the agent without features sees the newest
// return alone; the Bayes rule on one return classifies about 74% right, the HMM filter over the
// history ~95%) unless a suite needs the history in the observation itself (fine-tuning).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "actors/evaluate.hpp"
#include "actors/pretrain_run.hpp"
#include "actors/train_run.hpp"
#include "report/stats.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::actors::features_learning {

namespace fs = std::filesystem;

constexpr std::int64_t kEvalEpisodes = 4096;  // fresh paths per evaluation: the paired interval is ~+-0.02 Sharpe
constexpr std::int64_t kDqnSteps = 2'000'000;
constexpr std::int64_t kPpoSteps = 4'000'000;
// A diffusion model's features read exactly the windows it trained on: the market's window.
constexpr int kDiffusionWindow = 16;

// The market file's text with an observation window of `window` returns.
inline std::string regime_market_toml(int window) {
  std::ostringstream t;
  t << "[market]\nassets = 1\ndt = 0.003968253968253968\nepisode_length = 256\nwindow = " << window
    << "\ninitial_cash = 1_000_000.0\n\n"
    << "[process]\nkind = \"gbm\"\ninitial_price = 100.0\n\n"
    << "[process.regimes]\ntransition = [[0.98, 0.02], [0.02, 0.98]]\nmu = [[0.30], [-0.90]]\n"
    << "sigma = [[0.10], [0.30]]\n\n"
    << "[execution]\nfee_bps = 1.0\nhalf_spread_bps = 1.0\nposition_limit = 1.0\nleverage_cap = 1.0\n\n"
    << "[action]\nkind = \"discrete\"\nlevels = [-1.0, 0.0, 1.0]\n\n"
    << "[reward]\nkind = \"log_return\"\nscale = 100.0\n";
  return t.str();
}

// The [model] table of `kind`'s regime classifier at width 32: trainer_learning_test's regime
// recipe (the shipped configs/pretrain/<kind>_regime.toml structure), which reaches >= 90% of the
// HMM filter's accuracy above chance on regime2 for every family.
inline std::string regime_model_toml(const std::string& kind) {
  std::ostringstream m;
  m << "[model]\nkind = \"" << kind << "\"\nhidden = 32\n";
  if (kind == "mamba2") {
    m << "layers = 1\nd_state = 16\nhead_dim = 8\nexpand = 2\nconv_kernel = 4\nchunk = 64\n";
  } else if (kind == "xlstm") {
    m << "layers = 2\nblocks = \"ms\"\nheads = 2\nchunk = 64\nproj_factor = 2\nconv_kernel = 4\n";
  } else if (kind == "cfc") {
    m << "layers = 1\nbackbone_units = 64\nbackbone_layers = 1\nactivation = \"lecun_tanh\"\nmode = \"default\"\n";
  } else if (kind == "tft") {
    m << "layers = 1\nheads = 4\n";
  } else if (kind == "kan") {  // one KAN layer reading the whole 64-return window
    m << "layers = 1\ngrid = 8\norder = 3\nlags = 64\ngrid_min = -4.0\ngrid_max = 4.0\n";
  } else if (kind == "diffusion") {  // configs/pretrain/diffusion_regime.toml's denoiser at width 32
    m << "layers = 2\nexpand = 2\nembed = 32\ndiffusion_steps = 1000\nschedule = \"linear\"\n"
      << "sampler = \"ddim\"\nsample_steps = 50\n";
  } else {
    m << "layers = 1\n";
  }
  return m.str();
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The per-episode Sharpe ratios of `policy`'s run in an eval report (cost multiplier 1).
inline std::vector<double> sharpe_of(const report::Report& rep, const std::string& policy) {
  const int col = report::column_index(rep, "sharpe");
  EXPECT_GE(col, 0) << "the report has no sharpe column";
  for (const report::PolicyRun& r : rep.runs)
    if (r.policy == policy && r.cost_multiplier == 1.0 && col >= 0 && static_cast<std::size_t>(col) < r.episodes.size())
      return r.episodes[static_cast<std::size_t>(col)];
  ADD_FAILURE() << "the report has no run of " << policy;
  return {};
}

inline double mean(const std::vector<double>& v) { return report::mean_defined(v); }

// The mean of a - b per episode (same paths) with its 95% percentile-bootstrap interval.
inline report::Interval paired_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  std::vector<double> diff(std::min(a.size(), b.size()));
  for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = a[i] - b[i];
  return report::bootstrap_mean(diff);
}

// How an agent is trained.
struct TrainSpec {
  std::string learner = "dqn";  // "dqn" or "ppo"
  std::uint64_t seed = 1;
  int window = 1;                    // the market's observation window
  fs::path features;                 // the pretrain checkpoint (empty: no [features])
  std::string output = "embedding";  // features.output
  std::string mode = "frozen";       // features.mode
  double lr_scale = 1.0;             // features.lr_scale (finetune)
  std::int64_t env_steps = 0;        // run.total_env_steps (0: the recipe's, kDqnSteps or kPpoSteps)
};

// One folder per suite (removed at its end); pretrained checkpoints are shared by a suite's tests.
class FeaturesLearningFixture : public test::GpuTest {
 protected:
  static void TearDownTestSuite() {
    std::error_code ec;
    if (!root().empty()) fs::remove_all(root(), ec);
    root().clear();
    pretrained().clear();
  }

  static fs::path& root() {
    static fs::path r;
    return r;
  }
  static std::map<std::pair<std::string, std::uint64_t>, fs::path>& pretrained() {
    static std::map<std::pair<std::string, std::uint64_t>, fs::path> m;
    return m;
  }
  // The market file with an observation window of `window` returns (written at the first request).
  static fs::path market_file(int window) {
    const fs::path f = root() / ("regime_market_w" + std::to_string(window) + ".toml");
    if (!fs::exists(f)) std::ofstream(f) << regime_market_toml(window);
    return f;
  }

  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    if (root().empty()) {
      root() = fs::temp_directory_path() / ("foxhunt_features_learning_" + std::to_string(::getpid()));
      fs::remove_all(root());
      fs::create_directories(root());
    }
  }

  // The pretrained regime classifier of `kind` and `seed` (its final checkpoint): 1024 windows of
  // 64 returns of the 1-return market (the pretraining reads data.window, and [features] checks the
  // assets and the return normalization only, so it serves every window of the market), 3000 steps;
  // its accuracy is printed beside the HMM filter's. A diffusion model is a DDPM over the
  // kDiffusionWindow-return market's windows (its features read exactly those); its validation
  // loss is printed. Trained at the first request.
  fs::path pretrain(const std::string& kind, std::uint64_t seed) {
    if (auto it = pretrained().find({kind, seed}); it != pretrained().end()) return it->second;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string name = "pre_" + kind + std::to_string(seed);
    const bool diffusion = kind == "diffusion";
    std::ostringstream t;
    t << regime_model_toml(kind) << "[data]\nsource = \"market\"\nmarket = \""
      << market_file(diffusion ? kDiffusionWindow : 1).string() << "\"\nwindow = "
      << (diffusion ? kDiffusionWindow : 64) << "\n"
      << "[task]\nkind = \"" << (diffusion ? "generate" : "regime") << "\"\n"
      << "[optim]\nlr = 0.003\nweight_decay = 0.0\nwarmup_steps = 100\ndecay = \"cosine\"\ngrad_clip = 1.0\n"
      << "batch = 1024\nsteps = 3000\n"
      << "[run]\nseed = " << seed << "\neval_every = 3000\neval_windows = 65536\nlog_every = 500\n"
      << "tensorboard = false\n";
    std::ofstream(root() / (name + ".toml")) << t.str();
    PretrainRequest req;
    req.config = pretrain::load_pretrain_config(root() / (name + ".toml"));
    req.run_dir = root() / name;
    req.console = false;
    const PretrainOutcome out = run_pretraining(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << out.result.checkpoint_error;
    if (out.last_eval && diffusion) {
      // A denoiser that learned nothing predicts zero noise: validation loss 1.
      std::printf("pretrain diffusion seed %llu: epsilon-prediction loss %.4f (1 for a zero predictor), %.1f s\n",
                  static_cast<unsigned long long>(seed), out.last_eval->loss, seconds_since(t0));
      std::fflush(stdout);
      EXPECT_LT(out.last_eval->loss, 0.9) << "seed " << seed << ": the pretrained denoiser learned little";
    } else if (out.last_eval) {
      const pretrain::EvalMetrics& m = *out.last_eval;
      const double ratio = (m.accuracy - 0.5) / (m.baseline_accuracy - 0.5);
      std::printf("pretrain %s seed %llu: accuracy %.4f, HMM filter %.4f (above chance: ratio %.3f), %.1f s\n",
                  kind.c_str(), static_cast<unsigned long long>(seed), m.accuracy, m.baseline_accuracy, ratio,
                  seconds_since(t0));
      std::fflush(stdout);
      // The recipe's bar on regime2 (trainer_learning_test); here the drifts add evidence.
      EXPECT_GE(ratio, 0.9) << kind << " seed " << seed << ": the pretrained regime model is short of the HMM filter";
    } else {
      ADD_FAILURE() << kind << " seed " << seed << ": the pretraining reported no validation";
    }
    const fs::path ckpt = out.result.final_checkpoint.value_or(fs::path());
    pretrained()[{kind, seed}] = ckpt;
    return ckpt;
  }

  // A `foxhunt train` run named `name` (its run directory under the suite's folder): the DQN
  // recipe of configs/dqn_features_regime.toml (2M env steps) or the PPO recipe of
  // configs/ppo_features_regime.toml (4M env steps, pipeline.mode = "sync"), [features] with
  // output = "embedding" when spec.features is set. Returns the final checkpoint.
  fs::path train(const std::string& name, const TrainSpec& spec) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool dqn = spec.learner == "dqn";
    std::ostringstream t;
    t << "[run]\nname = \"" << name << "\"\nseed = " << spec.seed
      << "\ntotal_env_steps = " << (spec.env_steps > 0 ? spec.env_steps : dqn ? kDqnSteps : kPpoSteps) << "\n"
      << "[env]\nkind = \"market\"\nmarket = \"" << market_file(spec.window).string() << "\"\nnum_envs = 256\n";
    if (dqn) {
      t << "steps_per_slot = 1\n"
        << "[replay]\ncapacity = 1000000\nbatch_size = 256\nn_step = 3\ngamma = 0.99\n"
        << "[learner]\nkind = \"dqn\"\nhidden = [256, 256]\nlr = 0.0003\ndueling = true\ntarget = \"polyak\"\n"
        << "tau = 0.005\nepsilon_decay_steps = 500000\n"
        << "[pipeline]\nreplay_ratio = 0.0625\nlearning_starts = 10000\nsync_every = 1\n"
        << "[checkpoint]\nevery_env_steps = 0\nreplay = \"never\"\n";
    } else {
      t << "[learner]\nkind = \"ppo\"\nrollout_steps = 64\nepochs = 4\nminibatches = 8\nhidden = [64, 64]\n"
        << "lr = 0.0003\nent_coef = 0.01\n"
        << "[checkpoint]\nevery_env_steps = 0\n";
    }
    if (!spec.features.empty()) {
      t << "[features]\ncheckpoint = \"" << spec.features.string() << "\"\nmode = \"" << spec.mode
        << "\"\noutput = \"" << spec.output << "\"\n";
      if (spec.mode == "finetune") t << "lr_scale = " << spec.lr_scale << "\n";
    }
    t << "[logging]\ntimeline = false\ntensorboard = false\n";
    std::ofstream(root() / (name + ".toml")) << t.str();
    TrainRequest req;
    req.config = load_run_config(root() / (name + ".toml"));
    req.run_dir = root() / name;
    req.console = false;
    const TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    std::printf("  %s: %lld env steps, %lld updates, %.1f s\n", name.c_str(),
                static_cast<long long>(out.result.counters.env_steps),
                static_cast<long long>(out.result.counters.updates), seconds_since(t0));
    std::fflush(stdout);
    return out.result.final_checkpoint.value_or(fs::path());
  }

  // `foxhunt eval` of one checkpoint on kEvalEpisodes fresh episodes from `eval_seed` (the table
  // is printed).
  static report::Report evaluate_on(const fs::path& checkpoint, std::uint64_t eval_seed) {
    EvalRequest req;
    req.checkpoints = {checkpoint};
    req.episodes = kEvalEpisodes;
    req.seed = eval_seed;
    const EvalReport r = evaluate(plan_eval(req));
    std::printf("%s", format_eval_table(r).c_str());
    return r.report;
  }
};

}  // namespace foxhunt::actors::features_learning
