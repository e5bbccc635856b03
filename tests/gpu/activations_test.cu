// Activation forward and backward for every Activation (and several params) against double
// references, central finite differences of the GPU forward, and the inline functions of
// gpu/activation.cuh (runtime switch and host evaluation).
#include "support/gpu_test.hpp"

#include <cstring>

#include "gpu/activation.cuh"
#include "gpu/activations.hpp"

namespace foxhunt::gpu {
namespace {

struct Case {
  Activation act;
  float param;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string p = std::to_string(info.param.param);
  for (auto& c : p)
    if (c == '.' || c == '-') c = '_';
  return std::string(activation_name(info.param.act)) + "_" + p;
}

// Double-precision references, written from the definitions (PyTorch conventions).
constexpr double kK = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kC = 0.044715;

double ref_forward(double x, Activation act, double p) {
  switch (act) {
    case Activation::identity:
      return x;
    case Activation::relu:
      return x > 0 ? x : 0;
    case Activation::leaky_relu:
      return x > 0 ? x : p * x;
    case Activation::tanh:
      return std::tanh(x);
    case Activation::sigmoid:
      return 1 / (1 + std::exp(-x));
    case Activation::silu:
      return x / (1 + std::exp(-x));
    case Activation::gelu:
      return 0.5 * x * (1 + std::tanh(kK * (x + kC * x * x * x)));
    case Activation::elu:
      return x > 0 ? x : p * std::expm1(x);
    case Activation::softplus:
      return p * x > 20 ? x : std::log1p(std::exp(p * x)) / p;
  }
  return NAN;
}

double ref_grad(double x, Activation act, double p) {
  switch (act) {
    case Activation::identity:
      return 1;
    case Activation::relu:
      return x > 0 ? 1 : 0;
    case Activation::leaky_relu:
      return x > 0 ? 1 : p;
    case Activation::tanh: {
      const double t = std::tanh(x);
      return 1 - t * t;
    }
    case Activation::sigmoid: {
      const double s = 1 / (1 + std::exp(-x));
      return s * (1 - s);
    }
    case Activation::silu: {
      const double s = 1 / (1 + std::exp(-x));
      return s * (1 + x * (1 - s));
    }
    case Activation::gelu: {
      const double t = std::tanh(kK * (x + kC * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kK * (1 + 3 * kC * x * x);
    }
    case Activation::elu:
      return x > 0 ? 1 : p * std::exp(x);
    case Activation::softplus: {
      if (p * x > 20) return 1;
      const double z = std::exp(p * x);
      return z / (z + 1);
    }
  }
  return NAN;
}

// Mostly [-8, 8] where the functions bend; every 16th value from [-40, 40] to reach saturation,
// softplus's linear branch (beta x > 20) and exp under/overflow.
std::vector<float> random_inputs(std::int64_t n, std::mt19937_64& rng) {
  auto x = test::random_uniform(n, -8.0f, 8.0f, rng);
  std::uniform_real_distribution<float> wide(-40.0f, 40.0f);
  for (std::int64_t i = 0; i < n; i += 16) x[i] = wide(rng);
  return x;
}

constexpr std::int64_t kSizes[] = {1, 3, 4097, 1000003, std::int64_t{4} << 20};
constexpr int kOffsets[] = {0, 1};

// Per-element tolerance: fp32 evaluation of exp/tanh/log1p (a few ulp, amplified by the argument
// in exp(2u) for gelu) plus cancellation where a derivative crosses or approaches 0 (1 - t^2,
// s (1 - s)), which is absolute: |err| <= atol + rtol |ref|.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

class ActivationsTest : public test::GpuTest, public ::testing::WithParamInterface<Case> {
 protected:
  // n floats at `offset` in a buffer with a guard element on each side (poisoned).
  struct View {
    DeviceBuffer<float> buf;
    float* ptr;
    std::int64_t n;
  };
  View view(std::int64_t n, int offset) {
    View v{DeviceBuffer<float>(static_cast<std::size_t>(n + offset + 1)), nullptr, n};
    v.ptr = v.buf.data() + offset;
    test::poison(v.buf, stream());
    return v;
  }
  View view(const std::vector<float>& host, int offset) {
    View v = view(static_cast<std::int64_t>(host.size()), offset);
    FH_CHECK(cudaMemcpyAsync(v.ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream()));
    return v;
  }
  std::vector<float> read(const View& v) { return test::download(v.ptr, v.n, stream()); }
  ::testing::AssertionResult guards_intact(const View& v) {
    auto all = test::download(v.buf, stream());
    auto poisoned = [](float x) {
      std::uint32_t b;
      std::memcpy(&b, &x, 4);
      return b == 0xFFFFFFFFu;
    };
    const std::size_t off = static_cast<std::size_t>(v.ptr - v.buf.data());
    for (std::size_t i = 0; i < off; ++i)
      if (!poisoned(all[i])) return ::testing::AssertionFailure() << "write before the view";
    if (!poisoned(all.back())) return ::testing::AssertionFailure() << "write past the end of the view";
    return ::testing::AssertionSuccess();
  }
};

TEST_P(ActivationsTest, ForwardMatchesDoubleReference) {
  SCOPED_TRACE(seed_note());
  const auto [act, param] = GetParam();
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      auto x = random_inputs(n, rng());
      std::vector<double> want(n);
      for (std::int64_t i = 0; i < n; ++i) want[i] = ref_forward(x[i], act, param);
      View in = view(x, off), out = view(n, off);
      activation_forward(out.ptr, in.ptr, n, act, param, stream());
      auto got = read(out);
      if (n >= 1000) EXPECT_LT(test::rel_error(got, want), 1e-5);  // L2: meaningful over many
      EXPECT_TRUE(test::all_close(got, want, kRtol, kAtol));
      EXPECT_TRUE(guards_intact(out));
      activation_forward(in.ptr, in.ptr, n, act, param, stream());  // in place
      EXPECT_TRUE(test::all_close(read(in), want, kRtol, kAtol)) << "in place";
      EXPECT_TRUE(guards_intact(in)) << "in place";
    }
}

TEST_P(ActivationsTest, BackwardMatchesDoubleReference) {
  SCOPED_TRACE(seed_note());
  const auto [act, param] = GetParam();
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      auto x = random_inputs(n, rng());
      auto g = test::random_uniform(n, -1.0f, 1.0f, rng());
      std::vector<double> want(n);
      for (std::int64_t i = 0; i < n; ++i) want[i] = double(g[i]) * ref_grad(x[i], act, param);
      View in = view(x, off), dout = view(g, off), din = view(n, off);
      activation_backward(din.ptr, dout.ptr, in.ptr, n, act, param, stream());
      auto got = read(din);
      if (n >= 1000) EXPECT_LT(test::rel_error(got, want), 1e-5);  // L2: meaningful over many
      EXPECT_TRUE(test::all_close(got, want, kRtol, kAtol));
      EXPECT_TRUE(guards_intact(din));
      activation_backward(dout.ptr, dout.ptr, in.ptr, n, act, param, stream());  // d_in == d_out
      EXPECT_TRUE(test::all_close(read(dout), want, kRtol, kAtol)) << "in place";
      EXPECT_TRUE(guards_intact(dout)) << "in place";
    }
}

// dL/dx_i for L = sum(up * f(x)) by central differences through the GPU forward, at a handful of
// points away from kinks (|x| >= 0.05 > h), against the GPU backward.
TEST_P(ActivationsTest, BackwardMatchesFiniteDifferences) {
  SCOPED_TRACE(seed_note());
  const auto [act, param] = GetParam();
  const std::int64_t n = 4097;
  auto x = test::random_uniform(n, -4.0f, 4.0f, rng());
  for (auto& v : x)
    if (std::abs(v) < 0.05f) v = std::copysign(0.05f, v) + v;
  auto up = test::random_uniform(n, -1.0f, 1.0f, rng());
  auto d_x = test::upload(x, stream()), d_up = test::upload(up, stream());
  DeviceBuffer<float> d_in(n), y(n);
  activation_backward(d_in.data(), d_up.data(), d_x.data(), n, act, param, stream());
  const auto grad = test::download(d_in, stream());

  auto loss = [&](const std::vector<float>& xs) {
    auto dx = test::upload(xs, stream());
    activation_forward(y.data(), dx.data(), n, act, param, stream());
    const auto yh = test::download(y, stream());
    double l = 0;
    for (std::int64_t i = 0; i < n; ++i) l += double(up[i]) * yh[i];
    return l;
  };
  const float h = 1e-2f;
  std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
  for (int k = 0; k < 8; ++k) {
    const std::int64_t i = k == 0 ? n - 1 : pick(rng());
    auto xp = x, xm = x;
    xp[i] += h;
    xm[i] -= h;
    const double fd = (loss(xp) - loss(xm)) / (double(xp[i]) - xm[i]);
    // Noise floor: fp32 rounding of y_i (|y| <= 4: ~5e-7) over 2h, plus O(h^2) truncation.
    EXPECT_NEAR(fd, grad[i], 1e-2 * std::abs(grad[i]) + 2e-4) << "x = " << x[i] << " at " << i;
  }
}

// The inline functions other kernels fuse: the runtime switch in device code agrees with the
// launchers (to an ulp or so: inlining may contract a*b+c into an fma differently), and the host
// evaluation matches the double reference.
__global__ void runtime_switch_kernel(float* y, float* dy, const float* x, int n, Activation act, float param) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    y[i] = activate(x[i], act, param);
    dy[i] = activate_grad(x[i], act, param);
  }
}

