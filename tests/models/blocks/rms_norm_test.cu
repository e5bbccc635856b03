// RmsNorm and the gated RMSNorm: forward and backward (dx, dz, dweight) against float64 on fresh
// random inputs with NaN-poisoned outputs, the Module form against central finite differences of
// the GPU forward, and a CUDA-graph replay of forward + backward against eager runs (bitwise).
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/check.hpp"
#include "gpu/graph.hpp"
#include "models/blocks/rms_norm.hpp"

namespace foxhunt::models {
namespace {

double silu(double v) { return v / (1.0 + std::exp(-v)); }
double silu_grad(double v) {
  const double s = 1.0 / (1.0 + std::exp(-v));
  return s * (1.0 + v * (1.0 - s));
}

struct RefNorm {
  std::vector<double> y, dx, dz, dw;
};

// z empty: the plain norm. z rows are zs apart. dy (rows, C).
RefNorm ref_norm(const std::vector<float>& x, const std::vector<float>& z, std::int64_t zs, const std::vector<float>& w,
                 const std::vector<float>& dy, std::int64_t rows, std::int64_t C, double eps) {
  RefNorm r;
  r.y.assign(rows * C, 0);
  r.dx.assign(rows * C, 0);
  r.dz.assign(rows * C, 0);
  r.dw.assign(C, 0);
  std::vector<double> g(C), n(C);
  for (std::int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      g[c] = x[i * C + c] * (z.empty() ? 1.0 : silu(z[i * zs + c]));
      ss += g[c] * g[c];
    }
    const double rs = 1.0 / std::sqrt(ss / C + eps);
    double dot = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      n[c] = g[c] * rs;
      r.y[i * C + c] = n[c] * w[c];
      dot += dy[i * C + c] * w[c] * n[c];
      r.dw[c] += dy[i * C + c] * n[c];
    }
    for (std::int64_t c = 0; c < C; ++c) {
      const double dg = rs * (dy[i * C + c] * w[c] - n[c] * dot / C);
      if (z.empty()) {
        r.dx[i * C + c] = dg;
      } else {
        const double zv = z[i * zs + c];
        r.dx[i * C + c] = dg * silu(zv);
        r.dz[i * C + c] = dg * x[i * C + c] * silu_grad(zv);
      }
    }
  }
  return r;
}

class RmsNormTest : public test::LaneTest {};

TEST_F(RmsNormTest, PlainAndGatedMatchFloat64) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::int64_t rows, C;
  };
  // Rows past kRowsPerPartial * kMaxPartials (more rows per partial) and C past one warp's 32, past
  // a block's 256 columns and past 1024 (column sums: partials finished by a thread per column).
  for (const Case c : {Case{1, 1}, Case{5, 7}, Case{33, 64}, Case{200, 300}, Case{9000, 40}, Case{530000, 3},
                       Case{70, 1030}})
    for (const bool gated : {false, true}) {
      SCOPED_TRACE("rows=" + std::to_string(c.rows) + " C=" + std::to_string(c.C) + " gated=" + std::to_string(gated));
      const std::int64_t rows = c.rows, C = c.C, zs = C + 3;
      const float eps = 1e-5f;
      const auto x = test::random_uniform(rows * C, -2.f, 2.f, rng());
      const auto z = gated ? test::random_uniform(rows * zs, -3.f, 3.f, rng()) : std::vector<float>{};
      const auto w = test::random_uniform(C, 0.5f, 1.5f, rng());
      const auto dy = test::random_uniform(rows * C, -1.f, 1.f, rng());
      auto d_x = test::upload(x, s()), d_w = test::upload(w, s()), d_dy = test::upload(dy, s());
      gpu::DeviceBuffer<float> d_z, d_y(x.size()), d_rstd(rows), d_dx(x.size()), d_dz, d_dw(C);
      gpu::DeviceBuffer<std::byte> ws(rms_norm_backward_workspace_bytes(rows, C));
      test::poison(d_y, s());
      test::poison(d_rstd, s());
      test::poison(d_dx, s());
      test::poison(d_dw, s());
      if (gated) {
        d_z = test::upload(z, s());
        d_dz = gpu::DeviceBuffer<float>(z.size());
        test::poison(d_dz, s());
        rms_norm_gated_forward(d_y.data(), d_rstd.data(), d_x.data(), d_z.data(), zs, d_w.data(), rows, C, eps, s());
        rms_norm_gated_backward(d_dx.data(), d_dz.data(), zs, d_dw.data(), d_dy.data(), d_x.data(), d_z.data(), zs,
                                d_w.data(), d_rstd.data(), rows, C, ws.data(), s());
      } else {
        rms_norm_forward(d_y.data(), d_rstd.data(), d_x.data(), d_w.data(), rows, C, eps, s());
        rms_norm_backward(d_dx.data(), d_dw.data(), d_dy.data(), d_x.data(), d_w.data(), d_rstd.data(), rows, C,
                          ws.data(), s());
      }
      const RefNorm ref = ref_norm(x, z, zs, w, dy, rows, C, eps);
      EXPECT_TRUE(test::all_close(test::download(d_y, s()), ref.y, 1e-5, 1e-6)) << "y";
      EXPECT_TRUE(test::all_close(test::download(d_dx, s()), ref.dx, 1e-4, 1e-5)) << "dx";
      EXPECT_LT(test::rel_error(test::download(d_dw, s()), ref.dw), 1e-5) << "dweight";
      if (gated) {
        const auto dz = test::download(d_dz, s());
        std::vector<float> got(rows * C);
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t k = 0; k < C; ++k) {
            got[i * C + k] = dz[i * zs + k];
            // The stride's padding columns are not written: still the poison.
            if (k < 3) EXPECT_TRUE(std::isnan(dz[i * zs + C + k])) << "dz padding row " << i;
          }
        EXPECT_TRUE(test::all_close(got, ref.dz, 1e-4, 1e-5)) << "dz";
      }
    }
}

