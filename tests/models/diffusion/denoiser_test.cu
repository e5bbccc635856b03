// The diffusion family's building blocks on the device against float64 CPU references: the noise
// schedules, the sinusoidal timestep embedding, the denoiser's forward (NaN-poisoned outputs) and
// its backward (central finite differences of a weighted sum of the output, for parameters of every
// layer and for both inputs), the training noising (Philox draws reproduced on the host) and the
// epsilon loss with its gradient, the fixed-step noising and the per-row error of the anomaly score.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/philox.cuh"
#include "models/diffusion/denoiser.hpp"
#include "models/diffusion/noising.hpp"
#include "models/diffusion/schedule.hpp"
#include "models/diffusion/diffusion_reference.hpp"
#include "models/fd_support.hpp"

using namespace foxhunt;
using namespace foxhunt::models;
namespace ref = foxhunt::test::diffusion;

namespace {

class DiffusionModelTest : public test::LaneTest {};

TEST_F(DiffusionModelTest, SchedulesMatchTheirFormulasInFloat64) {
  SCOPED_TRACE(seed_note());
  for (const ScheduleKind kind : {ScheduleKind::linear, ScheduleKind::cosine}) {
    ScheduleSpec spec;
    spec.kind = kind;
    spec.steps = 1000;
    NoiseSchedule sched(spec, s());
    const ref::RefSchedule r = kind == ScheduleKind::linear ? ref::ref_linear(1000) : ref::ref_cosine(1000);
    for (std::size_t t = 0; t < 1000; ++t) {
      ASSERT_NEAR(sched.host().beta[t], r.beta[t], 1e-15) << t;
      ASSERT_NEAR(sched.host().alpha_bar[t], r.alpha_bar[t], 1e-14 * 1000) << t;
    }
    const ScheduleView v = sched.device();
    const auto beta = test::download(v.beta, 1000, s()), ab = test::download(v.alpha_bar, 1000, s());
    const auto sa = test::download(v.sqrt_alpha_bar, 1000, s());
    const auto so = test::download(v.sqrt_one_minus_alpha_bar, 1000, s());
    std::vector<double> rb, rab, rsa, rso;
    for (std::size_t t = 0; t < 1000; ++t) {
      rb.push_back(r.beta[t]);
      rab.push_back(r.alpha_bar[t]);
      rsa.push_back(std::sqrt(r.alpha_bar[t]));
      rso.push_back(std::sqrt(1 - r.alpha_bar[t]));
    }
    EXPECT_TRUE(test::all_close(beta, rb, 1e-6, 0));
    EXPECT_TRUE(test::all_close(ab, rab, 1e-6, 0));
    EXPECT_TRUE(test::all_close(sa, rsa, 1e-6, 0));
    EXPECT_TRUE(test::all_close(so, rso, 1e-6, 0));
    // alpha_bar decreases from ~1 towards 0.
    EXPECT_GT(r.alpha_bar.front(), 0.99);
    EXPECT_LT(r.alpha_bar.back(), 1e-3);
  }
}

TEST_F(DiffusionModelTest, TimestepEmbeddingMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 37, E = 24;
  std::uniform_int_distribution<std::int32_t> ut(0, 3999);
  std::vector<std::int32_t> t(B);
  for (auto& x : t) x = ut(rng());
  auto dt = test::upload(t, s());
  gpu::DeviceBuffer<float> e(static_cast<std::size_t>(B * E));
  test::poison(e, s());
  timestep_embedding(e.data(), dt.data(), B, E, s());
  std::vector<double> want;
  for (const auto x : t) {
    const auto r = ref::embedding(x, E);
    want.insert(want.end(), r.begin(), r.end());
  }
  EXPECT_TRUE(test::all_close(test::download(e, s()), want, 0, 1e-6));
}

// A small denoiser with random parameters (the output layer's zero init replaced, so every path
// carries gradient), its inputs and the parameters as the host reads them.
struct Fixture {
  DenoiserSpec spec;
  std::unique_ptr<Denoiser> net;
  gpu::ParameterArena arena;
  gpu::DeviceBuffer<std::byte> ws;
  Workspace view;
  std::int64_t B = 5;
  std::vector<float> x, ctx;
  std::vector<std::int32_t> t;
  gpu::DeviceBuffer<float> dx, dctx, out;
  gpu::DeviceBuffer<std::int32_t> dt;

