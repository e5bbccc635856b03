// MarketWindows (GPU): every window and label against a float64 CPU reference of the same law that
// reproduces every Philox draw (GBM with regimes, jumps and correlation over 5 assets; OU with
// regimes and its burn-in); a batch is a pure function of (seed, counter) (bitwise repeat, other
// counter or seed differs, batch-size independent, labels leave x unchanged, CUDA graph replay with
// an in-graph counter advance == eager); the moments of OU and GBM windows and their continuation
// by next_returns; zero-volatility GBM bitwise against the exact path; regime labels aligned with
// the returns they generated; regime frequencies against the stationary law (chi-square).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/graph.hpp"
#include "gpu/philox.cuh"
#include "pretrain/market_windows.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_params.hpp"
#include "tests/rl/envs_stationary.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

namespace foxhunt::pretrain {
namespace {

using test::download;

class MarketWindowsTest : public test::GpuTest {};

__global__ void advance_counter(std::uint64_t* c) { *c += 1; }

// The device buffers of one batch (NaN-poisoned), and the batch downloaded.
struct Batch {
  gpu::DeviceBuffer<float> x, next, vol;
  gpu::DeviceBuffer<std::int32_t> regime;
  Batch(std::int64_t b, const WindowSpec& s, std::int64_t assets)
      : x(b * s.window * assets), next(b * s.horizon * assets), vol(b * assets), regime(b) {}
  WindowBatch out(bool labels = true) {
    if (!labels) return WindowBatch{x.data(), nullptr, nullptr, nullptr};
    return WindowBatch{x.data(), next.data(), vol.data(), regime.data()};
  }
  void poison(cudaStream_t s) {
    test::poison(x, s);
    test::poison(next, s);
    test::poison(vol, s);
    test::poison(regime, s);
  }
};
struct Host {
  std::vector<float> x, next, vol;
  std::vector<std::int32_t> regime;
};
Host fetch(Batch& b, cudaStream_t s) { return Host{download(b.x, s), download(b.next, s), download(b.vol, s), download(b.regime, s)}; }

gpu::DeviceBuffer<std::uint64_t> device_counter(std::uint64_t c) { return test::upload(std::vector<std::uint64_t>{c}); }

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- the float64 CPU reference: market.hpp's law, every draw reproduced from gpu/philox.cuh ----

float lane_of(float4 v, int k) { return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w)); }
int cdf_index(const float* cdf, int count, float u) {
  int k = 0;
  while (k < count - 1 && u > cdf[k]) ++k;
  return k;
}
std::uint64_t base_of(std::uint64_t c, std::int64_t j) { return ((c << 20) | static_cast<std::uint64_t>(j)) << 4; }

void host_step(std::vector<double>& x, int& regime, const rl::MarketParams& p, std::uint64_t seed, std::uint32_t i,
               std::uint64_t base) {
  const int A = p.assets, r = regime;
  std::vector<float> eps(A);
  for (int a = 0; a < A; ++a) eps[a] = lane_of(gpu::normal4(seed, i, base | static_cast<std::uint64_t>(a / 4)), a % 4);
  std::vector<double> jump(A, 0.0);
  if (p.jumps)
    for (int a = 0; a < A; ++a) {
      const double u = 1.0 - lane_of(gpu::uniform4(seed, i, base | static_cast<std::uint64_t>(4 + a / 4)), a % 4);
      int count = 0;
      double pk = p.jump_p0, cdf = p.jump_p0;
      while (u >= cdf && count < 32) {
        ++count;
        pk *= p.jump_lambda_dt / count;
        cdf += pk;
      }
      const float z = lane_of(gpu::normal4(seed, i, base | static_cast<std::uint64_t>(8 + a / 4)), a % 4);
      if (count > 0) jump[a] = count * static_cast<double>(p.jump_mean) + std::sqrt(count) * p.jump_stddev * z;
    }
  for (int a = 0; a < A; ++a) {
    double z = eps[a];
    if (p.correlated) {
      z = 0.0;
      for (int b = 0; b <= a; ++b) z += static_cast<double>(p.chol[a * rl::kMaxAssets + b]) * eps[b];
    }
    const int k = r * rl::kMaxAssets + a;
    x[a] = p.mean[k] + (x[a] - p.mean[k]) * static_cast<double>(p.decay[k]) + p.drift[k] +
           static_cast<double>(p.noise[k]) * z + jump[a];
  }
  if (p.regimes > 1)
    regime = cdf_index(p.transition_cdf + r * rl::kMaxRegimes, p.regimes, gpu::uniform4(seed, i, base | 12u).x);
}

