// LinearBaseline (GPU): on y = X w + b + noise accumulated over batches of several sizes, the Gram
// sums match float64 sums to 1e-12 and the solved weights a float64 CPU least squares (Householder
// QR of [Z; sqrt(ridge) I], no normal equations) to 1e-8 relative; R^2 on held-out batches matches
// the CPU's 1 - SSE / SST to 1e-12; on AR(1) windows it recovers phi (and zeros) within 5 standard
// errors; on the market's OU windows it recovers the population best linear predictor (Yule-Walker
// from the OU autocovariance) and its R^2; a rerun and a CUDA graph replay are bitwise equal to eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "gpu/graph.hpp"
#include "pretrain/linear_baseline.hpp"
#include "pretrain/market_windows.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::pretrain {
namespace {

using test::download;

class LinearBaselineTest : public test::GpuTest {};

// Row-major (rows x cols) least squares min |A w - b|^2 for every column of b (rows x k) by
// Householder QR in double; returns w (cols x k).
std::vector<double> qr_least_squares(std::vector<double> A, std::vector<double> b, std::int64_t rows,
                                     std::int64_t cols, std::int64_t k) {
  for (std::int64_t j = 0; j < cols; ++j) {
    double norm = 0.0;
    for (std::int64_t i = j; i < rows; ++i) norm += A[i * cols + j] * A[i * cols + j];
    norm = std::sqrt(norm);
    const double alpha = A[j * cols + j] > 0 ? -norm : norm;
    std::vector<double> v(rows - j);
    for (std::int64_t i = j; i < rows; ++i) v[i - j] = A[i * cols + j];
    v[0] -= alpha;
    double vv = 0.0;
    for (double e : v) vv += e * e;
    if (vv == 0.0) continue;
    auto reflect = [&](std::vector<double>& M, std::int64_t mc, std::int64_t c) {
      double dot = 0.0;
      for (std::int64_t i = j; i < rows; ++i) dot += v[i - j] * M[i * mc + c];
      const double f = 2.0 * dot / vv;
      for (std::int64_t i = j; i < rows; ++i) M[i * mc + c] -= f * v[i - j];
    };
    for (std::int64_t c = j; c < cols; ++c) reflect(A, cols, c);
    for (std::int64_t c = 0; c < k; ++c) reflect(b, k, c);
  }
  std::vector<double> w(cols * k);
  for (std::int64_t c = 0; c < k; ++c)
    for (std::int64_t j = cols - 1; j >= 0; --j) {
      double s = b[j * k + c];
      for (std::int64_t m = j + 1; m < cols; ++m) s -= A[j * cols + m] * w[m * k + c];
      w[j * k + c] = s / A[j * cols + j];
    }
  return w;
}

// Solves the symmetric positive definite (n x n) system S w = r by Gaussian elimination (host).
std::vector<double> solve_spd(std::vector<double> S, std::vector<double> r, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t i = j + 1; i < n; ++i) {
      const double f = S[i * n + j] / S[j * n + j];
      for (std::int64_t m = j; m < n; ++m) S[i * n + m] -= f * S[j * n + m];
      r[i] -= f * r[j];
    }
  std::vector<double> w(n);
  for (std::int64_t j = n - 1; j >= 0; --j) {
    double s = r[j];
    for (std::int64_t m = j + 1; m < n; ++m) s -= S[j * n + m] * w[m];
    w[j] = s / S[j * n + j];
  }
  return w;
}

struct Data {
  std::vector<float> x, y;  // (n, d), (n, k)
  std::int64_t n;
};

// n rows of y = X w + b + 0.3 noise with correlated features (X = G M, M mixing).
Data synthetic(std::int64_t n, std::int64_t d, std::int64_t k, const std::vector<double>& w, std::mt19937_64& rng) {
  std::normal_distribution<double> z(0.0, 1.0);
  Data out{std::vector<float>(n * d), std::vector<float>(n * k), n};
  for (std::int64_t i = 0; i < n; ++i) {
    double prev = 0.0;
    for (std::int64_t p = 0; p < d; ++p) {
      prev = 0.5 * prev + z(rng) + (p % 3 == 0 ? 2.0 : 0.0);
      out.x[i * d + p] = static_cast<float>(prev);
    }
    for (std::int64_t c = 0; c < k; ++c) {
      double v = w[d * k + c] + 0.3 * z(rng);
      for (std::int64_t p = 0; p < d; ++p) v += static_cast<double>(out.x[i * d + p]) * w[p * k + c];
      out.y[i * k + c] = static_cast<float>(v);
    }
  }
  return out;
}

