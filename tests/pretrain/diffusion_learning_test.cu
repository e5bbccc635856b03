// DiffusionLearning: a DDPM trained on simulated market windows generates windows whose stylized
// facts match held-out simulated windows, for 3 seeds each (a few seconds per seed on an H100):
//   variance of the returns          ratio within 10% (OU) / 15% (regimes)
//   kurtosis of the returns          within 0.5 (OU, Gaussian: 3) / 1.0 (regimes: a heavy-tailed mixture)
//   lag-1 autocorrelation of returns and of |returns| (volatility clustering) within 0.05
//   two-sample Kolmogorov-Smirnov on the returns does not reject at 1%: one return per window
//   (position b mod window of window b), so each sample is independent as the test assumes;
//   the anomaly score (denoising error at a fixed step) is lower on held-out windows than on the
//   same windows with tripled returns.
// The facts pool every return of 8192 generated and 8192 held-out windows; held-out windows use
// a seed no training window uses. Sampling: ancestral DDPM over all 1000 steps (its own bias on
// Gaussian data is under 2% of the variance, tests/models/diffusion/sampler_test.cu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gpu/context.hpp"
#include "gpu/elementwise.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/market_windows.hpp"
#include "rl/envs/market_config.hpp"
#include "support/gpu_test.hpp"
#include "support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;

namespace {

struct Facts {
  double var = 0, kurtosis = 0, ac1 = 0, ac1_abs = 0;
};

// x (B, W) returns of one asset.
Facts facts_of(const std::vector<float>& x, std::int64_t B, std::int64_t W) {
  const double n = static_cast<double>(B * W);
  double mean = 0, mean_abs = 0;
  for (const float v : x) {
    mean += v;
    mean_abs += std::abs(v);
  }
  mean /= n;
  mean_abs /= n;
  double m2 = 0, m4 = 0, m2a = 0;
  for (const float v : x) {
    const double d = v - mean, a = std::abs(v) - mean_abs;
    m2 += d * d;
    m4 += d * d * d * d;
    m2a += a * a;
  }
  m2 /= n;
  m4 /= n;
  m2a /= n;
  double c = 0, ca = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t + 1 < W; ++t) {
      const double u = x[static_cast<std::size_t>(b * W + t)], v = x[static_cast<std::size_t>(b * W + t + 1)];
      c += (u - mean) * (v - mean);
      ca += (std::abs(u) - mean_abs) * (std::abs(v) - mean_abs);
    }
  const double pairs = static_cast<double>(B * (W - 1));
  return Facts{m2, m4 / (m2 * m2), c / pairs / m2, ca / pairs / m2a};
}

// One return per window: position b mod W of window b.
std::vector<double> one_per_window(const std::vector<float>& x, std::int64_t B, std::int64_t W) {
  std::vector<double> r;
  for (std::int64_t b = 0; b < B; ++b) r.push_back(x[static_cast<std::size_t>(b * W + b % W)]);
  return r;
}

double ks_statistic(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::size_t i = 0, j = 0;
  double d = 0;
  while (i < a.size() && j < b.size()) {
    const double v = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= v) ++i;
    while (j < b.size() && b[j] <= v) ++j;
    d = std::max(d, std::abs(static_cast<double>(i) / a.size() - static_cast<double>(j) / b.size()));
  }
  return d;
}

struct Case {
  const char* market;
  std::int64_t window, steps;
  double var_tol, kurtosis_tol;
};

