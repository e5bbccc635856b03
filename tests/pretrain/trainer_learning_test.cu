// Learning on the simulator's ground truth, every family (lstm, mamba2, xlstm, cfc, tft, kan), 3 fixed seeds,
// validated on held-out windows of another seed:
//   OU returns: a model trained by PretrainTrainer to forecast the next normalized return of the OU
//     market (configs/markets/ou_mean_reversion.toml) from a 64-return window reaches an R^2 >= 95%
//     of the best linear predictor's on the same windows (LinearBaseline: least squares in float64
//     on 2^20 training windows).
//   Regimes: a model classifying the hidden regime of the two-regime market
//     (configs/markets/regime2.toml) from the window reaches an accuracy above chance (1/2) of at
//     least 90% of what the exact HMM forward filter (true parameters, float64) reaches above chance
//     on the same windows.
//
// The OU bar is high: the predictable part of the next return is small (kappa dt = 5/252; the
// window's linear R^2 is about 0.35%), so the model's excess risk must stay below ~2e-4 of the
// target's variance. Hence many windows per step (8192), small models (width 16) and a cosine decay
// to 0; 1M validation windows keep the paired comparison's noise (~3e-5) well below the margin. A
// step costs 1.5 (lstm) to 23 ms (xlstm) on an H200 (dev/cuda/pretrain_step_profile.cu).
// One test per family and seed (a separate process each can run beside the others): filter one
// family with --gtest_filter='*Learning*/mamba2_*', one seed with '*Learning*/mamba2_seed11'.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "gpu/context.hpp"
#include "pretrain/hmm_filter.hpp"
#include "pretrain/linear_baseline.hpp"
#include "pretrain/market_windows.hpp"
#include "pretrain/trainer.hpp"
#include "rl/envs/market_config.hpp"
#include "support/gpu_test.hpp"
#include "support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;

namespace {

// A family at width `hidden` with the shipped configs' structure (configs/pretrain/<kind>_*.toml).
ModelSpec family(const std::string& kind, std::int64_t hidden) {
  ModelSpec m;
  m.kind = kind;
  m.hidden = hidden;
  m.layers = 1;
  auto& i = m.family.integers;
  if (kind == "mamba2") {
    i = {{"d_state", 16}, {"head_dim", hidden / 4}, {"expand", 2}, {"conv_kernel", 4}, {"chunk", 64}};
  } else if (kind == "xlstm") {
    m.layers = 2;
    i = {{"heads", 2}, {"chunk", 64}, {"proj_factor", 2}, {"conv_kernel", 4}};
    m.family.choices["blocks"] = "ms";
  } else if (kind == "cfc") {
    i = {{"backbone_units", 2 * hidden}, {"backbone_layers", 1}};
    m.family.choices = {{"activation", "lecun_tanh"}, {"mode", "default"}};
  } else if (kind == "tft") {
    i = {{"heads", 4}};
  } else if (kind == "kan") {  // one KAN layer reading the whole window
    i = {{"grid", 8}, {"order", 3}, {"lags", 64}};
    m.family.numbers = {{"grid_min", -4.0}, {"grid_max", 4.0}};
  }
  return m;
}

OptimSpec schedule(float lr, std::int64_t warmup, std::int64_t steps) {
  OptimSpec o;
  o.lr = lr;
  o.weight_decay = 0.f;
  o.warmup_steps = warmup;
  o.decay = Decay::cosine;
  o.grad_clip = 1.f;
  o.steps = steps;
  return o;
}

GenerateFn windows_of(MarketWindows& windows) {
  return [&windows](const WindowBatch& out, std::int64_t b, std::uint64_t s, const std::uint64_t* counter,
                    cudaStream_t st) { windows.generate(out, b, s, counter, st); };
}

// (family, seed)
using FamilySeed = std::tuple<std::string, std::uint64_t>;
class TrainerLearningTest : public test::GpuTest, public ::testing::WithParamInterface<FamilySeed> {
 protected:
  const std::string& kind() const { return std::get<0>(GetParam()); }
  std::uint64_t seed() const { return std::get<1>(GetParam()); }
};

TEST_P(TrainerLearningTest, ReachesTheLinearBaselineOnOuReturns) {
  const rl::MarketConfig market = rl::load_market_config(test::configs_dir() / "markets" / "ou_mean_reversion.toml");
  gpu::DeviceContext ctx(0, 1);
  const std::uint64_t seed = this->seed();
  const auto t0 = std::chrono::steady_clock::now();
  TrainerSpec spec;
  spec.model = family(kind(), 16);
  spec.task.kind = TaskKind::returns;
  spec.task.loss = LossKind::mse;
  spec.task.targets = 1;
  // CfC at lr 3e-3 ended between 0.91 and 1.0 of the baseline over seeds; at 1e-3 it holds above 0.99.
  spec.optim = schedule(kind() == "cfc" ? 1e-3f : 3e-3f, 200, 4000);
  spec.window.window = 64;
  spec.window.horizon = 1;
  spec.batch = 8192;
  spec.seed = seed;
  MarketWindows windows(market, spec.window, spec.batch);
  const GenerateFn data = windows_of(windows);
  PretrainTrainer trainer(spec, data, ctx.blas());
  LinearBaseline linear(spec.window.window, 1);
  trainer.fit_linear_baseline(linear, data, seed ^ 0xF17ull, std::int64_t{1} << 20);
  for (std::int64_t s = 0; s < spec.optim.steps; ++s) trainer.step();
  trainer.evaluate(data, seed ^ 0xE7A1ull, std::int64_t{1} << 20, &linear, nullptr);
  const EvalMetrics m = trainer.wait_eval();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s seed %llu: model R^2 %.5f, linear R^2 %.5f (ratio %.3f), %.1f s\n", kind().c_str(),
              static_cast<unsigned long long>(seed), m.r2, m.baseline_r2, m.r2 / m.baseline_r2, secs);
  std::fflush(stdout);
  ASSERT_TRUE(std::isfinite(m.r2) && std::isfinite(m.baseline_r2));
  EXPECT_GT(m.baseline_r2, 0.001) << "the window predicts the next OU return (linear R^2)";
  EXPECT_GE(m.r2, 0.95 * m.baseline_r2) << "model R^2 " << m.r2 << " < 95% of the linear baseline's " << m.baseline_r2;
}

