// PretrainTrainer on the device: the captured training step replays bitwise equal to the eager
// one; a training step makes no device-to-host (nor host-to-device) copy; the gradients in the arena are the loss's
// (central differences of the step's own loss); the learning-rate schedule follows its formula;
// validation with the linear baseline gives finite metrics over the windows asked for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gpu/context.hpp"
#include "gpu/transfer_audit.hpp"
#include "pretrain/linear_baseline.hpp"
#include "pretrain/market_windows.hpp"
#include "pretrain/trainer.hpp"
#include "rl/envs/market_config.hpp"
#include "support/gpu_test.hpp"
#include "support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;

namespace {

rl::MarketConfig ou_market() {
  return rl::load_market_config(test::configs_dir() / "markets" / "ou_mean_reversion.toml");
}

TrainerSpec small_spec(std::uint64_t seed) {
  TrainerSpec s;
  s.model.kind = "lstm";
  s.model.hidden = 8;
  s.model.layers = 2;
  s.task.kind = TaskKind::returns;
  s.task.loss = LossKind::mse;
  s.task.targets = 1;
  s.optim.lr = 1e-2f;
  s.optim.weight_decay = 0.01f;
  s.optim.warmup_steps = 2;
  s.optim.steps = 10;
  s.optim.grad_clip = 0.5f;
  s.window.window = 12;
  s.window.horizon = 1;
  s.assets = 1;
  s.batch = 32;
  s.seed = seed;
  return s;
}

class TrainerTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
  }
  GenerateFn source(const MarketWindows& w) {
    return [&w](const WindowBatch& out, std::int64_t b, std::uint64_t seed, const std::uint64_t* counter,
                cudaStream_t s) { w.generate(out, b, seed, counter, s); };
  }
  std::vector<float> params(PretrainTrainer& t) {
    return test::download(t.arena().params(), static_cast<std::size_t>(t.arena().padded_count()), t.stream());
  }
  std::unique_ptr<gpu::DeviceContext> ctx_;
};

TEST_F(TrainerTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const TrainerSpec spec = small_spec(seed_);
  MarketWindows windows(ou_market(), spec.window, spec.batch);
  PretrainTrainer eager(spec, source(windows), ctx_->blas());
  PretrainTrainer graph(spec, source(windows), ctx_->blas());
  ASSERT_EQ(params(eager), params(graph)) << "same seed, same initial parameters";
  for (int i = 0; i < 4; ++i) {
    eager.step_eager();
    graph.step();
  }
  const std::vector<float> a = params(eager), b = params(graph);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "parameters differ after 4 steps";
  const auto ma = test::download(eager.arena().adam_v(), a.size(), eager.stream());
  const auto mb = test::download(graph.arena().adam_v(), b.size(), graph.stream());
  EXPECT_EQ(std::memcmp(ma.data(), mb.data(), ma.size() * sizeof(float)), 0) << "Adam's v differs";
  const auto ca = test::download(eager.counters(), PretrainTrainer::kCounterCount, eager.stream());
  const auto cb = test::download(graph.counters(), PretrainTrainer::kCounterCount, graph.stream());
  EXPECT_EQ(ca, cb);
  EXPECT_EQ(ca[PretrainTrainer::kStep], 4u);
  EXPECT_EQ(ca[PretrainTrainer::kDataCounter], 4u);
  PretrainTrainer fresh(spec, source(windows), ctx_->blas());
  EXPECT_NE(a, params(fresh)) << "nothing trained";
}

TEST_F(TrainerTest, TrainingStepMakesNoDeviceToHostCopy) {
  std::string why;
  if (!gpu::TransferAudit::available(&why)) GTEST_SKIP() << "transfer audit unavailable: " << why;
  const TrainerSpec spec = small_spec(seed_);
  MarketWindows windows(ou_market(), spec.window, spec.batch);
  PretrainTrainer t(spec, source(windows), ctx_->blas());
  t.step();  // the capture
  t.publish_stats();
  t.wait_stats();
  FH_CHECK(cudaStreamSynchronize(t.stream()));
  gpu::TransferAudit audit;
  audit.start();
  for (int i = 0; i < 5; ++i) t.step();
  t.publish_stats();  // the periodic statistics leave through the exit, a kernel
  const gpu::TransferCounts c = audit.stop();
  EXPECT_EQ(c.device_to_host, 0) << c.str();
  EXPECT_EQ(c.host_to_device, 0) << c.str();
  const TrainStats st = t.wait_stats();
  EXPECT_EQ(st.step, 6u);
  EXPECT_EQ(st.steps, 5u);
  EXPECT_TRUE(std::isfinite(st.loss) && st.loss > 0) << st.loss;
  EXPECT_TRUE(std::isfinite(st.grad_norm) && st.grad_norm > 0) << st.grad_norm;
}

