// LayerNorm forward and backward against float64 CPU references, and the backward pass
// against central finite differences of the GPU forward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/layernorm.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

constexpr float kEps = 1e-5f;

struct RowsCols {
  std::int64_t rows, cols;
};
// Warp path (cols <= 1024; float4 when cols % 4 == 0), block path with the row cached in
// shared memory (4097, 50000 forward; 4097 backward) and re-read (100003; 50000 backward),
// grid-stride over rows (1000003), a large case (4M elements).
const RowsCols kShapes[] = {{1, 1},    {37, 1},    {37, 7},     {37, 32},     {37, 33},    {37, 1000},
                            {9, 4097}, {3, 50000}, {2, 100003}, {1000003, 1}, {4096, 1024}};

std::string shape_note(std::int64_t rows, std::int64_t cols) {
  return "rows " + std::to_string(rows) + " cols " + std::to_string(cols);
}

struct RefForward {
  std::vector<double> y, mean, rstd;
};
RefForward ref_forward(const std::vector<float>& x, const std::vector<float>& gamma, const std::vector<float>& beta,
                       std::int64_t rows, std::int64_t cols) {
  RefForward f{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(rows)};
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    double m = 0, v = 0;
    for (std::int64_t c = 0; c < cols; ++c) m += xr[c];
    m /= static_cast<double>(cols);
    for (std::int64_t c = 0; c < cols; ++c) v += (xr[c] - m) * (xr[c] - m);
    const double rs = 1.0 / std::sqrt(v / static_cast<double>(cols) + kEps);
    for (std::int64_t c = 0; c < cols; ++c) f.y[r * cols + c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    f.mean[r] = m;
    f.rstd[r] = rs;
  }
  return f;
}