// Sample i of (seed, c): the window, horizon next returns, realized vol over vol_horizon, the label.
struct HostSample {
  std::vector<double> x, next, vol;
  int regime = -1;
};
HostSample host_sample(const MarketWindows& w, std::uint64_t seed, std::uint32_t i, std::uint64_t c) {
  const rl::MarketParams& p = w.params();
  const WindowSpec& s = w.spec();
  const int A = p.assets;
  const bool ou = p.process == static_cast<int>(rl::PriceProcess::ou);
  int regime = cdf_index(p.stationary_cdf, p.regimes, gpu::uniform4(seed, i, base_of(c, 0) | 12u).x);
  std::vector<double> x(A);
  for (int a = 0; a < A; ++a) {
    const int k = regime * rl::kMaxAssets + a;
    const float z = lane_of(gpu::normal4(seed, i, base_of(c, 0) | static_cast<std::uint64_t>(a / 4)), a % 4);
    x[a] = ou ? p.mean[k] + static_cast<double>(p.stationary_sd[k]) * z : p.log_initial_price[a];
  }
  std::int64_t j = 1;
  for (std::int64_t b = 0; b < w.burn_in(); ++b, ++j) host_step(x, regime, p, seed, i, base_of(c, j));
  HostSample out;
  out.vol.assign(A, 0.0);
  const std::int64_t steps = s.window + std::max(s.horizon, s.vol_horizon);
  for (std::int64_t t = 0; t < steps; ++t, ++j) {
    const std::vector<double> prev = x;
    if (t == s.window - 1) out.regime = regime;
    host_step(x, regime, p, seed, i, base_of(c, j));
    for (int a = 0; a < A; ++a) {
      const double y = (x[a] - prev[a]) * p.ret_scale[a];
      if (t < s.window) out.x.push_back(y);
      if (t >= s.window && t - s.window < s.horizon) out.next.push_back(y);
      if (t >= s.window && t - s.window < s.vol_horizon) out.vol[a] += y * y;
    }
  }
  for (int a = 0; a < A; ++a) out.vol[a] = std::sqrt(out.vol[a] / s.vol_horizon);
  return out;
}

::testing::AssertionResult close_to(const float* got, const std::vector<double>& want, const char* what,
                                    std::int64_t sample) {
  for (std::size_t k = 0; k < want.size(); ++k) {
    const double err = std::abs(static_cast<double>(got[k]) - want[k]);
    if (!(err <= 2e-5 + 2e-5 * std::abs(want[k])))
      return ::testing::AssertionFailure() << what << " of sample " << sample << ", element " << k << ": got " << got[k]
                                           << ", reference " << want[k];
  }
  return ::testing::AssertionSuccess();
}

void expect_matches_reference(const rl::MarketConfig& c, const WindowSpec& spec, std::uint64_t seed, std::uint64_t ctr,
                              cudaStream_t s) {
  const std::int64_t B = 300;  // not a multiple of the block
  const MarketWindows w(c, spec, B);
  Batch b(B, spec, w.assets());
  b.poison(s);
  const auto counter = device_counter(ctr);
  w.generate(b.out(), B, seed, counter.data(), s);
  const Host h = fetch(b, s);
  const std::int64_t A = w.assets();
  for (std::int64_t i = 0; i < B; ++i) {
    const HostSample r = host_sample(w, seed, static_cast<std::uint32_t>(i), ctr);
    ASSERT_TRUE(close_to(h.x.data() + i * spec.window * A, r.x, "x", i));
    ASSERT_TRUE(close_to(h.next.data() + i * spec.horizon * A, r.next, "next_returns", i));
    ASSERT_TRUE(close_to(h.vol.data() + i * A, r.vol, "realized_vol", i));
    ASSERT_EQ(h.regime[i], r.regime) << "regime of sample " << i;
  }
}

rl::MarketConfig gbm(int assets) {
  rl::MarketConfig c;
  c.assets = assets;
  c.initial_price.assign(assets, 100.0);
  c.mu.assign(assets, 0.05);
  c.sigma.assign(assets, 0.2);
  return c;
}

