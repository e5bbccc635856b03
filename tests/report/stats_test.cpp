// The report's statistics (report/stats.hpp): the percentile bootstrap contains the mean for a
// large sample, narrows as the sample grows (about 1 / sqrt(n)), covers the true mean about 95% of
// the time, is the same for the same seed, leaves NaN out; Student-t quantiles against tables.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "report/stats.hpp"

namespace foxhunt::report {
namespace {

std::vector<double> normal_sample(std::size_t n, double mean, double sd, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(mean, sd);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(ReportStats, BootstrapContainsTheMeanOfALargeSample) {
  const auto v = normal_sample(4096, 0.3, 1.0, 1);
  const Interval i = bootstrap_mean(v);
  EXPECT_EQ(i.count, 4096);
  EXPECT_LT(i.low, i.mean);
  EXPECT_GT(i.high, i.mean);
  // Half-width about 1.96 sd / sqrt(n) = 0.0306 (within 15%: 2000 resamples).
  EXPECT_NEAR((i.high - i.low) / 2.0, 1.96 / std::sqrt(4096.0), 0.15 * 1.96 / std::sqrt(4096.0));
  EXPECT_LT(i.low, 0.3);
  EXPECT_GT(i.high, 0.3);
}

TEST(ReportStats, BootstrapNarrowsWithTheSampleSize) {
  double prev = 1e9;
  for (std::size_t n : {64, 256, 1024, 4096}) {
    const Interval i = bootstrap_mean(normal_sample(n, 0.0, 1.0, n));
    const double width = i.high - i.low;
    EXPECT_LT(width, prev) << n;
    EXPECT_NEAR(width * std::sqrt(static_cast<double>(n)), 2.0 * 1.96, 0.6) << n;  // width ~ 1/sqrt(n)
    prev = width;
  }
}

TEST(ReportStats, BootstrapCoversTheTrueMeanAboutNinetyFivePercentOfTheTime) {
  // 400 samples of 200: coverage is binomial(400, ~0.95) (the percentile interval runs a little
  // under nominal at n = 200); [0.90, 0.99] is more than 4 standard deviations wide.
  int covered = 0;
  BootstrapOptions o;
  o.resamples = 500;
  for (int k = 0; k < 400; ++k) {
    const Interval i = bootstrap_mean(normal_sample(200, 1.0, 2.0, 1000 + k), o);
    covered += i.low <= 1.0 && 1.0 <= i.high;
  }
  EXPECT_GE(covered, 360);
  EXPECT_LE(covered, 396);
}

TEST(ReportStats, BootstrapIsDeterministicForASeed) {
  const auto v = normal_sample(500, 0.0, 1.0, 7);
  const Interval a = bootstrap_mean(v), b = bootstrap_mean(v);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  BootstrapOptions other;
  other.seed = 99;
  const Interval c = bootstrap_mean(v, other);
  EXPECT_EQ(c.mean, a.mean);
  EXPECT_NE(c.low, a.low);
}

TEST(ReportStats, ColumnsShareResamplesAndSkipUndefinedValues) {
  auto v = normal_sample(300, 0.0, 1.0, 3);
  std::vector<double> with_nan = v;
  for (std::size_t k = 0; k < with_nan.size(); k += 3) with_nan[k] = std::nan("");
  std::vector<double> all_nan(300, std::nan(""));
  const auto out = bootstrap_means({v, v, with_nan, all_nan});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].low, out[1].low);  // the same indices for every column
  EXPECT_EQ(out[0].high, out[1].high);
  EXPECT_EQ(out[2].count, 200);
  EXPECT_TRUE(std::isfinite(out[2].low) && std::isfinite(out[2].high));
  EXPECT_LT(out[2].low, out[2].mean);
  EXPECT_EQ(out[3].count, 0);
  EXPECT_TRUE(std::isnan(out[3].mean) && std::isnan(out[3].low) && std::isnan(out[3].high));
  // A constant column has a zero-width interval at its value.
  const Interval c = bootstrap_mean(std::vector<double>(50, 2.5));
  EXPECT_EQ(c.low, 2.5);
  EXPECT_EQ(c.high, 2.5);
  EXPECT_THROW(bootstrap_means({{1.0, 2.0}, {1.0}}), std::invalid_argument);
}

TEST(ReportStats, StudentTQuantilesMatchTables) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.7062, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.3027, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 4), 2.7764, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0423, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.95, 10), 1.8125, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 100000), 1.9600, 1e-3);
  EXPECT_NEAR(student_t_quantile(0.025, 5), -2.5706, 1e-4);
}

TEST(ReportStats, TIntervalAcrossCheckpoints) {
  const std::vector<double> v = {1.0, 2.0, 3.0};
  const Interval i = t_interval(v);
  EXPECT_DOUBLE_EQ(i.mean, 2.0);
  EXPECT_NEAR(i.high - i.mean, 4.3027 * 1.0 / std::sqrt(3.0), 1e-3);
  EXPECT_NEAR(i.mean - i.low, i.high - i.mean, 1e-12);
  const Interval one = t_interval(std::vector<double>{5.0});
  EXPECT_EQ(one.mean, 5.0);
  EXPECT_TRUE(std::isnan(one.low) && std::isnan(one.high));
}

}  // namespace
}  // namespace foxhunt::report