struct RefBackward {
  std::vector<double> dx, dgamma, dbeta;
  std::vector<double> dgamma_scale;  // sum over rows of |d_out * xhat|: the scale of d_gamma's rounding
  std::vector<double> dbeta_scale;   // sum over rows of |d_out|
};
// mean, rstd: the f32 values the GPU backward is given.
RefBackward ref_backward(const std::vector<float>& dy, const std::vector<float>& x, const std::vector<float>& mean,
                         const std::vector<float>& rstd, const std::vector<float>& gamma, std::int64_t rows,
                         std::int64_t cols) {
  RefBackward b{std::vector<double>(x.size()), std::vector<double>(cols), std::vector<double>(cols),
                std::vector<double>(cols), std::vector<double>(cols)};
  std::vector<double> xh(cols), gh(cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    double m1 = 0, m2 = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = r * cols + c;
      xh[c] = (static_cast<double>(x[i]) - mean[r]) * rstd[r];
      gh[c] = static_cast<double>(dy[i]) * gamma[c];
      m1 += gh[c];
      m2 += gh[c] * xh[c];
      b.dgamma[c] += dy[i] * xh[c];
      b.dbeta[c] += dy[i];
      b.dgamma_scale[c] += std::abs(dy[i] * xh[c]);
      b.dbeta_scale[c] += std::abs(dy[i]);
    }
    m1 /= static_cast<double>(cols);
    m2 /= static_cast<double>(cols);
    for (std::int64_t c = 0; c < cols; ++c) b.dx[r * cols + c] = rstd[r] * (gh[c] - m1 - xh[c] * m2);
  }
  return b;
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// Sums over rows: |error| <= 1e-5 * sum |terms| (partial sums run in f32 before a double total).
::testing::AssertionResult sums_close(const std::vector<float>& got, const std::vector<double>& ref,
                                      const std::vector<double>& scale) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - ref[i]);
    if (!(err <= 1e-5 * scale[i] + 1e-30))
      return ::testing::AssertionFailure()
             << "column " << i << ": got " << got[i] << ", want " << ref[i] << " (scale " << scale[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

class LayerNormTest : public test::GpuTest {
 protected:
  struct Inputs {
    std::vector<float> x, gamma, beta;
  };
  Inputs random_inputs(std::int64_t rows, std::int64_t cols) {
    return {test::random_normal(rows * cols, 1.f, 2.f, rng()), test::random_uniform(cols, 0.5f, 1.5f, rng()),
            test::random_uniform(cols, -0.5f, 0.5f, rng())};
  }

  // Backward on the GPU; returns d_in, d_gamma, d_beta.
  struct Grads {
    std::vector<float> dx, dgamma, dbeta;
  };
  Grads run_backward(const std::vector<float>& dy, const std::vector<float>& x, const std::vector<float>& mean,
                     const std::vector<float>& rstd, const std::vector<float>& gamma, std::int64_t rows,
                     std::int64_t cols) {
    auto d_dy = test::upload(dy, stream());
    auto d_x = test::upload(x, stream());
    auto d_mean = test::upload(mean, stream());
    auto d_rstd = test::upload(rstd, stream());
    auto d_gamma = test::upload(gamma, stream());
    DeviceBuffer<float> d_dx(x.size()), d_dgamma(cols), d_dbeta(cols);
    DeviceBuffer<std::byte> ws(layernorm_backward_workspace_bytes(rows, cols));
    test::poison(d_dx, stream());
    test::poison(d_dgamma, stream());
    test::poison(d_dbeta, stream());
    test::poison(ws, stream());
    layernorm_backward(d_dx.data(), d_dgamma.data(), d_dbeta.data(), d_dy.data(), d_x.data(), d_mean.data(),
                       d_rstd.data(), d_gamma.data(), rows, cols, ws.data(), stream());
    return {test::download(d_dx, stream()), test::download(d_dgamma, stream()), test::download(d_dbeta, stream())};
  }
};

TEST_F(LayerNormTest, ForwardMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : kShapes) {
    SCOPED_TRACE(shape_note(s.rows, s.cols));
    const auto in = random_inputs(s.rows, s.cols);
    auto d_x = test::upload(in.x, stream());
    auto d_gamma = test::upload(in.gamma, stream());
    auto d_beta = test::upload(in.beta, stream());
    DeviceBuffer<float> d_y(in.x.size()), d_mean(s.rows), d_rstd(s.rows);
    test::poison(d_y, stream());
    test::poison(d_mean, stream());
    test::poison(d_rstd, stream());
    layernorm_forward(d_y.data(), d_mean.data(), d_rstd.data(), d_x.data(), d_gamma.data(), d_beta.data(), s.rows,
                      s.cols, kEps, stream());
    const auto ref = ref_forward(in.x, in.gamma, in.beta, s.rows, s.cols);
    EXPECT_LT(test::rel_error(test::download(d_y, stream()), ref.y), 1e-5);
    // mean ~ 1 with f32 rounding ~1e-7 of the row's |x| scale; rstd to a few ulp of the variance.
    EXPECT_TRUE(test::all_close(test::download(d_mean, stream()), ref.mean, 1e-5, 1e-6));
    EXPECT_TRUE(test::all_close(test::download(d_rstd, stream()), ref.rstd, 1e-5, 0));
  }
}

TEST_F(LayerNormTest, ForwardWithoutSavedStatistics) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : {RowsCols{37, 33}, RowsCols{9, 4097}}) {
    SCOPED_TRACE(shape_note(s.rows, s.cols));
    const auto in = random_inputs(s.rows, s.cols);
    auto d_x = test::upload(in.x, stream());
    auto d_gamma = test::upload(in.gamma, stream());
    auto d_beta = test::upload(in.beta, stream());
    layernorm_forward(d_x.data(), nullptr, nullptr, d_x.data(), d_gamma.data(), d_beta.data(), s.rows, s.cols, kEps,
                      stream());  // in place, no mean/rstd
    EXPECT_LT(test::rel_error(test::download(d_x, stream()), ref_forward(in.x, in.gamma, in.beta, s.rows, s.cols).y),
              1e-5);
  }
}

TEST_F(LayerNormTest, BackwardMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : kShapes) {
    SCOPED_TRACE(shape_note(s.rows, s.cols));
    const auto in = random_inputs(s.rows, s.cols);
    const auto fwd = ref_forward(in.x, in.gamma, in.beta, s.rows, s.cols);
    const auto mean = to_float(fwd.mean), rstd = to_float(fwd.rstd);
    const auto dy = test::random_normal(in.x.size(), 0.f, 1.f, rng());
    const auto g = run_backward(dy, in.x, mean, rstd, in.gamma, s.rows, s.cols);
    const auto ref = ref_backward(dy, in.x, mean, rstd, in.gamma, s.rows, s.cols);
    // cols == 1: d_in is exactly zero (xhat == 0 and g - mean(g) == 0): the L2 measure needs ref != 0.
    if (s.cols > 1)
      EXPECT_LT(test::rel_error(g.dx, ref.dx), 1e-5);
    else
      EXPECT_TRUE(test::all_close(g.dx, ref.dx, 0, 1e-6));
    EXPECT_TRUE(sums_close(g.dgamma, ref.dgamma, ref.dgamma_scale));
    EXPECT_TRUE(sums_close(g.dbeta, ref.dbeta, ref.dbeta_scale));
  }
}

