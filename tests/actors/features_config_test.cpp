// [features] in a run config (actors/run_config.hpp, pretrain/feature_source.hpp), on the host: a
// pretrain checkpoint is resolved against the config's folder (a checkpoint or its run directory),
// read, and checked against the environment's observation; the market's extra block takes the
// chosen output's width; the kept configuration carries the extractor. Every refusal names its
// key (and, for a mismatch, both sides).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "actors/env_shape.hpp"
#include "actors/ppo_run.hpp"
#include "actors/run_config.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

// A two-regime GBM market of `assets` assets with volatilities sigma (calm) and 3 sigma.
std::string market_text(int assets, double sigma, int extra_features = 0) {
  std::ostringstream m;
  auto row = [&](double v) {
    std::ostringstream r;
    r << "[";
    for (int a = 0; a < assets; ++a) r << (a ? ", " : "") << v;
    r << "]";
    return r.str();
  };
  m << "[market]\nassets = " << assets << "\nwindow = 16\nepisode_length = 64\nextra_features = " << extra_features
    << "\n[process]\nkind = \"gbm\"\ninitial_price = 100.0\n[process.regimes]\n"
    << "transition = [[0.98, 0.02], [0.02, 0.98]]\nmu = [" << row(0.1) << ", " << row(-0.3) << "]\nsigma = ["
    << row(sigma) << ", " << row(3 * sigma) << "]\n[action]\nkind = \"discrete\"\nlevels = [-1.0, 0.0, 1.0]\n";
  return m.str();
}

class FeaturesConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("foxhunt_features_config_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    // A pretrain run directory: runs/pre/checkpoints/step_1 (latest), as `foxhunt pretrain` keeps it.
    ckpt_ = root_ / "runs" / "pre" / "checkpoints" / "step_000000000001";
    fs::create_directories(ckpt_);
    write(ckpt_ / "market.resolved.toml", market_text(1, 0.1));
    write(ckpt_ / "config.resolved.toml",
          "[model]\nkind = \"lstm\"\nhidden = 24\n[data]\nsource = \"market\"\nmarket = \"market.resolved.toml\"\n"
          "window = 16\n[task]\nkind = \"regime\"\n");
    write(ckpt_ / "model.safetensors", "weights");
    write(ckpt_ / "counters.json", "{\"env_steps\": 1, \"updates\": 1}\n");
    write(root_ / "runs" / "pre" / "checkpoints" / "latest", "step_000000000001\n");
    write(root_ / "m.toml", market_text(1, 0.1));
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  static void write(const fs::path& f, const std::string& text) { std::ofstream(f) << text; }

  // A PPO market run config with the given [features] lines (and extra lines elsewhere).
  RunConfig load(const std::string& features, const std::string& learner = "kind = \"ppo\"\nrollout_steps = 16\n",
                 const std::string& market = "m.toml") {
    std::ostringstream t;
    t << "[run]\ntotal_env_steps = 100000\n[env]\nkind = \"market\"\nnum_envs = 8\nmarket = \"" << market
      << "\"\n[learner]\n" << learner << "[features]\n" << features;
    write(root_ / "run.toml", t.str());
    return load_run_config(root_ / "run.toml");
  }
  // The message of the refusal of `features` (empty when accepted).
  std::string refusal(const std::string& features, const std::string& learner = "kind = \"ppo\"\nrollout_steps = 16\n",
                      const std::string& market = "m.toml") {
    try {
      load(features, learner, market);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return {};
  }
  fs::path root_, ckpt_;
};

TEST_F(FeaturesConfigTest, ResolvesTheCheckpointAndSizesTheFeatureBlock) {
  const RunConfig c = load("checkpoint = \"runs/pre\"\n");  // a run directory: its latest checkpoint
  EXPECT_EQ(fs::path(c.features.checkpoint), ckpt_);
  EXPECT_EQ(c.features.mode, "frozen");
  EXPECT_EQ(c.features.output, "embedding");
  EXPECT_TRUE(c.features.shared);
  EXPECT_EQ(market_config(c).extra_features, 24);  // model.hidden
  const RunConfig h = load("checkpoint = \"runs/pre/checkpoints/step_000000000001\"\noutput = \"head\"\n");
  EXPECT_EQ(market_config(h).extra_features, 2);  // the regime head: one logit per regime
  // The resolved config round-trips, and the kept files carry the extractor beside it.
  EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(c), "resolved")), resolved_toml(c));
  const auto kept = kept_config_files(c);
  std::map<std::string, std::string> files(kept.begin(), kept.end());
  ASSERT_TRUE(files.count("features/model.safetensors"));
  EXPECT_EQ(files["features/model.safetensors"], "weights");
  ASSERT_TRUE(files.count("features/config.resolved.toml"));
  ASSERT_TRUE(files.count("features/market.resolved.toml"));
  EXPECT_NE(files["config.resolved.toml"].find("checkpoint = \"features\""), std::string::npos);
  // Written out, the kept run config loads with the kept extractor.
  const fs::path kept_dir = root_ / "kept";
  for (const auto& [name, text] : kept) {
    fs::create_directories((kept_dir / name).parent_path());
    write(kept_dir / name, text);
  }
  const RunConfig back = load_run_config(kept_dir / "config.resolved.toml");
  EXPECT_EQ(fs::path(back.features.checkpoint), kept_dir / "features");
  EXPECT_EQ(market_config(back).extra_features, 24);
}