// The arena's gradients after a step are the gradients of that step's loss at the parameters
// before its update: central differences of the loss the step computes (the same batch: the data
// counter is reset), with the parameters set by upload.
TEST_F(TrainerTest, GradientsMatchFiniteDifferencesOfTheStepLoss) {
  SCOPED_TRACE(seed_note());
  TrainerSpec spec = small_spec(seed_);
  spec.batch = 16;
  MarketWindows windows(ou_market(), spec.window, spec.batch);
  PretrainTrainer t(spec, source(windows), ctx_->blas());
  gpu::ParameterArena& a = t.arena();
  const std::vector<float> p0 = params(t);
  auto loss_at = [&](const std::vector<float>& p) {
    FH_CHECK(cudaMemcpyAsync(a.params(), p.data(), p.size() * sizeof(float), cudaMemcpyHostToDevice, t.stream()));
    FH_CHECK(cudaMemsetAsync(t.counters(), 0, PretrainTrainer::kCounterCount * sizeof(std::uint64_t), t.stream()));
    t.step_eager();
    return static_cast<double>(test::download(t.scalars() + 3, 1, t.stream())[0]);
  };
  loss_at(p0);
  const std::vector<float> g = test::download(a.grads(), p0.size(), t.stream());
  const double h = 1e-2;
  int checked = 0;
  for (const auto& e : a.entries()) {
    for (std::int64_t j : {std::int64_t{0}, e.numel / 2, e.numel - 1}) {
      const std::size_t i = static_cast<std::size_t>(e.offset + j);
      std::vector<float> plus = p0, minus = p0;
      plus[i] += static_cast<float>(h);
      minus[i] -= static_cast<float>(h);
      const double fd = (loss_at(plus) - loss_at(minus)) / (2 * h);
      // fp32 loss (~1) over 2h = 2e-2: ~1e-5 of rounding; O(h^2) curvature.
      EXPECT_NEAR(g[i], fd, 2e-4 + 2e-2 * std::abs(fd)) << e.name << "[" << j << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

TEST_F(TrainerTest, LearningRateScheduleFollowsItsFormula) {
  for (Decay decay : {Decay::cosine, Decay::linear, Decay::none}) {
    SCOPED_TRACE(static_cast<int>(decay));
    TrainerSpec spec = small_spec(seed_);
    spec.optim.decay = decay;
    spec.optim.warmup_steps = 3;
    spec.optim.steps = 9;
    spec.optim.lr = 0.02f;
    MarketWindows windows(ou_market(), spec.window, spec.batch);
    PretrainTrainer t(spec, source(windows), ctx_->blas());
    for (int s = 0; s < 11; ++s) {
      t.step();
      const float got = test::download(t.scalars(), 1, t.stream())[0];
      double want = 0.02;
      if (s < 3) {
        want = 0.02 * (s + 1) / 3.0;
      } else if (decay != Decay::none) {
        const double p = std::min(1.0, (s - 3) / 6.0);
        want = decay == Decay::cosine ? 0.02 * 0.5 * (1 + std::cos(M_PI * p)) : 0.02 * (1 - p);
      }
      EXPECT_NEAR(got, want, 1e-7) << "step " << s;
    }
  }
}

TEST_F(TrainerTest, ValidationWithTheLinearBaseline) {
  const TrainerSpec spec = small_spec(seed_);
  MarketWindows windows(ou_market(), spec.window, spec.batch);
  PretrainTrainer t(spec, source(windows), ctx_->blas());
  LinearBaseline linear(spec.window.window * spec.assets, 1);
  t.fit_linear_baseline(linear, source(windows), 77, 4096);
  for (int i = 0; i < 3; ++i) t.step();
  t.evaluate(source(windows), 99, 1000, &linear, nullptr);
  const EvalMetrics m = t.wait_eval();
  EXPECT_EQ(m.windows, 1000u);
  EXPECT_TRUE(std::isfinite(m.loss) && m.loss > 0) << m.loss;
  EXPECT_TRUE(std::isfinite(m.r2)) << m.r2;
  EXPECT_NEAR(m.mse, m.loss, 1e-12);
  EXPECT_TRUE(std::isfinite(m.baseline_r2)) << m.baseline_r2;
  EXPECT_TRUE(std::isnan(m.accuracy));
  // The same windows each time: an evaluation without steps between gives the same numbers.
  t.evaluate(source(windows), 99, 1000, &linear, nullptr);
  const EvalMetrics again = t.wait_eval();
  EXPECT_EQ(std::memcmp(&m, &again, sizeof m), 0);
}

}  // namespace
