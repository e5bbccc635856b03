#pragma once
// Test helper: checks that two equal-length samples of a stationary Gaussian process, taken
// `lag` steps apart across independent environments, have the given mean, variance and lag
// correlation, each within ~5 standard errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace foxhunt::test {

inline void expect_stationary_pair(const std::vector<double>& a, const std::vector<double>& b, double mean, double var,
                                   double rho, double extra_rho_slack = 0.0) {
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= n;
  mb /= n;
  double va = 0, vb = 0, cab = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    va += (a[i] - ma) * (a[i] - ma);
    vb += (b[i] - mb) * (b[i] - mb);
    cab += (a[i] - ma) * (b[i] - mb);
  }
  va /= n;
  vb /= n;
  cab /= n;
  EXPECT_NEAR(ma, mean, 5 * std::sqrt(var / n)) << "mean";
  EXPECT_NEAR(va, var, 5 * var * std::sqrt(2.0 / n)) << "variance (first sample)";
  EXPECT_NEAR(vb, var, 5 * var * std::sqrt(2.0 / n)) << "variance (second sample)";
  EXPECT_NEAR(cab / std::sqrt(va * vb), rho, 5 * (1 - rho * rho) / std::sqrt(n) + extra_rho_slack) << "lag correlation";
}

}  // namespace foxhunt::test