// DQN agents (Rainbow and BDQ among them) take frozen features in their collector: the market's
// extra block is the output's width, so the Q-network and replay see it as observation columns.
TEST_F(FeaturesConfigTest, DqnAgentsTakeFrozenFeatures) {
  const RunConfig c = load("checkpoint = \"runs/pre\"\n", "kind = \"dqn\"\n");
  EXPECT_EQ(c.learner.kind, "dqn");
  EXPECT_EQ(fs::path(c.features.checkpoint), ckpt_);
  EXPECT_EQ(market_config(c).extra_features, 24);
  const RunConfig h = load("checkpoint = \"runs/pre\"\noutput = \"head\"\n",
                           "kind = \"dqn\"\ndueling = true\nnoisy = true\natoms = 51\n");
  EXPECT_EQ(market_config(h).extra_features, 2);
  const auto kept = kept_config_files(c);
  std::map<std::string, std::string> files(kept.begin(), kept.end());
  EXPECT_TRUE(files.count("features/model.safetensors"));
  EXPECT_NE(files["config.resolved.toml"].find("checkpoint = \"features\""), std::string::npos);
}

// DQN agents fine-tune the extractor through the actors, every variant of the family: plain and
// double DQN, dueling, Rainbow (C51 + noisy + dueling + n-step). The market's extra block is the
// output's width, as when frozen.
TEST_F(FeaturesConfigTest, DqnAgentsAcceptFinetune) {
  const std::vector<std::pair<const char*, std::string>> learners = {
      {"plain", "kind = \"dqn\"\ndouble_dqn = false\n"},
      {"double", "kind = \"dqn\"\n"},
      {"dueling", "kind = \"dqn\"\ndueling = true\n"},
      {"rainbow", "kind = \"dqn\"\ndueling = true\nnoisy = true\natoms = 51\n"},
  };
  for (const auto& [name, learner] : learners) {
    SCOPED_TRACE(name);
    const RunConfig c = load("checkpoint = \"runs/pre\"\nmode = \"finetune\"\nlr_scale = 0.25\n", learner);
    EXPECT_EQ(c.learner.kind, "dqn");
    EXPECT_EQ(c.features.mode, "finetune");
    EXPECT_DOUBLE_EQ(c.features.lr_scale, 0.25);
    EXPECT_EQ(c.pipeline.mode, "actors");
    EXPECT_EQ(market_config(c).extra_features, 24);
    EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(c), "resolved")), resolved_toml(c));
  }
}

