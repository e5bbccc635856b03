// Generated markets' config (CPU): a market with process.kind = "generated" reads its diffusion
// checkpoint (a checkpoint or run directory, relative to the market file), applies its sampler
// overrides, writes back to itself, and refuses, naming the key and both sides, every model that
// does not fit: absent, not diffusion, conditioned on more than its window, of other assets or of another return
// normalization; the generated-only keys are refused elsewhere and the gbm/ou-only ones here.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "rl/envs/market_config.hpp"
#include "rl/envs/market_generator_config.hpp"
#include "tests/rl/generated_market_support.hpp"

namespace foxhunt::rl {
namespace {

namespace fs = std::filesystem;

class GeneratedMarketConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::fresh_dir("config");
    test::write_checkpoint_files(root_ / "ckpt", test::diffusion_ou_config(), test::ou_market_config());
    fs::create_directories(root_ / "markets");
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes the market file and loads it.
  MarketConfig load(const std::string& text) {
    const fs::path file = root_ / "markets" / "m.toml";
    test::write_text(file, text);
    return load_market_config(file);
  }
  // Expects loading to fail with every part in the message.
  ::testing::AssertionResult refuses(const std::string& text, const std::vector<std::string>& parts) {
    try {
      load(text);
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      for (const auto& p : parts)
        if (msg.find(p) == std::string::npos)
          return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "accepted:\n" << text;
  }
  fs::path root_;
};

TEST_F(GeneratedMarketConfig, ReadsTheCheckpointRelativeToTheFile) {
  const MarketConfig c = load(test::generated_market_text("../ckpt"));
  EXPECT_EQ(c.process, PriceProcess::generated);
  EXPECT_EQ(fs::path(c.generator_checkpoint), (root_ / "ckpt").lexically_normal());
  const GeneratorModel m = read_generator_checkpoint(c);
  const pretrain::PretrainConfig p = test::diffusion_ou_config();
  EXPECT_EQ(m.checkpoint, (root_ / "ckpt").lexically_normal());
  EXPECT_EQ(m.weights, m.checkpoint / "model.safetensors");
  EXPECT_EQ(m.assets, 1);
  EXPECT_EQ(m.window, p.data.window);
  EXPECT_EQ(m.hidden, p.model.hidden);
  EXPECT_EQ(m.blocks, p.model.layers);
  EXPECT_EQ(m.expand, p.model.family.integers.at("expand"));
  EXPECT_EQ(m.embed, p.model.family.integers.at("embed"));
  EXPECT_EQ(m.diffusion_steps, p.model.family.integers.at("diffusion_steps"));
  EXPECT_EQ(m.schedule, p.model.family.choices.at("schedule"));
  EXPECT_EQ(m.sampler, p.model.family.choices.at("sampler"));
  EXPECT_EQ(m.sample_steps, p.model.family.integers.at("sample_steps"));
  EXPECT_FALSE(m.bf16);
  ASSERT_EQ(m.ret_scale.size(), 1u);
  EXPECT_DOUBLE_EQ(m.ret_scale[0], 1.0 / (0.2 * std::sqrt(1.0 / 252.0)));
  EXPECT_EQ(market_return_scale(c), m.ret_scale);
}

TEST_F(GeneratedMarketConfig, TheSamplerCanBeOverridden) {
  const MarketConfig c = load(test::generated_market_text("../ckpt", "sampler = \"ddim\"\nsample_steps = 20\neta = 0.5\n"));
  EXPECT_EQ(c.generator_sampler, "ddim");
  EXPECT_EQ(c.generator_sample_steps, 20);
  EXPECT_EQ(c.generator_eta, 0.5);
  const GeneratorModel m = read_generator_checkpoint(c);
  EXPECT_EQ(m.sampler, "ddim");
  EXPECT_EQ(m.sample_steps, 20);
  EXPECT_EQ(m.eta, 0.5);
}

TEST_F(GeneratedMarketConfig, ARunDirectoryResolvesToItsLatestCheckpoint) {
  const fs::path run = root_ / "run";
  test::write_checkpoint_files(run / "checkpoints" / "step_20", test::diffusion_ou_config(), test::ou_market_config());
  test::write_text(run / "checkpoints" / "latest", "step_20\n");
  const MarketConfig c = load(test::generated_market_text("../run"));
  EXPECT_EQ(read_generator_checkpoint(c).checkpoint, run / "checkpoints" / "step_20");
  EXPECT_EQ(resolve_generator_checkpoint(run / "checkpoints"), run / "checkpoints" / "step_20");
  test::write_text(run / "checkpoints" / "latest", "step_40\n");
  EXPECT_TRUE(refuses(test::generated_market_text("../run"), {"process.checkpoint", "step_40", "no model.safetensors"}));
}

TEST_F(GeneratedMarketConfig, WritesBackToItself) {
  const MarketConfig c = load(test::generated_market_text("../ckpt", "sampler = \"ddim\"\nsample_steps = 20\n"));
  const std::string text = market_config_toml(c);
  const MarketConfig back = parse_market_config(text, "written.toml");
  EXPECT_EQ(back, c) << text;
  const MarketConfig plain = load(test::generated_market_text("../ckpt"));
  EXPECT_EQ(parse_market_config(market_config_toml(plain), "plain.toml"), plain);
}

TEST_F(GeneratedMarketConfig, RefusesAMissingOrAbsentCheckpoint) {
  std::string no_key = test::generated_market_text("x");
  no_key.replace(no_key.find("checkpoint = \"x\"\n"), 17, "");
  EXPECT_TRUE(refuses(no_key, {"process.checkpoint", "required"}));
  EXPECT_TRUE(refuses(test::generated_market_text("../nowhere"),
                      {"process.checkpoint", "nowhere does not exist", "foxhunt pretrain"}));
  fs::create_directories(root_ / "empty");
  EXPECT_TRUE(refuses(test::generated_market_text("../empty"), {"process.checkpoint", "neither a checkpoint"}));
}

TEST_F(GeneratedMarketConfig, RefusesAModelThatIsNotADiffusionGenerator) {
  pretrain::PretrainConfig lstm = pretrain::load_pretrain_config(test::configs_dir() / "pretrain" / "lstm_ou.toml");
  test::write_checkpoint_files(root_ / "lstm", lstm, test::ou_market_config());
  EXPECT_TRUE(refuses(test::generated_market_text("../lstm"),
                      {"process.checkpoint", "kind = \"lstm\"", "needs a diffusion model"}));
  pretrain::PretrainConfig conditioned = test::diffusion_ou_config();
  conditioned.model.family.integers["context"] = 20;
  test::write_checkpoint_files(root_ / "conditioned", conditioned, test::ou_market_config());
  EXPECT_TRUE(refuses(test::generated_market_text("../conditioned"),
                      {"process.checkpoint", "context of 20", "more than its window of 16"}));
  conditioned.model.family.integers["context"] = 16;
  test::write_checkpoint_files(root_ / "conditioned", conditioned, test::ou_market_config());
  EXPECT_EQ(read_generator_checkpoint(load(test::generated_market_text("../conditioned"))).context, 16);
  fs::create_directories(root_ / "bare");
  test::write_text(root_ / "bare" / "model.safetensors", "");
  EXPECT_TRUE(refuses(test::generated_market_text("../bare"), {"process.checkpoint", "no config.resolved.toml"}));
}

TEST_F(GeneratedMarketConfig, RefusesAModelOfOtherAssetsOrAnotherNormalization) {
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "", "", 2),
                      {"process.checkpoint", "generates 1 assets", "market.assets = 2"}));
  // sigma 0.3 against the model market's 0.2: both normalizations and both sides' keys named.
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "", "", 1, 0.3),
                      {"process.checkpoint", "normalized by 1 / (sigma sqrt(dt)) = 79.3725", "this market by 52.915",
                       "process.sigma 0.3", "sigma 0.2", "market.dt"}));
}

