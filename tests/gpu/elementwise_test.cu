// f32 element-wise arithmetic against double references: every size class, aligned (float4) and
// misaligned (base + 1: scalar path) views, in-place, guard elements around every output.
#include "support/gpu_test.hpp"

#include <cstring>
#include <functional>

#include "gpu/elementwise.hpp"

namespace foxhunt::gpu {
namespace {

// Sizes: single element, tails of every length (3, 4097 = 4*1024+1, 1000003), ~4M.
constexpr std::int64_t kSizes[] = {1, 3, 4097, 1000003, std::int64_t{4} << 20};
constexpr int kOffsets[] = {0, 1};  // 1: the view starts 4 bytes past a 256-byte aligned base

// n floats at `offset` inside a buffer with one guard element before and after the view.
struct View {
  DeviceBuffer<float> buf;
  float* ptr;
  std::int64_t n;
};
View make_view(std::int64_t n, int offset) {
  View v{DeviceBuffer<float>(static_cast<std::size_t>(n + offset + 1)), nullptr, n};
  v.ptr = v.buf.data() + offset;
  return v;
}
View upload_view(const std::vector<float>& host, int offset, cudaStream_t s) {
  View v = make_view(static_cast<std::int64_t>(host.size()), offset);
  test::poison(v.buf, s);
  FH_CHECK(cudaMemcpyAsync(v.ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  return v;
}
std::vector<float> read(const View& v, cudaStream_t s) { return test::download(v.ptr, v.n, s); }

bool is_poison(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b == 0xFFFFFFFFu;
}
// The guard elements around the view are still poisoned: no write outside [0, n).
::testing::AssertionResult guards_intact(const View& v, cudaStream_t s) {
  auto all = test::download(v.buf, s);
  const std::size_t off = static_cast<std::size_t>(v.ptr - v.buf.data());
  for (std::size_t i = 0; i < off; ++i)
    if (!is_poison(all[i])) return ::testing::AssertionFailure() << "write before the view at " << i;
  if (!is_poison(all.back())) return ::testing::AssertionFailure() << "write past the end of the view";
  return ::testing::AssertionSuccess();
}

using BinaryLaunch = std::function<void(float*, const float*, const float*, std::int64_t, cudaStream_t)>;
using BinaryRef = std::function<double(double, double)>;
using UnaryLaunch = std::function<void(float*, const float*, std::int64_t, cudaStream_t)>;

class ElementwiseTest : public test::GpuTest {
 protected:
  void check_binary(const BinaryLaunch& launch, const BinaryRef& ref, bool positive_b = false, double atol = 0.0);
  void check_unary(const UnaryLaunch& launch, const std::function<double(double)>& ref);
};

// out = op(a, b) on every size/offset, then again in place (out == a), against the double op.
// atol: 0 for a single rounded op; axpby rounds alpha * a first, an absolute error of up to half
// an ulp of |alpha a| that cancellation can make large relative to the result.
void ElementwiseTest::check_binary(const BinaryLaunch& launch, const BinaryRef& ref, bool positive_b, double atol) {
  auto& t = *this;
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      auto a = test::random_uniform(n, -2.0f, 2.0f, t.rng());
      // Divisors kept away from 0 so the quotient stays well conditioned.
      auto b =
          positive_b ? test::random_uniform(n, 0.5f, 4.0f, t.rng()) : test::random_uniform(n, -3.0f, 3.0f, t.rng());
      std::vector<double> want(n);
      for (std::int64_t i = 0; i < n; ++i) want[i] = ref(a[i], b[i]);

      View da = upload_view(a, off, t.stream()), db = upload_view(b, off, t.stream());
      View out = make_view(n, off);
      test::poison(out.buf, t.stream());
      launch(out.ptr, da.ptr, db.ptr, n, t.stream());
      auto got = read(out, t.stream());
      // L2 relative error over many elements (one tiny result would dominate a short vector; the
      // per-element bound below covers those).
      if (n >= 1000) EXPECT_LT(test::rel_error(got, want), 1e-6);
      EXPECT_TRUE(test::all_close(got, want, 1e-6, atol));
      EXPECT_TRUE(guards_intact(out, t.stream()));

      launch(da.ptr, da.ptr, db.ptr, n, t.stream());  // in place: out == a
      auto inplace = read(da, t.stream());
      EXPECT_TRUE(test::all_close(inplace, want, 1e-6, atol)) << "in place";
      EXPECT_TRUE(guards_intact(da, t.stream())) << "in place";
    }
}

TEST_F(ElementwiseTest, Add) {
  SCOPED_TRACE(seed_note());
  check_binary(add, [](double a, double b) { return a + b; });
}
TEST_F(ElementwiseTest, Sub) {
  SCOPED_TRACE(seed_note());
  check_binary(sub, [](double a, double b) { return a - b; });
}
TEST_F(ElementwiseTest, Mul) {
  SCOPED_TRACE(seed_note());
  check_binary(mul, [](double a, double b) { return a * b; });
}
TEST_F(ElementwiseTest, Div) {
  SCOPED_TRACE(seed_note());
  check_binary(
      div, [](double a, double b) { return a / b; }, /*positive_b=*/true);
}

TEST_F(ElementwiseTest, Axpby) {
  SCOPED_TRACE(seed_note());
  const float alpha = std::uniform_real_distribution<float>(0.5f, 2.0f)(rng());
  const float beta = -std::uniform_real_distribution<float>(0.5f, 2.0f)(rng());
  check_binary([&](float* o, const float* a, const float* b, std::int64_t n,
                   cudaStream_t s) { axpby(o, a, alpha, b, beta, n, s); },
               [&](double a, double b) { return double(alpha) * a + double(beta) * b; }, false, 1e-6);
}

void ElementwiseTest::check_unary(const UnaryLaunch& launch, const std::function<double(double)>& ref) {
  auto& t = *this;
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      auto x = test::random_uniform(n, -5.0f, 5.0f, t.rng());
      std::vector<double> want(n);
      for (std::int64_t i = 0; i < n; ++i) want[i] = ref(x[i]);
      View in = upload_view(x, off, t.stream());
      View out = make_view(n, off);
      test::poison(out.buf, t.stream());
      launch(out.ptr, in.ptr, n, t.stream());
      auto got = read(out, t.stream());
      if (n >= 1000) EXPECT_LT(test::rel_error(got, want), 1e-6);
      EXPECT_TRUE(test::all_close(got, want, 1e-6, 0.0));
      EXPECT_TRUE(guards_intact(out, t.stream()));
      launch(in.ptr, in.ptr, n, t.stream());
      EXPECT_TRUE(test::all_close(read(in, t.stream()), want, 1e-6, 0.0)) << "in place";
      EXPECT_TRUE(guards_intact(in, t.stream())) << "in place";
    }
}

TEST_F(ElementwiseTest, Scale) {
  SCOPED_TRACE(seed_note());
  const float alpha = std::uniform_real_distribution<float>(-3.0f, -0.5f)(rng());
  check_unary([&](float* o, const float* x, std::int64_t n, cudaStream_t s) { scale(o, x, alpha, n, s); },
              [&](double x) { return double(alpha) * x; });
}

TEST_F(ElementwiseTest, AddScalar) {
  SCOPED_TRACE(seed_note());
  const float c = std::uniform_real_distribution<float>(0.5f, 3.0f)(rng());
  check_unary([&](float* o, const float* x, std::int64_t n, cudaStream_t s) { add_scalar(o, x, c, n, s); },
              [&](double x) { return x + double(c); });
}

TEST_F(ElementwiseTest, Fill) {
  SCOPED_TRACE(seed_note());
  const float value = std::uniform_real_distribution<float>(-3.0f, 3.0f)(rng());
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      View out = make_view(n, off);
      test::poison(out.buf, stream());
      fill(out.ptr, value, n, stream());
      auto got = read(out, stream());
      EXPECT_TRUE(test::all_close(got, std::vector<double>(n, value), 0.0, 0.0));
      EXPECT_TRUE(guards_intact(out, stream()));
    }
}

TEST_F(ElementwiseTest, ZeroSizeWritesNothing) {
  View out = make_view(0, 0);
  test::poison(out.buf, stream());
  const float* in = out.ptr;
  add(out.ptr, in, in, 0, stream());
  axpby(out.ptr, in, 1.0f, in, 1.0f, 0, stream());
  scale(out.ptr, in, 2.0f, 0, stream());
  add_scalar(out.ptr, in, 2.0f, 0, stream());
  fill(out.ptr, 1.0f, 0, stream());
  mul_backward(out.ptr, nullptr, in, in, in, 0, stream());
  EXPECT_TRUE(guards_intact(out, stream()));
  EXPECT_THROW(add(out.ptr, in, in, -1, stream()), std::invalid_argument);
}

// da = dout * b, db = dout * a against the double product rule, on every size and offset.
TEST_F(ElementwiseTest, MulBackwardMatchesAnalytic) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      auto g = test::random_uniform(n, -1.0f, 1.0f, rng());
      auto a = test::random_uniform(n, -2.0f, 2.0f, rng());
      auto b = test::random_uniform(n, -2.0f, 2.0f, rng());
      std::vector<double> want_da(n), want_db(n);
      for (std::int64_t i = 0; i < n; ++i) {
        want_da[i] = double(g[i]) * b[i];
        want_db[i] = double(g[i]) * a[i];
      }
      View vg = upload_view(g, off, stream()), va = upload_view(a, off, stream()), vb = upload_view(b, off, stream());
      View da = make_view(n, off), db = make_view(n, off);
      test::poison(da.buf, stream());
      test::poison(db.buf, stream());
      mul_backward(da.ptr, db.ptr, vg.ptr, va.ptr, vb.ptr, n, stream());
      EXPECT_TRUE(test::all_close(read(da, stream()), want_da, 1e-6, 0.0)) << "da";
      EXPECT_TRUE(test::all_close(read(db, stream()), want_db, 1e-6, 0.0)) << "db";
      EXPECT_TRUE(guards_intact(da, stream()));
      EXPECT_TRUE(guards_intact(db, stream()));