// PPO with pipeline.mode = "sync" fine-tunes the extractor at lr_scale times its learning rate
// (one shared by actor and critic, or one each).
TEST_F(FeaturesConfigTest, PpoSyncAcceptsFinetune) {
  const RunConfig c = load("checkpoint = \"runs/pre\"\nmode = \"finetune\"\nlr_scale = 0.1\n");
  EXPECT_EQ(c.features.mode, "finetune");
  EXPECT_DOUBLE_EQ(c.features.lr_scale, 0.1);
  EXPECT_EQ(c.pipeline.mode, "sync");
  EXPECT_EQ(market_config(c).extra_features, 24);
  EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(c), "resolved")), resolved_toml(c));
  EXPECT_DOUBLE_EQ(load("checkpoint = \"runs/pre\"\nmode = \"finetune\"\n").features.lr_scale, 1.0);
  // An LSTM policy too: the extractor runs in front of its trunk and LSTM.
  const RunConfig lstm = load("checkpoint = \"runs/pre\"\nmode = \"finetune\"\n",
                              "kind = \"ppo\"\nrollout_steps = 16\nlstm_hidden = 16\n");
  EXPECT_EQ(lstm.features.mode, "finetune");
  EXPECT_EQ(lstm.learner.lstm_hidden, 16);
  for (const bool shared_trunk : {false, true})
    EXPECT_EQ(refusal("checkpoint = \"runs/pre\"\nmode = \"finetune\"\n",
                      std::string("kind = \"ppo\"\nrollout_steps = 16\nlstm_hidden = 8\nhidden = []\nshared_trunk = ") +
                          (shared_trunk ? "true" : "false") + "\n"),
              "")
        << (shared_trunk ? "shared trunk" : "separate networks");
  // Separate extractors for actor and critic (separate networks), feed-forward or LSTM.
  for (const char* policy : {"", "lstm_hidden = 8\n"}) {
    const RunConfig sep = load("checkpoint = \"runs/pre\"\nmode = \"finetune\"\nshared = false\n",
                               std::string("kind = \"ppo\"\nrollout_steps = 16\n") + policy);
    EXPECT_FALSE(sep.features.shared);
    EXPECT_FALSE(sep.learner.shared_trunk);
    EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(sep), "resolved")), resolved_toml(sep));
  }
}

// PPO through the actors (pipeline.mode = "actors", either policy lag) runs the extractor frozen in
// its collector or fine-tuned in its learner, as the synchronous loop does.
TEST_F(FeaturesConfigTest, PpoActorsAcceptFrozenAndFinetune) {
  for (const std::string mode : {"frozen", "finetune"}) {
    for (const int lag : {0, 1}) {
      SCOPED_TRACE(mode + " lag " + std::to_string(lag));
      const RunConfig c = load("checkpoint = \"runs/pre\"\nmode = \"" + mode + "\"\n[pipeline]\nmode = \"actors\"\n" +
                               "policy_lag = " + std::to_string(lag) + "\n");
      EXPECT_EQ(c.pipeline.mode, "actors");
      EXPECT_EQ(c.pipeline.policy_lag, lag);
      EXPECT_EQ(c.features.mode, mode);
      EXPECT_EQ(fs::path(c.features.checkpoint), ckpt_);
      EXPECT_EQ(market_config(c).extra_features, 24);
      EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(c), "resolved")), resolved_toml(c));
    }
  }
}