// Feeds rows [begin, end) of `data` in one call.
void feed(LinearBaseline& lb, const Data& data, std::int64_t begin, std::int64_t end, bool eval, cudaStream_t s) {
  const std::int64_t d = lb.features(), k = lb.targets(), n = end - begin;
  const auto x = test::upload(std::vector<float>(data.x.begin() + begin * d, data.x.begin() + end * d));
  const auto y = test::upload(std::vector<float>(data.y.begin() + begin * k, data.y.begin() + end * k));
  if (eval)
    lb.evaluate(x.data(), y.data(), n, s);
  else
    lb.accumulate(x.data(), y.data(), n, s);
  FH_CHECK(cudaStreamSynchronize(s));  // x and y die here
}

TEST_F(LinearBaselineTest, SolvesLeastSquaresAndR2LikeTheCpu) {
  SCOPED_TRACE(seed_note());
  const std::int64_t d = 24, k = 3, D = d + 1;
  std::normal_distribution<double> z(0.0, 1.0);
  std::vector<double> w_true(D * k);
  for (double& v : w_true) v = z(rng());
  const Data fit = synthetic(1058, d, k, w_true, rng());
  const Data val = synthetic(700, d, k, w_true, rng());
  LinearBaseline lb(d, k);
  FH_CHECK(cudaMemsetAsync(const_cast<double*>(lb.weights()), 0xFF, D * k * sizeof(double), stream()));
  lb.reset_fit(stream());
  const std::int64_t cuts[] = {0, 300, 557, 558, 1058};  // batches of 300, 257, 1 and 500 rows
  for (int b = 0; b < 4; ++b) feed(lb, fit, cuts[b], cuts[b + 1], false, stream());
  lb.solve(stream());

  // The sums against float64 host sums of the same f32 values.
  std::vector<double> Z(fit.n * D), Y(fit.n * k);
  for (std::int64_t i = 0; i < fit.n; ++i) {
    for (std::int64_t p = 0; p < d; ++p) Z[i * D + p] = fit.x[i * d + p];
    Z[i * D + d] = 1.0;
    for (std::int64_t c = 0; c < k; ++c) Y[i * k + c] = fit.y[i * k + c];
  }
  std::vector<double> G(D * D, 0.0);
  for (std::int64_t i = 0; i < fit.n; ++i)
    for (std::int64_t p = 0; p < D; ++p)
      for (std::int64_t q = 0; q < D; ++q) G[p * D + q] += Z[i * D + p] * Z[i * D + q];
  const std::vector<double> g_gpu = download(lb.gram(), D * D, stream());
  for (std::int64_t e = 0; e < D * D; ++e)
    ASSERT_NEAR(g_gpu[e], G[e], 1e-12 * (1.0 + std::abs(G[e]))) << "Gram entry " << e / D << ", " << e % D;
  std::vector<double> ZY(D * k, 0.0);
  for (std::int64_t i = 0; i < fit.n; ++i)
    for (std::int64_t p = 0; p < D; ++p)
      for (std::int64_t c = 0; c < k; ++c) ZY[p * k + c] += Z[i * D + p] * Y[i * k + c];
  const std::vector<double> zy_gpu = download(lb.moments(), D * k, stream());
  for (std::int64_t e = 0; e < D * k; ++e)
    ASSERT_NEAR(zy_gpu[e], ZY[e], 1e-12 * (1.0 + std::abs(ZY[e]))) << "z^T y entry " << e;

  // Least squares with the same ridge rows: [Z; sqrt(ridge) I] w = [Y; 0].
  double trace = 0.0;
  for (std::int64_t p = 0; p < D; ++p) trace += G[p * D + p];
  const double ridge = 1e-10 * trace / D;
  std::vector<double> A = Z, rhs = Y;
  for (std::int64_t p = 0; p < D; ++p) {
    std::vector<double> row(D, 0.0);
    row[p] = std::sqrt(ridge);
    A.insert(A.end(), row.begin(), row.end());
    for (std::int64_t c = 0; c < k; ++c) rhs.push_back(0.0);
  }
  const std::vector<double> w_cpu = qr_least_squares(A, rhs, fit.n + D, D, k);
  const std::vector<double> w_gpu = download(lb.weights(), D * k, stream());
  double scale = 0.0;
  for (double v : w_cpu) scale = std::max(scale, std::abs(v));
  for (std::int64_t e = 0; e < D * k; ++e)
    ASSERT_NEAR(w_gpu[e], w_cpu[e], 1e-8 * scale) << "weight " << e / k << ", target " << e % k;
  for (std::int64_t e = 0; e < D * k; ++e)
    EXPECT_NEAR(w_cpu[e], w_true[e], 0.5) << "the fit found the generating weights (a sanity check of the data)";

  // R^2 on held-out rows, two batches, against the CPU's sums with the device's weights.
  lb.reset_eval(stream());
  feed(lb, val, 0, 333, true, stream());
  feed(lb, val, 333, val.n, true, stream());
  lb.finish_eval(stream());
  const std::vector<double> r2 = download(lb.r2(), k, stream());
  for (std::int64_t c = 0; c < k; ++c) {
    double sse = 0.0, sy = 0.0, syy = 0.0;
    for (std::int64_t i = 0; i < val.n; ++i) {
      double yhat = w_gpu[d * k + c];
      for (std::int64_t p = 0; p < d; ++p) yhat += static_cast<double>(val.x[i * d + p]) * w_gpu[p * k + c];
      const double y = val.y[i * k + c];
      sse += (y - yhat) * (y - yhat);
      sy += y;
      syy += y * y;
    }
    const double want = 1.0 - sse / (syy - sy * sy / static_cast<double>(val.n));
    EXPECT_NEAR(r2[c], want, 1e-12) << "target " << c;
    EXPECT_GT(r2[c], 0.9) << "target " << c;
  }
}

