// gpu/atomics.cuh against host maxima: atomic_max_nonneg from every thread of many blocks on one
// address (the replay tree keeps its max priority with it), subnormals included.
#include "support/gpu_test.hpp"

#include <limits>
#include <vector>

#include "gpu/atomics.cuh"

namespace foxhunt::gpu {
namespace {

class AtomicsTest : public test::GpuTest {};

// atomic_max_nonneg itself, every thread of many blocks hitting one address (no block reduction),
// and the returned old value never above the final maximum.
__global__ void raw_atomic_max(float* m, float* old_max, const float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float old = atomic_max_nonneg(m, x[i]);
    atomic_max_nonneg(old_max, old);
  }
}

TEST_F(AtomicsTest, MaxNonnegFromEveryThread) {
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
