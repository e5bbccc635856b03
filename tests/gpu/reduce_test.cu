// Whole-array reductions (sum, mean, min, max, mean/variance) and row reductions (sum, max,
// argmax) against float64 / exact CPU references.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu/reduce.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// One block (1, 3, 4097), several blocks with a scalar tail (1000003), a large case.
const std::int64_t kSizes[] = {1, 3, 4097, 1000003, (1 << 22) + 5};

struct Scalars {
  float sum, mean, min, max, mv_mean, mv_var;
};

class ReduceTest : public test::GpuTest {
 protected:
  // Runs every whole-array reduction on in[offset, offset + n) (offset shifts the 16-byte
  // alignment, exercising the scalar head), with an exactly sized, poisoned workspace.
  Scalars run_all(const std::vector<float>& host, std::int64_t offset, std::int64_t n) {
    auto d_in = test::upload(host, stream());
    DeviceBuffer<float> out(6);
    DeviceBuffer<std::byte> ws(reduce_workspace_bytes(n));
    test::poison(out, stream());
    test::poison(ws, stream());
    const float* in = d_in.data() + offset;
    reduce_sum(out.data() + 0, in, n, ws.data(), stream());
    reduce_mean(out.data() + 1, in, n, ws.data(), stream());
    reduce_min(out.data() + 2, in, n, ws.data(), stream());
    reduce_max(out.data() + 3, in, n, ws.data(), stream());
    reduce_mean_var(out.data() + 4, out.data() + 5, in, n, ws.data(), stream());
    const auto o = test::download(out, stream());
    return {o[0], o[1], o[2], o[3], o[4], o[5]};
  }

  void check_against_reference(const std::vector<float>& host, std::int64_t offset, std::int64_t n) {
    SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
    const Scalars got = run_all(host, offset, n);
    double sum = 0, abs_sum = 0;
    float mn = kInf, mx = -kInf;
    for (std::int64_t i = offset; i < offset + n; ++i) {
      sum += host[i];
      abs_sum += std::abs(host[i]);
      mn = std::min(mn, host[i]);
      mx = std::max(mx, host[i]);
    }
    const double mean = sum / static_cast<double>(n);
    double m2 = 0;
    for (std::int64_t i = offset; i < offset + n; ++i) m2 += (host[i] - mean) * (host[i] - mean);
    const double var = m2 / static_cast<double>(n);
    // Partial sums of four floats in f32 (<= 2 ulp of their |x| sum), everything else in double:
    // the error is below ~3e-7 * sum|x| plus the final rounding to f32.
    EXPECT_NEAR(got.sum, sum, 1e-6 * abs_sum + 1e-7 * std::abs(sum));
    EXPECT_NEAR(got.mean, mean, (1e-6 * abs_sum + 1e-7 * std::abs(sum)) / static_cast<double>(n));
    EXPECT_EQ(got.min, mn);  // min and max are exact
    EXPECT_EQ(got.max, mx);
    EXPECT_NEAR(got.mv_mean, mean, (1e-6 * abs_sum + 1e-7 * std::abs(sum)) / static_cast<double>(n));
    EXPECT_NEAR(got.mv_var, var, 1e-5 * var);
  }
};

TEST_F(ReduceTest, WholeArrayMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : kSizes) {
    const auto host = test::random_normal(n + 3, 0.7f, 3.f, rng());
    for (std::int64_t offset : {0, 1, 3}) check_against_reference(host, offset, n);
  }
}

// Mean 1000, spread 1: E[x^2] - E[x]^2 would lose ~6 digits in f32 and some in double; the
// Welford/Chan combination must keep the variance to 1e-5.
TEST_F(ReduceTest, VarianceIsStableUnderALargeMean) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : {std::int64_t{4097}, std::int64_t{(1 << 22) + 5}}) {
    const auto host = test::random_normal(n, 1000.f, 1.f, rng());
    check_against_reference(host, 0, n);
  }
}

