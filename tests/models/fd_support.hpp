#pragma once
// Test helpers shared by the model and DQN tests: a fixture with a cuBLASLt lane, single-element
// device reads/writes (test-only), and central finite differences of a scalar loss computed from a
// GPU forward in double on the host.
#include "support/gpu_test.hpp"

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "gpu/context.hpp"

namespace foxhunt::test {

class LaneTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
  }
  void TearDown() override {
    if (ctx_) FH_CHECK(cudaStreamSynchronize(ctx_->stream()));
    ctx_.reset();
    GpuTest::TearDown();
  }
  gpu::BlasLane lane() const { return ctx_->blas(0); }
  cudaStream_t s() const { return ctx_->stream(0); }
  std::unique_ptr<gpu::DeviceContext> ctx_;
};

inline float get_elem(const float* dev, std::int64_t i, cudaStream_t s) {
  float v = 0.f;
  FH_CHECK(cudaMemcpyAsync(&v, dev + i, sizeof v, cudaMemcpyDeviceToHost, s));
  FH_CHECK(cudaStreamSynchronize(s));
  return v;
}
inline void set_elem(float* dev, std::int64_t i, float v, cudaStream_t s) {
  FH_CHECK(cudaMemcpyAsync(dev + i, &v, sizeof v, cudaMemcpyHostToDevice, s));
  FH_CHECK(cudaStreamSynchronize(s));
}
inline void upload_to(float* dev, const std::vector<float>& v, cudaStream_t s) {
  FH_CHECK(cudaMemcpyAsync(dev, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  FH_CHECK(cudaStreamSynchronize(s));
}

// L = sum_i u_i * y_i (double) after running `forward`, y (n) on the device.
inline double weighted_sum(const std::function<void()>& forward, const float* y, const std::vector<float>& u,
                           cudaStream_t s) {
  forward();
  const auto h = download(y, u.size(), s);
  double L = 0;
  for (std::size_t i = 0; i < u.size(); ++i) L += static_cast<double>(u[i]) * h[i];
  return L;
}

// Central difference of `loss` with respect to element i of the device array x.
inline double central_difference(const std::function<double()>& loss, float* x, std::int64_t i, float h,
                                 cudaStream_t s) {
  const float x0 = get_elem(x, i, s);
  set_elem(x, i, x0 + h, s);
  const double lp = loss();
  set_elem(x, i, x0 - h, s);
  const double lm = loss();
  set_elem(x, i, x0, s);
  return (lp - lm) / (2.0 * static_cast<double>(h));
}

// |fd - analytic| <= rtol * max(|analytic|, floor): floor keeps near-zero gradients from demanding
// more than float finite differences can give.
inline ::testing::AssertionResult fd_close(double fd, double analytic, double rtol, double floor) {
  const double err = std::abs(fd - analytic);
  if (err <= rtol * std::max(std::abs(analytic), floor)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "finite difference " << fd << " vs analytic " << analytic << " (|err| " << err
                                       << ", rtol " << rtol << ", floor " << floor << ")";
}

}  // namespace foxhunt::test
