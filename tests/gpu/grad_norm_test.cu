// Global gradient norm, clip scale and in-place clipping against float64 references.
#include "support/gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/grad_norm.hpp"

namespace foxhunt::gpu {
namespace {

class GradNormTest : public test::GpuTest {};

double norm_ref(const std::vector<float>& g, std::size_t offset, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(g[i + offset]) * g[i + offset];
  return std::sqrt(s);
}

TEST_F(GradNormTest, NormMatchesReference) {
  SCOPED_TRACE(seed_note());
  struct Case {
    std::int64_t n;
    std::size_t offset;
  };
  for (Case c :
       {Case{1, 0}, Case{3, 0}, Case{4097, 0}, Case{1000003, 0}, Case{4 << 20, 0}, Case{4097, 1}, Case{1000003, 3}}) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset));
    const auto g = test::random_normal(static_cast<std::size_t>(c.n) + c.offset, 0.f, 0.01f, rng());
    auto d_g = test::upload(g, stream());
    DeviceBuffer<float> norm(1);
    DeviceBuffer<std::byte> ws(grad_norm_workspace_bytes(c.n));
    test::poison(norm, stream());
    global_grad_norm(norm.data(), d_g.data() + c.offset, c.n, ws.data(), stream());
    const double ref = norm_ref(g, c.offset, static_cast<std::size_t>(c.n));
    // A sum of squares: all terms >= 0, so the float error is relative to the result.
    EXPECT_NEAR(test::download(norm, stream())[0], ref, 1e-5 * ref);
  }
}

TEST_F(GradNormTest, EmptyGradientHasZeroNorm) {
  DeviceBuffer<float> norm(1);
  DeviceBuffer<std::byte> ws(grad_norm_workspace_bytes(0));
  test::poison(norm, stream());
  global_grad_norm(norm.data(), nullptr, 0, ws.data(), stream());
  EXPECT_EQ(test::download(norm, stream())[0], 0.f);
}

TEST_F(GradNormTest, NormIsDeterministic) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1000003;
  auto d_g = test::upload(test::random_normal(n, 0.f, 1.f, rng()), stream());
  DeviceBuffer<float> a(1), b(1);
  DeviceBuffer<std::byte> ws(grad_norm_workspace_bytes(n));
  global_grad_norm(a.data(), d_g.data(), n, ws.data(), stream());
  test::poison(ws, stream());
  global_grad_norm(b.data(), d_g.data(), n, ws.data(), stream());
  EXPECT_EQ(test::download(a, stream())[0], test::download(b, stream())[0]);
}

TEST_F(GradNormTest, ClipScaleFollowsPyTorch) {
  const float max_norm = 1.5f;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float norm_value : {0.f, 0.7f, 1.5f, 3.f, 1e6f, nan}) {
    DeviceBuffer<float> norm(1), scale(1);
    norm.upload(std::span<const float>(&norm_value, 1), stream());
    test::poison(scale, stream());
    clip_scale(scale.data(), norm.data(), max_norm, stream());
    const float got = test::download(scale, stream())[0];
    if (std::isnan(norm_value)) {
      EXPECT_TRUE(std::isnan(got)) << "a NaN norm must give a NaN scale";
      continue;
    }
    const double ref = std::min(1.0, static_cast<double>(max_norm) / (static_cast<double>(norm_value) + 1e-6));
    EXPECT_NEAR(got, ref, 1e-6 * ref) << "norm " << norm_value;
  }
}

TEST_F(GradNormTest, ClipScalesGradientInPlace) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : {1, 5, 4097, 1000003, 4 << 20})
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset));
      const auto g = test::random_normal(static_cast<std::size_t>(n) + offset, 0.f, 1.f, rng());
      auto d_g = test::upload(g, stream());
      DeviceBuffer<float> norm(1);
      DeviceBuffer<std::byte> ws(grad_norm_workspace_bytes(n));
      global_grad_norm(norm.data(), d_g.data() + offset, n, ws.data(), stream());
      const double ref_norm = norm_ref(g, offset, static_cast<std::size_t>(n));
      const float max_norm = static_cast<float>(0.25 * ref_norm);  // forces clipping by ~4x
      clip_grad_norm(d_g.data() + offset, norm.data(), max_norm, n, stream());
      const auto got = test::download(d_g.data() + offset, static_cast<std::size_t>(n), stream());
      const double c = max_norm / (ref_norm + 1e-6);
      std::vector<double> ref(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) ref[i] = c * g[i + offset];
      EXPECT_LT(test::rel_error(got, ref), 1e-5);
      // The head element before the view is untouched.
      if (offset) EXPECT_EQ(test::download(d_g.data(), 1, stream())[0], g[0]);
    }
}

TEST_F(GradNormTest, NoClipLeavesGradientBitwiseUnchanged) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 4097;
  const auto g = test::random_normal(n, 0.f, 1.f, rng());
  auto d_g = test::upload(g, stream());
  DeviceBuffer<float> norm(1);
  DeviceBuffer<std::byte> ws(grad_norm_workspace_bytes(n));
  global_grad_norm(norm.data(), d_g.data(), n, ws.data(), stream());
  clip_grad_norm(d_g.data(), norm.data(), 1e9f, n, stream());
  EXPECT_EQ(test::download(d_g, stream()), g);
}

TEST_F(GradNormTest, RejectsBadArguments) {
  DeviceBuffer<float> x(4), norm(1);
  EXPECT_THROW(clip_scale(norm.data(), norm.data(), 0.f, stream()), std::invalid_argument);
  EXPECT_THROW(clip_grad_norm(x.data(), norm.data(), -1.f, 4, stream()), std::invalid_argument);
  EXPECT_THROW(global_grad_norm(norm.data(), x.data(), 4, nullptr, stream()), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