TEST_P(ActivationsTest, InlineFunctionsAgreeWithLaunchers) {
  SCOPED_TRACE(seed_note());
  const auto [act, param] = GetParam();
  const int n = 4097;
  auto x = random_inputs(n, rng());
  auto d_x = test::upload(x, stream());
  DeviceBuffer<float> y(n), dy(n), y_launch(n), dy_launch(n);
  auto one = test::upload(std::vector<float>(n, 1.0f), stream());
  runtime_switch_kernel<<<(n + 255) / 256, 256, 0, stream()>>>(y.data(), dy.data(), d_x.data(), n, act, param);
  FH_CHECK_LAUNCH();
  activation_forward(y_launch.data(), d_x.data(), n, act, param, stream());
  activation_backward(dy_launch.data(), one.data(), d_x.data(), n, act, param, stream());
  const auto hy = test::download(y, stream()), hdy = test::download(dy, stream());
  const auto ly = test::download(y_launch, stream()), ldy = test::download(dy_launch, stream());
  std::vector<double> want_y(n), want_dy(n);
  std::vector<float> host_y(n), host_dy(n);
  for (int i = 0; i < n; ++i) {
    want_y[i] = ref_forward(x[i], act, param);
    want_dy[i] = ref_grad(x[i], act, param);
    host_y[i] = activate(x[i], act, param);
    host_dy[i] = activate_grad(x[i], act, param);
  }
  EXPECT_TRUE(test::all_close(hy, std::vector<double>(ly.begin(), ly.end()), 1e-6, 1e-7)) << "device forward";
  EXPECT_TRUE(test::all_close(hdy, std::vector<double>(ldy.begin(), ldy.end()), 1e-6, 1e-7)) << "device grad";
  EXPECT_TRUE(test::all_close(hy, want_y, kRtol, kAtol)) << "device forward vs reference";
  EXPECT_TRUE(test::all_close(host_y, want_y, kRtol, kAtol)) << "host forward";
  EXPECT_TRUE(test::all_close(host_dy, want_dy, kRtol, kAtol)) << "host grad";
}

