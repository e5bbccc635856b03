// `foxhunt pretrain` with [model] kind = "diffusion": the family's keys reach the trainer's spec,
// the resolved TOML round-trips, and bad values and combinations are errors naming the keys.
#include <gtest/gtest.h>

#include <string>

#include "models/diffusion/sampler.hpp"
#include "models/diffusion/schedule.hpp"
#include "pretrain/config.hpp"
#include "pretrain/diffusion_trainer.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;

namespace {

constexpr const char* kHead = "[model]\nkind = \"diffusion\"\n";
constexpr const char* kTail = "[data]\nsource = \"market\"\nmarket = \"m.toml\"\nwindow = 12\n[task]\nkind = \"generate\"\n";

std::string errors_of(const std::string& text) {
  try {
    parse_pretrain_config(text, "p.toml");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(DiffusionConfigTest, SpecReadsTheFamilyKeys) {
  const PretrainConfig c = parse_pretrain_config(std::string(kHead) +
                                                 "hidden = 32\nlayers = 3\ndiffusion_steps = 200\nschedule = \"cosine\"\n"
                                                 "embed = 16\nexpand = 3\ncontext = 4\nsampler = \"ddpm\"\n"
                                                 "sample_steps = 100\n" +
                                                 kTail);
  const DiffusionTrainerSpec s = diffusion_trainer_spec(c, 2);
  EXPECT_EQ(s.denoiser.hidden, 32);
  EXPECT_EQ(s.denoiser.blocks, 3);
  EXPECT_EQ(s.denoiser.embed, 16);
  EXPECT_EQ(s.denoiser.expand, 3);
  EXPECT_EQ(s.schedule.kind, models::ScheduleKind::cosine);
  EXPECT_EQ(s.schedule.steps, 200);
  EXPECT_EQ(s.sampler.kind, models::SamplerKind::ddpm);
  EXPECT_EQ(s.sampler.steps, 100);
  EXPECT_EQ(s.window, 12);
  EXPECT_EQ(s.context, 4);
  EXPECT_EQ(s.assets, 2);
  EXPECT_EQ(sample_window(c), 16);
  EXPECT_EQ(bars_per_window(c), 18);  // 16 returns + 1, and the shortest label
}

TEST(DiffusionConfigTest, ResolvedTomlRoundTrips) {
  const PretrainConfig c =
      parse_pretrain_config(std::string(kHead) + "schedule = \"linear\"\nbeta_end = 0.03\neta = 0.5\n" + kTail);
  const auto round_trips = [](const PretrainConfig& x) {
    const std::string text = resolved_pretrain_toml(x);
    const PretrainConfig back = parse_pretrain_config(text, "resolved");
    EXPECT_EQ(resolved_pretrain_toml(back), text);
    EXPECT_EQ(back.model.family, x.model.family);
  };
  round_trips(c);
  const PretrainConfig d =
      parse_pretrain_config(std::string(kHead) + "schedule = \"cosine\"\nsampler = \"ddpm\"\ncontext = 3\n" + kTail);
  round_trips(d);
  EXPECT_EQ(resolved_pretrain_toml(d).find("beta_start"), std::string::npos);
  EXPECT_EQ(resolved_pretrain_toml(d).find("\neta = "), std::string::npos);
}

TEST(DiffusionConfigTest, TaskAndModelMustAgree) {
  EXPECT_NE(errors_of(std::string(kHead) +
                      "[data]\nsource = \"market\"\nmarket = \"m.toml\"\n[task]\nkind = \"returns\"\n")
                .find("task.kind"),
            std::string::npos);
  const std::string e = errors_of(
      "[model]\nkind = \"lstm\"\n[data]\nsource = \"market\"\nmarket = \"m.toml\"\n[task]\nkind = \"generate\"\n");
  EXPECT_NE(e.find("task.kind"), std::string::npos) << e;
  EXPECT_NE(e.find("model.kind"), std::string::npos) << e;
}

TEST(DiffusionConfigTest, BadFamilyValuesAreNamed) {
  const auto has = [](const std::string& keys, const std::string& key) {
    const std::string e = errors_of(std::string(kHead) + keys + kTail);
    EXPECT_NE(e.find(key), std::string::npos) << keys << " -> " << e;
  };
  has("embed = 7\n", "model.embed");
  has("schedule = \"quadratic\"\n", "model.schedule");
  has("sampler = \"euler\"\n", "model.sampler");
  has("diffusion_steps = 100\nsample_steps = 200\n", "model.sample_steps");
  has("eta = 1.5\n", "model.eta");
  has("beta_start = 0.05\nbeta_end = 0.01\n", "model.beta_start");
  has("schedule = \"cosine\"\nbeta_end = 0.01\n", "model.beta_end");  // no effect
  has("sampler = \"ddpm\"\neta = 0.5\n", "model.eta");                // no effect
  has("context = -1\n", "model.context");
}

TEST(DiffusionConfigTest, ParsersNameTheAllowedValues) {
  EXPECT_EQ(models::parse_schedule_kind("linear"), models::ScheduleKind::linear);
  EXPECT_EQ(models::parse_sampler_kind("ddim"), models::SamplerKind::ddim);
  EXPECT_THROW(models::parse_schedule_kind("sigmoid"), std::invalid_argument);
  EXPECT_THROW(models::parse_sampler_kind("dpm"), std::invalid_argument);
}

TEST(DiffusionConfigTest, SchedulesInFloat64) {
  models::ScheduleSpec spec;
  spec.kind = models::ScheduleKind::linear;
  spec.steps = 1000;
  const models::ScheduleTables l = models::schedule_tables(spec);
  EXPECT_DOUBLE_EQ(l.beta.front(), 1e-4);
  EXPECT_DOUBLE_EQ(l.beta.back(), 0.02);
  double p = 1;
  for (std::size_t t = 0; t < 1000; ++t) {
    p *= 1 - l.beta[t];
    ASSERT_NEAR(l.alpha_bar[t], p, 1e-15);
    ASSERT_DOUBLE_EQ(l.alpha[t], 1 - l.beta[t]);
  }
  spec.kind = models::ScheduleKind::cosine;
  const models::ScheduleTables c = models::schedule_tables(spec);
  // ab_t = f(t + 1) / f(0) wherever the 0.999 clip is not reached.
  const auto f = [](double s) {
    const double v = std::cos((s / 1000.0 + 0.008) / 1.008 * 3.14159265358979323846 / 2);
    return v * v;
  };
  for (std::size_t t = 0; t + 1 < 1000; ++t) ASSERT_NEAR(c.alpha_bar[t], f(t + 1.0) / f(0.0), 1e-12) << t;
  EXPECT_DOUBLE_EQ(c.beta.back(), 0.999);
  spec.steps = 1;
  EXPECT_THROW(models::schedule_tables(spec), std::invalid_argument);
}

}  // namespace
