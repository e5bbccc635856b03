#pragma once
// Host helpers of the xLSTM tests: float64 copies, time slices of batch-major (B, T, X) arrays,
// and RMS of a gradient (the floor of finite-difference comparisons).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace foxhunt::test::xlstm {

inline std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// v (B, T, X) -> (B, t1 - t0, X): steps t0 .. t1-1 of every row.
inline std::vector<float> slice_time(const std::vector<float>& v, std::int64_t B, std::int64_t T, std::int64_t X,
                                     std::int64_t t0, std::int64_t t1) {
  std::vector<float> o;
  o.reserve(static_cast<std::size_t>(B * (t1 - t0) * X));
  for (std::int64_t b = 0; b < B; ++b)
    o.insert(o.end(), v.begin() + (b * T + t0) * X, v.begin() + (b * T + t1) * X);
  return o;
}

// v (B, T, X) -> (B, X): step t of every row.
inline std::vector<float> at_time(const std::vector<float>& v, std::int64_t B, std::int64_t T, std::int64_t X,
                                  std::int64_t t) {
  return slice_time(v, B, T, X, t, t + 1);
}

inline double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return v.empty() ? 0.0 : std::sqrt(s / static_cast<double>(v.size()));
}

inline double log_sigmoid(double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::abs(x))); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace foxhunt::test::xlstm
