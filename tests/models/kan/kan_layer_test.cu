// KanLayer / KanNetwork: the local Cox-de Boor bases against the dense float64 recursion on random
// non-uniform grids (and their partition of unity inside the grid), the forward and the backward
// against a float64 layer over several shapes with inputs outside the grid, the backward against
// central finite differences of the GPU forward, the forward's two row tiles bitwise alike,
// determinism and a CUDA-graph replay, the grid update against a float64 refit (knots and refit
// values) and its preservation of a spline that is a cubic polynomial, the arena keeping the grid out
// of the parameters, and the network.
#include "models/fd_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "gpu/device.hpp"
#include "gpu/graph.hpp"
#include "models/kan/kan_layer.hpp"
#include "models/kan/kan_network.hpp"
#include "models/kan/kan_reference.hpp"

namespace foxhunt::models {
namespace {

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

KanLayerSpec spec_of(std::int64_t in, std::int64_t out, std::int64_t G, std::int64_t k) {
  KanLayerSpec s;
  s.name = "kan";
  s.in = in;
  s.out = out;
  s.grid = G;
  s.order = k;
  return s;
}

std::string describe(const KanLayerSpec& s) {
  return "in=" + std::to_string(s.in) + " out=" + std::to_string(s.out) + " G=" + std::to_string(s.grid) +
         " k=" + std::to_string(s.order);
}

class KanLayerTest : public test::LaneTest {
 protected:
  struct Layer {
    explicit Layer(KanLayerSpec s) : layer(std::move(s)) {}
    gpu::ParameterArena arena;
    KanLayer layer;
  };
  // A layer with coefficients U(-1, 1) (so the spline branch matters), and optionally random
  // strictly increasing knots around the configured range.
  std::unique_ptr<Layer> make(const KanLayerSpec& spec, bool random_grid) {
    auto l = std::make_unique<Layer>(spec);
    l->layer.declare(l->arena);
    l->arena.finalize(s());
    l->layer.init(l->arena, rng(), s());
    l->layer.bind(l->arena);
    const auto& e = l->arena.entry(l->layer.param_name("spline_weight"));
    l->arena.upload_param(e.name, test::random_uniform(static_cast<std::size_t>(e.numel), -1.f, 1.f, rng()), s());
    if (random_grid) {
      std::uniform_real_distribution<float> gap(0.1f, 0.6f);
      std::vector<float> g(static_cast<std::size_t>(spec.in * l->layer.knots()));
      for (std::int64_t i = 0; i < spec.in; ++i) {
        float t = -1.5f;
        for (std::int64_t m = 0; m < l->layer.knots(); ++m) g[static_cast<std::size_t>(i * l->layer.knots() + m)] = t += gap(rng());
      }
      l->arena.upload_state(l->layer.param_name("grid"), g, s());
    }
    FH_CHECK(cudaStreamSynchronize(s()));
    return l;
  }
  std::vector<double> param(const Layer& l, const std::string& suffix) {
    const auto& e = l.arena.entry(l.layer.param_name(suffix));
    return as_double(test::download(l.arena.param(e.name).as<float>(), static_cast<std::size_t>(e.numel), s()));
  }
  std::vector<double> grid(const Layer& l) {
    const auto& e = l.arena.state_entry(l.layer.param_name("grid"));
    return as_double(test::download(l.arena.state(e.name).as<float>(), static_cast<std::size_t>(e.numel), s()));
  }
  test::RefKan ref(const Layer& l) {
    test::RefKan r;
    r.in = static_cast<int>(l.layer.spec().in);
    r.out = static_cast<int>(l.layer.spec().out);
    r.G = static_cast<int>(l.layer.spec().grid);
    r.k = static_cast<int>(l.layer.spec().order);
    r.w = param(l, "base_weight");
    r.c = param(l, "spline_weight");
    r.grid = grid(l);
    return r;
  }
  std::vector<float> grad(const Layer& l, const std::string& suffix) {
    const auto& e = l.arena.entry(l.layer.param_name(suffix));
    return test::download(l.arena.grad(e.name).as<float>(), static_cast<std::size_t>(e.numel), s());
  }
};

TEST_F(KanLayerTest, BasesMatchDenseCoxDeBoorAndSumToOneInsideTheGrid) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t k = 1; k <= kKanMaxOrder; ++k)
    for (std::int64_t G : {1, 5, 11}) {
      const KanLayerSpec spec = spec_of(7, 3, G, k);
      SCOPED_TRACE(describe(spec));
      auto l = make(spec, true);
      const test::RefKan r = ref(*l);
      const std::int64_t B = 300;
      auto x = test::random_uniform(static_cast<std::size_t>(B * spec.in), -2.5f, 2.5f + 0.6f * r.nk(), rng());
      for (std::int64_t i = 0; i < spec.in && i < B; ++i)  // some inputs exactly on knots
        x[static_cast<std::size_t>(i * spec.in + i)] = static_cast<float>(r.knots(static_cast<int>(i))[static_cast<std::size_t>(i % r.nk())]);
      const auto xd = test::upload(x, s());
      const std::size_t n = static_cast<std::size_t>(B * spec.in), k1 = static_cast<std::size_t>(k + 1);
      gpu::DeviceBuffer<std::int32_t> first(n);
      gpu::DeviceBuffer<float> values(n * k1), slopes(n * k1);
      test::poison(first, s());
      test::poison(values, s());
      test::poison(slopes, s());
      l->layer.compute_bases(first.data(), values.data(), slopes.data(), xd.data(), B, s());
      const auto f = test::download(first, s());
      const auto v = test::download(values, s());
      const auto dv = test::download(slopes, s());
      std::vector<double> b, db;
      int inside = 0;
      for (std::size_t e = 0; e < n; ++e) {
        const int i = static_cast<int>(e % static_cast<std::size_t>(spec.in));
        const auto t = r.knots(i);
        const double xv = x[e];
        test::dense_bases(xv, t, static_cast<int>(k), b, db);
        ASSERT_GE(f[e], 0);
        ASSERT_LE(f[e], G - 1);
        double sum = 0;
        for (int j = 0; j < r.nb(); ++j) {
          const int q = j - f[e];
          const bool active = q >= 0 && q <= k;
          const double gv = active ? v[e * k1 + static_cast<std::size_t>(q)] : 0.0;
          const double gd = active ? dv[e * k1 + static_cast<std::size_t>(q)] : 0.0;
          // Values are O(1); slopes up to k / (smallest knot gap) = 50: float rounding of the knots.
          ASSERT_NEAR(gv, b[static_cast<std::size_t>(j)], 5e-5) << "x " << xv << " basis " << j;
          ASSERT_NEAR(gd, db[static_cast<std::size_t>(j)], 5e-4 * std::max(1.0, std::abs(db[static_cast<std::size_t>(j)])))
              << "x " << xv << " basis " << j;
          if (!active) EXPECT_EQ(b[static_cast<std::size_t>(j)], 0.0) << "x " << xv << " basis " << j;
          sum += gv;
        }
        if (xv >= t[static_cast<std::size_t>(k)] && xv < t[static_cast<std::size_t>(G + k)]) {
          ++inside;
          EXPECT_NEAR(sum, 1.0, 1e-5) << "partition of unity at x " << xv;
        }
      }
      EXPECT_GT(inside, 20);
    }
}

