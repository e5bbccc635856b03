// The DDPM / DDIM samplers with an exact epsilon-predictor, independent of any training: for
// Gaussian data x0 ~ N(mu, diag s^2) the optimal predictor is analytic,
//   E[eps | x_t] = sqrt(1 - ab_t) / (ab_t s^2 + 1 - ab_t) (x_t - sqrt(ab_t) mu),
// which makes every sampler step affine in x plus Gaussian noise, so the sample's law is Gaussian
// with moments a float64 recursion gives exactly (written here from the DDPM / DDIM update rules,
// not from the sampler's coefficients). Checked: the samples' moments against that recursion
// (standardized, pooled over dimensions), full-length DDPM against the data law itself,
// DDPM == DDIM with eta = 1 on the same noise, DDIM eta = 0 bitwise deterministic, its inversion
// round trip (against the recursion's affine map and near the identity), and graph replay == eager.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "gpu/graph.hpp"
#include "gpu/launch.cuh"
#include "models/diffusion/diffusion_reference.hpp"
#include "models/diffusion/sampler.hpp"
#include "models/diffusion/schedule.hpp"
#include "support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::models;
namespace ref = foxhunt::test::diffusion;

namespace {

// The analytic predictor: eps (B, D) from x (B, D), t (B); mu, s2 (D).
__global__ void gaussian_eps_kernel(float* eps, const float* x, const std::int32_t* t, const float* alpha_bar,
                                    const float* mu, const float* s2, std::int64_t B, std::int64_t D) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < B * D;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / D, d = i % D;
    const double ab = alpha_bar[t[b]];
    const double k = sqrt(1.0 - ab) / (ab * s2[d] + 1.0 - ab);
    eps[i] = static_cast<float>(k * (x[i] - sqrt(ab) * mu[d]));
  }
}

// The float64 law of a sampler run on one dimension: x' = a x + c + sd z per step.
struct Affine {
  double a = 1, c = 0, v = 0;  // x_out = a x_in + c + noise of variance v
};

std::vector<std::int64_t> subsequence(std::int64_t T, std::int64_t S) {
  std::vector<std::int64_t> tau;
  for (std::int64_t i = 0; i < S; ++i)
    tau.push_back(S == 1 ? T - 1 : std::llround(static_cast<double>(i) * (T - 1) / static_cast<double>(S - 1)));
  return tau;
}

// The reverse run (x_T -> x_0) as one affine map with noise, from the DDPM / DDIM rules.
Affine reverse_law(const std::vector<double>& abar, std::int64_t S, bool ddpm, double eta, double mu, double s2) {
  const auto tau = subsequence(static_cast<std::int64_t>(abar.size()), S);
  Affine m;
  for (std::int64_t i = S - 1; i >= 0; --i) {
    const double ab = abar[static_cast<std::size_t>(tau[static_cast<std::size_t>(i)])];
    const double abp = i > 0 ? abar[static_cast<std::size_t>(tau[static_cast<std::size_t>(i - 1)])] : 1.0;
    // eps = k (x - sqrt(ab) mu)
    const double k = std::sqrt(1 - ab) / (ab * s2 + 1 - ab);
    double a, c, var;
    if (ddpm) {
      const double alpha = ab / abp, beta = 1 - alpha;
      // x' = (x - beta / sqrt(1 - ab) eps) / sqrt(alpha) + sqrt(beta (1 - abp) / (1 - ab)) z
      const double g = beta / std::sqrt(1 - ab);
      a = (1 - g * k) / std::sqrt(alpha);
      c = g * k * std::sqrt(ab) * mu / std::sqrt(alpha);
      var = i > 0 ? beta * (1 - abp) / (1 - ab) : 0.0;
    } else {
      // x0_hat = (x - sqrt(1 - ab) eps) / sqrt(ab); x' = sqrt(abp) x0_hat + sqrt(1 - abp - sg^2) eps + sg z
      const double sg = eta * std::sqrt((1 - abp) / (1 - ab)) * std::sqrt(1 - ab / abp);
      const double r = std::sqrt(std::max(0.0, 1 - abp - sg * sg));
      const double ax = std::sqrt(abp / ab) * (1 - std::sqrt(1 - ab) * k) + r * k;
      const double cx = (std::sqrt(abp / ab) * std::sqrt(1 - ab) * k - r * k) * std::sqrt(ab) * mu;
      a = ax;
      c = cx;
      var = sg * sg;
    }
    m.a = a * m.a;
    m.c = a * m.c + c;
    m.v = a * a * m.v + var;
  }
  return m;
}