class DiffusionLearning : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
  }

  void run(const Case& k, std::uint64_t seed) {
    SCOPED_TRACE(std::string(k.market) + " seed " + std::to_string(seed));
    constexpr std::int64_t kWindows = 8192;
    const rl::MarketConfig market = rl::load_market_config(test::configs_dir() / "markets" / k.market);
    DiffusionTrainerSpec spec;
    spec.denoiser.hidden = 128;
    spec.denoiser.blocks = 3;
    spec.denoiser.expand = 2;
    spec.denoiser.embed = 64;
    spec.schedule.kind = models::ScheduleKind::linear;
    spec.schedule.steps = 1000;
    spec.sampler = models::SamplerSpec{models::SamplerKind::ddpm, 1000, 0.0};
    spec.optim.lr = 2e-3f;
    spec.optim.weight_decay = 0.0f;
    spec.optim.warmup_steps = 200;
    spec.optim.decay = Decay::cosine;
    spec.optim.grad_clip = 1.0f;
    spec.optim.steps = k.steps;
    spec.window = k.window;
    spec.assets = 1;
    spec.batch = 512;
    spec.sample_batch = kWindows;
    spec.seed = seed;
    WindowSpec ws;
    ws.window = k.window;
    ws.horizon = 1;
    ws.vol_horizon = 1;
    MarketWindows windows(market, ws, kWindows);
    GenerateFn source = [&windows](const WindowBatch& out, std::int64_t b, std::uint64_t s,
                                   const std::uint64_t* counter, cudaStream_t st) {
      windows.generate(out, b, s, counter, st);
    };
    DiffusionTrainer trainer(spec, source, ctx_->blas());
    for (std::int64_t i = 0; i < k.steps; ++i) trainer.step();
    trainer.evaluate(source, seed ^ 0x5bd1e995ull, 8192);
    const EvalMetrics m = trainer.wait_eval();
    EXPECT_LT(m.loss, 0.9) << "the epsilon loss of an untrained (zero) predictor is 1";

    gpu::DeviceBuffer<float> gen(static_cast<std::size_t>(kWindows * k.window));
    gpu::DeviceBuffer<float> real(static_cast<std::size_t>(kWindows * k.window));
    gpu::DeviceBuffer<std::uint64_t> counter(1);
    counter.zero(trainer.stream());
    trainer.sample(gen.data(), nullptr, kWindows, seed + 11, counter.data());
    WindowBatch held;
    held.x = real.data();
    windows.generate(held, kWindows, seed ^ 0x27d4eb2f165667c5ull, counter.data(), trainer.stream());
    const auto g = test::download(gen, trainer.stream()), r = test::download(real, trainer.stream());
    const Facts fg = facts_of(g, kWindows, k.window), fr = facts_of(r, kWindows, k.window);
    const double ks = ks_statistic(one_per_window(g, kWindows, k.window), one_per_window(r, kWindows, k.window));
    const double ks_critical = 1.628 * std::sqrt(2.0 / kWindows);  // alpha = 1%, n = m = 8192
    std::printf("[ %s seed %llu ] eps loss %.4f | var %.4f vs %.4f | kurtosis %.3f vs %.3f | ac1 %.4f vs %.4f | "
                "ac1|r| %.4f vs %.4f | KS %.4f (critical %.4f)\n",
                k.market, static_cast<unsigned long long>(seed), m.loss, fg.var, fr.var, fg.kurtosis, fr.kurtosis,
                fg.ac1, fr.ac1, fg.ac1_abs, fr.ac1_abs, ks, ks_critical);
    EXPECT_NEAR(fg.var / fr.var, 1.0, k.var_tol);
    EXPECT_NEAR(fg.kurtosis, fr.kurtosis, k.kurtosis_tol);
    EXPECT_NEAR(fg.ac1, fr.ac1, 0.05);
    EXPECT_NEAR(fg.ac1_abs, fr.ac1_abs, 0.05);
    EXPECT_LT(ks, ks_critical);

    // The anomaly score (denoising error at step 100) ranks held-out windows below the same
    // windows with their returns tripled, which the market never makes.
    gpu::DeviceBuffer<float> score(static_cast<std::size_t>(kWindows)), scaled(real.size());
    gpu::scale(scaled.data(), real.data(), 3.f, static_cast<std::int64_t>(real.size()), trainer.stream());
    trainer.features(nullptr, score.data(), real.data(), nullptr, kWindows, 100, seed, counter.data());
    const auto normal_scores = test::download(score, trainer.stream());
    trainer.features(nullptr, score.data(), scaled.data(), nullptr, kWindows, 100, seed, counter.data());
    const auto odd_scores = test::download(score, trainer.stream());
    double normal = 0, odd = 0;
    for (std::size_t i = 0; i < normal_scores.size(); ++i) {
      normal += normal_scores[i];
      odd += odd_scores[i];
    }
    EXPECT_LT(normal, odd) << "mean anomaly score of held-out windows vs tripled ones";
  }

  std::unique_ptr<gpu::DeviceContext> ctx_;
};

TEST_F(DiffusionLearning, OuWindowsMatchHeldOutStylizedFacts) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) run(Case{"ou_mean_reversion.toml", 16, 6000, 0.10, 0.5}, seed);
}

TEST_F(DiffusionLearning, RegimeWindowsMatchHeldOutStylizedFacts) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) run(Case{"regime2.toml", 32, 8000, 0.15, 1.0}, seed);
}

}  // namespace
