// DiffusionTrainer on the device: the captured training step replays bitwise equal to the eager
// one (with a conditioning window); a training step and a sampling call make no host transfer;
// the gradients in the arena are the step loss's (central differences); validation is the same
// number twice (fixed windows, steps and noise); the features are the denoising error at a fixed
// step and the denoiser's last hidden state.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gpu/context.hpp"
#include "gpu/transfer_audit.hpp"
#include "models/diffusion/noising.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/market_windows.hpp"
#include "rl/envs/market_config.hpp"
#include "support/gpu_test.hpp"
#include "support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;

namespace {

rl::MarketConfig ou_market() {
  return rl::load_market_config(test::configs_dir() / "markets" / "ou_mean_reversion.toml");
}

DiffusionTrainerSpec small_spec(std::uint64_t seed, std::int64_t context) {
  DiffusionTrainerSpec s;
  s.denoiser.hidden = 16;
  s.denoiser.blocks = 2;
  s.denoiser.expand = 2;
  s.denoiser.embed = 8;
  s.schedule.kind = models::ScheduleKind::linear;
  s.schedule.steps = 100;
  s.sampler = models::SamplerSpec{models::SamplerKind::ddim, 10, 0.0};
  s.optim.lr = 3e-3f;
  s.optim.warmup_steps = 2;
  s.optim.steps = 10;
  s.optim.grad_clip = 0.5f;
  s.window = 8;
  s.context = context;
  s.assets = 1;
  s.batch = 32;
  s.sample_batch = 64;
  s.seed = seed;
  return s;
}

class DiffusionTrainerTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
  }
  static WindowSpec window_of(const DiffusionTrainerSpec& s) {
    WindowSpec w;
    w.window = s.context + s.window;
    w.horizon = 1;
    w.vol_horizon = 1;
    return w;
  }
  GenerateFn source(const MarketWindows& w) {
    return [&w](const WindowBatch& out, std::int64_t b, std::uint64_t seed, const std::uint64_t* counter,
                cudaStream_t s) { w.generate(out, b, seed, counter, s); };
  }
  std::vector<float> params(DiffusionTrainer& t) {
    return test::download(t.arena().params(), static_cast<std::size_t>(t.arena().padded_count()), t.stream());
  }
  std::unique_ptr<gpu::DeviceContext> ctx_;
};

TEST_F(DiffusionTrainerTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const DiffusionTrainerSpec spec = small_spec(seed_, 4);
  MarketWindows windows(ou_market(), window_of(spec), std::max(spec.batch, spec.sample_batch));
  DiffusionTrainer eager(spec, source(windows), ctx_->blas());
  DiffusionTrainer graph(spec, source(windows), ctx_->blas());
  ASSERT_EQ(params(eager), params(graph)) << "same seed, same initial parameters";
  for (int i = 0; i < 4; ++i) {
    eager.step_eager();
    graph.step();
  }
  const std::vector<float> a = params(eager), b = params(graph);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "parameters differ after 4 steps";
  const auto ca = test::download(eager.counters(), DiffusionTrainer::kCounterCount, eager.stream());
  const auto cb = test::download(graph.counters(), DiffusionTrainer::kCounterCount, graph.stream());
  EXPECT_EQ(ca, cb);
  EXPECT_EQ(ca[DiffusionTrainer::kStep], 4u);
  DiffusionTrainer fresh(spec, source(windows), ctx_->blas());
  EXPECT_NE(a, params(fresh)) << "nothing trained";
}

TEST_F(DiffusionTrainerTest, TrainingAndSamplingMakeNoHostTransfer) {
  std::string why;
  if (!gpu::TransferAudit::available(&why)) GTEST_SKIP() << "transfer audit unavailable: " << why;
  const DiffusionTrainerSpec spec = small_spec(seed_, 0);
  MarketWindows windows(ou_market(), window_of(spec), std::max(spec.batch, spec.sample_batch));
  DiffusionTrainer t(spec, source(windows), ctx_->blas());
  gpu::DeviceBuffer<float> out(static_cast<std::size_t>(spec.sample_batch * t.dim()));
  gpu::DeviceBuffer<std::uint64_t> counter(1);
  counter.zero(t.stream());
  t.step();  // the capture
  t.publish_stats();
  t.wait_stats();
  FH_CHECK(cudaStreamSynchronize(t.stream()));
  gpu::TransferAudit audit;
  audit.start();
  for (int i = 0; i < 5; ++i) t.step();
  t.sample(out.data(), nullptr, spec.sample_batch, 3, counter.data());
  t.publish_stats();
  const gpu::TransferCounts c = audit.stop();
  EXPECT_EQ(c.device_to_host, 0) << c.str();
  EXPECT_EQ(c.host_to_device, 0) << c.str();
  const TrainStats st = t.wait_stats();
  EXPECT_EQ(st.steps, 5u);
  EXPECT_TRUE(std::isfinite(st.loss) && st.loss > 0) << st.loss;
  for (const float v : test::download(out, t.stream())) ASSERT_TRUE(std::isfinite(v));
}