  Fixture(std::int64_t context, std::mt19937_64& rng, cudaStream_t s) {
    spec.name = "model";
    spec.dim = 6;
    spec.context = context;
    spec.hidden = 8;
    spec.blocks = 2;
    spec.expand = 2;
    spec.embed = 8;
    net = std::make_unique<Denoiser>(spec);
    net->declare(arena);
    arena.finalize(s);
    net->init(arena, rng, s);
    for (const auto& e : arena.entries())
      arena.upload_param(e.name, test::random_uniform(static_cast<std::size_t>(e.numel), -0.6f, 0.6f, rng), s);
    net->bind(arena);
    ws = gpu::DeviceBuffer<std::byte>(net->workspace_bytes(B));
    view = Workspace{ws.data(), B, false};
    x = test::random_normal(static_cast<std::size_t>(B * spec.dim), 0.f, 1.f, rng);
    ctx = test::random_normal(static_cast<std::size_t>(B * std::max<std::int64_t>(context, 1)), 0.f, 1.f, rng);
    std::uniform_int_distribution<std::int32_t> ut(0, 999);
    for (std::int64_t b = 0; b < B; ++b) t.push_back(ut(rng));
    dx = test::upload(x, s);
    dctx = test::upload(ctx, s);
    dt = test::upload(t, s);
    out = gpu::DeviceBuffer<float>(static_cast<std::size_t>(B * spec.dim));
  }
  std::map<std::string, std::vector<float>> params(cudaStream_t s) {
    std::map<std::string, std::vector<float>> p;
    for (const auto& e : arena.entries())
      p[e.name] = test::download(arena.param(e.name).as<float>(), static_cast<std::size_t>(e.numel), s);
    return p;
  }
  void forward(gpu::BlasLane lane) {
    net->forward(out.data(), dx.data(), spec.context > 0 ? dctx.data() : nullptr, dt.data(), B, view, lane);
  }
};

TEST_F(DiffusionModelTest, DenoiserForwardMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  for (const std::int64_t context : {0, 4}) {
    Fixture f(context, rng(), s());
    test::poison(f.out, s());
    f.forward(lane());
    const auto got = test::download(f.out, s());
    const auto p = f.params(s());
    std::vector<double> want;
    for (std::int64_t b = 0; b < f.B; ++b) {
      std::vector<double> x(f.x.begin() + b * 6, f.x.begin() + (b + 1) * 6), c;
      if (context > 0) c.assign(f.ctx.begin() + b * context, f.ctx.begin() + (b + 1) * context);
      const auto r = ref::denoiser_row(p, "model", 2, 8, x, c, f.t[static_cast<std::size_t>(b)]);
      want.insert(want.end(), r.begin(), r.end());
    }
    EXPECT_LT(test::rel_error(got, want), 1e-5) << "context " << context;
    EXPECT_TRUE(test::all_close(got, want, 1e-4, 1e-5)) << "context " << context;
  }
}

TEST_F(DiffusionModelTest, DenoiserBackwardMatchesCentralDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t context = 4;
  Fixture f(context, rng(), s());
  const std::size_t n_out = static_cast<std::size_t>(f.B * 6);
  const std::vector<float> u = test::random_uniform(n_out, -1.f, 1.f, rng());
  auto du = test::upload(u, s());
  gpu::DeviceBuffer<float> gx(n_out), gctx(static_cast<std::size_t>(f.B * context));
  test::poison(gx, s());
  test::poison(gctx, s());
  FH_CHECK(cudaMemsetAsync(f.arena.grads(), 0xFF, static_cast<std::size_t>(f.arena.padded_count()) * 4, s()));
  f.forward(lane());
  f.net->backward(gx.data(), gctx.data(), du.data(), f.B, f.view, lane());
  const auto grad_x = test::download(gx, s()), grad_ctx = test::download(gctx, s());
  const auto loss = [&] { return test::weighted_sum([&] { f.forward(lane()); }, f.out.data(), u, s()); };
  const float h = 1e-2f;
  for (std::size_t i = 0; i < grad_x.size(); ++i)
    EXPECT_TRUE(test::fd_close(test::central_difference(loss, f.dx.data(), static_cast<std::int64_t>(i), h, s()),
                               grad_x[i], 3e-2, 3e-2))
        << "d x_t[" << i << "]";
  for (std::size_t i = 0; i < grad_ctx.size(); ++i)
    EXPECT_TRUE(test::fd_close(test::central_difference(loss, f.dctx.data(), static_cast<std::int64_t>(i), h, s()),
                               grad_ctx[i], 3e-2, 3e-2))
        << "d ctx[" << i << "]";
  // Three elements of every parameter (all written: the gradients were poisoned).
  for (const auto& e : f.arena.entries()) {
    float* p = f.arena.param(e.name).as<float>();
    const auto g = test::download(f.arena.grad(e.name).as<float>(), static_cast<std::size_t>(e.numel), s());
    for (const float v : g) ASSERT_TRUE(std::isfinite(v)) << e.name;
    std::uniform_int_distribution<std::int64_t> ui(0, e.numel - 1);
    for (int k = 0; k < 3; ++k) {
      const std::int64_t i = ui(rng());
      EXPECT_TRUE(test::fd_close(test::central_difference(loss, p, i, h, s()), g[static_cast<std::size_t>(i)], 3e-2, 3e-2))
          << e.name << "[" << i << "]";
    }
  }
}

TEST_F(DiffusionModelTest, NoisingReproducesPhiloxDrawsAndTheForwardProcess) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 300, D = 10;  // D not a multiple of 4: the last group is partial
  ScheduleSpec spec;
  spec.kind = ScheduleKind::linear;
  spec.steps = 500;
  NoiseSchedule sched(spec, s());
  const auto x0 = test::random_normal(static_cast<std::size_t>(B * D), 0.f, 1.f, rng());
  auto dx0 = test::upload(x0, s());
  const std::uint64_t seed = rng()(), c = 12345;
  auto counter = test::upload(std::vector<std::uint64_t>{c}, s());
  gpu::DeviceBuffer<float> xt(x0.size()), eps(x0.size());
  gpu::DeviceBuffer<std::int32_t> t(static_cast<std::size_t>(B));
  test::poison(xt, s());
  test::poison(eps, s());
  test::poison(t, s());
  diffusion_noising(xt.data(), eps.data(), t.data(), dx0.data(), B, D, sched.device(), seed, counter.data(), s());
  const auto gt = test::download(t, s());
  const auto ge = test::download(eps, s()), gx = test::download(xt, s());
  std::vector<double> want_x;
  for (std::int64_t b = 0; b < B; ++b) {
    const uint4 tb = gpu::random_bits4(seed, kTimestepTag << 24 | static_cast<std::uint32_t>(b), c);
    const auto step = static_cast<std::int32_t>((static_cast<std::uint64_t>(tb.x) * 500u) >> 32);
    ASSERT_EQ(gt[static_cast<std::size_t>(b)], step) << b;
    const double ab = sched.host().alpha_bar[static_cast<std::size_t>(step)];
    for (std::int64_t j = 0; j < D; ++j) {
      const float4 z = gpu::normal4(seed, kNoiseTag << 24 | static_cast<std::uint32_t>(b), c << 16 | static_cast<std::uint64_t>(j / 4));
      const float zs[4] = {z.x, z.y, z.z, z.w};
      const std::size_t at = static_cast<std::size_t>(b * D + j);
      ASSERT_EQ(ge[at], zs[j % 4]) << "eps " << b << "," << j;
      want_x.push_back(std::sqrt(ab) * x0[at] + std::sqrt(1 - ab) * zs[j % 4]);
    }
  }
  EXPECT_TRUE(test::all_close(gx, want_x, 1e-5, 1e-6));
}