      // One gradient only (the other pointer null), then in place over dout and a.
      test::poison(db.buf, stream());
      mul_backward(nullptr, db.ptr, vg.ptr, va.ptr, vb.ptr, n, stream());
      EXPECT_TRUE(test::all_close(read(db, stream()), want_db, 1e-6, 0.0)) << "db alone";
      mul_backward(vg.ptr, va.ptr, vg.ptr, va.ptr, vb.ptr, n, stream());  // da -> dout, db -> a
      EXPECT_TRUE(test::all_close(read(vg, stream()), want_da, 1e-6, 0.0)) << "da in place";
      EXPECT_TRUE(test::all_close(read(va, stream()), want_db, 1e-6, 0.0)) << "db in place";
    }
  View x = make_view(4, 0);
  EXPECT_THROW(mul_backward(x.ptr, x.ptr, x.ptr, x.ptr, x.ptr, 4, stream()), std::invalid_argument);
}

// Central differences of L = sum(up * mul(a, b)) taken through the GPU forward.
TEST_F(ElementwiseTest, MulBackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 4097;
  auto up = test::random_uniform(n, -1.0f, 1.0f, rng());
  auto a = test::random_uniform(n, -2.0f, 2.0f, rng());
  auto b = test::random_uniform(n, -2.0f, 2.0f, rng());
  auto dup = test::upload(up, stream());
  auto d_a = test::upload(a, stream()), d_b = test::upload(b, stream());
  DeviceBuffer<float> da(n), db(n), y(n);
  mul_backward(da.data(), db.data(), dup.data(), d_a.data(), d_b.data(), n, stream());
  auto got_da = test::download(da, stream()), got_db = test::download(db, stream());

  auto loss = [&](const std::vector<float>& xa, const std::vector<float>& xb) {
    auto pa = test::upload(xa, stream()), pb = test::upload(xb, stream());
    mul(y.data(), pa.data(), pb.data(), n, stream());
    auto yh = test::download(y, stream());
    double l = 0;
    for (std::int64_t i = 0; i < n; ++i) l += double(up[i]) * yh[i];
    return l;
  };
  const float h = 1e-2f;
  std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
  for (int k = 0; k < 6; ++k) {
    const std::int64_t i = k == 0 ? n - 1 : pick(rng());
    for (int which = 0; which < 2; ++which) {
      auto p = which == 0 ? a : b, m = p;
      p[i] += h;
      m[i] -= h;
      const double fd = which == 0 ? (loss(p, b) - loss(m, b)) / (double(p[i]) - m[i])
                                   : (loss(a, p) - loss(a, m)) / (double(p[i]) - m[i]);
      const double an = which == 0 ? got_da[i] : got_db[i];
      EXPECT_NEAR(fd, an, 1e-2 * std::abs(an) + 1e-4) << (which == 0 ? "da" : "db") << " at " << i;
    }
  }
}

}  // namespace
}  // namespace foxhunt::gpu