TEST_F(FeaturesConfigTest, RefusesWhatItCannotRunNamingTheKeys) {
  struct Case {
    const char* name;
    std::string features, learner, market;
    std::vector<std::string> says;
  };
  write(root_ / "m2.toml", market_text(2, 0.1));
  write(root_ / "m_scale.toml", market_text(1, 0.2));
  write(root_ / "m_extra.toml", market_text(1, 0.1, 3));
  const std::string ppo = "kind = \"ppo\"\nrollout_steps = 16\n";
  const std::vector<Case> cases = {
      {"missing checkpoint", "checkpoint = \"nowhere\"\n", ppo, "m.toml", {"features.checkpoint", "nowhere"}},
      {"other assets", "checkpoint = \"runs/pre\"\n", ppo, "m2.toml", {"features.checkpoint", "1 asset", "has 2"}},
      {"other return scale", "checkpoint = \"runs/pre\"\n", ppo, "m_scale.toml", {"features.checkpoint", "normalized"}},
      {"separate extractors, shared trunk", "checkpoint = \"runs/pre\"\nmode = \"finetune\"\nshared = false\n",
       ppo + "shared_trunk = true\n", "m.toml", {"features.shared", "learner.shared_trunk"}},
      {"finetune lstm policy through the actors", "checkpoint = \"runs/pre\"\nmode = \"finetune\"\n",
       ppo + "lstm_hidden = 16\n[pipeline]\nmode = \"actors\"\n", "m.toml",
       {"features.mode", "learner.lstm_hidden", "not supported yet"}},
      {"separate extractors through the actors", "checkpoint = \"runs/pre\"\nmode = \"finetune\"\nshared = false\n",
       ppo + "[pipeline]\nmode = \"actors\"\n", "m.toml", {"features.shared", "pipeline.mode", "not supported yet"}},
      {"lr_scale when frozen", "checkpoint = \"runs/pre\"\nlr_scale = 0.5\n", ppo, "m.toml",
       {"features.lr_scale", "features.mode"}},
      {"lr_scale zero", "checkpoint = \"runs/pre\"\nmode = \"finetune\"\nlr_scale = 0.0\n", ppo, "m.toml",
       {"features.lr_scale"}},
      {"unknown mode", "checkpoint = \"runs/pre\"\nmode = \"thawed\"\n", ppo, "m.toml", {"features.mode", "frozen"}},
      {"unknown output", "checkpoint = \"runs/pre\"\noutput = \"forecast\"\n", ppo, "m.toml",
       {"features.output", "embedding", "head"}},
      {"separate extractors frozen", "checkpoint = \"runs/pre\"\nshared = false\n", ppo, "m.toml",
       {"features.shared", "features.mode"}},
      {"dqn finetune shared", "checkpoint = \"runs/pre\"\nmode = \"finetune\"\nshared = false\n", "kind = \"dqn\"\n",
       "m.toml", {"features.shared", "learner.kind"}},
      {"dqn finetune lr_scale zero", "checkpoint = \"runs/pre\"\nmode = \"finetune\"\nlr_scale = 0.0\n",
       "kind = \"dqn\"\n", "m.toml", {"features.lr_scale"}},
      {"dqn shared", "checkpoint = \"runs/pre\"\nshared = false\n", "kind = \"dqn\"\n", "m.toml",
       {"features.shared", "learner.kind"}},
      {"dqn other assets", "checkpoint = \"runs/pre\"\n", "kind = \"dqn\"\n", "m2.toml",
       {"features.checkpoint", "1 asset", "has 2"}},
      {"finetune lstm policy through the actors", "checkpoint = \"runs/pre\"\nmode = \"finetune\"\n",
       ppo + "lstm_hidden = 16\n[pipeline]\nmode = \"actors\"\n", "m.toml",
       {"features.mode", "learner.lstm_hidden", "not supported yet"}},
      {"options without a checkpoint", "mode = \"frozen\"\n", ppo, "m.toml", {"features.mode", "features.checkpoint"}},
      {"market with its own extra block", "checkpoint = \"runs/pre\"\n", ppo, "m_extra.toml",
       {"env.market", "extra_features"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    std::string learner = k.learner, features = k.features;
    // [pipeline] belongs after [features]: move it there.
    std::string tail;
    if (const auto p = learner.find("[pipeline]"); p != std::string::npos) {
      tail = learner.substr(p);
      learner = learner.substr(0, p);
    }
    const std::string why = refusal(features + tail, learner, k.market);
    ASSERT_FALSE(why.empty()) << "accepted";
    for (const auto& s : k.says) EXPECT_NE(why.find(s), std::string::npos) << "missing \"" << s << "\" in: " << why;
  }
}

// A diffusion checkpoint (runs/diff, beside the sequence model's): window 12 after a context of 4
// (16 returns, as the market's window), model.hidden 24, 50 diffusion steps.
class DiffusionFeaturesConfigTest : public FeaturesConfigTest {
 protected:
  void SetUp() override {
    FeaturesConfigTest::SetUp();
    diff_ = root_ / "runs" / "diff";
    fs::create_directories(diff_);
    write(diff_ / "market.resolved.toml", market_text(1, 0.1));
    write(diff_ / "config.resolved.toml",
          "[model]\nkind = \"diffusion\"\nhidden = 24\ndiffusion_steps = 50\nsample_steps = 10\ncontext = 4\n"
          "[data]\nsource = \"market\"\nmarket = \"market.resolved.toml\"\nwindow = 12\n[task]\nkind = \"generate\"\n");
    write(diff_ / "model.safetensors", "weights");
  }
  fs::path diff_;
};

// A diffusion model offers its embedding, its anomaly score or both; the block takes the width.
TEST_F(DiffusionFeaturesConfigTest, OffersEmbeddingScoreAndBoth) {
  const RunConfig c = load("checkpoint = \"runs/diff\"\n");
  EXPECT_EQ(fs::path(c.features.checkpoint), diff_);
  EXPECT_EQ(c.features.noise_step, 5);  // the default: diffusion_steps / 10, resolved at load
  EXPECT_NE(resolved_toml(c).find("noise_step = 5"), std::string::npos);
  EXPECT_EQ(market_config(c).extra_features, 24);
  const RunConfig sc = load("checkpoint = \"runs/diff\"\noutput = \"score\"\nnoise_step = 49\n");
  EXPECT_EQ(sc.features.noise_step, 49);
  EXPECT_EQ(market_config(sc).extra_features, 1);
  const RunConfig both = load("checkpoint = \"runs/diff\"\noutput = \"both\"\nnoise_step = 0\n", "kind = \"dqn\"\n");
  EXPECT_EQ(market_config(both).extra_features, 25);
  EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(both), "resolved")), resolved_toml(both));
  EXPECT_NE(resolved_toml(both).find("noise_step = 0"), std::string::npos);
}