TEST_F(KanLayerTest, ForwardAndBackwardMatchFloat64Reference) {
  SCOPED_TRACE(seed_note());
  struct Shape {
    std::int64_t in, out, G, k, B;
  };
  for (const Shape sh : {Shape{3, 5, 5, 3, 1}, Shape{17, 70, 7, 2, 37}, Shape{64, 16, 5, 3, 300}, Shape{5, 130, 12, 1, 65},
                         Shape{9, 3, 27, 5, 129}, Shape{33, 65, 8, 4, 70}}) {
    const KanLayerSpec spec = spec_of(sh.in, sh.out, sh.G, sh.k);
    SCOPED_TRACE(describe(spec) + " B=" + std::to_string(sh.B));
    auto l = make(spec, sh.in % 2 == 1);
    const test::RefKan r = ref(*l);
    // Inputs beyond the extended grid on both sides (the spline branch is 0 there).
    const auto x = test::random_uniform(static_cast<std::size_t>(sh.B * sh.in), -3.f, 3.f, rng());
    const auto dy = test::random_normal(static_cast<std::size_t>(sh.B * sh.out), 0.f, 1.f, rng());
    const auto xd = test::upload(x, s());
    const auto dyd = test::upload(dy, s());
    gpu::DeviceBuffer<float> y(static_cast<std::size_t>(sh.B * sh.out)), dx(static_cast<std::size_t>(sh.B * sh.in));
    OwnedWorkspace ws(l->layer, sh.B + 3);
    test::poison(y, s());
    test::poison(dx, s());
    FH_CHECK(cudaMemsetAsync(l->arena.grads(), 0xFF, static_cast<std::size_t>(l->arena.padded_count()) * 4, s()));
    l->layer.forward(y.data(), xd.data(), sh.B, false, ws.view, lane());
    l->layer.backward(dx.data(), dyd.data(), xd.data(), sh.B, ws.view, lane(), nullptr);
    const auto yr = r.forward(as_double(x), static_cast<int>(sh.B));
    std::vector<double> dxr, dwr, dcr;
    r.backward(as_double(x), as_double(dy), static_cast<int>(sh.B), dxr, dwr, dcr);
    const auto yg = test::download(y, s());
    // Float sums of in (k + 2) terms of size ~1: absolute errors ~1e-6 sqrt(terms).
    EXPECT_TRUE(test::all_close(yg, yr, 1e-5, 2e-5));
    // Slopes reach k / (smallest knot gap) = 50 on the random grids: d_x sums terms of ~50.
    EXPECT_TRUE(test::all_close(test::download(dx, s()), dxr, 1e-3, 1e-3));
    EXPECT_TRUE(test::all_close(grad(*l, "base_weight"), dwr, 1e-5, 1e-4));
    EXPECT_TRUE(test::all_close(grad(*l, "spline_weight"), dcr, 1e-5, 1e-4));
  }
}

