// GatedMlp (SwiGLU): forward and backward against float64 with NaN-poisoned outputs and
// gradients, the backward against central finite differences of the GPU forward, bf16 GEMMs
// within 3e-2 of fp32, and a CUDA-graph replay against eager runs (bitwise).
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "gpu/graph.hpp"
#include "models/blocks/gated_mlp.hpp"

namespace foxhunt::models {
namespace {

double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

class GatedMlpTest : public test::LaneTest {
 protected:
  struct Net {
    explicit Net(GatedMlpSpec spec) : mlp(std::move(spec)) {}
    gpu::ParameterArena arena;
    GatedMlp mlp;
  };
  std::unique_ptr<Net> make(std::int64_t C, std::int64_t F, gpu::LinearMath math = gpu::LinearMath::fp32) {
    auto n = std::make_unique<Net>(GatedMlpSpec{"mlp", C, F, math});
    n->mlp.declare(n->arena);
    n->arena.finalize(s());
    n->mlp.init(n->arena, rng(), s());
    n->mlp.bind(n->arena);
    return n;
  }
  std::vector<float> param(const Net& n, const std::string& name) {
    return test::download(n.arena.param(name).as<float>(), n.arena.entry(name).numel, s());
  }
  std::vector<float> grad(const Net& n, const std::string& name) {
    return test::download(n.arena.grad(name).as<float>(), n.arena.entry(name).numel, s());
  }
  // Every gradient in declaration order, without the arena's padding.
  std::vector<float> all_grads(const Net& n) {
    std::vector<float> v;
    for (const auto& e : n.arena.entries()) {
      const auto g = grad(n, e.name);
      v.insert(v.end(), g.begin(), g.end());
    }
    return v;
  }
};

TEST_F(GatedMlpTest, ForwardAndBackwardMatchFloat64) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::int64_t B, C, F;
  };
  for (const Case c : {Case{1, 1, 1}, Case{7, 5, 12}, Case{64, 32, 96}, Case{300, 64, 200}, Case{2048, 48, 160}}) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " C=" + std::to_string(c.C) + " F=" + std::to_string(c.F));
    auto n = make(c.C, c.F);
    const std::int64_t B = c.B, C = c.C, F = c.F;
    const auto wg = param(*n, n->mlp.gate_name()), wu = param(*n, n->mlp.up_name()), wd = param(*n, n->mlp.down_name());
    const auto x = test::random_uniform(B * C, -1.f, 1.f, rng());
    const auto u = test::random_uniform(B * C, -1.f, 1.f, rng());
    auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
    gpu::DeviceBuffer<float> d_y(x.size()), d_dx(x.size());
    const OwnedWorkspace ws(n->mlp, B);
    test::poison(d_y, s());
    test::poison(d_dx, s());
    FH_CHECK(cudaMemsetAsync(n->arena.grads(), 0xFF, n->arena.padded_count() * sizeof(float), s()));
    n->mlp.forward(d_y.data(), d_x.data(), B, false, ws.view, lane());
    n->mlp.backward(d_dx.data(), d_u.data(), d_x.data(), B, ws.view, lane(), nullptr);
    std::vector<double> y(B * C, 0), dx(B * C, 0), dwg(F * C, 0), dwu(F * C, 0), dwd(C * F, 0);
    std::vector<double> g(F), up(F), h(F), dh(F);
    for (std::int64_t r = 0; r < B; ++r) {
      for (std::int64_t f = 0; f < F; ++f) {
        double a = 0, b = 0;
        for (std::int64_t k = 0; k < C; ++k) {
          a += static_cast<double>(wg[f * C + k]) * x[r * C + k];
          b += static_cast<double>(wu[f * C + k]) * x[r * C + k];
        }
        g[f] = a, up[f] = b, h[f] = a * sig(a) * b;
      }
      for (std::int64_t k = 0; k < C; ++k) {
        double acc = 0;
        for (std::int64_t f = 0; f < F; ++f) acc += static_cast<double>(wd[k * F + f]) * h[f];
        y[r * C + k] = acc;
      }
      for (std::int64_t f = 0; f < F; ++f) {
        double acc = 0;
        for (std::int64_t k = 0; k < C; ++k) {
          acc += static_cast<double>(u[r * C + k]) * wd[k * F + f];
          dwd[k * F + f] += static_cast<double>(u[r * C + k]) * h[f];
        }
        dh[f] = acc;
      }
      for (std::int64_t f = 0; f < F; ++f) {
        const double sg = sig(g[f]);
        const double dgate = dh[f] * up[f] * sg * (1 + g[f] * (1 - sg)), dup = dh[f] * g[f] * sg;
        for (std::int64_t k = 0; k < C; ++k) {
          dwg[f * C + k] += dgate * x[r * C + k];
          dwu[f * C + k] += dup * x[r * C + k];
          dx[r * C + k] += dgate * wg[f * C + k] + dup * wu[f * C + k];
        }
      }
    }
    EXPECT_LT(test::rel_error(test::download(d_y, s()), y), 1e-5) << "out";
    EXPECT_LT(test::rel_error(test::download(d_dx, s()), dx), 1e-4) << "d_in";
    EXPECT_LT(test::rel_error(grad(*n, n->mlp.gate_name()), dwg), 1e-4) << "gate.weight";
    EXPECT_LT(test::rel_error(grad(*n, n->mlp.up_name()), dwu), 1e-4) << "up.weight";
    EXPECT_LT(test::rel_error(grad(*n, n->mlp.down_name()), dwd), 1e-4) << "down.weight";
  }
}