TEST_F(GeneratedMarketConfig, RefusesSamplerOverridesTheModelCannotRun) {
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "sample_steps = 2000\n"),
                      {"process.sample_steps", "diffusion_steps = 1000"}));
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "eta = 0.5\n"), {"process.eta", "only ddim"}));
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "sampler = \"euler\"\n"), {"process.sampler", "ddim"}));
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "sample_steps = 0\n"), {"process.sample_steps"}));
}

TEST_F(GeneratedMarketConfig, RefusesKeysOfOtherLaws) {
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "kappa = 5.0\n"), {"process.kappa", "\"ou\""}));
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "mu = 0.1\n"), {"process.mu", "\"gbm\""}));
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "\n[process.jumps]\nintensity = 1.0\n"),
                      {"process.jumps", "\"gbm\" or \"ou\""}));
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "", "\n[observation]\nprice_level = true\n"),
                      {"observation.price_level", "generated"}));
  EXPECT_TRUE(refuses(test::generated_market_text("../ckpt", "", "", 1, 0.0), {"process.sigma"}));
  EXPECT_TRUE(refuses("[market]\nassets = 1\n[process]\nkind = \"gbm\"\ninitial_price = 100.0\nsigma = 0.2\n"
                      "checkpoint = \"../ckpt\"\nsample_steps = 10\n",
                      {"process.checkpoint", "process.sample_steps", "only allowed for process.kind = \"generated\""}));
}

TEST_F(GeneratedMarketConfig, ACheckpointIsCheckedOnlyWhenReadFromAFile) {
  // parse_market_config has no folder: the path is kept, nothing is read.
  const MarketConfig c = parse_market_config(test::generated_market_text("/no/such/run"), "text.toml");
  EXPECT_EQ(c.generator_checkpoint, "/no/such/run");
  EXPECT_THROW(read_generator_checkpoint(c), ConfigError);
  MarketConfig gbm = c;
  gbm.process = PriceProcess::gbm;
  gbm.mu = {0.0};
  EXPECT_THROW(validate(gbm), ConfigError);  // a checkpoint on a gbm market
}

}  // namespace
}  // namespace foxhunt::rl
