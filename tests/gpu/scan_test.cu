// Inclusive and exclusive scans of float, int32 and uint32 against CPU references: integers
// exactly, floats against double prefix sums.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu/scan.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

// The f32 tile is 8192 elements, a look-back group 32 tiles: one partial tile (1, 7, 4097), one
// full tile (8192: bulk copy and bulk store when aligned), one element past it (8193), two full
// tiles (16384), one element past the first group (262145), several tiles with a partial last one
// (1000003), many tiles and groups (4M + 1: 513 tiles, 17 groups). Offset 1 (misaligned) takes the
// element-wise path everywhere.
const std::int64_t kSizes[] = {1, 7, 4097, 8192, 8193, 16384, 32 * 8192 + 1, 1000003, (1 << 22) + 1};

class ScanTest : public test::GpuTest {
 protected:
  // Scans host[offset, offset + n) into a poisoned output at the same offset (offset != 0
  // breaks 16-byte alignment); in_place scans the input buffer itself.
  template <class T>
  std::vector<T> run(const std::vector<T>& host, std::int64_t offset, std::int64_t n, bool exclusive,
                     bool in_place = false) {
    auto d_in = test::upload(host, stream());
    DeviceBuffer<T> d_out(host.size());
    test::poison(d_out, stream());
    const std::size_t bytes = scan_workspace_bytes<T>(n);
    DeviceBuffer<std::byte> ws(bytes);
    test::poison(ws, stream());
    T* out = (in_place ? d_in.data() : d_out.data()) + offset;
    const T* in = d_in.data() + offset;
    if (exclusive)
      exclusive_scan(out, in, n, ws.data(), bytes, stream());
    else
      inclusive_scan(out, in, n, ws.data(), bytes, stream());
    auto all = test::download(in_place ? d_in : d_out, stream());
    return std::vector<T>(all.begin() + offset, all.begin() + offset + n);
  }

  template <class T, class Wide>
  void check_exact(const std::vector<T>& host, std::int64_t offset, std::int64_t n) {
    for (bool exclusive : {false, true}) {
      SCOPED_TRACE(std::string(exclusive ? "exclusive" : "inclusive") + " n " + std::to_string(n) + " offset " +
                   std::to_string(offset));
      const auto got = run(host, offset, n, exclusive);
      Wide acc = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const Wide before = acc;
        acc = static_cast<Wide>(acc + static_cast<Wide>(host[offset + i]));
        ASSERT_EQ(got[i], static_cast<T>(exclusive ? before : acc)) << "element " << i;
      }
    }
  }
};

TEST_F(ScanTest, Int32IsExact) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<std::int32_t> d(-1000, 1000);  // running sums stay far from overflow
  for (std::int64_t n : kSizes) {
    std::vector<std::int32_t> host(n + 1);
    for (auto& v : host) v = d(rng());
    check_exact<std::int32_t, std::int64_t>(host, 0, n);
    check_exact<std::int32_t, std::int64_t>(host, 1, n);
  }
}

// Full-range values: the sums wrap modulo 2^32, which uint32 arithmetic on the host mirrors.
TEST_F(ScanTest, Uint32IsExactModulo2To32) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<std::uint32_t> d;
  for (std::int64_t n : kSizes) {
    std::vector<std::uint32_t> host(n + 1);
    for (auto& v : host) v = d(rng());
    check_exact<std::uint32_t, std::uint32_t>(host, 0, n);
    check_exact<std::uint32_t, std::uint32_t>(host, 1, n);
  }
}

// Small integers stored as float: every partial sum of any grouping is an integer below 2^24,
// so float addition is exact and the scan must match bit for bit whatever its summation
// order. This catches any element missed, doubled or misplaced by the tiles and look-back.
TEST_F(ScanTest, FloatOfSmallIntegersIsExact) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<int> d(-8, 8);
  for (std::int64_t n : kSizes) {
    std::vector<float> host(n + 1);
    for (auto& v : host) v = static_cast<float>(d(rng()));
    for (std::int64_t offset : {0, 1})
      for (bool exclusive : {false, true}) {
        SCOPED_TRACE(std::string(exclusive ? "exclusive" : "inclusive") + " n " + std::to_string(n) + " offset " +
                     std::to_string(offset));
        const auto got = run(host, offset, n, exclusive);
        double acc = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const double before = acc;
          acc += host[offset + i];
          ASSERT_EQ(got[i], static_cast<float>(exclusive ? before : acc)) << "element " << i;
        }
      }
  }
}