TEST_F(GatedMlpTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 5, C = 6, F = 10;
  auto n = make(C, F);
  const auto x = test::random_uniform(B * C, -1.f, 1.f, rng());
  const auto u = test::random_uniform(B * C, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> d_y(x.size()), d_dx(x.size());
  const OwnedWorkspace ws(n->mlp, B);
  auto forward = [&] { n->mlp.forward(d_y.data(), d_x.data(), B, false, ws.view, lane()); };
  forward();
  n->mlp.backward(d_dx.data(), d_u.data(), d_x.data(), B, ws.view, lane(), nullptr);
  const auto grads = test::download(n->arena.grads(), n->arena.padded_count(), s());
  const auto dx = test::download(d_dx, s());
  auto loss = [&] { return test::weighted_sum(forward, d_y.data(), u, s()); };
  for (const auto& e : n->arena.entries())
    for (int k = 0; k < 4; ++k) {
      const auto i = static_cast<std::int64_t>(rng()() % static_cast<std::uint64_t>(e.numel));
      const double fd = test::central_difference(loss, n->arena.params() + e.offset, i, 1e-2f, s());
      EXPECT_TRUE(test::fd_close(fd, grads[e.offset + i], 2e-2, 0.02)) << e.name << "[" << i << "]";
    }
  for (std::int64_t i : {0L, 11L, B * C - 1}) {
    const double fd = test::central_difference(loss, d_x.data(), i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, dx[i], 2e-2, 0.02)) << "x[" << i << "]";
  }
}

// bf16 tensor-core GEMMs with the fp32 network's weights stay within 3e-2 (relative L2) of fp32.
TEST_F(GatedMlpTest, Bf16StaysCloseToFp32) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 256, C = 64, F = 128;
  auto a = make(C, F), b = make(C, F, gpu::LinearMath::bf16);
  FH_CHECK(cudaMemcpyAsync(b->arena.params(), a->arena.params(), a->arena.padded_count() * sizeof(float),
                           cudaMemcpyDeviceToDevice, s()));
  const auto x = test::random_uniform(B * C, -1.f, 1.f, rng());
  const auto u = test::random_uniform(B * C, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> ya(x.size()), yb(x.size()), dxa(x.size()), dxb(x.size());
  const OwnedWorkspace wa(a->mlp, B), wb(b->mlp, B);
  a->mlp.forward(ya.data(), d_x.data(), B, false, wa.view, lane());
  a->mlp.backward(dxa.data(), d_u.data(), d_x.data(), B, wa.view, lane(), nullptr);
  b->mlp.forward(yb.data(), d_x.data(), B, false, wb.view, lane());
  b->mlp.backward(dxb.data(), d_u.data(), d_x.data(), B, wb.view, lane(), nullptr);
  auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  EXPECT_LT(test::rel_error(test::download(yb, s()), as_double(test::download(ya, s()))), 3e-2) << "out";
  EXPECT_LT(test::rel_error(test::download(dxb, s()), as_double(test::download(dxa, s()))), 3e-2) << "d_in";
  for (const auto& name : {a->mlp.gate_name(), a->mlp.up_name(), a->mlp.down_name()})
    EXPECT_LT(test::rel_error(grad(*b, name), as_double(grad(*a, name))), 3e-2) << name;
}

TEST_F(GatedMlpTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 33, C = 24, F = 40;
  auto n = make(C, F);
  const auto x = test::random_uniform(B * C, -1.f, 1.f, rng());
  const auto u = test::random_uniform(B * C, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> d_y(x.size()), d_dx(x.size());
  const OwnedWorkspace ws(n->mlp, B);
  auto body = [&](gpu::BlasLane ln) {
    n->mlp.forward(d_y.data(), d_x.data(), B, false, ws.view, ln);
    n->mlp.backward(d_dx.data(), d_u.data(), d_x.data(), B, ws.view, ln, nullptr);
  };
  body(lane());
  const auto y = test::download(d_y, s()), dx = test::download(d_dx, s());
  const auto grads = all_grads(*n);
  gpu::CudaGraph graph;
  graph.capture(s(), [&](cudaStream_t cs) {
    gpu::BlasLane ln = lane();
    ln.stream = cs;
    body(ln);
  });
  ASSERT_TRUE(graph.captured());
  for (int r = 0; r < 2; ++r) {
    test::poison(d_y, s());
    test::poison(d_dx, s());
    FH_CHECK(cudaMemsetAsync(n->arena.grads(), 0xFF, n->arena.padded_count() * sizeof(float), s()));
    graph.replay(s());
    EXPECT_EQ(test::download(d_y, s()), y) << "replay " << r;
    EXPECT_EQ(test::download(d_dx, s()), dx) << "replay " << r;
    EXPECT_EQ(all_grads(*n), grads) << "replay " << r;
  }
}

}  // namespace
}  // namespace foxhunt::models