TEST_F(DiffusionModelTest, NoisingAtAFixedStepAndRowErrorsMatchFloat64) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 70, D = 45;  // rows longer than a warp, a partial last Philox group
  ScheduleSpec spec;
  spec.kind = ScheduleKind::cosine;
  spec.steps = 300;
  NoiseSchedule sched(spec, s());
  const auto x0 = test::random_normal(static_cast<std::size_t>(B * D), 0.f, 1.f, rng());
  auto dx0 = test::upload(x0, s());
  const std::uint64_t seed = rng()(), c = 4;
  auto counter = test::upload(std::vector<std::uint64_t>{c}, s());
  gpu::DeviceBuffer<float> xt(x0.size()), eps(x0.size()), err(static_cast<std::size_t>(B));
  gpu::DeviceBuffer<std::int32_t> t(static_cast<std::size_t>(B));
  test::poison(xt, s());
  test::poison(t, s());
  test::poison(err, s());
  diffusion_noising_at(xt.data(), eps.data(), t.data(), dx0.data(), B, D, sched.device(), 123, seed, counter.data(), s());
  row_mean_squared_error(err.data(), xt.data(), dx0.data(), B, D, s());
  for (const auto v : test::download(t, s())) ASSERT_EQ(v, 123);
  const auto ge = test::download(eps, s()), gx = test::download(xt, s());
  const double ab = sched.host().alpha_bar[123];
  std::vector<double> want_x, want_err;
  for (std::int64_t b = 0; b < B; ++b) {
    double sum = 0;
    for (std::int64_t j = 0; j < D; ++j) {
      const float4 z = gpu::normal4(seed, kNoiseTag << 24 | static_cast<std::uint32_t>(b), c << 16 | static_cast<std::uint64_t>(j / 4));
      const float zs[4] = {z.x, z.y, z.z, z.w};
      const std::size_t at = static_cast<std::size_t>(b * D + j);
      ASSERT_EQ(ge[at], zs[j % 4]);
      want_x.push_back(std::sqrt(ab) * x0[at] + std::sqrt(1 - ab) * zs[j % 4]);
      const double d = static_cast<double>(gx[at]) - x0[at];
      sum += d * d;
    }
    want_err.push_back(sum / static_cast<double>(D));
  }
  EXPECT_TRUE(test::all_close(gx, want_x, 1e-5, 1e-6));
  EXPECT_TRUE(test::all_close(test::download(err, s()), want_err, 1e-6, 1e-9));
}