// Random floats against double prefix sums. A float sum of k terms in any fixed tree has error
// <= depth * 2^-24 * sum|terms|; here the depth is about 40 (4 in a lane, 5 across lanes, 8
// segments, 8 warps, the group totals and the look-back sums), so the error of out[i] scales
// with the running sum S_i = sum_{j<=i} |x_j|, not with |out[i]|, which cancellation can make
// arbitrarily small. Tolerance: 1e-5 * S_i (the bound is ~2.4e-6 * S_i).
TEST_F(ScanTest, FloatMatchesDoublePrefixSums) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : kSizes) {
    const auto host = test::random_normal(n + 1, 0.1f, 1.f, rng());
    for (std::int64_t offset : {0, 1})
      for (bool exclusive : {false, true}) {
        SCOPED_TRACE(std::string(exclusive ? "exclusive" : "inclusive") + " n " + std::to_string(n) + " offset " +
                     std::to_string(offset));
        const auto got = run(host, offset, n, exclusive);
        double acc = 0, abs_acc = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const double before = acc, abs_before = abs_acc;
          acc += host[offset + i];
          abs_acc += std::abs(host[offset + i]);
          const double want = exclusive ? before : acc, scale = exclusive ? abs_before : abs_acc;
          ASSERT_NEAR(got[i], want, 1e-5 * scale + 1e-30) << "element " << i;
        }
        if (exclusive) EXPECT_EQ(got[0], 0.f);
      }
  }
}

TEST_F(ScanTest, InPlaceAndRepeatedRunsAreBitwiseEqual) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = (1 << 22) + 1;
  const auto host = test::random_normal(n, 0.f, 1.f, rng());
  for (bool exclusive : {false, true}) {
    const auto a = run(host, 0, n, exclusive), b = run(host, 0, n, exclusive);
    const auto c = run(host, 0, n, exclusive, /*in_place=*/true);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(a.data(), c.data(), n * sizeof(float)), 0);
  }
  std::vector<std::int32_t> ints(n);
  std::uniform_int_distribution<std::int32_t> d(-100, 100);
  for (auto& v : ints) v = d(rng());
  const auto a = run(ints, 0, n, false), c = run(ints, 0, n, false, /*in_place=*/true);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), n * sizeof(std::int32_t)), 0);
}

TEST_F(ScanTest, EmptyInputAndWorkspaceChecks) {
  DeviceBuffer<float> f(16);
  DeviceBuffer<std::int32_t> i(16);
  test::poison(f, stream());
  inclusive_scan(f.data(), f.data(), 0, nullptr, 0, stream());
  exclusive_scan(i.data(), i.data(), 0, nullptr, 0, stream());
  for (float v : test::download(f, stream())) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(scan_workspace_bytes<float>(0), 0u);
  EXPECT_EQ(scan_workspace_bytes<std::uint32_t>(0), 0u);

  const std::int64_t n = 1 << 20;
  DeviceBuffer<float> big(n);
  const std::size_t bytes = scan_workspace_bytes<float>(n);
  ASSERT_GT(bytes, 0u);
  DeviceBuffer<std::byte> ws(bytes);
  EXPECT_THROW(inclusive_scan(big.data(), big.data(), n, ws.data(), bytes - 1, stream()), std::invalid_argument);
  EXPECT_THROW(inclusive_scan(big.data(), big.data(), n, nullptr, bytes, stream()), std::invalid_argument);
  EXPECT_THROW(inclusive_scan(big.data(), big.data(), -1, ws.data(), bytes, stream()), std::invalid_argument);
  DeviceBuffer<std::int32_t> ibig(n);
  const std::size_t ibytes = scan_workspace_bytes<std::int32_t>(n);
  EXPECT_THROW(exclusive_scan(ibig.data(), ibig.data(), n, ws.data(), ibytes > 0 ? ibytes - 1 : 0, stream()),
               std::invalid_argument);
  EXPECT_THROW(exclusive_scan(big.data(), big.data(), n, ws.data(), bytes - 1, stream()), std::invalid_argument);
  DeviceBuffer<std::byte> misaligned(bytes + 8);
  EXPECT_THROW(inclusive_scan(big.data(), big.data(), n, misaligned.data() + 4, bytes, stream()),
               std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
