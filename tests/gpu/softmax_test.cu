// Softmax / log-softmax forward and backward against float64 CPU references, and the backward
// passes against central finite differences of the GPU forward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu/softmax.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

using Forward = void (*)(float*, const float*, std::int64_t, std::int64_t, cudaStream_t);
using Backward = void (*)(float*, const float*, const float*, std::int64_t, std::int64_t, cudaStream_t);

struct RowsCols {
  std::int64_t rows, cols;
};
// Warp path (cols <= 1024; float4 when cols % 4 == 0, scalar otherwise), block path with the
// row cached in shared memory (4097, 50000) and re-read from global memory (100003 forward;
// 50000 and 100003 backward, which caches two rows), grid-stride over rows (1000003), and a
// large case (4M elements).
const RowsCols kShapes[] = {{1, 1},    {37, 1},    {37, 7},     {37, 32},     {37, 33},    {37, 1000},
                            {9, 4097}, {3, 50000}, {2, 100003}, {1000003, 1}, {4096, 1024}};

std::string shape_note(std::int64_t rows, std::int64_t cols) {
  return "rows " + std::to_string(rows) + " cols " + std::to_string(cols);
}

std::vector<double> ref_forward(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, bool log) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(xr[c]));
    double s = 0;
    for (std::int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
    for (std::int64_t c = 0; c < cols; ++c) y[r * cols + c] = log ? (xr[c] - m) - std::log(s) : std::exp(xr[c] - m) / s;
  }
  return y;
}

// y: the forward output as the backward pass sees it (f32).
std::vector<double> ref_backward(const std::vector<float>& dy, const std::vector<float>& y, std::int64_t rows,
                                 std::int64_t cols, bool log) {
  std::vector<double> dx(dy.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = r * cols + c;
      s += log ? static_cast<double>(dy[i]) : static_cast<double>(dy[i]) * y[i];
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = r * cols + c;
      dx[i] = log ? dy[i] - std::exp(static_cast<double>(y[i])) * s : y[i] * (dy[i] - s);
    }
  }
  return dx;
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

class SoftmaxTest : public test::GpuTest {
 protected:
  void check_forward(Forward fwd, bool log, std::int64_t rows, std::int64_t cols) {
    SCOPED_TRACE(shape_note(rows, cols));
    const auto x = test::random_normal(rows * cols, 0.3f, 2.f, rng());
    auto d_x = test::upload(x, stream());
    DeviceBuffer<float> d_y(x.size());
    test::poison(d_y, stream());
    fwd(d_y.data(), d_x.data(), rows, cols, stream());
    const auto y = test::download(d_y, stream());
    const auto ref = ref_forward(x, rows, cols, log);
    EXPECT_LT(test::rel_error(y, ref), 1e-5);
    // Element-wise too, so tiny probabilities are checked as well: f32 exp of arguments up to
    // ~20 in size carries ~1e-6 relative error; log-softmax values carry ~1 ulp of |y| + log(s).
    EXPECT_TRUE(test::all_close(y, ref, 1e-5, log ? 1e-5 : 1e-12));
  }

  void check_backward(Backward bwd, bool log, std::int64_t rows, std::int64_t cols) {
    SCOPED_TRACE(shape_note(rows, cols));
    const auto x = test::random_normal(rows * cols, 0.f, 2.f, rng());
    const auto y = to_float(ref_forward(x, rows, cols, log));
    const auto dy = test::random_normal(rows * cols, 0.f, 1.f, rng());
    auto d_y = test::upload(y, stream());
    auto d_dy = test::upload(dy, stream());
    DeviceBuffer<float> d_dx(y.size());
    test::poison(d_dx, stream());
    bwd(d_dx.data(), d_dy.data(), d_y.data(), rows, cols, stream());
    const auto dx = test::download(d_dx, stream());
    EXPECT_LT(test::rel_error(dx, ref_backward(dy, y, rows, cols, log)), 1e-5);
  }