// The Module: its weight and input gradients against central differences of L = sum(u * y).
TEST_F(RmsNormTest, ModuleBackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 6, C = 20;
  gpu::ParameterArena arena;
  RmsNorm norm(RmsNormSpec{"norm", C, 1e-5f});
  norm.declare(arena);
  arena.finalize(s());
  norm.init(arena, rng(), s());
  norm.bind(arena);
  EXPECT_EQ(test::download(norm.weight(), C, s()), std::vector<float>(C, 1.f)) << "init ones";
  test::upload_to(arena.params() + arena.entry(norm.weight_name()).offset, test::random_uniform(C, 0.5f, 1.5f, rng()),
                  s());
  const auto x = test::random_uniform(B * C, -1.f, 1.f, rng());
  const auto u = test::random_uniform(B * C, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_u = test::upload(u, s());
  gpu::DeviceBuffer<float> d_y(x.size()), d_dx(x.size());
  const OwnedWorkspace ws(norm, B);
  auto forward = [&] { norm.forward(d_y.data(), d_x.data(), B, false, ws.view, lane()); };
  forward();
  norm.backward(d_dx.data(), d_u.data(), d_x.data(), B, ws.view, lane(), nullptr);
  const auto dw = test::download(norm.weight_grad(), C, s()), dx = test::download(d_dx, s());
  auto loss = [&] { return test::weighted_sum(forward, d_y.data(), u, s()); };
  float* w = arena.params() + arena.entry(norm.weight_name()).offset;
  for (std::int64_t i : {0L, 7L, C - 1}) {
    const double fd = test::central_difference(loss, w, i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, dw[i], 1e-2, 0.05)) << "weight[" << i << "]";
  }
  for (std::int64_t i : {0L, 13L, 61L, B * C - 1}) {
    const double fd = test::central_difference(loss, d_x.data(), i, 1e-2f, s());
    EXPECT_TRUE(test::fd_close(fd, dx[i], 2e-2, 0.05)) << "x[" << i << "]";
  }
}

// Gated forward + backward captured in a graph replay bitwise like the eager calls.
TEST_F(RmsNormTest, GraphReplayEqualsEagerBitwise) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 500, C = 48, zs = 2 * C;
  const auto x = test::random_uniform(rows * C, -1.f, 1.f, rng());
  const auto z = test::random_uniform(rows * zs, -2.f, 2.f, rng());
  const auto w = test::random_uniform(C, 0.5f, 1.5f, rng());
  const auto dy = test::random_uniform(rows * C, -1.f, 1.f, rng());
  auto d_x = test::upload(x, s()), d_z = test::upload(z, s()), d_w = test::upload(w, s()), d_dy = test::upload(dy, s());
  gpu::DeviceBuffer<float> d_y(x.size()), d_rstd(rows), d_dx(x.size()), d_dz(z.size()), d_dw(C);
  gpu::DeviceBuffer<std::byte> ws(rms_norm_backward_workspace_bytes(rows, C));
  test::poison(d_dz, s());
  auto body = [&](cudaStream_t cs) {
    rms_norm_gated_forward(d_y.data(), d_rstd.data(), d_x.data(), d_z.data(), zs, d_w.data(), rows, C, 1e-5f, cs);
    rms_norm_gated_backward(d_dx.data(), d_dz.data(), zs, d_dw.data(), d_dy.data(), d_x.data(), d_z.data(), zs,
                            d_w.data(), d_rstd.data(), rows, C, ws.data(), cs);
  };
  body(s());
  const auto y = test::download(d_y, s()), dx = test::download(d_dx, s()), dw = test::download(d_dw, s());
  const auto dz = test::download(d_dz, s());
  gpu::CudaGraph graph;
  graph.capture(s(), body);
  ASSERT_TRUE(graph.captured());
  for (int r = 0; r < 2; ++r) {
    test::poison(d_y, s());
    test::poison(d_dx, s());
    test::poison(d_dw, s());
    test::poison(d_dz, s());
    graph.replay(s());
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(test::download(d_y, s()), y)) << "y, replay " << r;
    EXPECT_TRUE(same(test::download(d_dx, s()), dx)) << "dx, replay " << r;
    EXPECT_TRUE(same(test::download(d_dw, s()), dw)) << "dweight, replay " << r;
    EXPECT_TRUE(same(test::download(d_dz, s()), dz)) << "dz (NaN padding included), replay " << r;
  }
}

}  // namespace
}  // namespace foxhunt::models