// The DDIM inversion (x_0 -> x_T, eps at the current level's step, tau_0 for the data).
Affine inversion_law(const std::vector<double>& abar, std::int64_t S, double mu, double s2) {
  const auto tau = subsequence(static_cast<std::int64_t>(abar.size()), S);
  Affine m;
  for (std::int64_t i = 0; i < S; ++i) {
    const double abc = i > 0 ? abar[static_cast<std::size_t>(tau[static_cast<std::size_t>(i - 1)])] : 1.0;
    const double abn = abar[static_cast<std::size_t>(tau[static_cast<std::size_t>(i)])];
    const double abe = abar[static_cast<std::size_t>(tau[static_cast<std::size_t>(std::max<std::int64_t>(i - 1, 0))])];
    const double k = std::sqrt(1 - abe) / (abe * s2 + 1 - abe);
    // x' = sqrt(abn) (x - sqrt(1 - abc) eps) / sqrt(abc) + sqrt(1 - abn) eps
    const double ce = std::sqrt(1 - abn) - std::sqrt(abn / abc) * std::sqrt(1 - abc);
    const double a = std::sqrt(abn / abc) + ce * k;
    const double c = -ce * k * std::sqrt(abe) * mu;
    m.a = a * m.a;
    m.c = a * m.c + c;
  }
  return m;
}

class DiffusionSamplerTest : public test::GpuTest {
 protected:
  static constexpr std::int64_t D = 8;
  void prepare(ScheduleKind kind, std::int64_t T) {
    ScheduleSpec spec;
    spec.kind = kind;
    spec.steps = T;
    sched_ = std::make_unique<NoiseSchedule>(spec, stream());
    // Per-dimension data laws: means in [-1, 1], variances in [0.2, 2].
    mu_.clear();
    s2_.clear();
    for (std::int64_t d = 0; d < D; ++d) {
      mu_.push_back(-1.f + 2.f * static_cast<float>(d) / (D - 1));
      s2_.push_back(0.2f + 1.8f * static_cast<float>((d * 5) % D) / (D - 1));
    }
    dmu_ = test::upload(mu_, stream());
    ds2_ = test::upload(s2_, stream());
  }
  EpsilonFn eps_fn() {
    return [this](float* eps, const float* x, const std::int32_t* t, std::int64_t batch, cudaStream_t st) {
      gaussian_eps_kernel<<<gpu::grid_stride_blocks(batch * D), gpu::kBlock, 0, st>>>(
          eps, x, t, sched_->device().alpha_bar, dmu_.data(), ds2_.data(), batch, D);
      FH_CHECK_LAUNCH();
    };
  }
  // Samples of B rows standardized by the recursion's exact law per dimension: their mean and
  // variance (pooled over the B x D values) must be 0 and 1.
  void expect_law(const std::vector<float>& x, std::int64_t B, std::int64_t S, bool ddpm, double eta) {
    double sum = 0, sq = 0;
    for (std::int64_t d = 0; d < D; ++d) {
      const Affine m = reverse_law(sched_->host().alpha_bar, S, ddpm, eta, mu_[static_cast<std::size_t>(d)],
                                   s2_[static_cast<std::size_t>(d)]);
      const double mean = m.c, var = m.a * m.a + m.v;  // x_T ~ N(0, 1)
      for (std::int64_t b = 0; b < B; ++b) {
        const double z = (x[static_cast<std::size_t>(b * D + d)] - mean) / std::sqrt(var);
        ASSERT_TRUE(std::isfinite(z));
        sum += z;
        sq += z * z;
      }
    }
    const double n = static_cast<double>(B * D), mean = sum / n, var = sq / n - mean * mean;
    // 5 standard errors: mean 1/sqrt(n), variance sqrt(2/n).
    EXPECT_LT(std::abs(mean), 5 / std::sqrt(n)) << "S " << S << " ddpm " << ddpm << " eta " << eta;
    EXPECT_LT(std::abs(var - 1), 5 * std::sqrt(2 / n)) << "S " << S << " ddpm " << ddpm << " eta " << eta;
  }
  std::vector<float> run_sample(const SamplerSpec& spec, std::int64_t B, std::uint64_t seed, std::uint64_t c) {
    DiffusionSampler sampler(sched_->host(), spec, B, D);
    gpu::DeviceBuffer<float> x(static_cast<std::size_t>(B * D));
    auto counter = test::upload(std::vector<std::uint64_t>{c}, stream());
    test::poison(x, stream());
    sampler.sample(x.data(), eps_fn(), B, seed, counter.data(), stream());
    return test::download(x, stream());
  }