TEST_F(ReduceTest, EmptyInput) {
  const Scalars got = run_all(std::vector<float>{1.f}, 0, 0);
  EXPECT_EQ(got.sum, 0.f);
  EXPECT_TRUE(std::isnan(got.mean));
  EXPECT_EQ(got.min, kInf);
  EXPECT_EQ(got.max, -kInf);
  EXPECT_TRUE(std::isnan(got.mv_mean));
  EXPECT_TRUE(std::isnan(got.mv_var));
  EXPECT_EQ(reduce_workspace_bytes(0), 0u);
}

TEST_F(ReduceTest, NanPropagates) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : {std::int64_t{3}, std::int64_t{1000003}}) {
    auto host = test::random_normal(n, 0.f, 1.f, rng());
    host[std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng())] = kNan;
    const Scalars got = run_all(host, 0, n);
    EXPECT_TRUE(std::isnan(got.sum));
    EXPECT_TRUE(std::isnan(got.mean));
    EXPECT_TRUE(std::isnan(got.min));
    EXPECT_TRUE(std::isnan(got.max));
    EXPECT_TRUE(std::isnan(got.mv_var));
  }
}

TEST_F(ReduceTest, RepeatedRunsAreBitwiseEqual) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = (1 << 22) + 5;
  const auto host = test::random_normal(n, 0.3f, 2.f, rng());
  const Scalars a = run_all(host, 1, n - 1), b = run_all(host, 1, n - 1);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof(Scalars)), 0);
}

TEST_F(ReduceTest, InvalidArguments) {
  DeviceBuffer<float> buf(1 << 20);
  EXPECT_THROW(reduce_sum(buf.data(), buf.data(), -1, nullptr, stream()), std::invalid_argument);
  EXPECT_GT(reduce_workspace_bytes(1 << 20), 0u);
  EXPECT_THROW(reduce_sum(buf.data(), buf.data(), 1 << 20, nullptr, stream()), std::invalid_argument);
  EXPECT_THROW(reduce_mean_var(buf.data(), nullptr, buf.data(), 8, nullptr, stream()), std::invalid_argument);
}

// ---- row reductions ------------------------------------------------------------------------

struct RowsCols {
  std::int64_t rows, cols;
};
// Warp path (float4 when cols % 4 == 0), block path (4097, 50000, 100003), many rows.
const RowsCols kRowShapes[] = {{1, 1},    {37, 1},    {37, 7},     {37, 32},     {37, 33},    {37, 1000},
                               {9, 4097}, {3, 50000}, {2, 100003}, {1000003, 1}, {4096, 1024}};

struct RowResults {
  std::vector<float> sum, max;
  std::vector<std::int32_t> argmax;
};

class RowReduceTest : public test::GpuTest {
 protected:
  RowResults run(const std::vector<float>& host, std::int64_t offset, std::int64_t rows, std::int64_t cols) {
    auto d_in = test::upload(host, stream());
    DeviceBuffer<float> sum(rows), max(rows);
    DeviceBuffer<std::int32_t> arg(rows);
    test::poison(sum, stream());
    test::poison(max, stream());
    test::poison(arg, stream());
    row_sum(sum.data(), d_in.data() + offset, rows, cols, stream());
    row_max(max.data(), d_in.data() + offset, rows, cols, stream());
    row_argmax(arg.data(), d_in.data() + offset, rows, cols, stream());
    return {test::download(sum, stream()), test::download(max, stream()), test::download(arg, stream())};
  }

  // Reference: double sum, NaN-propagating max, first index of the max with NaN above all.
  void check(const std::vector<float>& host, std::int64_t offset, std::int64_t rows, std::int64_t cols) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " offset " +
                 std::to_string(offset));
    const RowResults got = run(host, offset, rows, cols);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* x = host.data() + offset + r * cols;
      double s = 0, abs_s = 0;
      float mx = -kInf;
      std::int32_t arg = 0;
      bool nan = false;
      for (std::int64_t c = 0; c < cols; ++c) {
        s += x[c];
        abs_s += std::abs(x[c]);
        if (std::isnan(x[c])) {
          if (!nan) arg = static_cast<std::int32_t>(c);
          nan = true;
        } else if (x[c] > mx) {  // strict: the first of equal maxima stays (all -inf: index 0)
          mx = x[c];
          if (!nan) arg = static_cast<std::int32_t>(c);
        }
      }
      if (nan) {
        ASSERT_TRUE(std::isnan(got.max[r])) << "row " << r;
        ASSERT_TRUE(std::isnan(got.sum[r])) << "row " << r;
      } else if (std::isinf(s)) {
        ASSERT_EQ(got.sum[r], s) << "row " << r;
        ASSERT_EQ(got.max[r], mx) << "row " << r;
      } else {
        // Accumulated in double: only the final rounding to f32 remains.
        ASSERT_NEAR(got.sum[r], s, 1e-6 * abs_s + 1e-30) << "row " << r;
        ASSERT_EQ(got.max[r], mx) << "row " << r;
      }
      ASSERT_EQ(got.argmax[r], arg) << "row " << r;
    }
  }
};

