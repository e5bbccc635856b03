#include "report/stats.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace foxhunt::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform index in [0, n): the high 64 bits of the 64 x 64-bit product x n (Lemire), the same
// everywhere (n < 2^32 here: episodes are at most 2^20).
std::size_t draw_index(std::uint64_t& state, std::size_t n) {
  const std::uint64_t x = splitmix64(state), m = n;
  const std::uint64_t lo = (x & 0xffffffffull) * m, hi = (x >> 32) * m;
  return static_cast<std::size_t>((hi + (lo >> 32)) >> 32);
}

// Regularized incomplete beta I_x(a, b) by its continued fraction (modified Lentz).
double incomplete_beta(double x, double a, double b) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  if (x > (a + 1.0) / (a + b + 2.0)) return 1.0 - incomplete_beta(1.0 - x, b, a);
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x)) / a;
  const double tiny = 1e-300;
  double f = 1.0, c = 1.0, d = 0.0;
  for (int i = 0; i <= 400; ++i) {
    const int m = i / 2;
    double num;
    if (i == 0)
      num = 1.0;
    else if (i % 2 == 0)
      num = (m * (b - m) * x) / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
    else
      num = -((a + m) * (a + b + m) * x) / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
    d = 1.0 + num * d;
    if (std::abs(d) < tiny) d = tiny;
    d = 1.0 / d;
    c = 1.0 + num / c;
    if (std::abs(c) < tiny) c = tiny;
    const double cd = c * d;
    f *= cd;
    if (std::abs(1.0 - cd) < 1e-15) break;
  }
  return front * (f - 1.0);
}

double student_t_cdf(double t, int df) {
  const double v = df;
  const double tail = 0.5 * incomplete_beta(v / (v + t * t), 0.5 * v, 0.5);
  return t >= 0.0 ? 1.0 - tail : tail;
}

}  // namespace

double mean_defined(std::span<const double> values, std::int64_t* count) {
  double sum = 0.0;
  std::int64_t n = 0;
  for (double v : values)
    if (!std::isnan(v)) {
      sum += v;
      ++n;
    }
  if (count) *count = n;
  return n > 0 ? sum / static_cast<double>(n) : kNaN;
}

double sorted_quantile(std::span<const double> sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("sorted_quantile: no values");
  const double h = (static_cast<double>(sorted.size()) - 1.0) * std::clamp(q, 0.0, 1.0);
  const auto lo = static_cast<std::size_t>(std::floor(h));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

std::vector<Interval> bootstrap_means(const std::vector<std::vector<double>>& columns, const BootstrapOptions& o) {
  if (o.resamples < 1) throw std::invalid_argument("bootstrap: resamples must be >= 1");
  if (!(o.level > 0.0 && o.level < 1.0)) throw std::invalid_argument("bootstrap: level must be in (0, 1)");
  const std::size_t K = columns.size();
  const std::size_t n = K ? columns[0].size() : 0;
  for (const auto& c : columns)
    if (c.size() != n) throw std::invalid_argument("bootstrap: every column needs one value per episode");
  std::vector<Interval> out(K);
  for (std::size_t k = 0; k < K; ++k) out[k].mean = mean_defined(columns[k], &out[k].count);
  if (n == 0) return out;
  // Episode-major copy: one resample reads every column of an episode together.
  std::vector<double> rows(n * K);
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t i = 0; i < n; ++i) rows[i * K + k] = columns[k][i];
  std::vector<std::vector<double>> means(K);
  for (auto& m : means) m.reserve(static_cast<std::size_t>(o.resamples));
  std::vector<double> sum(K);
  std::vector<std::int64_t> cnt(K);
  std::uint64_t state = o.seed;
  for (int b = 0; b < o.resamples; ++b) {
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(cnt.begin(), cnt.end(), 0);
    for (std::size_t j = 0; j < n; ++j) {
      const double* row = rows.data() + draw_index(state, n) * K;
      for (std::size_t k = 0; k < K; ++k)
        if (!std::isnan(row[k])) {
          sum[k] += row[k];
          ++cnt[k];
        }
    }
    for (std::size_t k = 0; k < K; ++k)
      if (cnt[k] > 0) means[k].push_back(sum[k] / static_cast<double>(cnt[k]));
  }
  const double lo_q = (1.0 - o.level) / 2.0, hi_q = (1.0 + o.level) / 2.0;
  for (std::size_t k = 0; k < K; ++k) {
    if (means[k].empty()) continue;
    std::sort(means[k].begin(), means[k].end());
    out[k].low = sorted_quantile(means[k], lo_q);
    out[k].high = sorted_quantile(means[k], hi_q);
  }
  return out;
}

Interval bootstrap_mean(std::span<const double> values, const BootstrapOptions& options) {
  return bootstrap_means({std::vector<double>(values.begin(), values.end())}, options)[0];
}

double student_t_quantile(double p, int df) {
  if (!(p > 0.0 && p < 1.0)) throw std::invalid_argument("student_t_quantile: p must be in (0, 1)");
  if (df < 1) throw std::invalid_argument("student_t_quantile: df must be >= 1");
  if (p < 0.5) return -student_t_quantile(1.0 - p, df);
  double lo = 0.0, hi = 1.0;
  while (student_t_cdf(hi, df) < p) hi *= 2.0;  // df = 1, p = 0.9999: about 3183
  for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Interval t_interval(std::span<const double> values, double level) {
  if (!(level > 0.0 && level < 1.0)) throw std::invalid_argument("t_interval: level must be in (0, 1)");
  Interval out;
  out.mean = mean_defined(values, &out.count);
  if (out.count < 2) return out;
  double ss = 0.0;
  for (double v : values)
    if (!std::isnan(v)) ss += (v - out.mean) * (v - out.mean);
  const double n = static_cast<double>(out.count);
  const double half =
      student_t_quantile(0.5 + level / 2.0, static_cast<int>(out.count - 1)) * std::sqrt(ss / (n - 1.0) / n);
  out.low = out.mean - half;
  out.high = out.mean + half;
  return out;
}

}  // namespace foxhunt::report
