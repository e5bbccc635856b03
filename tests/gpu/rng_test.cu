// fill_uniform / fill_normal: bit-exact against the host Philox functions, position-determined
// (independent of call size and pointer alignment), and statistically sound.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/philox.cuh"
#include "gpu/rng.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

class RngTest : public test::GpuTest {};

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float host_uniform(std::int64_t i, float lo, float hi, std::uint64_t seed, std::uint32_t sid, std::uint64_t off) {
  const float4 u = uniform4(seed, sid, off + static_cast<std::uint64_t>(i / 4));
  const float lanes[4] = {u.x, u.y, u.z, u.w};
  return uniform_in(lanes[i % 4], lo, hi);
}
float host_normal(std::int64_t i, float mean, float sd, std::uint64_t seed, std::uint32_t sid, std::uint64_t off) {
  const float4 z = normal4(seed, sid, off + static_cast<std::uint64_t>(i / 4));
  const float lanes[4] = {z.x, z.y, z.z, z.w};
  return normal_scaled(lanes[i % 4], mean, sd);
}

// First index whose bits differ, or -1.
std::int64_t first_mismatch(const std::vector<float>& got, auto&& want_at) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (bits(got[i]) != bits(want_at(static_cast<std::int64_t>(i)))) return static_cast<std::int64_t>(i);
  return -1;
}

TEST_F(RngTest, DeviceEqualsHostBitForBit) {
  SCOPED_TRACE(seed_note());
  const std::uint64_t seed = rng()();
  const std::uint32_t sid = static_cast<std::uint32_t>(rng()());
  const std::uint64_t off = rng()() >> 1;  // exercises the high counter word
  for (std::int64_t n : {1, 3, 4097, 1000003}) {
    for (int misalign : {0, 1}) {  // out + 1 takes the scalar-store path
      SCOPED_TRACE("n " + std::to_string(n) + " misalign " + std::to_string(misalign));
      DeviceBuffer<float> buf(n + 1);
      test::poison(buf, stream());
      float* out = buf.data() + misalign;
      fill_uniform(out, n, -1.5f, 2.5f, seed, sid, off, stream());
      auto got = test::download(out, n, stream());
      std::int64_t bad =
          first_mismatch(got, [&](std::int64_t i) { return host_uniform(i, -1.5f, 2.5f, seed, sid, off); });
      EXPECT_EQ(bad, -1) << "uniform element " << bad << " got " << (bad >= 0 ? got[bad] : 0.f);

      test::poison(buf, stream());
      fill_normal(out, n, 0.25f, 3.0f, seed, sid, off, stream());
      got = test::download(out, n, stream());
      bad = first_mismatch(got, [&](std::int64_t i) { return host_normal(i, 0.25f, 3.0f, seed, sid, off); });
      EXPECT_EQ(bad, -1) << "normal element " << bad << " got " << (bad >= 0 ? got[bad] : 0.f);
      if (misalign) {  // the element before the output was not touched (still the 0xFF poison)
        auto guard = test::download(buf.data(), 1, stream());
        EXPECT_EQ(bits(guard[0]), 0xFFFFFFFFu);
      }
    }
  }
}

TEST_F(RngTest, OutputDependsOnlyOnPositionSeedAndStream) {
  SCOPED_TRACE(seed_note());
  const std::uint64_t seed = rng()();
  const std::int64_t n = 100003;
  DeviceBuffer<float> a(n), b(n), c(n);
  test::poison(a, stream());
  test::poison(b, stream());
  test::poison(c, stream());
  fill_normal(a.data(), n, 0.f, 1.f, seed, 2, 10, stream());
  fill_normal(b.data(), n, 0.f, 1.f, seed, 2, 10, stream());
  // Same numbers from a shorter call that starts one counter (four elements) later.
  fill_normal(c.data(), n - 4, 0.f, 1.f, seed, 2, 11, stream());
  const auto ha = test::download(a, stream()), hb = test::download(b, stream()), hc = test::download(c, stream());
  EXPECT_EQ(std::memcmp(ha.data(), hb.data(), n * sizeof(float)), 0) << "same key, different output";
  EXPECT_EQ(std::memcmp(ha.data() + 4, hc.data(), (n - 4) * sizeof(float)), 0) << "output depends on call shape";
}