  // d_in from the GPU backward vs central differences of L = sum(up * y) with y from the GPU
  // forward, for a few random elements. Only the perturbed row's terms change, so L sums that
  // row alone. h = 0.05: the rounding noise of an f32 row of 1e5 log-probabilities (~1e-4 in L)
  // stays ~1e-3 of the gradient, while the h^2 truncation error is ~1e-4 of it.
  void check_finite_differences(Forward fwd, Backward bwd, bool log, std::int64_t rows, std::int64_t cols) {
    SCOPED_TRACE(shape_note(rows, cols));
    const std::int64_t n = rows * cols;
    auto x = test::random_normal(n, 0.f, 1.5f, rng());
    const auto up = test::random_normal(n, 0.f, 1.f, rng());
    auto d_x = test::upload(x, stream());
    auto d_up = test::upload(up, stream());
    DeviceBuffer<float> d_y(n), d_dx(n);
    fwd(d_y.data(), d_x.data(), rows, cols, stream());
    bwd(d_dx.data(), d_up.data(), d_y.data(), rows, cols, stream());
    const auto dx = test::download(d_dx, stream());
    double rms = 0;
    for (float v : dx) rms += static_cast<double>(v) * v;
    rms = std::sqrt(rms / static_cast<double>(n));

    auto row_loss = [&](std::int64_t r) {
      d_x.upload(std::span<const float>(x), stream());
      fwd(d_y.data(), d_x.data(), rows, cols, stream());
      const auto y = test::download(d_y, stream());
      double l = 0;
      for (std::int64_t c = 0; c < cols; ++c) l += static_cast<double>(up[r * cols + c]) * y[r * cols + c];
      return l;
    };
    const float h = 0.05f;
    std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
    for (int k = 0; k < 6; ++k) {
      const std::int64_t i = pick(rng()), r = i / cols;
      const float x0 = x[i];
      x[i] = x0 + h;
      const double lp = row_loss(r);
      const float xp = x[i];
      x[i] = x0 - h;
      const double lm = row_loss(r);
      const float xm = x[i];
      x[i] = x0;
      const double fd = (lp - lm) / (static_cast<double>(xp) - xm);
      // 3e-2: with h = 0.05 the central difference's own h^2 term reaches ~2% on softmax's
      // curvature (seen on an H200: 1.9% at 1e5 columns); the analytic check above is the tight one.
      EXPECT_NEAR(fd, dx[i], 3e-2 * (std::abs(dx[i]) + 0.1 * rms) + 1e-7) << "element " << i;
    }
  }
};

TEST_F(SoftmaxTest, ForwardMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : kShapes) {
    check_forward(softmax_forward, false, s.rows, s.cols);
    check_forward(log_softmax_forward, true, s.rows, s.cols);
  }
}

TEST_F(SoftmaxTest, BackwardMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : kShapes) {
    check_backward(softmax_backward, false, s.rows, s.cols);
    check_backward(log_softmax_backward, true, s.rows, s.cols);
  }
}

TEST_F(SoftmaxTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  // Up to 4097 columns: past that, one element's effect on a sum over 5e4+ f32 outputs drowns in
  // their rounding (seen on an H200: 25% noise at 1e5 columns). The float64 check covers 1e5.
  const RowsCols shapes[] = {{37, 1}, {37, 7}, {37, 33}, {37, 1000}, {9, 4097}};
  for (const auto& s : shapes) {
    check_finite_differences(softmax_forward, softmax_backward, false, s.rows, s.cols);
    check_finite_differences(log_softmax_forward, log_softmax_backward, true, s.rows, s.cols);
  }
}

// -inf logits (action masks) get probability 0 / log-probability -inf; the rest renormalise.
// At 5% density many block-path threads see -inf first, which the online max/sum must survive.
TEST_F(SoftmaxTest, MaskedLogits) {
  SCOPED_TRACE(seed_note());
  const RowsCols shapes[] = {{37, 7}, {37, 1000}, {9, 4097}, {2, 100003}};
  std::bernoulli_distribution masked(0.05);
  for (const auto& s : shapes) {
    SCOPED_TRACE(shape_note(s.rows, s.cols));
    auto x = test::random_normal(s.rows * s.cols, 0.f, 2.f, rng());
    for (std::int64_t r = 0; r < s.rows; ++r) {
      for (std::int64_t c = 1; c < s.cols; ++c)  // column 0 stays finite: no row is all -inf
        if (masked(rng())) x[r * s.cols + c] = -std::numeric_limits<float>::infinity();
    }
    auto d_x = test::upload(x, stream());
    DeviceBuffer<float> d_y(x.size());
    test::poison(d_y, stream());
    softmax_forward(d_y.data(), d_x.data(), s.rows, s.cols, stream());
    const auto p = test::download(d_y, stream());
    EXPECT_TRUE(test::all_close(p, ref_forward(x, s.rows, s.cols, false), 1e-5, 1e-12));

    test::poison(d_y, stream());
    log_softmax_forward(d_y.data(), d_x.data(), s.rows, s.cols, stream());
    const auto lp = test::download(d_y, stream());
    const auto ref = ref_forward(x, s.rows, s.cols, true);
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isinf(x[i])) {
        ASSERT_TRUE(std::isinf(lp[i]) && lp[i] < 0) << "element " << i << ": " << lp[i];
      } else {
        ASSERT_NEAR(lp[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << "element " << i;
      }
    }
  }
}

