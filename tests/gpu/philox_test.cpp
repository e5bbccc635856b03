// Philox4x32-10 on the host: Random123's known-answer vectors, the (seed, stream, counter)
// addressing, and the accuracy and range of the uniform/normal transforms (the device runs the
// same code; tests/gpu/rng_test.cu checks it bit for bit against these host functions).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gpu/philox.cuh"

namespace foxhunt::gpu {
namespace {

::testing::AssertionResult same(uint4 got, uint4 want) {
  if (got.x == want.x && got.y == want.y && got.z == want.z && got.w == want.w) return ::testing::AssertionSuccess();
  char buf[160];
  std::snprintf(buf, sizeof buf, "got %08x %08x %08x %08x, want %08x %08x %08x %08x", got.x, got.y, got.z, got.w,
                want.x, want.y, want.z, want.w);
  return ::testing::AssertionFailure() << buf;
}

// Random123 kat_vectors, philox4x32 R=10: counter (4 words), key (2 words) -> output.
TEST(Philox, Random123KnownAnswers) {
  EXPECT_TRUE(same(philox4x32_10(make_uint4(0, 0, 0, 0), make_uint2(0, 0)),
                   make_uint4(0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)));
  EXPECT_TRUE(same(
      philox4x32_10(make_uint4(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff), make_uint2(0xffffffff, 0xffffffff)),
      make_uint4(0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)));
  EXPECT_TRUE(same(
      philox4x32_10(make_uint4(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), make_uint2(0xa4093822, 0x299f31d0)),
      make_uint4(0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)));
}

TEST(Philox, AddressingMapsSeedStreamAndCounterOntoKeyAndCounterWords) {
  const std::uint64_t seed = 0x299f31d0a4093822ull;  // key {a4093822, 299f31d0}
  const std::uint64_t counter = 0x85a308d3243f6a88ull;
  // stream 0x13198a2e gives counter words {243f6a88, 85a308d3, 13198a2e, 0}: not the KAT (w = 0).
  const uint4 direct =
      philox4x32_10(make_uint4(0x243f6a88, 0x85a308d3, 0x13198a2e, 0), make_uint2(0xa4093822, 0x299f31d0));
  EXPECT_TRUE(same(random_bits4(seed, 0x13198a2e, counter), direct));
  EXPECT_TRUE(same(random_bits4(0, 0, 0), make_uint4(0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)));
  // Each input moves the output.
  const uint4 base = random_bits4(7, 3, 11);
  EXPECT_FALSE(same(random_bits4(8, 3, 11), base));
  EXPECT_FALSE(same(random_bits4(7, 4, 11), base));
  EXPECT_FALSE(same(random_bits4(7, 3, 12), base));
  EXPECT_FALSE(same(random_bits4(7 + (1ull << 32), 3, 11), base));  // high seed word is used
  EXPECT_FALSE(same(random_bits4(7, 3, 11 + (1ull << 32)), base));  // high counter word is used
}

TEST(Philox, UniformTransformsCoverTheirIntervalsExactly) {
  EXPECT_EQ(u32_to_uniform_open0(0u), 0x1p-24f);
  EXPECT_EQ(u32_to_uniform_open0(0xffffffffu), 1.0f);
  EXPECT_EQ(u32_to_uniform_open0(0xffu), 0x1p-24f);  // low 8 bits dropped
  EXPECT_EQ(u32_to_uniform_closed0(0u), 0.0f);
  EXPECT_EQ(u32_to_uniform_closed0(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_EQ(u32_to_uniform_closed0(0x80000000u), 0.5f);
  // uniform4 lanes are the open0 transform of the block's words.
  const uint4 b = random_bits4(42, 1, 9);
  const float4 u = uniform4(42, 1, 9);
  EXPECT_EQ(u.x, u32_to_uniform_open0(b.x));
  EXPECT_EQ(u.w, u32_to_uniform_open0(b.w));
  EXPECT_EQ(uniform_in(1.0f, -2.0f, 3.0f), 3.0f);
  EXPECT_EQ(uniform_in(0.5f, -2.0f, 2.0f), 0.0f);
}

// The log behind Box-Muller, over every value u1 can take (2^24 of them), against double.
TEST(Philox, LogIsAccurateOverEveryUniformValue) {
  double worst_ulps = 0;
  for (std::uint32_t k = 1; k <= (1u << 24); ++k) {
    const float u = static_cast<float>(k) * 0x1p-24f;
    const float got = philox_detail::log_positive(u);
    const double want = std::log(static_cast<double>(u));
    if (k == (1u << 24)) {
      ASSERT_EQ(got, 0.0f);  // log(1) = 0 exactly: the radius is then exactly 0
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    worst_ulps = std::max(worst_ulps, std::abs(got - want) / ulp);
  }
  EXPECT_LT(worst_ulps, 1.5) << "worst error of log_positive in float ulps";
}

TEST(Philox, SinCosAreAccurateOverTheCircle) {
  double worst = 0;
  for (std::uint32_t k = 0; k < (1u << 24); k += 7) {  // ~2.4M angles incl. all quadrants
    const float u = static_cast<float>(k) * 0x1p-24f;
    float s, c;
    philox_detail::sincos_2pi(u, &s, &c);
    const double a = 2.0 * M_PI * static_cast<double>(u);
    worst = std::max({worst, std::abs(s - std::sin(a)), std::abs(c - std::cos(a))});
  }
  EXPECT_LT(worst, 1.5e-7) << "worst absolute error of sincos_2pi (float ulp at 1 is 1.2e-7)";
  float s, c;
  philox_detail::sincos_2pi(0.25f, &s, &c);
  EXPECT_EQ(s, 1.0f);
  EXPECT_LT(std::abs(c), 1e-7f);
  philox_detail::sincos_2pi(0.5f, &s, &c);
  EXPECT_EQ(c, -1.0f);
}

TEST(Philox, NormalsAreFiniteBoundedAndStandard) {
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t seed = rng();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int blocks = 1 << 18;  // 1M normals
  double sum = 0, sum2 = 0, sum4 = 0;
  for (int c = 0; c < blocks; ++c) {
    const float4 z = normal4(seed, 5, static_cast<std::uint64_t>(c));
    for (float v : {z.x, z.y, z.z, z.w}) {
      ASSERT_TRUE(std::isfinite(v));
      ASSERT_LE(std::abs(v), 5.8f);  // radius <= sqrt(-2 log 2^-24) = 5.77
      sum += v;
      sum2 += static_cast<double>(v) * v;
      sum4 += static_cast<double>(v) * v * v * v;
    }
  }
  const double n = 4.0 * blocks;
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_LT(std::abs(mean), 5.0 / std::sqrt(n));                   // sd of the mean: 1/sqrt(n)
  EXPECT_LT(std::abs(var - 1.0), 5.0 * std::sqrt(2.0 / n));        // sd of the variance: sqrt(2/n)
  EXPECT_LT(std::abs(sum4 / n - 3.0), 5.0 * std::sqrt(96.0 / n));  // 4th moment 3, sd sqrt(96/n)
  // Extremes: the smallest u1 gives the largest radius, u1 = 1 gives exactly 0.
  const float2 far = normal2(0u, 0u);  // u1 = 2^-24, angle 0
  EXPECT_NEAR(far.x, std::sqrt(-2.0 * std::log(0x1p-24)), 1e-5);
  EXPECT_EQ(far.y, 0.0f);
  const float2 zero = normal2(0xffffffffu, 0x12345678u);
  EXPECT_EQ(zero.x, 0.0f);
  EXPECT_EQ(zero.y, 0.0f);
  EXPECT_EQ(normal_scaled(2.0f, 1.0f, 0.5f), 2.0f);
  const float4 four = normal4(seed, 9, 77);
  const float2 two = normal2(seed, 9, 77);
  EXPECT_EQ(two.x, four.x);
  EXPECT_EQ(two.y, four.y);
}

}  // namespace
}  // namespace foxhunt::gpu