// The forward's two row tiles (64 rows per block when that fills the device, 32 for a smaller
// batch) run each output's FMAs in the same order: a batch large enough for the 64-row tile gives,
// on its first rows, the bits of those rows forwarded alone (the 32-row tile), and both match the
// float64 layer.
TEST_F(KanLayerTest, ForwardRowTilesAgreeBitwise) {
  SCOPED_TRACE(seed_note());
  const KanLayerSpec spec = spec_of(33, 65, 8, 3);
  auto l = make(spec, true);
  const test::RefKan r = ref(*l);
  const std::int64_t big = 64 * gpu::sm_count() + 5, small = 37;  // 2 output tiles: R = 4 for big, 2 for small
  const auto x = test::random_uniform(static_cast<std::size_t>(big * spec.in), -3.f, 3.f, rng());
  const auto xd = test::upload(x, s());
  gpu::DeviceBuffer<float> y_big(static_cast<std::size_t>(big * spec.out)),
      y_small(static_cast<std::size_t>(small * spec.out));
  OwnedWorkspace ws(l->layer, big);
  test::poison(y_big, s());
  test::poison(y_small, s());
  l->layer.forward(y_big.data(), xd.data(), big, false, ws.view, lane());
  l->layer.forward(y_small.data(), xd.data(), small, false, ws.view, lane());
  const auto yb = test::download(y_big, s()), ys = test::download(y_small, s());
  EXPECT_TRUE(std::equal(ys.begin(), ys.end(), yb.begin())) << "the two row tiles disagree on the first rows";
  const std::vector<float> x_tail(x.end() - small * spec.in, x.end());
  const std::vector<float> y_tail(yb.end() - small * spec.out, yb.end());
  EXPECT_TRUE(test::all_close(
      ys, r.forward(as_double(std::vector<float>(x.begin(), x.begin() + small * spec.in)), static_cast<int>(small)),
      1e-5, 2e-5));
  EXPECT_TRUE(test::all_close(y_tail, r.forward(as_double(x_tail), static_cast<int>(small)), 1e-5, 2e-5))
      << "the last rows of the large batch";
}

