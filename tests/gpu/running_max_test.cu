// The device-side running maximum (replay max priority) and atomic_max_nonneg against host maxima:
// many blocks, the maximum planted anywhere (last element, vector tail), misaligned inputs, a
// larger starting value kept, negatives and NaN ignored, and raw atomics from many threads.
#include "support/gpu_test.hpp"

#include <algorithm>
#include <bit>

#include "gpu/atomics.cuh"
#include "gpu/running_max.hpp"

namespace foxhunt::gpu {
namespace {

constexpr std::int64_t kSizes[] = {1, 3, 4097, 1000003, std::int64_t{4} << 20};
constexpr int kOffsets[] = {0, 1};

class RunningMaxTest : public test::GpuTest {
 protected:
  // Runs raise_max_nonneg over `values` placed at `offset`, starting from `start`.
  float run(const std::vector<float>& values, int offset, float start) {
    DeviceBuffer<float> v(values.size() + offset);
    if (!values.empty())
      FH_CHECK(cudaMemcpyAsync(v.data() + offset, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice,
                               stream()));
    auto m = test::upload(std::vector<float>{start}, stream());
    raise_max_nonneg(m.data(), v.data() + offset, static_cast<std::int64_t>(values.size()), stream());
    return test::download(m, stream())[0];
  }
};

TEST_F(RunningMaxTest, MatchesHostMaximum) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      auto x = test::random_uniform(n, 0.0f, 1000.0f, rng());
      const float want = *std::max_element(x.begin(), x.end());
      EXPECT_EQ(run(x, off, 0.0f), want);
    }
}

// The maximum at the first element, the last element, inside the scalar tail (n % 4 != 0) and at
// a random position, each strictly above every other value.
TEST_F(RunningMaxTest, FindsAPlantedMaximumAnywhere) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : {std::int64_t{4097}, std::int64_t{1000003}, std::int64_t{4} << 20})
    for (int off : kOffsets) {
      auto x = test::random_uniform(n, 0.0f, 1.0f, rng());
      std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
      // n - n % 4: the first element of the scalar tail behind the last float4.
      for (std::int64_t pos : {std::int64_t{0}, n - 1, n - (n % 4 == 0 ? 2 : n % 4), pick(rng())}) {
        SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off) + " at " + std::to_string(pos));
        auto y = x;
        const float peak = 2.0f + std::uniform_real_distribution<float>(0.0f, 1.0f)(rng());
        y[pos] = peak;
        EXPECT_EQ(run(y, off, 0.5f), peak);
      }
    }
}

TEST_F(RunningMaxTest, KeepsALargerStartingValue) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : kSizes) {
    auto x = test::random_uniform(n, 0.0f, 1000.0f, rng());
    EXPECT_EQ(run(x, 0, 1000.5f), 1000.5f) << "n " << n;
    EXPECT_EQ(run(x, 1, std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  }
}

TEST_F(RunningMaxTest, AccumulatesAcrossCalls) {
  SCOPED_TRACE(seed_note());
  auto a = test::random_uniform(1000003, 0.0f, 10.0f, rng());
  auto b = test::random_uniform(4097, 0.0f, 20.0f, rng());
  auto d_a = test::upload(a, stream()), d_b = test::upload(b, stream());
  auto m = test::upload(std::vector<float>{0.0f}, stream());
  raise_max_nonneg(m.data(), d_a.data(), static_cast<std::int64_t>(a.size()), stream());
  raise_max_nonneg(m.data(), d_b.data(), static_cast<std::int64_t>(b.size()), stream());
  const float want = std::max(*std::max_element(a.begin(), a.end()), *std::max_element(b.begin(), b.end()));
  EXPECT_EQ(test::download(m, stream())[0], want);
}

TEST_F(RunningMaxTest, IgnoresNegativesAndNaN) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1000003;
  auto x = test::random_uniform(n, -100.0f, 1.0f, rng());  // mostly negative
  std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
  for (int k = 0; k < 16; ++k) x[pick(rng())] = std::numeric_limits<float>::quiet_NaN();
  x[n - 1] = std::numeric_limits<float>::quiet_NaN();
  x[0] = -0.0f;
  float want = 0.0f;
  for (float v : x)
    if (v > want) want = v;  // false for NaN and -0
  EXPECT_EQ(run(x, 0, 0.0f), want);
  EXPECT_EQ(run(x, 1, 0.0f), want);
  // All negative: the running maximum stays where it started.
  EXPECT_EQ(run(test::random_uniform(4097, -5.0f, -1.0f, rng()), 0, 0.25f), 0.25f);
}

TEST_F(RunningMaxTest, ZeroSizeLeavesTheValue) {
  auto m = test::upload(std::vector<float>{3.0f}, stream());
  raise_max_nonneg(m.data(), m.data(), 0, stream());
  EXPECT_EQ(test::download(m, stream())[0], 3.0f);
  EXPECT_THROW(raise_max_nonneg(m.data(), m.data(), -1, stream()), std::invalid_argument);
}

// atomic_max_nonneg itself, every thread of many blocks hitting one address (no block reduction),
// and the returned old value never above the final maximum.
__global__ void raw_atomic_max(float* m, float* old_max, const float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float old = atomic_max_nonneg(m, x[i]);
    atomic_max_nonneg(old_max, old);
  }
}

TEST_F(RunningMaxTest, AtomicMaxNonnegFromEveryThread) {
  SCOPED_TRACE(seed_note());
  const int n = 1 << 20;
  auto x = test::random_uniform(n, 0.0f, 1e30f, rng());
  x[1] = std::numeric_limits<float>::denorm_min();  // ordering holds for subnormals too
  x[std::uniform_int_distribution<int>(2, n - 1)(rng())] = std::numeric_limits<float>::max();
  auto d_x = test::upload(x, stream());
  auto m = test::upload(std::vector<float>{0.0f}, stream());
  auto old = test::upload(std::vector<float>{0.0f}, stream());
  raw_atomic_max<<<n / 256, 256, 0, stream()>>>(m.data(), old.data(), d_x.data(), n);
  FH_CHECK_LAUNCH();
  EXPECT_EQ(test::download(m, stream())[0], std::numeric_limits<float>::max());
  EXPECT_LE(test::download(old, stream())[0], std::numeric_limits<float>::max());

  // Subnormal against zero and against a smaller subnormal: bit order is value order.
  auto tiny = test::upload(
      std::vector<float>{std::numeric_limits<float>::denorm_min() * 3, std::numeric_limits<float>::denorm_min() * 2},
      stream());
  auto z = test::upload(std::vector<float>{0.0f}, stream());
  auto z_old = test::upload(std::vector<float>{0.0f}, stream());
  raw_atomic_max<<<1, 32, 0, stream()>>>(z.data(), z_old.data(), tiny.data(), 2);
  FH_CHECK_LAUNCH();
  EXPECT_EQ(test::download(z, stream())[0], std::numeric_limits<float>::denorm_min() * 3);
}

}  // namespace
}  // namespace foxhunt::gpu