  std::unique_ptr<NoiseSchedule> sched_;
  std::vector<float> mu_, s2_;
  gpu::DeviceBuffer<float> dmu_, ds2_;
};

TEST_F(DiffusionSamplerTest, SamplesFollowTheExactLawOfTheirSteps) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 8192;
  for (const ScheduleKind kind : {ScheduleKind::linear, ScheduleKind::cosine}) {
    prepare(kind, 1000);
    for (const auto& [k, S, eta] : {std::tuple{SamplerKind::ddpm, 1000, 0.0}, std::tuple{SamplerKind::ddpm, 100, 0.0},
                                    std::tuple{SamplerKind::ddim, 20, 0.0}, std::tuple{SamplerKind::ddim, 50, 0.5},
                                    std::tuple{SamplerKind::ddim, 50, 1.0}}) {
      SamplerSpec spec{k, S, eta};
      const auto x = run_sample(spec, B, rng()(), 3);
      expect_law(x, B, S, k == SamplerKind::ddpm, eta);
    }
  }
}

TEST_F(DiffusionSamplerTest, FullLengthDdpmRecoversTheDataLaw) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 16384;
  prepare(ScheduleKind::linear, 1000);
  const auto x = run_sample(SamplerSpec{SamplerKind::ddpm, 1000, 0.0}, B, rng()(), 0);
  for (std::int64_t d = 0; d < D; ++d) {
    double sum = 0, sq = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      const double v = x[static_cast<std::size_t>(b * D + d)];
      sum += v;
      sq += v * v;
    }
    const double mean = sum / B, var = sq / B - mean * mean;
    const double m = mu_[static_cast<std::size_t>(d)], s2 = s2_[static_cast<std::size_t>(d)];
    // Sampling error (5 standard errors) plus the 1000-step chain's own bias (under 2% of the
    // variance for these laws by the exact recursion: 1.7% at s^2 = 0.2).
    EXPECT_NEAR(mean, m, 5 * std::sqrt(s2 / B)) << "dim " << d;
    EXPECT_NEAR(var / s2, 1.0, 5 * std::sqrt(2.0 / B) + 0.02) << "dim " << d;
  }
}

TEST_F(DiffusionSamplerTest, DdpmEqualsDdimWithEtaOneOnTheSameNoise) {
  SCOPED_TRACE(seed_note());
  prepare(ScheduleKind::linear, 1000);
  const std::uint64_t seed = rng()();
  const auto a = run_sample(SamplerSpec{SamplerKind::ddpm, 50, 0.0}, 512, seed, 9);
  const auto b = run_sample(SamplerSpec{SamplerKind::ddim, 50, 1.0}, 512, seed, 9);
  std::vector<double> bd(b.begin(), b.end());
  EXPECT_TRUE(test::all_close(a, bd, 1e-4, 1e-4));
}

