// The pretrain tasks on the device against float64 CPU references: each loss and its gradient
// w.r.t. the head output (fresh random inputs, NaN-poisoned outputs; the reference gradient itself
// checked by central differences of the reference loss), and the validation metrics over several
// batches (R^2, MSE, pinball, accuracy, the baselines' averages).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "pretrain/tasks.hpp"
#include "support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;

namespace {

// One batch of a task: the head output, the labels and the reference loss in double.
struct Problem {
  TaskSpec spec;
  std::int64_t batch = 0, stride = 0;
  std::vector<float> out, y;
  std::vector<std::int32_t> cls;
};

double ref_loss(const Problem& p, const std::vector<double>& out) {
  const TaskSpec& s = p.spec;
  const std::int64_t B = p.batch, K = s.targets, O = s.outputs();
  double acc = 0;
  switch (s.loss) {
    case LossKind::mse:
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t k = 0; k < K; ++k) {
          const double e = out[b * O + k] - p.y[b * p.stride + k];
          acc += e * e;
        }
      return acc / static_cast<double>(B * K);
    case LossKind::quantile: {
      const auto Q = static_cast<std::int64_t>(s.quantiles.size());
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t k = 0; k < K; ++k)
          for (std::int64_t q = 0; q < Q; ++q) {
            const double tau = s.quantiles[q], u = p.y[b * p.stride + k] - out[b * O + k * Q + q];
            acc += std::max(tau * u, (tau - 1) * u);
          }
      return acc / static_cast<double>(B * K * Q);
    }
    case LossKind::cross_entropy:
      for (std::int64_t b = 0; b < B; ++b) {
        double m = -std::numeric_limits<double>::infinity(), z = 0;
        for (std::int64_t j = 0; j < O; ++j) m = std::max(m, out[b * O + j]);
        for (std::int64_t j = 0; j < O; ++j) z += std::exp(out[b * O + j] - m);
        acc += m + std::log(z) - out[b * O + p.cls[b]];
      }
      return acc / static_cast<double>(B);
    case LossKind::binary_cross_entropy:
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t a = 0; a < K; ++a) {
          const double z = out[b * O + a], y = p.y[b * p.stride + a] > 0 ? 1.0 : 0.0;
          acc += -(y * std::log(1 / (1 + std::exp(-z))) + (1 - y) * std::log(1 - 1 / (1 + std::exp(-z))));
        }
      return acc / static_cast<double>(B * K);
  }
  return NAN;
}

// The exact gradient in double, and its check by central differences of ref_loss.
std::vector<double> ref_grad(const Problem& p) {
  const TaskSpec& s = p.spec;
  const std::int64_t B = p.batch, K = s.targets, O = s.outputs();
  std::vector<double> g(static_cast<std::size_t>(B * O), 0.0);
  switch (s.loss) {
    case LossKind::mse:
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t k = 0; k < K; ++k)
          g[b * O + k] = 2.0 * (static_cast<double>(p.out[b * O + k]) - p.y[b * p.stride + k]) / static_cast<double>(B * K);
      break;
    case LossKind::quantile: {
      const auto Q = static_cast<std::int64_t>(s.quantiles.size());
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t k = 0; k < K; ++k)
          for (std::int64_t q = 0; q < Q; ++q) {
            const double tau = s.quantiles[q];
            const double u = static_cast<double>(p.y[b * p.stride + k]) - p.out[b * O + k * Q + q];
            g[b * O + k * Q + q] = ((u < 0 ? 1.0 : 0.0) - tau) / static_cast<double>(B * K * Q);
          }
      break;
    }
    case LossKind::cross_entropy:
      for (std::int64_t b = 0; b < B; ++b) {
        double m = -std::numeric_limits<double>::infinity(), z = 0;
        for (std::int64_t j = 0; j < O; ++j) m = std::max(m, static_cast<double>(p.out[b * O + j]));
        for (std::int64_t j = 0; j < O; ++j) z += std::exp(p.out[b * O + j] - m);
        for (std::int64_t j = 0; j < O; ++j)
          g[b * O + j] = (std::exp(p.out[b * O + j] - m) / z - (j == p.cls[b] ? 1.0 : 0.0)) / static_cast<double>(B);
      }
      break;
    case LossKind::binary_cross_entropy:
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t a = 0; a < K; ++a) {
          const double z = p.out[b * O + a], y = p.y[b * p.stride + a] > 0 ? 1.0 : 0.0;
          g[b * O + a] = (1 / (1 + std::exp(-z)) - y) / static_cast<double>(B * K);
        }
      break;
  }
  return g;
}