TEST_F(KanLayerTest, BackwardMatchesCentralFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t k : {2, 3}) {
    const KanLayerSpec spec = spec_of(4, 3, 5, k);
    SCOPED_TRACE(describe(spec));
    auto l = make(spec, false);
    const std::int64_t B = 6;
    auto xd = test::upload(test::random_uniform(static_cast<std::size_t>(B * spec.in), -1.8f, 1.8f, rng()), s());
    const auto u = test::random_normal(static_cast<std::size_t>(B * spec.out), 0.f, 1.f, rng());
    const auto ud = test::upload(u, s());
    gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B * spec.out)), dx(static_cast<std::size_t>(B * spec.in));
    OwnedWorkspace ws(l->layer, B);
    l->layer.forward(y.data(), xd.data(), B, false, ws.view, lane());
    l->layer.backward(dx.data(), ud.data(), xd.data(), B, ws.view, lane(), nullptr);
    const auto dxg = test::download(dx, s());
    const auto dwg = grad(*l, "base_weight");
    const auto dcg = grad(*l, "spline_weight");
    const auto loss = [&] {
      return test::weighted_sum([&] { l->layer.forward(y.data(), xd.data(), B, false, ws.view, lane()); }, y.data(), u,
                                s());
    };
    // The loss is linear in the parameters (steps of 1e-2: float losses to ~1e-6 give ~5e-5 in the
    // quotient). In x, splines of order k >= 2 are C^1: a step of 1e-3 across a knot, where the
    // second derivative jumps by ~2k(k-1) / gap^2, errs by ~3e-3; float rounding adds ~5e-4.
    const float h = 1e-2f, hx = 1e-3f;
    for (std::size_t e = 0; e < dxg.size(); ++e)
      EXPECT_TRUE(test::fd_close(test::central_difference(loss, xd.data(), static_cast<std::int64_t>(e), hx, s()), dxg[e],
                                 2e-2, 5e-2))
          << "d x[" << e << "]";
    float* w = l->arena.param(l->layer.param_name("base_weight")).as<float>();
    for (std::size_t e = 0; e < dwg.size(); ++e)
      EXPECT_TRUE(test::fd_close(test::central_difference(loss, w, static_cast<std::int64_t>(e), h, s()), dwg[e], 1e-2,
                                 5e-2))
          << "d base_weight[" << e << "]";
    float* c = l->arena.param(l->layer.param_name("spline_weight")).as<float>();
    for (std::size_t e = 0; e < dcg.size(); ++e)
      EXPECT_TRUE(test::fd_close(test::central_difference(loss, c, static_cast<std::int64_t>(e), h, s()), dcg[e], 1e-2,
                                 5e-2))
          << "d spline_weight[" << e << "]";
  }
}