TEST_F(DiffusionSamplerTest, DdimWithEtaZeroIsDeterministicAndInverts) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 2048, S = 200;
  prepare(ScheduleKind::linear, 1000);
  SamplerSpec spec{SamplerKind::ddim, S, 0.0};
  // Bitwise the same twice, whatever the noise seed (eta = 0 draws only x_T).
  DiffusionSampler sampler(sched_->host(), spec, B, D);
  gpu::DeviceBuffer<float> x(static_cast<std::size_t>(B * D)), y(static_cast<std::size_t>(B * D));
  auto counter = test::upload(std::vector<std::uint64_t>{1}, stream());
  sampler.initial_noise(x.data(), B, 42, counter.data(), stream());
  FH_CHECK(cudaMemcpyAsync(y.data(), x.data(), x.bytes(), cudaMemcpyDeviceToDevice, stream()));
  sampler.reverse(x.data(), eps_fn(), B, 1, counter.data(), stream());
  sampler.reverse(y.data(), eps_fn(), B, 2, counter.data(), stream());
  const auto hx = test::download(x, stream()), hy = test::download(y, stream());
  ASSERT_EQ(0, std::memcmp(hx.data(), hy.data(), hx.size() * sizeof(float)));

  // Inversion: data -> x_T -> data.
  std::vector<float> x0(static_cast<std::size_t>(B * D));
  std::normal_distribution<float> nd;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t d = 0; d < D; ++d)
      x0[static_cast<std::size_t>(b * D + d)] = mu_[static_cast<std::size_t>(d)] + std::sqrt(s2_[static_cast<std::size_t>(d)]) * nd(rng());
  auto dx = test::upload(x0, stream());
  sampler.invert(dx.data(), eps_fn(), B, stream());
  const auto xT = test::download(dx, stream());
  sampler.reverse(dx.data(), eps_fn(), B, 0, counter.data(), stream());
  const auto back = test::download(dx, stream());
  double err = 0, spread = 0, sum_t = 0, sq_t = 0;
  std::vector<double> want_t, want_back;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t d = 0; d < D; ++d) {
      const std::size_t i = static_cast<std::size_t>(b * D + d);
      const double m = mu_[static_cast<std::size_t>(d)], s2 = s2_[static_cast<std::size_t>(d)];
      const Affine inv = inversion_law(sched_->host().alpha_bar, S, m, s2);
      const Affine rev = reverse_law(sched_->host().alpha_bar, S, false, 0.0, m, s2);
      want_t.push_back(inv.a * x0[i] + inv.c);
      want_back.push_back(rev.a * (inv.a * x0[i] + inv.c) + rev.c);
      err += (back[i] - x0[i]) * (back[i] - x0[i]);
      spread += (x0[i] - m) * (x0[i] - m);
      const double z = xT[i];
      sum_t += z;
      sq_t += z * z;
    }
  // The sampler computes the maps of the update rules...
  EXPECT_TRUE(test::all_close(xT, want_t, 1e-3, 1e-3));
  EXPECT_TRUE(test::all_close(back, want_back, 1e-3, 1e-3));
  // ...which round-trip within the discretization error (at most 3.1% of the spread at 200 of
  // 1000 steps for these laws by the recursion) and send the data to roughly N(0, 1) (the inverted law's
  // variance is within 3.1% of 1 for them).
  EXPECT_LT(std::sqrt(err / spread), 0.04);
  const double n = static_cast<double>(B * D);
  EXPECT_NEAR(sum_t / n, 0.0, 0.05);
  EXPECT_NEAR(sq_t / n - (sum_t / n) * (sum_t / n), 1.0, 0.1);
}

TEST_F(DiffusionSamplerTest, GraphReplayEqualsEager) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 1000;
  prepare(ScheduleKind::cosine, 200);
  DiffusionSampler sampler(sched_->host(), SamplerSpec{SamplerKind::ddpm, 40, 0.0}, B, D);
  gpu::DeviceBuffer<float> x(static_cast<std::size_t>(B * D)), y(static_cast<std::size_t>(B * D));
  auto counter = test::upload(std::vector<std::uint64_t>{5}, stream());
  const std::uint64_t seed = rng()();
  sampler.sample(x.data(), eps_fn(), B, seed, counter.data(), stream());
  gpu::CudaGraph g;
  g.capture(stream(), [&](cudaStream_t cs) { sampler.sample(y.data(), eps_fn(), B, seed, counter.data(), cs); });
  test::poison(y, stream());
  g.replay(stream());
  const auto hx = test::download(x, stream()), hy = test::download(y, stream());
  ASSERT_EQ(0, std::memcmp(hx.data(), hy.data(), hx.size() * sizeof(float)));
}

}  // namespace