Problem make_problem(TaskKind kind, LossKind loss, std::int64_t B, std::int64_t targets, std::int64_t stride,
                     std::int64_t classes, std::mt19937_64& rng) {
  Problem p;
  p.spec.kind = kind;
  p.spec.loss = loss;
  p.spec.targets = targets;
  p.spec.classes = classes;
  if (loss == LossKind::quantile) p.spec.quantiles = {0.1f, 0.5f, 0.9f};
  p.batch = B;
  p.stride = stride;
  p.out = test::random_normal(static_cast<std::size_t>(B * p.spec.outputs()), 0.f, 1.5f, rng);
  p.y = test::random_normal(static_cast<std::size_t>(std::max<std::int64_t>(B * stride, 1)), 0.f, 1.f, rng);
  if (classes > 0) {
    std::uniform_int_distribution<int> d(0, static_cast<int>(classes) - 1);
    p.cls.resize(static_cast<std::size_t>(B));
    for (auto& c : p.cls) c = d(rng);
  }
  return p;
}

class TasksTest : public test::GpuTest {
 protected:
  void check_loss(const Problem& p, const char* what) {
    SCOPED_TRACE(std::string(what) + ", " + seed_note());
    const std::int64_t O = p.spec.outputs();
    auto out = test::upload(p.out, stream());
    auto y = test::upload(p.y, stream());
    gpu::DeviceBuffer<std::int32_t> cls;
    if (!p.cls.empty()) cls = test::upload(p.cls, stream());
    gpu::DeviceBuffer<float> d_out(static_cast<std::size_t>(p.batch * O)), loss(1);
    test::poison(d_out, stream());
    test::poison(loss, stream());
    TaskTargets t{y.data(), p.stride, cls.empty() ? nullptr : cls.data()};
    task_loss(d_out.data(), loss.data(), out.data(), t, p.batch, p.spec, stream());
    const std::vector<float> got = test::download(d_out, stream());
    const float got_loss = test::download(loss, stream())[0];

    std::vector<double> od(p.out.begin(), p.out.end());
    const double want_loss = ref_loss(p, od);
    EXPECT_NEAR(got_loss, want_loss, 1e-6 * std::abs(want_loss) + 1e-7) << "loss";
    const std::vector<double> want = ref_grad(p);
    // fp32 outputs of a double computation: one rounding.
    EXPECT_TRUE(test::all_close(got, want, 1e-6, 1e-12)) << "gradient";

    // The reference gradient is the reference loss's: central differences in double.
    const double h = 1e-6;
    for (std::size_t i = 0; i < od.size(); i += std::max<std::size_t>(1, od.size() / 17)) {
      std::vector<double> plus = od, minus = od;
      plus[i] += h;
      minus[i] -= h;
      const double fd = (ref_loss(p, plus) - ref_loss(p, minus)) / (2 * h);
      EXPECT_NEAR(fd, want[i], 1e-6 * std::abs(want[i]) + 1e-9) << "finite difference at element " << i;
    }
  }
};

TEST_F(TasksTest, ReturnsMseLossAndGradient) {
  // stride 5 > targets 3: the labels are a row's first targets; 1500 x 3 elements > the block.
  check_loss(make_problem(TaskKind::returns, LossKind::mse, 1500, 3, 5, 0, rng()), "returns mse");
  check_loss(make_problem(TaskKind::returns, LossKind::mse, 1, 1, 1, 0, rng()), "returns mse, one window");
}