TEST_F(DiffusionModelTest, TimestepsAreUniform) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 1 << 16, D = 1, T = 8;
  ScheduleSpec spec;
  spec.steps = T;
  NoiseSchedule sched(spec, s());
  gpu::DeviceBuffer<float> x0(static_cast<std::size_t>(B)), xt(static_cast<std::size_t>(B)), eps(static_cast<std::size_t>(B));
  x0.zero(s());
  gpu::DeviceBuffer<std::int32_t> t(static_cast<std::size_t>(B));
  auto counter = test::upload(std::vector<std::uint64_t>{7}, s());
  diffusion_noising(xt.data(), eps.data(), t.data(), x0.data(), B, D, sched.device(), rng()(), counter.data(), s());
  std::vector<double> n(T, 0);
  for (const auto v : test::download(t, s())) {
    ASSERT_TRUE(v >= 0 && v < T);
    n[static_cast<std::size_t>(v)] += 1;
  }
  double chi2 = 0;
  const double e = static_cast<double>(B) / T;
  for (const double k : n) chi2 += (k - e) * (k - e) / e;
  EXPECT_LT(chi2, 24.3);  // chi-square, 7 degrees of freedom: P(> 24.3) = 0.001
}

TEST_F(DiffusionModelTest, EpsilonLossAndGradientMatchFloat64) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 129, D = 7;
  const auto p = test::random_normal(static_cast<std::size_t>(B * D), 0.f, 1.f, rng());
  const auto e = test::random_normal(p.size(), 0.f, 1.f, rng());
  auto dp = test::upload(p, s()), de = test::upload(e, s());
  gpu::DeviceBuffer<float> loss(1), grad(p.size());
  gpu::DeviceBuffer<std::byte> ws(epsilon_loss_workspace_bytes(B, D));
  test::poison(loss, s());
  test::poison(grad, s());
  epsilon_loss(loss.data(), grad.data(), dp.data(), de.data(), B, D, ws.data(), s());
  double want = 0;
  std::vector<double> want_g;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double d = static_cast<double>(p[i]) - e[i];
    want += d * d / static_cast<double>(p.size());
    want_g.push_back(2 * d / static_cast<double>(p.size()));
  }
  EXPECT_NEAR(test::download(loss, s())[0], want, 1e-5 * want);
  EXPECT_TRUE(test::all_close(test::download(grad, s()), want_g, 1e-5, 1e-9));
}

}  // namespace