TEST_P(ActivationsTest, ZeroSizeWritesNothing) {
  const auto [act, param] = GetParam();
  View v = view(0, 0);
  activation_forward(v.ptr, v.ptr, 0, act, param, stream());
  activation_backward(v.ptr, v.ptr, v.ptr, 0, act, param, stream());
  EXPECT_TRUE(guards_intact(v));
}

INSTANTIATE_TEST_SUITE_P(All, ActivationsTest,
                         ::testing::Values(Case{Activation::identity, 0.0f}, Case{Activation::relu, 0.0f},
                                           Case{Activation::leaky_relu, 0.01f}, Case{Activation::leaky_relu, 0.2f},
                                           Case{Activation::tanh, 0.0f}, Case{Activation::sigmoid, 0.0f},
                                           Case{Activation::silu, 0.0f}, Case{Activation::gelu, 0.0f},
                                           Case{Activation::elu, 1.0f}, Case{Activation::elu, 0.5f},
                                           Case{Activation::softplus, 1.0f}, Case{Activation::softplus, 2.0f},
                                           Case{Activation::softplus, 0.5f}),
                         case_name);

class ActivationsArgsTest : public test::GpuTest {};

TEST_F(ActivationsArgsTest, RejectsBadArguments) {
  DeviceBuffer<float> v(4);
  EXPECT_THROW(activation_forward(v.data(), v.data(), 4, Activation::softplus, 0.0f, stream()), std::invalid_argument);
  EXPECT_THROW(activation_backward(v.data(), v.data(), v.data(), 4, Activation::softplus, -1.0f, stream()),
               std::invalid_argument);
  EXPECT_THROW(activation_forward(v.data(), v.data(), 4, static_cast<Activation>(200), 0.0f, stream()),
               std::invalid_argument);
  EXPECT_THROW(activation_forward(v.data(), v.data(), -1, Activation::relu, 0.0f, stream()), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