// Central differences of L = sum(up * y), y from the GPU forward, against the GPU backward, for
// a few elements of x (L over the perturbed row) and of gamma and beta (L over the column).
// h = 0.05: f32 rounding noise of a 1e5-wide row (~1e-5 in L) stays ~1e-3 of the gradient.
TEST_F(LayerNormTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const RowsCols shapes[] = {{37, 1}, {37, 7}, {37, 33}, {37, 1000}, {9, 4097}, {3, 50000}, {2, 100003}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(shape_note(s.rows, s.cols));
    const std::int64_t rows = s.rows, cols = s.cols, n = rows * cols;
    auto in = random_inputs(rows, cols);
    const auto up = test::random_normal(n, 0.f, 1.f, rng());
    auto d_x = test::upload(in.x, stream());
    auto d_gamma = test::upload(in.gamma, stream());
    auto d_beta = test::upload(in.beta, stream());
    DeviceBuffer<float> d_y(n), d_mean(rows), d_rstd(rows);
    layernorm_forward(d_y.data(), d_mean.data(), d_rstd.data(), d_x.data(), d_gamma.data(), d_beta.data(), rows, cols,
                      kEps, stream());
    const auto g = run_backward(up, in.x, test::download(d_mean, stream()), test::download(d_rstd, stream()), in.gamma,
                                rows, cols);

    // L restricted to the outputs that a perturbation can change (row r, or column c).
    auto loss = [&](std::int64_t row, std::int64_t col) {
      d_x.upload(std::span<const float>(in.x), stream());
      d_gamma.upload(std::span<const float>(in.gamma), stream());
      d_beta.upload(std::span<const float>(in.beta), stream());
      layernorm_forward(d_y.data(), nullptr, nullptr, d_x.data(), d_gamma.data(), d_beta.data(), rows, cols, kEps,
                        stream());
      const auto y = test::download(d_y, stream());
      double l = 0;
      if (row >= 0)
        for (std::int64_t c = 0; c < cols; ++c) l += static_cast<double>(up[row * cols + c]) * y[row * cols + c];
      else
        for (std::int64_t r = 0; r < rows; ++r) l += static_cast<double>(up[r * cols + col]) * y[r * cols + col];
      return l;
    };
    auto central = [&](float& v, std::int64_t row, std::int64_t col) {
      const float v0 = v, h = 0.05f;
      v = v0 + h;
      const double lp = loss(row, col);
      const float vp = v;
      v = v0 - h;
      const double lm = loss(row, col);
      const float vm = v;
      v = v0;
      return (lp - lm) / (static_cast<double>(vp) - vm);
    };
    auto rms = [](const std::vector<float>& v) {
      double s = 0;
      for (float e : v) s += static_cast<double>(e) * e;
      return std::sqrt(s / static_cast<double>(v.size()));
    };
    const double rms_dx = rms(g.dx), rms_dg = rms(g.dgamma), rms_db = rms(g.dbeta);
    std::uniform_int_distribution<std::int64_t> pick_x(0, n - 1), pick_c(0, cols - 1);
    for (int k = 0; k < 4; ++k) {
      const std::int64_t i = pick_x(rng());
      EXPECT_NEAR(central(in.x[i], i / cols, -1), g.dx[i], 1e-2 * (std::abs(g.dx[i]) + 0.1 * rms_dx) + 1e-6)
          << "d_in element " << i;
      const std::int64_t c = pick_c(rng());
      EXPECT_NEAR(central(in.gamma[c], -1, c), g.dgamma[c], 1e-2 * (std::abs(g.dgamma[c]) + 0.1 * rms_dg) + 1e-6)
          << "d_gamma column " << c;
      EXPECT_NEAR(central(in.beta[c], -1, c), g.dbeta[c], 1e-2 * (std::abs(g.dbeta[c]) + 0.1 * rms_db) + 1e-6)
          << "d_beta column " << c;
    }
  }
}

