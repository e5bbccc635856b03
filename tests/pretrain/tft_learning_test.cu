// The TFT's multi-horizon quantile forecasts on the OU market (issue 18), 3 fixed seeds, validated
// on held-out windows of other seeds: trained by PretrainTrainer with the pinball loss on the next
// 3 normalized returns at the quantiles 0.1, 0.5, 0.9 from a 64-return window,
//   - the median's R^2 (mean over the 3 horizons) reaches >= 95% of the best linear predictor's on
//     the same windows (LinearBaseline: least squares in float64 on 2^20 training windows), and
//   - each quantile's empirical coverage P(y < q_tau) over 2^18 held-out windows and all horizons
//     lies within +-3 points of tau (its standard error there is below 0.1 point).
// As in trainer_learning_test.cu: many windows per step (8192), a small model (hidden 16, 4 heads:
// pytorch-forecasting's defaults) and a cosine decay to 0.
// One test per seed (separate processes can run them side by side): --gtest_filter='*TftLearningTest.*'.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "pretrain/linear_baseline.hpp"
#include "pretrain/market_windows.hpp"
#include "pretrain/trainer.hpp"
#include "rl/envs/market_config.hpp"
#include "support/gpu_test.hpp"
#include "support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;

namespace {

class TftLearningTest : public test::GpuTest, public ::testing::WithParamInterface<std::uint64_t> {};

TEST_P(TftLearningTest, CalibratedQuantilesReachTheLinearBaselineOnOuReturns) {
  const rl::MarketConfig market = rl::load_market_config(test::configs_dir() / "markets" / "ou_mean_reversion.toml");
  gpu::DeviceContext ctx(0, 1);
  const std::vector<float> taus{0.1f, 0.5f, 0.9f};
  const std::int64_t K = 3, Q = 3, T = 64;
  const std::uint64_t seed = GetParam();
  const auto t0 = std::chrono::steady_clock::now();
  TrainerSpec spec;
  spec.model.kind = "tft";
  spec.model.hidden = 16;
  spec.model.layers = 1;
  spec.model.family.integers = {{"heads", 4}};
  spec.task.kind = TaskKind::returns;
  spec.task.loss = LossKind::quantile;
  spec.task.targets = K;
  spec.task.quantiles = taus;
  spec.optim.lr = 3e-3f;
  spec.optim.weight_decay = 0.f;
  spec.optim.warmup_steps = 200;
  spec.optim.decay = Decay::cosine;
  spec.optim.grad_clip = 1.f;
  spec.optim.steps = 3000;
  spec.window.window = T;
  spec.window.horizon = K;
  spec.batch = 8192;
  spec.seed = seed;
  MarketWindows windows(market, spec.window, spec.batch);
  const GenerateFn data = [&windows](const WindowBatch& out, std::int64_t b, std::uint64_t s,
                                     const std::uint64_t* counter,
                                     cudaStream_t st) { windows.generate(out, b, s, counter, st); };
  PretrainTrainer trainer(spec, data, ctx.blas());
  LinearBaseline linear(T, K);
  trainer.fit_linear_baseline(linear, data, seed ^ 0xF17ull, std::int64_t{1} << 20);
  for (std::int64_t s = 0; s < spec.optim.steps; ++s) trainer.step();
  trainer.evaluate(data, seed ^ 0xE7A1ull, std::int64_t{1} << 20, &linear, nullptr);
  const EvalMetrics m = trainer.wait_eval();

  // Coverage on held-out windows (another seed): the model and head run here, in eval mode.
  const std::int64_t B = spec.batch, H = spec.model.hidden, batches = 32;
  const cudaStream_t st = trainer.stream();
  gpu::DeviceBuffer<float> x(static_cast<std::size_t>(B * T)), y(static_cast<std::size_t>(B * K));
  gpu::DeviceBuffer<float> features(static_cast<std::size_t>(B * T * H)), last(static_cast<std::size_t>(B * H));
  gpu::DeviceBuffer<float> out(static_cast<std::size_t>(B * K * Q));
  gpu::DeviceBuffer<std::uint64_t> counter(1);
  models::OwnedWorkspace model_ws(trainer.model(), B), head_ws(trainer.head(), B);
  WindowBatch held;
  held.x = x.data();
  held.next_returns = y.data();
  std::vector<double> below(static_cast<std::size_t>(Q), 0.0);
  double n = 0;
  for (std::uint64_t c = 0; c < static_cast<std::uint64_t>(batches); ++c) {
    counter.upload(std::span<const std::uint64_t>(&c, 1), st);
    windows.generate(held, B, seed ^ 0xC0FEull, counter.data(), st);
    trainer.model().forward(features.data(), x.data(), B, true, model_ws.view, ctx.blas());
    const std::size_t row = static_cast<std::size_t>(H) * sizeof(float);
    FH_CHECK(cudaMemcpy2DAsync(last.data(), row, features.data() + (T - 1) * H, static_cast<std::size_t>(T) * row, row,
                               static_cast<std::size_t>(B), cudaMemcpyDeviceToDevice, st));
    trainer.head().forward(out.data(), last.data(), B, true, head_ws.view, ctx.blas());
    const auto q = test::download(out, st);
    const auto target = test::download(y, st);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t k = 0; k < K; ++k) {
        for (std::int64_t j = 0; j < Q; ++j) below[j] += target[b * K + k] < q[(b * K + k) * Q + j] ? 1.0 : 0.0;
        n += 1;
      }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tft seed %llu: median R^2 %.5f, linear R^2 %.5f (ratio %.3f); coverage %.4f %.4f %.4f; %.1f s\n",
              static_cast<unsigned long long>(seed), m.r2, m.baseline_r2, m.r2 / m.baseline_r2, below[0] / n,
              below[1] / n, below[2] / n, secs);
  std::fflush(stdout);
  ASSERT_TRUE(std::isfinite(m.r2) && std::isfinite(m.baseline_r2));
  EXPECT_GT(m.baseline_r2, 0.001) << "the window predicts the next OU returns (linear R^2)";
  EXPECT_GE(m.r2, 0.95 * m.baseline_r2) << "median R^2 " << m.r2 << " < 95% of the linear baseline's " << m.baseline_r2;
  for (std::int64_t j = 0; j < Q; ++j)
    EXPECT_NEAR(below[j] / n, taus[j], 0.03) << "coverage of the quantile " << taus[j];
}

INSTANTIATE_TEST_SUITE_P(Seeds, TftLearningTest,
                         ::testing::Values(std::uint64_t{11}, std::uint64_t{22}, std::uint64_t{33}),
                         [](const ::testing::TestParamInfo<std::uint64_t>& p) {
                           return "seed" + std::to_string(p.param);
                         });

}  // namespace