// The arena's gradients after a step are those of that step's loss at the parameters before the
// update (the same batch, steps and noise: the counters are reset before each evaluation).
TEST_F(DiffusionTrainerTest, GradientsMatchFiniteDifferencesOfTheStepLoss) {
  SCOPED_TRACE(seed_note());
  DiffusionTrainerSpec spec = small_spec(seed_, 4);
  spec.batch = 16;
  MarketWindows windows(ou_market(), window_of(spec), std::max(spec.batch, spec.sample_batch));
  DiffusionTrainer t(spec, source(windows), ctx_->blas());
  gpu::ParameterArena& a = t.arena();
  // Random parameters: the output layer's zero init would leave every other gradient zero.
  for (const auto& e : a.entries())
    a.upload_param(e.name, test::random_uniform(static_cast<std::size_t>(e.numel), -0.4f, 0.4f, rng()), t.stream());
  const std::vector<float> p0 = params(t);
  auto loss_at = [&](const std::vector<float>& p) {
    FH_CHECK(cudaMemcpyAsync(a.params(), p.data(), p.size() * sizeof(float), cudaMemcpyHostToDevice, t.stream()));
    FH_CHECK(cudaMemsetAsync(t.counters(), 0, DiffusionTrainer::kCounterCount * sizeof(std::uint64_t), t.stream()));
    t.step_eager();
    return static_cast<double>(test::download(t.scalars() + 3, 1, t.stream())[0]);
  };
  loss_at(p0);
  const std::vector<float> g = test::download(a.grads(), p0.size(), t.stream());
  const double h = 1e-2;
  for (const auto& e : a.entries())
    for (std::int64_t j : {std::int64_t{0}, e.numel / 2, e.numel - 1}) {
      const std::size_t i = static_cast<std::size_t>(e.offset + j);
      std::vector<float> p = p0;
      p[i] = p0[i] + static_cast<float>(h);
      const double lp = loss_at(p);
      p[i] = p0[i] - static_cast<float>(h);
      const double lm = loss_at(p);
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(fd, g[i], 3e-2 * std::max(std::abs(static_cast<double>(g[i])), 2e-2)) << e.name << "[" << j << "]";
    }
}

TEST_F(DiffusionTrainerTest, ValidationIsReproducible) {
  const DiffusionTrainerSpec spec = small_spec(seed_, 0);
  MarketWindows windows(ou_market(), window_of(spec), std::max(spec.batch, spec.sample_batch));
  DiffusionTrainer t(spec, source(windows), ctx_->blas());
  t.step();
  t.evaluate(source(windows), 77, 100);
  const EvalMetrics a = t.wait_eval();
  t.evaluate(source(windows), 77, 100);
  const EvalMetrics b = t.wait_eval();
  EXPECT_EQ(a.windows, 100u);
  EXPECT_TRUE(std::isfinite(a.loss) && a.loss > 0) << a.loss;
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_TRUE(std::isnan(a.r2));
}

// features(): the score is the mean squared error of the denoiser's noise prediction on x0 noised
// at the given step (reproduced here: the same noising, then a forward of the denoiser itself),
// the embedding its last hidden state.
TEST_F(DiffusionTrainerTest, FeaturesAreTheDenoisingErrorAndTheLastHiddenState) {
  SCOPED_TRACE(seed_note());
  const DiffusionTrainerSpec spec = small_spec(seed_, 4);
  MarketWindows windows(ou_market(), window_of(spec), std::max(spec.batch, spec.sample_batch));
  DiffusionTrainer t(spec, source(windows), ctx_->blas());
  gpu::ParameterArena& a = t.arena();
  for (const auto& e : a.entries())
    a.upload_param(e.name, test::random_uniform(static_cast<std::size_t>(e.numel), -0.4f, 0.4f, rng()), t.stream());
  const std::int64_t B = 50, D = t.dim(), Dc = t.context_dim(), H = spec.denoiser.hidden;
  const auto x0 = test::random_normal(static_cast<std::size_t>(B * D), 0.f, 1.f, rng());
  const auto ctx = test::random_normal(static_cast<std::size_t>(B * Dc), 0.f, 1.f, rng());
  auto dx0 = test::upload(x0, t.stream()), dctx = test::upload(ctx, t.stream());
  auto counter = test::upload(std::vector<std::uint64_t>{3}, t.stream());
  gpu::DeviceBuffer<float> emb(static_cast<std::size_t>(B * H)), score(static_cast<std::size_t>(B));
  test::poison(emb, t.stream());
  test::poison(score, t.stream());
  const std::int32_t step = 37;
  t.features(emb.data(), score.data(), dx0.data(), dctx.data(), B, step, 99, counter.data());
  const auto got_emb = test::download(emb, t.stream()), got_score = test::download(score, t.stream());

  gpu::DeviceBuffer<float> xt(x0.size()), eps(x0.size()), eps_hat(x0.size());
  gpu::DeviceBuffer<std::int32_t> steps(static_cast<std::size_t>(B));
  models::diffusion_noising_at(xt.data(), eps.data(), steps.data(), dx0.data(), B, D, t.schedule().device(), step, 99,
                               counter.data(), t.stream());
  for (const auto v : test::download(steps, t.stream())) ASSERT_EQ(v, step);
  gpu::DeviceBuffer<std::byte> ws(t.denoiser().workspace_bytes(B));
  const models::Workspace view{ws.data(), B, false};
  t.denoiser().forward(eps_hat.data(), xt.data(), dctx.data(), steps.data(), B, view, ctx_->blas());
  const auto he = test::download(eps, t.stream()), hh = test::download(eps_hat, t.stream());
  const auto hidden = test::download(t.denoiser().last_hidden(view), static_cast<std::size_t>(B * H), t.stream());
  std::vector<double> want;
  for (std::int64_t b = 0; b < B; ++b) {
    double sum = 0;
    for (std::int64_t j = 0; j < D; ++j) {
      const double d = static_cast<double>(hh[static_cast<std::size_t>(b * D + j)]) - he[static_cast<std::size_t>(b * D + j)];
      sum += d * d;
    }
    want.push_back(sum / static_cast<double>(D));
  }
  EXPECT_TRUE(test::all_close(got_score, want, 1e-5, 1e-7));
  EXPECT_TRUE(test::all_close(got_emb, std::vector<double>(hidden.begin(), hidden.end()), 1e-6, 1e-7));
}

}  // namespace