// d_gamma/d_beta are overwritten (a second call does not double them), results repeat bit for
// bit, and d_in may alias d_out.
TEST_F(LayerNormTest, BackwardOverwritesIsDeterministicAndMayRunInPlace) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : {RowsCols{4096, 1024}, RowsCols{333, 1000}, RowsCols{300, 4097}, RowsCols{5, 50000}}) {
    SCOPED_TRACE(shape_note(s.rows, s.cols));
    const std::int64_t rows = s.rows, cols = s.cols, n = rows * cols;
    const auto in = random_inputs(rows, cols);
    const auto fwd = ref_forward(in.x, in.gamma, in.beta, rows, cols);
    const auto mean = to_float(fwd.mean), rstd = to_float(fwd.rstd);
    const auto dy = test::random_normal(n, 0.f, 1.f, rng());
    auto d_dy = test::upload(dy, stream());
    auto d_x = test::upload(in.x, stream());
    auto d_mean = test::upload(mean, stream());
    auto d_rstd = test::upload(rstd, stream());
    auto d_gamma = test::upload(in.gamma, stream());
    DeviceBuffer<float> dx(n), dg1(cols), db1(cols), dg2(cols), db2(cols);
    DeviceBuffer<std::byte> ws(layernorm_backward_workspace_bytes(rows, cols));
    layernorm_backward(dx.data(), dg1.data(), db1.data(), d_dy.data(), d_x.data(), d_mean.data(), d_rstd.data(),
                       d_gamma.data(), rows, cols, ws.data(), stream());
    const auto dx_out_of_place = test::download(dx, stream());
    layernorm_backward(dx.data(), dg1.data(), db1.data(), d_dy.data(), d_x.data(), d_mean.data(), d_rstd.data(),
                       d_gamma.data(), rows, cols, ws.data(), stream());  // same outputs again: overwritten
    layernorm_backward(d_dy.data(), dg2.data(), db2.data(), d_dy.data(), d_x.data(), d_mean.data(), d_rstd.data(),
                       d_gamma.data(), rows, cols, ws.data(), stream());  // d_in aliases d_out
    const auto g1 = test::download(dg1, stream()), g2 = test::download(dg2, stream());
    const auto b1 = test::download(db1, stream()), b2 = test::download(db2, stream());
    const auto dx_in_place = test::download(d_dy, stream());
    EXPECT_EQ(std::memcmp(g1.data(), g2.data(), cols * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(b1.data(), b2.data(), cols * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(dx_out_of_place.data(), dx_in_place.data(), n * sizeof(float)), 0);
    const auto ref = ref_backward(dy, in.x, mean, rstd, in.gamma, rows, cols);
    EXPECT_TRUE(sums_close(g1, ref.dgamma, ref.dgamma_scale));
    EXPECT_TRUE(sums_close(b1, ref.dbeta, ref.dbeta_scale));
  }
}

TEST_F(LayerNormTest, EmptyAndInvalidShapes) {
  DeviceBuffer<float> buf(16), dg(8), db(8);
  test::poison(dg, stream());
  test::poison(db, stream());
  // No rows: nothing to normalise, and the parameter gradients are empty sums, written as 0.
  layernorm_forward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), 0, 8, kEps, stream());
  layernorm_backward(buf.data(), dg.data(), db.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), 0, 8,
                     nullptr, stream());
  for (float v : test::download(dg, stream())) EXPECT_EQ(v, 0.f);
  for (float v : test::download(db, stream())) EXPECT_EQ(v, 0.f);
  EXPECT_EQ(layernorm_backward_workspace_bytes(0, 8), 0u);
  EXPECT_THROW(layernorm_forward(buf.data(), nullptr, nullptr, buf.data(), nullptr, buf.data(), 1, 8, kEps, stream()),
               std::invalid_argument);
  EXPECT_THROW(
      layernorm_forward(buf.data(), nullptr, nullptr, buf.data(), buf.data(), buf.data(), 1, 0, kEps, stream()),
      std::invalid_argument);
  EXPECT_THROW(layernorm_backward(buf.data(), dg.data(), db.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                  buf.data(), 1, 8, nullptr, stream()),
               std::invalid_argument);  // workspace required
}

}  // namespace
}  // namespace foxhunt::gpu