// A row of only -inf has no distribution: NaN, as in PyTorch (and not an exception or garbage).
TEST_F(SoftmaxTest, AllMaskedRowIsNan) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t cols : {7, 4097, 100003}) {
    SCOPED_TRACE(shape_note(2, cols));
    auto x = test::random_normal(2 * cols, 0.f, 1.f, rng());
    std::fill(x.begin(), x.begin() + cols, -std::numeric_limits<float>::infinity());
    auto d_x = test::upload(x, stream());
    DeviceBuffer<float> d_y(x.size());
    softmax_forward(d_y.data(), d_x.data(), 2, cols, stream());
    const auto y = test::download(d_y, stream());
    for (std::int64_t c = 0; c < cols; ++c) ASSERT_TRUE(std::isnan(y[c])) << c;
    const std::vector<float> second(y.begin() + cols, y.end());
    const auto ref = ref_forward(x, 2, cols, false);
    EXPECT_LT(test::rel_error(second, std::vector<double>(ref.begin() + cols, ref.end())), 1e-5);
  }
}

// Pointers one float past an allocation: rows are not 16-byte aligned, the scalar path runs.
TEST_F(SoftmaxTest, UnalignedPointers) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 37, cols = 1000, n = rows * cols;
  auto x = test::random_normal(n + 1, 0.f, 2.f, rng());
  auto d_x = test::upload(x, stream());
  DeviceBuffer<float> d_y(n + 1);
  test::poison(d_y, stream());
  softmax_forward(d_y.data() + 1, d_x.data() + 1, rows, cols, stream());
  const auto y = test::download(d_y, stream());
  const std::vector<float> xs(x.begin() + 1, x.end()), ys(y.begin() + 1, y.end());
  EXPECT_LT(test::rel_error(ys, ref_forward(xs, rows, cols, false)), 1e-5);
  EXPECT_TRUE(std::isnan(y[0]));  // the float before the output was not written
}

TEST_F(SoftmaxTest, InPlaceAndRepeatedRunsAreBitwiseEqual) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : {RowsCols{37, 33}, RowsCols{4096, 1024}, RowsCols{9, 4097}, RowsCols{2, 100003}}) {
    SCOPED_TRACE(shape_note(s.rows, s.cols));
    const std::int64_t n = s.rows * s.cols;
    const auto x = test::random_normal(n, 0.f, 2.f, rng());
    const auto dy = test::random_normal(n, 0.f, 1.f, rng());
    auto d_x = test::upload(x, stream());
    auto d_dy = test::upload(dy, stream());
    DeviceBuffer<float> y1(n), y2(n), g1(n), g2(n);
    log_softmax_forward(y1.data(), d_x.data(), s.rows, s.cols, stream());
    log_softmax_forward(y2.data(), d_x.data(), s.rows, s.cols, stream());
    log_softmax_backward(g1.data(), d_dy.data(), y1.data(), s.rows, s.cols, stream());
    log_softmax_backward(g2.data(), d_dy.data(), y1.data(), s.rows, s.cols, stream());
    const auto a = test::download(y1, stream()), b = test::download(y2, stream());
    const auto ga = test::download(g1, stream()), gb = test::download(g2, stream());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(ga.data(), gb.data(), n * sizeof(float)), 0);

    softmax_forward(y1.data(), d_x.data(), s.rows, s.cols, stream());
    softmax_forward(d_x.data(), d_x.data(), s.rows, s.cols, stream());  // in place
    const auto out_of_place = test::download(y1, stream()), in_place = test::download(d_x, stream());
    EXPECT_EQ(std::memcmp(out_of_place.data(), in_place.data(), n * sizeof(float)), 0);
    softmax_backward(d_dy.data(), d_dy.data(), y1.data(), s.rows, s.cols, stream());  // d_in aliases d_out
    const auto g_in_place = test::download(d_dy, stream());
    EXPECT_LT(test::rel_error(g_in_place, ref_backward(dy, out_of_place, s.rows, s.cols, false)), 1e-5);
  }
}

TEST_F(SoftmaxTest, EmptyAndInvalidShapes) {
  DeviceBuffer<float> buf(8);
  test::poison(buf, stream());
  softmax_forward(buf.data(), buf.data(), 0, 8, stream());  // no rows: nothing to do
  log_softmax_backward(buf.data(), buf.data(), buf.data(), 0, 8, stream());
  for (float v : test::download(buf, stream())) EXPECT_TRUE(std::isnan(v));
  EXPECT_THROW(softmax_forward(buf.data(), buf.data(), 1, 0, stream()), std::invalid_argument);
  EXPECT_THROW(softmax_forward(buf.data(), buf.data(), -1, 8, stream()), std::invalid_argument);
  EXPECT_THROW(softmax_backward(buf.data(), nullptr, buf.data(), 1, 8, stream()), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