TEST_F(KanLayerTest, BackwardIsDeterministicAndGraphReplayIsBitwiseEager) {
  SCOPED_TRACE(seed_note());
  const KanLayerSpec spec = spec_of(24, 40, 6, 3);
  auto l = make(spec, true);
  const std::int64_t B = 700;  // three row splits of the parameter gradients
  const auto xd = test::upload(test::random_uniform(static_cast<std::size_t>(B * spec.in), -2.f, 2.f, rng()), s());
  const auto dyd = test::upload(test::random_normal(static_cast<std::size_t>(B * spec.out), 0.f, 1.f, rng()), s());
  gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B * spec.out)), dx(static_cast<std::size_t>(B * spec.in));
  OwnedWorkspace ws(l->layer, B);
  auto run = [&](cudaStream_t) {
    l->layer.forward(y.data(), xd.data(), B, false, ws.view, lane());
    l->layer.backward(dx.data(), dyd.data(), xd.data(), B, ws.view, lane(), nullptr);
  };
  auto snapshot = [&] {
    std::vector<float> v = test::download(y, s());
    for (const auto& part : {test::download(dx, s()), grad(*l, "base_weight"), grad(*l, "spline_weight")})
      v.insert(v.end(), part.begin(), part.end());
    return v;
  };
  run(s());
  const auto first = snapshot();
  run(s());
  EXPECT_EQ(snapshot(), first);
  gpu::CudaGraph graph;
  graph.capture(s(), run);
  test::poison(y, s());
  test::poison(dx, s());
  l->arena.zero_grads(s());
  graph.replay(s());
  EXPECT_EQ(snapshot(), first);
}