TEST_P(TrainerLearningTest, ApproachesTheHmmFilterOnRegimes) {
  const rl::MarketConfig market = rl::load_market_config(test::configs_dir() / "markets" / "regime2.toml");
  gpu::DeviceContext ctx(0, 1);
  const std::uint64_t seed = this->seed();
  const auto t0 = std::chrono::steady_clock::now();
  TrainerSpec spec;
  spec.model = family(kind(), 32);
  spec.task.kind = TaskKind::regime;
  spec.task.loss = LossKind::cross_entropy;
  spec.task.targets = 0;
  spec.task.classes = 2;
  spec.optim = schedule(3e-3f, 100, 3000);
  spec.window.window = 64;
  spec.batch = 1024;
  spec.seed = seed;
  MarketWindows windows(market, spec.window, spec.batch);
  const GenerateFn data = windows_of(windows);
  PretrainTrainer trainer(spec, data, ctx.blas());
  HmmFilter hmm(market, spec.window.window);
  for (std::int64_t s = 0; s < spec.optim.steps; ++s) trainer.step();
  trainer.evaluate(data, seed ^ 0xE7A1ull, std::int64_t{1} << 18, nullptr, &hmm);
  const EvalMetrics m = trainer.wait_eval();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double ratio = (m.accuracy - 0.5) / (m.baseline_accuracy - 0.5);
  std::printf("%s seed %llu: model accuracy %.4f, HMM filter %.4f (above chance: ratio %.3f), %.1f s\n", kind().c_str(),
              static_cast<unsigned long long>(seed), m.accuracy, m.baseline_accuracy, ratio, secs);
  std::fflush(stdout);
  ASSERT_TRUE(std::isfinite(m.accuracy) && std::isfinite(m.baseline_accuracy));
  EXPECT_GT(m.baseline_accuracy, 0.6) << "the window reveals the regime (HMM filter)";
  EXPECT_GE(ratio, 0.9) << "model accuracy " << m.accuracy << " is above chance by less than 90% of the HMM "
                        << "filter's " << m.baseline_accuracy;
}

INSTANTIATE_TEST_SUITE_P(Families, TrainerLearningTest,
                         ::testing::Combine(::testing::Values("lstm", "mamba2", "xlstm", "cfc", "tft", "kan"),
                                            ::testing::Values(11u, 22u, 33u)),
                         [](const ::testing::TestParamInfo<FamilySeed>& p) {
                           return std::get<0>(p.param) + "_seed" + std::to_string(std::get<1>(p.param));
                         });

}  // namespace