TEST_F(TasksTest, ReturnsQuantileLossAndGradient) {
  check_loss(make_problem(TaskKind::returns, LossKind::quantile, 129, 2, 2, 0, rng()), "returns quantile");
}

TEST_F(TasksTest, VolatilityMseLossAndGradient) {
  check_loss(make_problem(TaskKind::volatility, LossKind::mse, 77, 4, 4, 0, rng()), "volatility");
}

TEST_F(TasksTest, RegimeCrossEntropyLossAndGradient) {
  check_loss(make_problem(TaskKind::regime, LossKind::cross_entropy, 2100, 0, 0, 3, rng()), "regime");
}

TEST_F(TasksTest, DirectionBinaryCrossEntropyLossAndGradient) {
  check_loss(make_problem(TaskKind::direction, LossKind::binary_cross_entropy, 333, 2, 6, 0, rng()), "direction");
}

// The metrics over three batches against the float64 reference of all their windows.
TEST_F(TasksTest, RegressionMetricsOverBatches) {
  SCOPED_TRACE(seed_note());
  for (LossKind loss : {LossKind::mse, LossKind::quantile}) {
    SCOPED_TRACE(loss == LossKind::mse ? "mse" : "quantile");
    TaskSpec spec;
    spec.kind = TaskKind::returns;
    spec.loss = loss;
    spec.targets = 2;
    if (loss == LossKind::quantile) spec.quantiles = {0.25f, 0.5f, 0.75f};
    const std::int64_t K = 2, O = spec.outputs(), stride = 3;
    TaskMetrics metrics(spec);
    metrics.reset(stream());
    std::vector<double> sse(K), sy(K), syy(K);
    double pin = 0, n = 0;
    const int Q = static_cast<int>(spec.quantiles.size());
    for (std::int64_t B : {300, 1, 517}) {
      std::vector<float> y = test::random_normal(static_cast<std::size_t>(B * stride), 0.3f, 1.f, rng());
      std::vector<float> out(static_cast<std::size_t>(B * O));
      for (std::int64_t b = 0; b < B; ++b)  // predictions correlated with the labels: R^2 well above 0
        for (std::int64_t o = 0; o < O; ++o)
          out[b * O + o] = 0.7f * y[b * stride + (Q > 0 ? o / Q : o)] + std::normal_distribution<float>(0, 0.5f)(rng());
      auto d_out = test::upload(out, stream());
      auto d_y = test::upload(y, stream());
      metrics.accumulate(d_out.data(), TaskTargets{d_y.data(), stride, nullptr}, B, stream());
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t k = 0; k < K; ++k) {
          const double yv = y[b * stride + k];
          const double pred = Q > 0 ? out[b * O + k * Q + 1] : out[b * O + k];  // 0.5 is level 1
          sse[k] += (pred - yv) * (pred - yv);
          sy[k] += yv;
          syy[k] += yv * yv;
          for (int q = 0; q < Q; ++q) {
            const double tau = spec.quantiles[q], u = yv - out[b * O + k * Q + q];
            pin += std::max(tau * u, (tau - 1) * u);
          }
        }
      n += static_cast<double>(B);
    }
    const std::vector<double> baseline_r2 = {0.25, 0.75};
    auto d_base = test::upload(baseline_r2, stream());
    gpu::DeviceBuffer<EvalMetrics> m(1);
    test::poison(m, stream());
    metrics.finish(m.data(), d_base.data(), nullptr, stream());
    const EvalMetrics got = test::download(m, stream())[0];
    double r2 = 0, mse = 0;
    for (std::int64_t k = 0; k < K; ++k) {
      r2 += 1 - sse[k] / (syy[k] - sy[k] * sy[k] / n);
      mse += sse[k];
    }
    r2 /= K;
    mse /= n * K;
    EXPECT_EQ(got.windows, 818u);
    EXPECT_NEAR(got.r2, r2, 1e-9);
    EXPECT_GT(got.r2, 0.2);
    EXPECT_NEAR(got.mse, mse, 1e-9 * mse);
    EXPECT_NEAR(got.baseline_r2, 0.5, 1e-15);
    EXPECT_TRUE(std::isnan(got.accuracy));
    EXPECT_TRUE(std::isnan(got.baseline_accuracy));
    if (Q > 0) {
      const double want = pin / (n * K * Q);
      EXPECT_NEAR(got.pinball, want, 1e-9 * want);
      EXPECT_NEAR(got.loss, want, 1e-9 * want);
    } else {
      EXPECT_TRUE(std::isnan(got.pinball));
      EXPECT_NEAR(got.loss, mse, 1e-9 * mse);
    }
  }
}