TEST_F(MarketWindowsTest, MatchesTheReferenceGbmRegimesJumpsCorrelation) {
  SCOPED_TRACE(seed_note());
  rl::MarketConfig c = gbm(5);
  c.regimes = 2;
  c.transition = {0.9, 0.1, 0.3, 0.7};
  c.mu = {0.1, 0.0, -0.1, 0.2, 0.05, -0.3, -0.2, 0.1, -0.4, 0.0};
  c.sigma = {0.1, 0.2, 0.15, 0.3, 0.25, 0.5, 0.6, 0.4, 0.7, 0.3};
  c.correlation.assign(25, 0.4);
  for (int a = 0; a < 5; ++a) c.correlation[a * 5 + a] = 1.0;
  c.jump_intensity = 20.0;
  c.jump_mean = -0.02;
  c.jump_stddev = 0.03;
  rl::validate(c);
  expect_matches_reference(c, WindowSpec{24, 3, 7}, seed_, rng()() >> 30, stream());
}

TEST_F(MarketWindowsTest, MatchesTheReferenceOuRegimesWithBurnIn) {
  SCOPED_TRACE(seed_note());
  rl::MarketConfig c = gbm(1);
  c.process = rl::PriceProcess::ou;
  c.mu.clear();
  c.regimes = 2;
  c.transition = {0.95, 0.05, 0.1, 0.9};
  c.kappa = {20.0, 40.0};
  c.theta = {0.0, 0.2};
  c.sigma = {0.2, 0.5};
  rl::validate(c);
  const WindowSpec spec{16, 4, 2};  // vol_horizon < horizon
  EXPECT_EQ(MarketWindows(c, spec, 1).burn_in(), static_cast<std::int64_t>(std::ceil(8.0 / (20.0 * c.dt))));
  expect_matches_reference(c, spec, seed_, 3, stream());
}

TEST_F(MarketWindowsTest, BatchIsAPureFunctionOfSeedAndCounter) {
  SCOPED_TRACE(seed_note());
  const rl::MarketConfig c = rl::load_market_config(test::configs_dir() / "markets" / "regime_jumps.toml");
  const WindowSpec spec{32, 4, 10};
  const std::int64_t B = 512;
  const MarketWindows w(c, spec, B);
  const auto c0 = device_counter(17), c1 = device_counter(18);
  Batch a(B, spec, 2), b(B, spec, 2);
  a.poison(stream());
  b.poison(stream());
  w.generate(a.out(), B, seed_, c0.data(), stream());
  w.generate(b.out(), B, seed_, c0.data(), stream());
  const Host ha = fetch(a, stream()), hb = fetch(b, stream());
  for (float v : ha.x) ASSERT_TRUE(std::isfinite(v)) << "x not written everywhere";
  for (float v : ha.next) ASSERT_TRUE(std::isfinite(v)) << "next_returns not written everywhere";
  for (float v : ha.vol) ASSERT_TRUE(std::isfinite(v) && v >= 0.0f) << "realized_vol not written everywhere";
  for (std::int32_t r : ha.regime) ASSERT_TRUE(r == 0 || r == 1) << "regime " << r;
  EXPECT_TRUE(same_bytes(ha.x, hb.x));
  EXPECT_TRUE(same_bytes(ha.next, hb.next));
  EXPECT_TRUE(same_bytes(ha.vol, hb.vol));
  EXPECT_EQ(ha.regime, hb.regime);
  EXPECT_EQ(download(c0.data(), 1)[0], 17u) << "generate() must not change the counter";

  // Another counter or seed: other data (every element differs but for chance ties).
  auto differing = [](const std::vector<float>& p, const std::vector<float>& q) {
    std::size_t n = 0;
    for (std::size_t k = 0; k < p.size(); ++k) n += p[k] != q[k];
    return static_cast<double>(n) / static_cast<double>(p.size());
  };
  w.generate(b.out(), B, seed_, c1.data(), stream());
  EXPECT_GT(differing(ha.x, fetch(b, stream()).x), 0.99);
  w.generate(b.out(), B, seed_ ^ 0x5DEECE66Dull, c0.data(), stream());
  EXPECT_GT(differing(ha.x, fetch(b, stream()).x), 0.99);

  // A smaller batch is the same samples; x does not depend on which labels are asked for.
  Batch small(100, spec, 2);
  small.poison(stream());
  w.generate(small.out(false), 100, seed_, c0.data(), stream());
  const Host hs = fetch(small, stream());
  EXPECT_EQ(std::memcmp(hs.x.data(), ha.x.data(), hs.x.size() * sizeof(float)), 0);
  for (float v : hs.next) ASSERT_TRUE(std::isnan(v)) << "a null label was written";

  // A longer horizon continues the same path: its first 4 steps are the 4-step labels.
  const WindowSpec longer{32, 9, 10};
  const MarketWindows wl(c, longer, B);
  Batch l(B, longer, 2);
  l.poison(stream());
  wl.generate(l.out(), B, seed_, c0.data(), stream());
  const Host hl = fetch(l, stream());
  EXPECT_TRUE(same_bytes(hl.x, ha.x));
  EXPECT_TRUE(same_bytes(hl.vol, ha.vol));
  EXPECT_EQ(hl.regime, ha.regime);
  for (std::int64_t i = 0; i < B; ++i)
    ASSERT_EQ(std::memcmp(hl.next.data() + i * 9 * 2, ha.next.data() + i * 4 * 2, 4 * 2 * sizeof(float)), 0)
        << "sample " << i;
}