TEST_F(RowReduceTest, MatchesReference) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : kRowShapes) check(test::random_normal(s.rows * s.cols, 0.4f, 2.f, rng()), 0, s.rows, s.cols);
}

TEST_F(RowReduceTest, UnalignedRows) {
  SCOPED_TRACE(seed_note());
  for (const auto& s : {RowsCols{37, 1000}, RowsCols{9, 4096}})
    check(test::random_normal(s.rows * s.cols + 1, 0.f, 1.f, rng()), 1, s.rows, s.cols);
}

// Small integers make ties common: argmax must return the FIRST index of the maximum.
TEST_F(RowReduceTest, ArgmaxTiesPickTheFirstIndex) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<int> small(-3, 3);
  for (const auto& s : {RowsCols{1000, 7}, RowsCols{200, 33}, RowsCols{100, 1000}, RowsCols{9, 4097}}) {
    std::vector<float> host(s.rows * s.cols);
    for (auto& v : host) v = static_cast<float>(small(rng()));
    // Every value equal in one row; the max only in the last column in another.
    std::fill(host.begin(), host.begin() + s.cols, 2.f);
    std::fill(host.begin() + s.cols, host.begin() + 2 * s.cols, -3.f);
    host[2 * s.cols - 1] = 5.f;
    check(host, 0, s.rows, s.cols);
    const RowResults got = run(host, 0, s.rows, s.cols);
    EXPECT_EQ(got.argmax[0], 0);
    EXPECT_EQ(got.argmax[1], s.cols - 1);
  }
}

// NaN: row_max and row_sum give NaN, argmax the first NaN; -0.0 ties +0.0; all -inf picks 0.
TEST_F(RowReduceTest, NanInfAndSignedZero) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t cols : {7, 1000, 4097}) {
    const std::int64_t rows = 5;
    auto host = test::random_normal(rows * cols, 0.f, 1.f, rng());
    std::uniform_int_distribution<std::int64_t> col(0, cols - 1);
    const std::int64_t a = col(rng()), b = col(rng());
    host[0 * cols + a] = kNan;
    host[0 * cols + b] = kNan;
    std::fill(host.begin() + cols, host.begin() + 2 * cols, -kInf);
    for (std::int64_t c = 0; c < cols; ++c) host[2 * cols + c] = c % 2 ? 0.f : -0.f;
    host[3 * cols + cols - 1] = kInf;
    check(host, 0, rows, cols);
    const RowResults got = run(host, 0, rows, cols);
    EXPECT_EQ(got.argmax[0], std::min(a, b));
    EXPECT_EQ(got.argmax[1], 0);
    EXPECT_EQ(got.argmax[2], 0);
    EXPECT_EQ(got.argmax[3], cols - 1);
  }
}

TEST_F(RowReduceTest, EmptyAndInvalidShapes) {
  DeviceBuffer<float> buf(8);
  DeviceBuffer<std::int32_t> idx(8);
  test::poison(buf, stream());
  row_sum(buf.data(), buf.data(), 0, 8, stream());
  for (float v : test::download(buf, stream())) EXPECT_TRUE(std::isnan(v));
  EXPECT_THROW(row_sum(buf.data(), buf.data(), 1, 0, stream()), std::invalid_argument);
  EXPECT_THROW(row_argmax(idx.data(), nullptr, 1, 8, stream()), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