// x_t = phi x_t-1 + e_t (stationary start): the best linear predictor of x_W from x_0 .. x_W-1 is
// phi x_W-1, so the fit recovers phi on the last feature and 0 elsewhere (intercept included), each
// within 5 standard errors sqrt(sigma_e^2 [G^-1]_jj), and R^2 = phi^2 within 5 standard errors.
TEST_F(LinearBaselineTest, RecoversTheAr1Coefficient) {
  SCOPED_TRACE(seed_note());
  const std::int64_t W = 16, n = 1 << 17;
  const double phi = 0.7;
  std::normal_distribution<double> z(0.0, 1.0);
  Data data{std::vector<float>(n * W), std::vector<float>(n), n};
  for (std::int64_t i = 0; i < n; ++i) {
    double x = z(rng()) / std::sqrt(1 - phi * phi);
    for (std::int64_t t = 0; t < W; ++t) {
      data.x[i * W + t] = static_cast<float>(x);
      x = phi * static_cast<double>(data.x[i * W + t]) + z(rng());
    }
    data.y[i] = static_cast<float>(x);
  }
  LinearBaseline lb(W, 1);
  lb.reset_fit(stream());
  feed(lb, data, 0, n / 2, false, stream());
  feed(lb, data, n / 2, n, false, stream());
  lb.solve(stream());
  const std::vector<double> w = download(lb.weights(), W + 1, stream());
  // Standard errors from the population Gram of the features: n Var(x) phi^|i-j| / (1 - phi^2).
  std::vector<double> S((W + 1) * (W + 1), 0.0);
  for (std::int64_t p = 0; p < W; ++p)
    for (std::int64_t q = 0; q < W; ++q) S[p * (W + 1) + q] = std::pow(phi, std::abs(static_cast<double>(p - q))) / (1 - phi * phi);
  S[W * (W + 1) + W] = 1.0;
  for (std::int64_t j = 0; j <= W; ++j) {
    std::vector<double> e(W + 1, 0.0);
    e[j] = 1.0;
    const double inv_jj = solve_spd(S, e, W + 1)[j];
    const double se = std::sqrt(inv_jj / static_cast<double>(n));
    const double want = j == W - 1 ? phi : 0.0;
    EXPECT_NEAR(w[j], want, 5 * se) << "coefficient " << j << (j == W ? " (intercept)" : "");
  }
  lb.reset_eval(stream());
  feed(lb, data, 0, n, true, stream());
  lb.finish_eval(stream());
  EXPECT_NEAR(download(lb.r2(), 1, stream())[0], phi * phi, 5 * 2 * phi * std::sqrt((1 - phi * phi) / n) + 1e-3);
}