TEST_F(MarketWindowsTest, GraphReplayWithAnInGraphCounterEqualsEager) {
  SCOPED_TRACE(seed_note());
  const rl::MarketConfig c = rl::load_market_config(test::configs_dir() / "markets" / "regime2.toml");
  const WindowSpec spec{64, 2, 20};
  const std::int64_t B = 256;
  const MarketWindows w(c, spec, B);
  auto counter = device_counter(5);
  Batch g(B, spec, 1), e(B, spec, 1);
  gpu::CudaGraph graph;
  graph.capture(stream(), [&](cudaStream_t cs) {
    w.generate(g.out(), B, seed_, counter.data(), cs);
    advance_counter<<<1, 1, 0, cs>>>(counter.data());
  });
  ASSERT_TRUE(graph.captured());
  for (std::uint64_t step = 5; step < 8; ++step) {
    g.poison(stream());
    graph.replay(stream());
    const auto ce = device_counter(step);
    e.poison(stream());
    w.generate(e.out(), B, seed_, ce.data(), stream());
    const Host hg = fetch(g, stream()), he = fetch(e, stream());
    EXPECT_TRUE(same_bytes(hg.x, he.x)) << "counter " << step;
    EXPECT_TRUE(same_bytes(hg.next, he.next)) << "counter " << step;
    EXPECT_TRUE(same_bytes(hg.vol, he.vol)) << "counter " << step;
    EXPECT_EQ(hg.regime, he.regime) << "counter " << step;
  }
  EXPECT_EQ(download(counter.data(), 1)[0], 8u);
}

// Column (t, a) of a (B, T, A) array as doubles.
std::vector<double> column(const std::vector<float>& v, std::int64_t B, std::int64_t T, std::int64_t A, std::int64_t t,
                           std::int64_t a) {
  std::vector<double> out(static_cast<std::size_t>(B));
  for (std::int64_t i = 0; i < B; ++i) out[i] = v[(i * T + t) * A + a];
  return out;
}