TEST_F(TasksTest, ClassificationMetricsOverBatches) {
  SCOPED_TRACE(seed_note());
  // Regime: 3 classes; the HMM's right answers come in as a device count.
  TaskSpec spec;
  spec.kind = TaskKind::regime;
  spec.loss = LossKind::cross_entropy;
  spec.targets = 0;
  spec.classes = 3;
  TaskMetrics metrics(spec);
  metrics.reset(stream());
  double ce = 0, right = 0, n = 0;
  for (std::int64_t B : {700, 301}) {
    Problem p = make_problem(TaskKind::regime, LossKind::cross_entropy, B, 0, 0, 3, rng());
    p.out[0] = p.out[1];  // a tie: the lowest index wins
    auto d_out = test::upload(p.out, stream());
    auto d_cls = test::upload(p.cls, stream());
    metrics.accumulate(d_out.data(), TaskTargets{nullptr, 0, d_cls.data()}, B, stream());
    std::vector<double> od(p.out.begin(), p.out.end());
    ce += ref_loss(p, od) * static_cast<double>(B);
    for (std::int64_t b = 0; b < B; ++b) {
      const float* z = p.out.data() + b * 3;
      const auto arg = std::max_element(z, z + 3) - z;  // first maximum
      right += arg == p.cls[b] ? 1 : 0;
    }
    n += static_cast<double>(B);
  }
  auto hmm_right = test::upload(std::vector<std::uint64_t>{600}, stream());
  gpu::DeviceBuffer<EvalMetrics> m(1);
  test::poison(m, stream());
  metrics.finish(m.data(), nullptr, hmm_right.data(), stream());
  const EvalMetrics got = test::download(m, stream())[0];
  EXPECT_EQ(got.windows, 1001u);
  EXPECT_NEAR(got.loss, ce / n, 1e-9 * ce / n);
  EXPECT_DOUBLE_EQ(got.accuracy, right / n);
  EXPECT_DOUBLE_EQ(got.baseline_accuracy, 600.0 / n);
  EXPECT_TRUE(std::isnan(got.r2));

  // Direction: per asset, (z > 0) == (y > 0).
  TaskSpec dir;
  dir.kind = TaskKind::direction;
  dir.loss = LossKind::binary_cross_entropy;
  dir.targets = 2;
  TaskMetrics dm(dir);
  dm.reset(stream());
  Problem p = make_problem(TaskKind::direction, LossKind::binary_cross_entropy, 450, 2, 3, 0, rng());
  auto d_out = test::upload(p.out, stream());
  auto d_y = test::upload(p.y, stream());
  dm.accumulate(d_out.data(), TaskTargets{d_y.data(), 3, nullptr}, 450, stream());
  dm.finish(m.data(), nullptr, nullptr, stream());
  const EvalMetrics g2 = test::download(m, stream())[0];
  double r2 = 0;
  for (std::int64_t b = 0; b < 450; ++b)
    for (std::int64_t a = 0; a < 2; ++a) r2 += (p.out[b * 2 + a] > 0) == (p.y[b * 3 + a] > 0) ? 1 : 0;
  std::vector<double> od(p.out.begin(), p.out.end());
  EXPECT_DOUBLE_EQ(g2.accuracy, r2 / 900.0);
  EXPECT_NEAR(g2.loss, ref_loss(p, od), 1e-9);
  EXPECT_TRUE(std::isnan(g2.baseline_accuracy));
}

}  // namespace