TEST_F(RngTest, UniformMomentsAndChiSquare) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1 << 22;
  const float lo = -2.f, hi = 6.f;
  DeviceBuffer<float> buf(n);
  test::poison(buf, stream());
  fill_uniform(buf.data(), n, lo, hi, rng()(), 0, 0, stream());
  const auto h = test::download(buf, stream());
  double sum = 0, sum2 = 0;
  std::vector<std::int64_t> bins(64, 0);
  for (float v : h) {
    ASSERT_TRUE(v >= lo && v <= hi) << v;
    sum += v;
    sum2 += static_cast<double>(v) * v;
    const int bin = std::min(63, static_cast<int>((v - lo) / (hi - lo) * 64.0));
    ++bins[bin];
  }
  const double w = hi - lo, mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_LT(std::abs(mean - (lo + hi) / 2.0), 5.0 * std::sqrt(w * w / 12.0 / n));
  // Var of the sample variance of U(0, w): (mu4 - sigma^4) / n = w^4 (1/80 - 1/144) / n.
  EXPECT_LT(std::abs(var - w * w / 12.0), 5.0 * w * w * std::sqrt((1.0 / 80 - 1.0 / 144) / n));
  // Chi-square with 63 degrees of freedom: mean 63, sd sqrt(126); 5 sd above is 119.
  const double expected = n / 64.0;
  double chi2 = 0;
  for (auto c : bins) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 63.0 + 5.0 * std::sqrt(126.0)) << "uniform histogram is not flat";
  EXPECT_GT(chi2, 10.0) << "histogram too flat to be random";  // P(chi2_63 < 10) ~ 1e-17
}

TEST_F(RngTest, NormalMoments) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1 << 22;
  const float mu = 1.5f, sd = 0.5f;
  DeviceBuffer<float> buf(n);
  test::poison(buf, stream());
  fill_normal(buf.data(), n, mu, sd, rng()(), 0, 0, stream());
  const auto h = test::download(buf, stream());
  double sum = 0, sum2 = 0, below = 0;
  for (float v : h) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum2 += static_cast<double>(v) * v;
    below += v < mu - sd;  // P(z < -1) = 0.158655
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_LT(std::abs(mean - mu), 5.0 * sd / std::sqrt(double(n)));
  EXPECT_LT(std::abs(var - sd * sd), 5.0 * sd * sd * std::sqrt(2.0 / n));
  const double p = 0.15865525393145707;
  EXPECT_LT(std::abs(below / n - p), 5.0 * std::sqrt(p * (1 - p) / n));
}

double correlation(const std::vector<float>& a, const std::vector<float>& b) {
  double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
  const double n = static_cast<double>(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    sa += a[i];
    sb += b[i];
    saa += double(a[i]) * a[i];
    sbb += double(b[i]) * b[i];
    sab += double(a[i]) * b[i];
  }
  const double cov = sab / n - (sa / n) * (sb / n);
  return cov / std::sqrt((saa / n - (sa / n) * (sa / n)) * (sbb / n - (sb / n) * (sb / n)));
}

TEST_F(RngTest, StreamsAndSeedsAreIndependent) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1 << 21;
  const std::uint64_t seed = rng()();
  DeviceBuffer<float> a(n), b(n), c(n);
  fill_normal(a.data(), n, 0.f, 1.f, seed, 0, 0, stream());
  fill_normal(b.data(), n, 0.f, 1.f, seed, 1, 0, stream());
  fill_normal(c.data(), n, 0.f, 1.f, seed + 1, 0, 0, stream());
  const auto ha = test::download(a, stream()), hb = test::download(b, stream()), hc = test::download(c, stream());
  const double bound = 5.0 / std::sqrt(double(n));
  EXPECT_LT(std::abs(correlation(ha, hb)), bound) << "streams 0 and 1 correlate";
  EXPECT_LT(std::abs(correlation(ha, hc)), bound) << "seeds s and s+1 correlate";
  // Lag-1 correlation within a stream (neighbouring lanes of one block, and across blocks).
  std::vector<float> lead(ha.begin(), ha.end() - 1), lag(ha.begin() + 1, ha.end());
  EXPECT_LT(std::abs(correlation(lead, lag)), bound) << "lag-1 correlation";
  std::int64_t equal_ab = 0, equal_ac = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    equal_ab += bits(ha[i]) == bits(hb[i]);
    equal_ac += bits(ha[i]) == bits(hc[i]);
  }
  EXPECT_LT(equal_ab, 64) << "streams repeat each other";
  EXPECT_LT(equal_ac, 64) << "seeds repeat each other";
}

TEST_F(RngTest, EmptyAndInvalidArguments) {
  EXPECT_NO_THROW(fill_uniform(nullptr, 0, 0.f, 1.f, 1, 0, 0, stream()));
  EXPECT_NO_THROW(fill_normal(nullptr, 0, 0.f, 1.f, 1, 0, 0, stream()));
  DeviceBuffer<float> buf(4);
  EXPECT_THROW(fill_uniform(buf.data(), -1, 0.f, 1.f, 1, 0, 0, stream()), std::invalid_argument);
  EXPECT_THROW(fill_uniform(buf.data(), 4, 1.f, 0.f, 1, 0, 0, stream()), std::invalid_argument);
  EXPECT_THROW(fill_normal(buf.data(), 4, 0.f, -1.f, 1, 0, 0, stream()), std::invalid_argument);
  EXPECT_THROW(fill_normal(nullptr, 4, 0.f, 1.f, 1, 0, 0, stream()), std::invalid_argument);
  EXPECT_EQ(rng_counters_used(0), 0u);
  EXPECT_EQ(rng_counters_used(5), 2u);
}

}  // namespace
}  // namespace foxhunt::gpu
