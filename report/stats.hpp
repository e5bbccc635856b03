#pragma once
// Host statistics of an evaluation report. A NaN value means "undefined" (e.g. the hit rate of an
// episode that never held a position) and is left out of every mean.
//   bootstrap_means  percentile bootstrap of the mean over episodes: `resamples` resamples of n
//                    episodes drawn with replacement (splitmix64 from `seed`, so the same input
//                    and seed give the same interval on every platform), each resample's mean over
//                    its defined values; the interval is the (1 - level) / 2 and (1 + level) / 2
//                    percentiles of those means (linear interpolation between order statistics).
//                    All columns of one call share the resampled indices (one resample is one set
//                    of episodes for every metric).
//   t_interval       mean +- t_{(1 + level) / 2, n - 1} s / sqrt(n) over n values (s the sample
//                    standard deviation): the interval across a few checkpoints, where a
//                    bootstrap of 3 to 10 values would be too narrow.
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace foxhunt::report {

struct Interval {
  double mean = std::numeric_limits<double>::quiet_NaN();
  double low = std::numeric_limits<double>::quiet_NaN();  // NaN when undefined (fewer than 2 values)
  double high = std::numeric_limits<double>::quiet_NaN();
  std::int64_t count = 0;  // defined values the mean is over
};

struct BootstrapOptions {
  int resamples = 2000;
  double level = 0.95;
  std::uint64_t seed = 0x666f78626f6f74ull;  // "foxboot"
};

// Mean of the non-NaN values (NaN when there is none); *count receives how many.
double mean_defined(std::span<const double> values, std::int64_t* count = nullptr);

// One interval per column (columns[k] holds one value per episode; every column the same length).
// Throws std::invalid_argument for resamples < 1, a level outside (0, 1) or columns of unequal length.
std::vector<Interval> bootstrap_means(const std::vector<std::vector<double>>& columns,
                                      const BootstrapOptions& options = {});
Interval bootstrap_mean(std::span<const double> values, const BootstrapOptions& options = {});

Interval t_interval(std::span<const double> values, double level = 0.95);

// The p-quantile (p in (0, 1)) of Student's t with df >= 1 degrees of freedom.
double student_t_quantile(double p, int df);
// Quantile q in [0, 1] of ascending `sorted` (non-empty), linear between order statistics.
double sorted_quantile(std::span<const double> sorted, double q);

}  // namespace foxhunt::report