// The market's OU windows (kappa 100, normalized returns): the population best linear predictor of
// the next return from the window solves Gamma w = gamma with the OU return autocovariance
// gamma_0 = (1 - d) / (kappa dt), gamma_k = -(1 - d)^2 d^(k-1) / (2 kappa dt); the fit on 2^18
// windows recovers it within 5 standard errors and its R^2 = gamma^T w / gamma_0 within 0.01.
TEST_F(LinearBaselineTest, RecoversTheBestLinearPredictorOfOuReturns) {
  SCOPED_TRACE(seed_note());
  rl::MarketConfig c;
  c.process = rl::PriceProcess::ou;
  c.initial_price = {100.0};
  c.kappa = {100.0};
  c.theta = {0.0};
  c.sigma = {0.3};
  rl::validate(c);
  const std::int64_t W = 8, B = 65536;
  const MarketWindows windows(c, WindowSpec{W, 1, 1}, B);
  gpu::DeviceBuffer<float> x(B * W), y(B);
  gpu::DeviceBuffer<std::uint64_t> counter(1);
  LinearBaseline lb(W, 1);
  lb.reset_fit(stream());
  for (std::uint64_t b = 0; b < 4; ++b) {
    counter.upload(std::span<const std::uint64_t>(&b, 1), stream());
    windows.generate(WindowBatch{x.data(), y.data(), nullptr, nullptr}, B, seed_, counter.data(), stream());
    lb.accumulate(x.data(), y.data(), B, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));  // b dies
  }
  lb.solve(stream());
  const double kdt = 100.0 * c.dt, d = std::exp(-kdt);
  auto gamma = [&](std::int64_t lag) {
    return lag == 0 ? (1 - d) / kdt : -(1 - d) * (1 - d) * std::pow(d, static_cast<double>(lag - 1)) / (2 * kdt);
  };
  std::vector<double> Gam(W * W), g(W);
  for (std::int64_t p = 0; p < W; ++p) {
    for (std::int64_t q = 0; q < W; ++q) Gam[p * W + q] = gamma(std::abs(p - q));
    g[p] = gamma(W - p);  // feature p (oldest first) is W - p steps before the target
  }
  const std::vector<double> w_pop = solve_spd(Gam, g, W);
  double explained = 0.0;
  for (std::int64_t p = 0; p < W; ++p) explained += g[p] * w_pop[p];
  const double resid = gamma(0) - explained;
  const std::vector<double> w = download(lb.weights(), W + 1, stream());
  const double n = 4.0 * B;
  for (std::int64_t j = 0; j < W; ++j) {
    std::vector<double> e(W, 0.0);
    e[j] = 1.0;
    const double se = std::sqrt(resid * solve_spd(Gam, e, W)[j] / n);
    EXPECT_NEAR(w[j], w_pop[j], 5 * se) << "coefficient " << j;
  }
  EXPECT_NEAR(w[W], 0.0, 5 * std::sqrt(resid / n)) << "intercept";
  lb.reset_eval(stream());
  const std::uint64_t held_out = 1000;
  counter.upload(std::span<const std::uint64_t>(&held_out, 1), stream());
  windows.generate(WindowBatch{x.data(), y.data(), nullptr, nullptr}, B, seed_, counter.data(), stream());
  lb.evaluate(x.data(), y.data(), B, stream());
  lb.finish_eval(stream());
  EXPECT_NEAR(download(lb.r2(), 1, stream())[0], explained / gamma(0), 0.01);
  FH_CHECK(cudaStreamSynchronize(stream()));
}

TEST_F(LinearBaselineTest, RerunAndGraphReplayAreBitwiseEager) {
  SCOPED_TRACE(seed_note());
  const std::int64_t d = 40, k = 2, n = 999;
  std::normal_distribution<double> z(0.0, 1.0);
  std::vector<double> w_true((d + 1) * k);
  for (double& v : w_true) v = z(rng());
  const Data data = synthetic(n, d, k, w_true, rng());
  const auto x = test::upload(data.x), y = test::upload(data.y);
  auto run = [&](LinearBaseline& lb, cudaStream_t s) {
    lb.reset_fit(s);
    lb.accumulate(x.data(), y.data(), n, s);
    lb.accumulate(x.data(), y.data(), 17, s);
    lb.solve(s);
    lb.reset_eval(s);
    lb.evaluate(x.data(), y.data(), n, s);
    lb.finish_eval(s);
  };
  LinearBaseline a(d, k), b(d, k), g(d, k);
  run(a, stream());
  run(b, stream());
  gpu::CudaGraph graph;
  graph.capture(stream(), [&](cudaStream_t cs) { run(g, cs); });
  ASSERT_TRUE(graph.captured());
  graph.replay(stream());
  graph.replay(stream());
  const std::vector<double> wa = download(a.weights(), (d + 1) * k, stream()), ra = download(a.r2(), k, stream());
  for (LinearBaseline* o : {&b, &g}) {
    const std::vector<double> wo = download(o->weights(), (d + 1) * k, stream()), ro = download(o->r2(), k, stream());
    EXPECT_EQ(std::memcmp(wa.data(), wo.data(), wa.size() * sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(ra.data(), ro.data(), ra.size() * sizeof(double)), 0);
  }
}

}  // namespace
}  // namespace foxhunt::pretrain
