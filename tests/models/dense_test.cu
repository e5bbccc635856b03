// Dense layers, plain and NoisyNet: the noise against Philox on the host, forward (noisy and mu-only)
// and backward (mu, sigma, bias, input gradients) against float64 references, and every gradient
// against central finite differences of the GPU forward.
#include "models/fd_support.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/philox.cuh"
#include "models/dense.hpp"
#include "models/noisy_linear.hpp"

namespace foxhunt::models {
namespace {

class DenseTest : public test::LaneTest {};

double fsqrt_signed(double x) { return x < 0 ? -std::sqrt(-x) : std::sqrt(x); }

TEST_F(DenseTest, NoiseMatchesHostPhiloxAndFollowsTheCounter) {
  SCOPED_TRACE(seed_note());
  const std::int64_t in = 37, out = 19;
  gpu::ParameterArena arena;
  Dense layer(DenseSpec{"l", in, out, gpu::Activation::identity, true, 0.5f}, 7);
  layer.declare(arena);
  arena.finalize(s());
  layer.bind(arena);
  const std::uint64_t seed = rng()();
  std::vector<std::uint64_t> counter{3};
  auto d_counter = test::upload(counter, s());
  layer.resample_noise(seed, d_counter.data(), s());
  const auto fi = test::download(layer.noise_in(), in, s());
  const auto fo = test::download(layer.noise_out(), out, s());
  for (std::int64_t i = 0; i < in + out; ++i) {
    const float4 z = gpu::normal4(seed, 7, 3 * kNoiseCounterStride + static_cast<std::uint64_t>(i / 4));
    const float e = i % 4 == 0 ? z.x : i % 4 == 1 ? z.y : i % 4 == 2 ? z.z : z.w;
    const double want = fsqrt_signed(e);
    const float got = i < in ? fi[i] : fo[i - in];
    ASSERT_NEAR(got, want, 1e-6 * std::max(1.0, std::abs(want))) << "factor " << i;
  }
  // Another counter gives other noise; the same counter the same noise.
  counter[0] = 4;
  d_counter.upload(std::span<const std::uint64_t>(counter), s());
  layer.resample_noise(seed, d_counter.data(), s());
  const auto fi2 = test::download(layer.noise_in(), in, s());
  int same = 0;
  for (std::int64_t i = 0; i < in; ++i) same += fi2[i] == fi[i];
  EXPECT_LT(same, 3);
  counter[0] = 3;
  d_counter.upload(std::span<const std::uint64_t>(counter), s());
  layer.resample_noise(seed, d_counter.data(), s());
  EXPECT_EQ(test::download(layer.noise_in(), in, s()), fi);
}

struct Case {
  bool noisy;
  gpu::Activation act;
  std::int64_t batch, in, out;
};

void run_case(const Case& c, std::mt19937_64& rng, gpu::BlasLane lane, cudaStream_t s) {
  SCOPED_TRACE("noisy=" + std::to_string(c.noisy) + " act=" + std::string(gpu::activation_name(c.act)) +
               " B=" + std::to_string(c.batch) + " in=" + std::to_string(c.in) + " out=" + std::to_string(c.out));
  gpu::ParameterArena arena;
  Dense layer(DenseSpec{"l", c.in, c.out, c.act, c.noisy, 0.5f}, 11);
  layer.declare(arena);
  arena.finalize(s);
  layer.init(arena, rng, s);
  layer.bind(arena);
  const auto wname = layer.weight_name(), bname = layer.bias_name();
  if (c.noisy) {  // non-constant sigmas so that a transposed index would show
    arena.upload_param("l.weight_sigma", test::random_uniform(static_cast<std::size_t>(c.in * c.out), 0.05f, 0.5f, rng),
                       s);
    arena.upload_param("l.bias_sigma", test::random_uniform(static_cast<std::size_t>(c.out), 0.05f, 0.5f, rng), s);
    std::vector<std::uint64_t> counter{rng() % 1000};
    auto d_counter = test::upload(counter, s);
    layer.resample_noise(rng(), d_counter.data(), s);
    FH_CHECK(cudaStreamSynchronize(s));
  }
  const auto x = test::random_uniform(static_cast<std::size_t>(c.batch * c.in), -1.f, 1.f, rng);
  const auto u = test::random_uniform(static_cast<std::size_t>(c.batch * c.out), -1.f, 1.f, rng);
  auto d_x = test::upload(x, s), d_u = test::upload(u, s);
  gpu::DeviceBuffer<float> d_y(static_cast<std::size_t>(c.batch * c.out)), d_dx(x.size());
  const OwnedWorkspace work(layer, c.batch);  // the Module form: aux and d_pre carved from one buffer

  // Host copies of the effective weights.
  const auto mu = test::download(arena.param(wname).as<float>(), static_cast<std::size_t>(c.in * c.out), s);
  const auto bmu = test::download(arena.param(bname).as<float>(), static_cast<std::size_t>(c.out), s);
  std::vector<double> W(mu.begin(), mu.end()), b(bmu.begin(), bmu.end()), fi(c.in, 0), fo(c.out, 0);
  std::vector<float> ws, bs;
  if (c.noisy) {
    ws = test::download(arena.param("l.weight_sigma").as<float>(), mu.size(), s);
    bs = test::download(arena.param("l.bias_sigma").as<float>(), bmu.size(), s);
    const auto hi = test::download(layer.noise_in(), c.in, s), ho = test::download(layer.noise_out(), c.out, s);
    for (std::int64_t k = 0; k < c.in; ++k) fi[k] = hi[k];
    for (std::int64_t o = 0; o < c.out; ++o) fo[o] = ho[o];
  }
  auto reference = [&](bool eval, std::vector<double>& pre) {
    pre.assign(static_cast<std::size_t>(c.batch * c.out), 0);
    for (std::int64_t r = 0; r < c.batch; ++r)
      for (std::int64_t o = 0; o < c.out; ++o) {
        double acc = b[o] + ((c.noisy && !eval) ? bs[o] * fo[o] : 0.0);
        for (std::int64_t k = 0; k < c.in; ++k) {
          const double w = W[o * c.in + k] + ((c.noisy && !eval) ? ws[o * c.in + k] * fo[o] * fi[k] : 0.0);
          acc += w * x[r * c.in + k];
        }
        pre[r * c.out + o] = acc;
      }
  };
  auto act = [&](double v) { return c.act == gpu::Activation::relu ? std::max(v, 0.0) : v; };

  for (bool eval : {true, false}) {
    if (eval && !c.noisy) continue;
    test::poison(d_y, s);
    layer.forward(d_y.data(), d_x.data(), c.batch, eval, work.view, lane);
    std::vector<double> pre;
    reference(eval, pre);
    std::vector<double> want(pre.size());
    for (std::size_t i = 0; i < pre.size(); ++i) want[i] = act(pre[i]);
    EXPECT_LT(test::rel_error(test::download(d_y, s), want), 1e-5) << "forward eval=" << eval;
  }

  // Backward (training mode) against float64.
  layer.forward(d_y.data(), d_x.data(), c.batch, false, work.view, lane);
  test::poison(d_dx, s);
  layer.backward(d_dx.data(), d_u.data(), d_x.data(), c.batch, work.view, lane, nullptr);
  std::vector<double> pre;
  reference(false, pre);
  std::vector<double> g(pre.size());
  for (std::size_t i = 0; i < pre.size(); ++i)
    g[i] = u[i] * (c.act == gpu::Activation::relu ? (pre[i] > 0 ? 1.0 : 0.0) : 1.0);
  std::vector<double> dW(mu.size(), 0), db(bmu.size(), 0), dx(x.size(), 0);
  for (std::int64_t r = 0; r < c.batch; ++r)
    for (std::int64_t o = 0; o < c.out; ++o) {
      const double go = g[r * c.out + o];
      db[o] += go;
      for (std::int64_t k = 0; k < c.in; ++k) {
        const double w = W[o * c.in + k] + (c.noisy ? ws[o * c.in + k] * fo[o] * fi[k] : 0.0);
        dW[o * c.in + k] += go * x[r * c.in + k];
        dx[r * c.in + k] += go * w;
      }
    }
  EXPECT_LT(test::rel_error(test::download(d_dx, s), dx), 1e-5);
  EXPECT_LT(test::rel_error(test::download(arena.grad(wname).as<float>(), mu.size(), s), dW), 1e-5);
  EXPECT_LT(test::rel_error(test::download(arena.grad(bname).as<float>(), bmu.size(), s), db), 1e-5);
  if (c.noisy) {
    std::vector<double> dWs(dW.size()), dbs(db.size());
    for (std::int64_t o = 0; o < c.out; ++o) {
      dbs[o] = db[o] * fo[o];
      for (std::int64_t k = 0; k < c.in; ++k) dWs[o * c.in + k] = dW[o * c.in + k] * fo[o] * fi[k];
    }
    EXPECT_LT(test::rel_error(test::download(arena.grad("l.weight_sigma").as<float>(), mu.size(), s), dWs), 1e-5);
    EXPECT_LT(test::rel_error(test::download(arena.grad("l.bias_sigma").as<float>(), bmu.size(), s), dbs), 1e-5);
  }

  // Central finite differences of L = sum(u * y) from the GPU forward (same noise throughout).
  const auto gw = test::download(arena.grad(wname).as<float>(), mu.size(), s);
  const auto gb = test::download(arena.grad(bname).as<float>(), bmu.size(), s);
  const auto gx = test::download(d_dx, s);
  auto loss = [&] {
    return test::weighted_sum([&] { layer.forward(d_y.data(), d_x.data(), c.batch, false, work.view, lane); },
                              d_y.data(), u, s);
  };
  struct Target {
    const char* what;
    float* x;
    const std::vector<float>* grad;
  };
  std::vector<float> gws, gbs;
  std::vector<Target> targets{{"weight", arena.param(wname).as<float>(), &gw},
                              {"bias", arena.param(bname).as<float>(), &gb},
                              {"input", d_x.data(), &gx}};
  if (c.noisy) {
    gws = test::download(arena.grad("l.weight_sigma").as<float>(), mu.size(), s);
    gbs = test::download(arena.grad("l.bias_sigma").as<float>(), bmu.size(), s);
    targets.push_back({"weight_sigma", arena.param("l.weight_sigma").as<float>(), &gws});
    targets.push_back({"bias_sigma", arena.param("l.bias_sigma").as<float>(), &gbs});
  }
  // ReLU kinks within h of a pre-activation would break central differences: identity layers only.
  if (c.act == gpu::Activation::relu) return;
  for (const auto& tg : targets) {
    std::uniform_int_distribution<std::size_t> pick(0, tg.grad->size() - 1);
    for (int k = 0; k < 6; ++k) {
      const std::size_t i = pick(rng);
      const double fd = test::central_difference(loss, tg.x, static_cast<std::int64_t>(i), 1e-2f, s);
      EXPECT_TRUE(test::fd_close(fd, (*tg.grad)[i], 1e-2, 0.05)) << tg.what << "[" << i << "]";
    }
  }
}

TEST_F(DenseTest, ForwardBackwardAndFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  constexpr auto id = gpu::Activation::identity;
  for (const Case& c :
       {Case{false, id, 1, 1, 1}, Case{true, id, 5, 37, 19}, Case{true, id, 64, 33, 9}, Case{false, id, 7, 20, 31}})
    run_case(c, rng(), lane(), s());
}

TEST_F(DenseTest, ReluLayerAnalyticGradients) {
  SCOPED_TRACE(seed_note());
  run_case(Case{true, gpu::Activation::relu, 9, 24, 17}, rng(), lane(), s());
}

}  // namespace
}  // namespace foxhunt::models