// The diffusion extractor is a function of each row: a PPO checkpoint keeps no features_state for
// it (a sequence model's run does), and `foxhunt check` expects none.
TEST_F(DiffusionFeaturesConfigTest, KeepsNoPerEnvironmentState) {
  const auto has_state = [](const RunConfig& c) {
    for (const auto& [name, bytes] : ppo_state_arrays(c, env_shape(c)))
      if (name == "features_state") return bytes > 0;
    return false;
  };
  EXPECT_FALSE(has_state(load("checkpoint = \"runs/diff\"\n")));
  EXPECT_TRUE(has_state(load("checkpoint = \"runs/pre\"\n")));
}

// A diffusion model fine-tunes like a sequence model (PPO, DQN agents), the noise step resolved as
// for frozen features.
TEST_F(DiffusionFeaturesConfigTest, AcceptsFinetune) {
  const std::vector<std::pair<const char*, std::string>> learners = {
      {"ppo sync", "kind = \"ppo\"\nrollout_steps = 16\n"},
      {"dqn", "kind = \"dqn\"\n"},
  };
  for (const auto& [name, learner] : learners) {
    SCOPED_TRACE(name);
    const RunConfig c = load("checkpoint = \"runs/diff\"\nmode = \"finetune\"\noutput = \"both\"\nlr_scale = 0.5\n",
                             learner);
    EXPECT_EQ(c.features.mode, "finetune");
    EXPECT_DOUBLE_EQ(c.features.lr_scale, 0.5);
    EXPECT_EQ(c.features.noise_step, 5);
    EXPECT_EQ(market_config(c).extra_features, 25);
    EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(c), "resolved")), resolved_toml(c));
  }
}

TEST_F(DiffusionFeaturesConfigTest, RefusesMismatchesNamingBothSides) {
  struct Case {
    const char* name;
    std::string features, learner, market;
    std::vector<std::string> says;
  };
  write(root_ / "m2.toml", market_text(2, 0.1));
  write(root_ / "m_scale.toml", market_text(1, 0.2));
  std::string wide = market_text(1, 0.1);
  wide.replace(wide.find("window = 16"), 11, "window = 20");
  write(root_ / "m_wide.toml", wide);
  const std::string ppo = "kind = \"ppo\"\nrollout_steps = 16\n", dqn = "kind = \"dqn\"\n";
  const std::string d = "checkpoint = \"runs/diff\"\nnoise_step = 10\n";
  const std::vector<Case> cases = {
      {"other window", d, ppo, "m_wide.toml",
       {"features.checkpoint", "16 returns", "data.window = 12", "model.context = 4", "market.window = 20"}},
      {"other window dqn", d, dqn, "m_wide.toml", {"features.checkpoint", "market.window = 20"}},
      {"other assets", d, dqn, "m2.toml", {"features.checkpoint", "1 asset", "has 2"}},
      {"other return scale", d, ppo, "m_scale.toml", {"features.checkpoint", "normalized"}},
      {"head of a diffusion model", d + "output = \"head\"\n", ppo, "m.toml",
       {"features.output", "no head", "score"}},
      {"score of a sequence model", "checkpoint = \"runs/pre\"\noutput = \"score\"\n", ppo, "m.toml",
       {"features.output", "diffusion", "lstm"}},
      {"noise step past the schedule", "checkpoint = \"runs/diff\"\nnoise_step = 100\n", ppo, "m.toml",
       {"features.noise_step = 100", "diffusion_steps = 50"}},
      {"noise step negative", "checkpoint = \"runs/diff\"\nnoise_step = -2\n", ppo, "m.toml",
       {"features.noise_step"}},
      {"unknown output", d + "output = \"forecast\"\n", ppo, "m.toml",
       {"features.output", "embedding", "head", "score", "both"}},
      {"noise step without a checkpoint", "noise_step = 10\n", ppo, "m.toml",
       {"features.noise_step", "features.checkpoint"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const std::string why = refusal(k.features, k.learner, k.market);
    ASSERT_FALSE(why.empty()) << "accepted";
    for (const auto& s : k.says) EXPECT_NE(why.find(s), std::string::npos) << "missing \"" << s << "\" in: " << why;
  }
}

}  // namespace