TEST_F(KanLayerTest, GridUpdateMatchesFloat64RefitAndKeepsTheSplines) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t k : {1, 3}) {
    KanLayerSpec spec = spec_of(6, 5, 5, k);
    SCOPED_TRACE(describe(spec));
    auto l = make(spec, false);
    // The base branch does not change: zero it so the outputs are the splines alone.
    const auto& we = l->arena.entry(l->layer.param_name("base_weight"));
    l->arena.upload_param(we.name, std::vector<float>(static_cast<std::size_t>(we.numel), 0.f), s());
    test::RefKan r = ref(*l);
    r.w.assign(r.w.size(), 0.0);
    const std::int64_t B = 2000;
    std::vector<float> x(static_cast<std::size_t>(B * spec.in));
    std::normal_distribution<float> nd(0.f, 0.6f);
    for (auto& v : x) v = nd(rng());
    const auto xd = test::upload(x, s());
    gpu::DeviceBuffer<std::byte> uws_mem(l->layer.grid_update_workspace_bytes(B));
    const Workspace uws{uws_mem.data(), B, false};
    l->layer.update_grid(xd.data(), B, uws, s());
    r.update_grid(as_double(x), static_cast<int>(B), spec.grid_eps, spec.grid_margin);
    // Knots: the same order statistics and float arithmetic of O(1) values.
    EXPECT_TRUE(test::all_close(test::download(l->arena.state(l->layer.param_name("grid")).as<float>(), r.grid.size(), s()),
                                r.grid, 1e-5, 1e-5));
    // The refit spline values on the batch: the same least-squares projection (float bases).
    gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B * spec.out));
    OwnedWorkspace ws(l->layer, B);
    test::poison(y, s());
    l->layer.forward(y.data(), xd.data(), B, true, ws.view, lane());
    const auto yr = r.forward(as_double(x), static_cast<int>(B));
    double ymax = 0;
    for (double v : yr) ymax = std::max(ymax, std::abs(v));
    EXPECT_TRUE(test::all_close(test::download(y, s()), yr, 0.0, 1e-4 * std::max(ymax, 1.0)));
  }
  // A spline that is a cubic polynomial p on [-1, 1] (the init grid's inner range) stays p: the
  // refit grid covers the batch (inside [-1, 1]) and every cubic spline space holds p.
  {
    KanLayerSpec spec = spec_of(3, 4, 5, 3);
    auto l = make(spec, false);
    const auto& we = l->arena.entry(l->layer.param_name("base_weight"));
    l->arena.upload_param(we.name, std::vector<float>(static_cast<std::size_t>(we.numel), 0.f), s());
    const std::int64_t B = 4096;
    // The coefficients of p: the float64 least squares on p over [-1, 1] (exact in the spline space).
    test::RefKan r = ref(*l);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    auto p = [](int o, int i, double x) { return (o + 1) * (0.3 * x * x * x - x * x + 0.5 * x - 0.2) + i; };
    const int n = r.nb();
    for (int i = 0; i < r.in; ++i)
      for (int o = 0; o < r.out; ++o) {
        std::vector<double> M(static_cast<std::size_t>(n * n), 0.0), R(static_cast<std::size_t>(n), 0.0), b, db;
        for (int q = 0; q < 4096; ++q) {
          const double xv = u(rng());
          test::dense_bases(xv, r.knots(i), 3, b, db);
          for (int a = 0; a < n; ++a) {
            R[a] += b[a] * p(o, i, xv);
            for (int c2 = 0; c2 < n; ++c2) M[static_cast<std::size_t>(a * n + c2)] += b[a] * b[c2];
          }
        }
        for (int a = 0; a < n; ++a)  // Gaussian elimination (M is symmetric positive definite)
          for (int c2 = a + 1; c2 < n; ++c2) {
            const double f = M[static_cast<std::size_t>(c2 * n + a)] / M[static_cast<std::size_t>(a * n + a)];
            for (int d = a; d < n; ++d) M[static_cast<std::size_t>(c2 * n + d)] -= f * M[static_cast<std::size_t>(a * n + d)];
            R[c2] -= f * R[a];
          }
        for (int a = n - 1; a >= 0; --a) {
          double v = R[a];
          for (int d = a + 1; d < n; ++d) v -= M[static_cast<std::size_t>(a * n + d)] * R[d];
          R[a] = v / M[static_cast<std::size_t>(a * n + a)];
        }
        for (int j = 0; j < n; ++j) r.c[(static_cast<std::size_t>(o) * r.in + i) * n + j] = R[j];
      }
    std::vector<float> cf(r.c.begin(), r.c.end());
    l->arena.upload_param(l->layer.param_name("spline_weight"), cf, s());
    std::vector<float> x(static_cast<std::size_t>(B * spec.in));
    std::uniform_real_distribution<float> ux(-0.95f, 0.95f);
    for (auto& v : x) v = ux(rng());
    const auto xd = test::upload(x, s());
    gpu::DeviceBuffer<std::byte> uws_mem(l->layer.grid_update_workspace_bytes(B));
    l->layer.update_grid(xd.data(), B, Workspace{uws_mem.data(), B, false}, s());
    gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B * spec.out));
    OwnedWorkspace ws(l->layer, B);
    test::poison(y, s());
    l->layer.forward(y.data(), xd.data(), B, true, ws.view, lane());
    const auto yg = test::download(y, s());
    double worst = 0, ymax = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (int o = 0; o < r.out; ++o) {
        double want = 0;
        for (int i = 0; i < r.in; ++i) want += p(o, i, x[static_cast<std::size_t>(b * r.in + i)]);
        ymax = std::max(ymax, std::abs(want));
        worst = std::max(worst, std::abs(yg[static_cast<std::size_t>(b * r.out + o)] - want));
      }
    // Float bases and coefficients of size ~10 (the float64 refit keeps p to ~1e-8 relative).
    EXPECT_LE(worst, 1e-4 * ymax) << "max |y - p| " << worst << " of max |p| " << ymax;
  }
}

TEST_F(KanLayerTest, GridIsArenaStateNotAParameter) {
  const KanLayerSpec spec = spec_of(3, 2, 5, 3);
  auto l = make(spec, false);
  EXPECT_FALSE(l->arena.contains(l->layer.param_name("grid")));
  EXPECT_EQ(l->arena.count(), 3 * 2 + 3 * 2 * 8);
  EXPECT_EQ(l->arena.state_entry(l->layer.param_name("grid")).numel, 3 * 12);
  const auto g = grid(*l);
  for (std::int64_t m = 0; m < l->layer.knots(); ++m) EXPECT_NEAR(g[static_cast<std::size_t>(m)], -1.0 + (m - 3) * 0.4, 1e-6);
}