// OU returns: var (1 - d) / (kappa dt) in the observation's units, lag-k correlation
// -(1 - d) d^(k-1) / 2 (d = e^{-kappa dt}), within the window and across its end into next_returns.
TEST_F(MarketWindowsTest, OuWindowsHaveTheLawsMomentsAndNextReturnsContinueThem) {
  SCOPED_TRACE(seed_note());
  rl::MarketConfig c = gbm(1);
  c.process = rl::PriceProcess::ou;
  c.mu.clear();
  c.kappa = {100.0};
  c.theta = {0.3};
  c.sigma = {0.3};
  rl::validate(c);
  const WindowSpec spec{16, 2, 2};
  const std::int64_t B = 65536, W = spec.window;
  const MarketWindows w(c, spec, B);
  Batch b(B, spec, 1);
  const auto counter = device_counter(rng()() >> 30);
  w.generate(b.out(), B, seed_, counter.data(), stream());
  const Host h = fetch(b, stream());
  const double d = std::exp(-100.0 * c.dt);
  const double var = (1.0 - d) / (100.0 * c.dt), rho1 = -(1.0 - d) / 2.0, rho2 = rho1 * d;
  for (std::int64_t t : {0, 7, 13}) {
    SCOPED_TRACE("window steps " + std::to_string(t) + ", +1, +2");
    test::expect_stationary_pair(column(h.x, B, W, 1, t, 0), column(h.x, B, W, 1, t + 1, 0), 0.0, var, rho1);
    test::expect_stationary_pair(column(h.x, B, W, 1, t, 0), column(h.x, B, W, 1, t + 2, 0), 0.0, var, rho2);
  }
  SCOPED_TRACE("across the window's end");
  const std::vector<double> last = column(h.x, B, W, 1, W - 1, 0), n0 = column(h.next, B, 2, 1, 0, 0),
                            n1 = column(h.next, B, 2, 1, 1, 0);
  test::expect_stationary_pair(last, n0, 0.0, var, rho1);
  test::expect_stationary_pair(last, n1, 0.0, var, rho2);
  test::expect_stationary_pair(n0, n1, 0.0, var, rho1);
}

// GBM returns: mean (mu - sigma^2/2) sqrt(dt) / sigma, variance 1, no autocorrelation, the
// configured correlation between assets at the same step.
TEST_F(MarketWindowsTest, GbmWindowsHaveTheLawsMomentsAndCorrelation) {
  SCOPED_TRACE(seed_note());
  rl::MarketConfig c = gbm(2);
  c.mu = {0.8, -0.5};
  c.sigma = {0.2, 0.4};
  c.correlation = {1.0, 0.6, 0.6, 1.0};
  rl::validate(c);
  const WindowSpec spec{8, 1, 1};
  const std::int64_t B = 65536, W = spec.window;
  const MarketWindows w(c, spec, B);
  Batch b(B, spec, 2);
  const auto counter = device_counter(0);
  w.generate(b.out(), B, seed_, counter.data(), stream());
  const Host h = fetch(b, stream());
  for (int a = 0; a < 2; ++a) {
    SCOPED_TRACE("asset " + std::to_string(a));
    const double mean = (c.mu[a] - 0.5 * c.sigma[a] * c.sigma[a]) * std::sqrt(c.dt) / c.sigma[a];
    test::expect_stationary_pair(column(h.x, B, W, 2, 2, a), column(h.x, B, W, 2, 3, a), mean, 1.0, 0.0);
    test::expect_stationary_pair(column(h.x, B, W, 2, W - 1, a), column(h.next, B, 1, 2, 0, a), mean, 1.0, 0.0);
  }
  // The same step of both assets (the helper checks the first one's mean).
  const double m0 = (c.mu[0] - 0.5 * c.sigma[0] * c.sigma[0]) * std::sqrt(c.dt) / c.sigma[0];
  test::expect_stationary_pair(column(h.x, B, W, 2, 5, 0), column(h.x, B, W, 2, 5, 1), m0, 1.0, 0.6);
}

// Zero volatility: every return is the drift step of the exact double path x_t+1 = x_t + drift,
// bitwise, through the window, the next returns and the realized volatility.
TEST_F(MarketWindowsTest, ZeroVolatilityGbmIsTheExactPath) {
  rl::MarketConfig c = gbm(1);
  c.mu = {0.37};
  c.sigma = {0.0};
  rl::validate(c);
  const WindowSpec spec{20, 6, 6};
  const std::int64_t B = 130;
  const MarketWindows w(c, spec, B);
  Batch b(B, spec, 1);
  b.poison(stream());
  const auto counter = device_counter(9);
  w.generate(b.out(), B, 1234, counter.data(), stream());
  const Host h = fetch(b, stream());
  const rl::MarketParams& p = w.params();
  ASSERT_EQ(p.ret_scale[0], 1.0f);  // sigma_ref = 0: the observation's scale is 1
  std::vector<float> path;
  double x = p.log_initial_price[0], sq = 0.0;
  for (int t = 0; t < spec.window + spec.horizon; ++t) {
    const double next = x + p.drift[0];
    path.push_back(static_cast<float>((next - x) * 1.0));
    if (t >= spec.window) sq += static_cast<double>(path.back()) * path.back();
    x = next;
  }
  const float vol = static_cast<float>(std::sqrt(sq / spec.vol_horizon));
  for (std::int64_t i = 0; i < B; ++i) {
    for (int t = 0; t < spec.window; ++t) ASSERT_EQ(h.x[i * spec.window + t], path[t]) << "sample " << i << " step " << t;
    for (int k = 0; k < spec.horizon; ++k)
      ASSERT_EQ(h.next[i * spec.horizon + k], path[spec.window + k]) << "sample " << i << " next " << k;
    ASSERT_EQ(h.vol[i], vol) << "sample " << i;
    ASSERT_EQ(h.regime[i], 0);
  }
}

