#pragma once
// Central finite differences of L = sum(u * y) for the TFT tests: every parameter tensor of an
// arena (3 random entries each) and each given input (6 entries), against the analytic gradients
// of one backward after one forward. Test support only.
#include "models/fd_support.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu/arena.hpp"

namespace foxhunt::test {

struct FdInput {
  std::string name;
  float* x;         // device input
  const float* dx;  // its analytic gradient (device), written by `backward`
  std::size_t n;
};

inline double rms_of(const std::vector<float>& g, std::size_t offset, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(g[offset + i]) * g[offset + i];
  return std::sqrt(s / static_cast<double>(std::max<std::size_t>(n, 1)));
}

// fd_close of the central difference at h or, where that misses, of its Richardson extrapolation
// (4 D(h/2) - D(h)) / 3, which cancels the O(h^2) truncation term: the TFT's LayerNorms over a
// few values (the selection weights' V logits, GLU-gated widths of 3-4) curve enough that D(h)
// alone can miss a right gradient by 2-3%, while a wrong gradient misses both.
inline ::testing::AssertionResult fd_or_richardson_close(const std::function<double()>& loss, float* x, std::int64_t i,
                                                         float h, double analytic, double rtol, double floor,
                                                         cudaStream_t s) {
  const double d1 = central_difference(loss, x, i, h, s);
  if (fd_close(d1, analytic, rtol, floor)) return ::testing::AssertionSuccess();
  const double d2 = central_difference(loss, x, i, 0.5f * h, s);
  const double extrapolated = (4.0 * d2 - d1) / 3.0;
  if (fd_close(extrapolated, analytic, rtol, floor)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "central differences " << d1 << " (h) and " << d2 << " (h/2), extrapolated "
                                       << extrapolated << ", vs analytic " << analytic << " (rtol " << rtol
                                       << ", floor " << floor << ")";
}

// h = 1e-2 by default, |fd - analytic| <= 2e-2 max(|analytic|, 0.05 rms) (as tests/models/cfc): the float32
// forward's rounding over the sum stays far below that at these sizes.
inline void check_finite_differences(gpu::ParameterArena& arena, const std::function<void()>& forward,
                                     const std::function<void()>& backward, const float* y,
                                     const std::vector<float>& u, const std::vector<FdInput>& inputs,
                                     std::mt19937_64& rng, cudaStream_t s, int per_tensor = 3,
                                     float h = 1e-2f) {
  forward();
  backward();
  const auto grads = download(arena.grads(), static_cast<std::size_t>(arena.padded_count()), s);
  std::vector<std::vector<float>> gin;
  for (const auto& in : inputs) gin.push_back(download(in.dx, in.n, s));
  auto loss = [&] { return weighted_sum(forward, y, u, s); };
  double rms = 0;
  for (const auto& e : arena.entries()) {
    const double r = rms_of(grads, static_cast<std::size_t>(e.offset), static_cast<std::size_t>(e.numel));
    rms += r * r * static_cast<double>(e.numel);
  }
  rms = std::sqrt(rms / static_cast<double>(arena.count()));
  for (const auto& e : arena.entries())
    for (int k = 0; k < per_tensor; ++k) {
      const auto i = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(e.numel));
      EXPECT_TRUE(fd_or_richardson_close(loss, arena.params() + e.offset, i, h, grads[e.offset + i], 2e-2, 0.05 * rms,
                                         s))
          << e.name << "[" << i << "]";
    }
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const double r = rms_of(gin[k], 0, inputs[k].n);
    for (int t = 0; t < 6; ++t) {
      const auto i = static_cast<std::int64_t>(rng() % inputs[k].n);
      // 3%: float32 central differences through the whole model (LayerNorms, softmaxes) carry
      // about 2% noise at input gradients of 1e-3.
      EXPECT_TRUE(fd_or_richardson_close(loss, inputs[k].x, i, h, gin[k][i], 3e-2, 0.05 * r, s))
          << inputs[k].name << "[" << i << "]";
    }
  }
}

}  // namespace foxhunt::test