TEST_F(KanLayerTest, NetworkMatchesStackedFloat64Layers) {
  SCOPED_TRACE(seed_note());
  KanNetworkSpec ns;
  ns.name = "net";
  ns.widths = {5, 19, 7};
  ns.layer.grid = 6;
  ns.layer.order = 3;
  ns.layer.grid_min = -2.f;
  ns.layer.grid_max = 2.f;
  gpu::ParameterArena arena;
  KanNetwork net(ns);
  net.declare(arena);
  arena.finalize(s());
  net.init(arena, rng(), s());
  net.bind(arena);
  std::vector<test::RefKan> refs;
  for (std::int64_t li = 0; li < net.layer_count(); ++li) {
    const KanLayer& L = net.layer(li);
    test::RefKan r;
    r.in = static_cast<int>(L.spec().in);
    r.out = static_cast<int>(L.spec().out);
    r.G = 6;
    r.k = 3;
    auto dl = [&](const std::string& n) {
      const auto& e = arena.entry(L.param_name(n));
      return as_double(test::download(arena.param(e.name).as<float>(), static_cast<std::size_t>(e.numel), s()));
    };
    r.w = dl("base_weight");
    r.c = dl("spline_weight");
    const auto& ge = arena.state_entry(L.param_name("grid"));
    r.grid = as_double(test::download(arena.state(ge.name).as<float>(), static_cast<std::size_t>(ge.numel), s()));
    refs.push_back(r);
  }
  const std::int64_t B = 91;
  const auto x = test::random_uniform(static_cast<std::size_t>(B * 5), -2.5f, 2.5f, rng());
  const auto dy = test::random_normal(static_cast<std::size_t>(B * 7), 0.f, 1.f, rng());
  const auto xd = test::upload(x, s());
  const auto dyd = test::upload(dy, s());
  gpu::DeviceBuffer<float> y(static_cast<std::size_t>(B * 7)), dx(static_cast<std::size_t>(B * 5));
  OwnedWorkspace ws(net, B);
  test::poison(y, s());
  test::poison(dx, s());
  net.forward(y.data(), xd.data(), B, false, ws.view, lane());
  net.backward(dx.data(), dyd.data(), xd.data(), B, ws.view, lane(), nullptr);
  const auto h = refs[0].forward(as_double(x), static_cast<int>(B));
  const auto yr = refs[1].forward(h, static_cast<int>(B));
  EXPECT_TRUE(test::all_close(test::download(y, s()), yr, 1e-4, 1e-4));
  std::vector<double> dh, dw1, dc1, dxr, dw0, dc0;
  refs[1].backward(h, as_double(dy), static_cast<int>(B), dh, dw1, dc1);
  refs[0].backward(as_double(x), dh, static_cast<int>(B), dxr, dw0, dc0);
  EXPECT_TRUE(test::all_close(test::download(dx, s()), dxr, 1e-3, 1e-3));
  auto g = [&](std::int64_t li, const char* n) {
    const auto& e = arena.entry(net.layer(li).param_name(n));
    return test::download(arena.grad(e.name).as<float>(), static_cast<std::size_t>(e.numel), s());
  };
  EXPECT_TRUE(test::all_close(g(1, "spline_weight"), dc1, 1e-4, 1e-3));
  EXPECT_TRUE(test::all_close(g(0, "spline_weight"), dc0, 1e-3, 1e-3));
  EXPECT_TRUE(test::all_close(g(0, "base_weight"), dw0, 1e-3, 1e-3));
  // A grid update of every layer runs and leaves finite outputs close to the old ones on the batch.
  gpu::DeviceBuffer<std::byte> uws(net.grid_update_workspace_bytes(B));
  net.update_grid(xd.data(), B, Workspace{uws.data(), B, false}, lane());
  net.forward(y.data(), xd.data(), B, true, ws.view, lane());
  for (float v : test::download(y, s())) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace foxhunt::models