// Two zero-volatility regimes with opposite drifts: the sign of every return names the regime that
// generated it, so the label must be the last window return's regime, for every sample; the
// returns switch sign at the chain's rate; realized_vol is the rms of next_returns, bitwise.
TEST_F(MarketWindowsTest, RegimeLabelIsTheRegimeOfTheLastWindowReturn) {
  SCOPED_TRACE(seed_note());
  rl::MarketConfig c = gbm(1);
  c.regimes = 2;
  c.transition = {0.9, 0.1, 0.2, 0.8};
  c.mu = {0.5, -0.5};
  c.sigma = {0.0, 0.0};
  rl::validate(c);
  const WindowSpec spec{12, 5, 5};
  const std::int64_t B = 8192;
  const MarketWindows w(c, spec, B);
  Batch b(B, spec, 1);
  b.poison(stream());
  const auto counter = device_counter(rng()() >> 30);
  w.generate(b.out(), B, seed_, counter.data(), stream());
  const Host h = fetch(b, stream());
  double from0 = 0, stay0 = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const float* xi = h.x.data() + i * spec.window;
    ASSERT_EQ(h.regime[i], xi[spec.window - 1] > 0.0f ? 0 : 1) << "sample " << i;
    for (int t = 0; t + 1 < spec.window; ++t)
      if (xi[t] > 0.0f) {
        from0 += 1;
        stay0 += xi[t + 1] > 0.0f;
      }
    double sq = 0.0;
    for (int k = 0; k < spec.horizon; ++k) {
      const double y = h.next[i * spec.horizon + k];
      sq += y * y;
    }
    ASSERT_EQ(h.vol[i], static_cast<float>(std::sqrt(sq / spec.vol_horizon))) << "sample " << i;
  }
  EXPECT_NEAR(stay0 / from0, 0.9, 5 * std::sqrt(0.09 / from0));
}

// Labels at the window's last step over many samples against the stationary law: chi-square with
// 2 degrees of freedom below 27.6 (p = 1e-6).
TEST_F(MarketWindowsTest, RegimeFrequenciesMatchTheStationaryLaw) {
  SCOPED_TRACE(seed_note());
  rl::MarketConfig c = gbm(1);
  c.regimes = 3;
  c.transition = {0.9, 0.08, 0.02, 0.1, 0.85, 0.05, 0.2, 0.2, 0.6};
  c.mu = {0.0, 0.0, 0.0};
  c.sigma = {0.1, 0.3, 0.6};
  rl::validate(c);
  const std::vector<double> pi = rl::regime_stationary(c);
  const WindowSpec spec{64, 1, 1};
  const std::int64_t B = 65536;
  const MarketWindows w(c, spec, B);
  Batch b(B, spec, 1);
  const auto counter = device_counter(rng()() >> 30);
  w.generate(WindowBatch{nullptr, nullptr, nullptr, b.regime.data()}, B, seed_, counter.data(), stream());
  const std::vector<std::int32_t> regime = download(b.regime, stream());
  std::vector<double> count(3, 0.0);
  for (std::int32_t r : regime) {
    ASSERT_TRUE(r >= 0 && r < 3) << r;
    count[r] += 1;
  }
  double chi2 = 0.0;
  for (int r = 0; r < 3; ++r) {
    const double want = pi[r] * B;
    chi2 += (count[r] - want) * (count[r] - want) / want;
  }
  EXPECT_LT(chi2, 27.6) << "counts " << count[0] << " " << count[1] << " " << count[2] << ", stationary " << pi[0]
                        << " " << pi[1] << " " << pi[2];
}

}  // namespace
}  // namespace foxhunt::pretrain
