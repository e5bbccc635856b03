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

// One tile (1, 7, 4097), several tiles with a partial last one (1000003), many tiles and more
// than one look-back group of 32 tiles (4M + 1: 513 tiles, 17 groups).
const std::int64_t kSizes[] = {1, 7, 4097, 8192, 8193, 1000003, (1 << 22) + 1};

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

  // Same as run() for float, through configuration `config` of the f32 scan.
  std::vector<float> run_config(int config, const std::vector<float>& host, std::int64_t offset, std::int64_t n,
                                bool exclusive, bool in_place = false) {
    auto d_in = test::upload(host, stream());
    DeviceBuffer<float> d_out(host.size());
    test::poison(d_out, stream());
    const std::size_t bytes = detail::scan_f32_config_workspace_bytes(config, n);
    DeviceBuffer<std::byte> ws(bytes);
    test::poison(ws, stream());
    float* out = (in_place ? d_in.data() : d_out.data()) + offset;
    detail::scan_f32_config(out, d_in.data() + offset, n, exclusive, config, ws.data(), bytes, stream());
    auto all = test::download(in_place ? d_in : d_out, stream());
    return std::vector<float>(all.begin() + offset, all.begin() + offset + n);
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

// ---- every configuration of the f32 scan (detail::scan_f32_config) ---------------------------
// Tile sizes are 4096, 6144 or 8192 elements and groups span 32 * 8192 or 64 * 4096 elements: these
// sizes hit one tile, exact tiles, one element past a tile, partial last tiles and many groups.
// The L2-prefetching ("_pf") configurations prefetch their own tile (first resident wave, the
// partial last tile cut to whole 16-byte chunks) and, at (1 << 22) + 1 (513 tiles), tiles one
// wave ahead up to the last one; offset 1 (misaligned) takes the path without prefetch. The
// shared-memory ("_tma") configurations bulk-copy full tiles only when aligned (offset 0): a single
// full tile (4096, 8192), full tiles before a partial last one (4097, 8193, 1000003, ...), and the
// element-wise path for the partial tile and for offset 1; "_bst" stores full tiles in bulk too.
const std::int64_t kConfigSizes[] = {1, 7, 2048, 2049, 4096, 4097, 6144, 6145, 8192, 8193, 1000003, (1 << 22) + 1};

std::string config_note(int config) {
  return "config " + std::to_string(config) + " " + detail::scan_f32_config_name(config);
}

TEST_F(ScanTest, ConfigsListAndRejectBadIndex) {
  const int count = detail::scan_f32_config_count();
  ASSERT_GE(count, 1);
  EXPECT_GE(detail::scan_f32_default_config(), 0);
  EXPECT_LT(detail::scan_f32_default_config(), count);
  for (int c = 0; c < count; ++c) EXPECT_FALSE(std::string(detail::scan_f32_config_name(c)).empty());
  EXPECT_THROW(detail::scan_f32_config_name(count), std::invalid_argument);
  EXPECT_THROW(detail::scan_f32_config_name(-1), std::invalid_argument);
  EXPECT_EQ(detail::scan_f32_config_workspace_bytes(0, 0), 0u);
}

// The default configuration through detail:: gives the same bits as the public entry points.
TEST_F(ScanTest, DefaultConfigMatchesPublicScan) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1000003;
  const auto host = test::random_normal(n, 0.f, 1.f, rng());
  for (bool exclusive : {false, true}) {
    const auto a = run(host, 0, n, exclusive), b = run_config(detail::scan_f32_default_config(), host, 0, n, exclusive);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0) << (exclusive ? "exclusive" : "inclusive");
  }
}

// As FloatOfSmallIntegersIsExact, for every configuration.
TEST_F(ScanTest, EveryConfigIsExactOnSmallIntegers) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<int> d(-8, 8);
  for (int config = 0; config < detail::scan_f32_config_count(); ++config) {
    SCOPED_TRACE(config_note(config));
    for (std::int64_t n : kConfigSizes) {
      std::vector<float> host(n + 1);
      for (auto& v : host) v = static_cast<float>(d(rng()));
      for (std::int64_t offset : {0, 1})
        for (bool exclusive : {false, true}) {
          SCOPED_TRACE(std::string(exclusive ? "exclusive" : "inclusive") + " n " + std::to_string(n) + " offset " +
                       std::to_string(offset));
          const auto got = run_config(config, host, offset, n, exclusive);
          double acc = 0;
          for (std::int64_t i = 0; i < n; ++i) {
            const double before = acc;
            acc += host[offset + i];
            ASSERT_EQ(got[i], static_cast<float>(exclusive ? before : acc)) << "element " << i;
          }
        }
    }
  }
}

// As FloatMatchesDoublePrefixSums (same tolerance and reasoning; with 4096-element tiles and
// 64-tile groups the tree is no deeper than with the default), for every configuration.
TEST_F(ScanTest, EveryConfigMatchesDoublePrefixSums) {
  SCOPED_TRACE(seed_note());
  for (int config = 0; config < detail::scan_f32_config_count(); ++config) {
    SCOPED_TRACE(config_note(config));
    for (std::int64_t n : {std::int64_t{4097}, std::int64_t{1000003}, std::int64_t{(1 << 22) + 1}}) {
      const auto host = test::random_normal(n + 1, 0.1f, 1.f, rng());
      for (std::int64_t offset : {0, 1})
        for (bool exclusive : {false, true}) {
          SCOPED_TRACE(std::string(exclusive ? "exclusive" : "inclusive") + " n " + std::to_string(n) + " offset " +
                       std::to_string(offset));
          const auto got = run_config(config, host, offset, n, exclusive);
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
}

// Every configuration: two runs bitwise equal, in place equal to out of place (aligned and
// misaligned), inclusive and exclusive.
TEST_F(ScanTest, EveryConfigIsBitwiseReproducibleAndInPlaceSafe) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = (1 << 22) + 1;
  const auto host = test::random_normal(n + 1, 0.f, 1.f, rng());
  for (int config = 0; config < detail::scan_f32_config_count(); ++config) {
    SCOPED_TRACE(config_note(config));
    for (std::int64_t offset : {0, 1})
      for (bool exclusive : {false, true}) {
        SCOPED_TRACE(std::string(exclusive ? "exclusive" : "inclusive") + " offset " + std::to_string(offset));
        const auto a = run_config(config, host, offset, n, exclusive),
                   b = run_config(config, host, offset, n, exclusive);
        const auto c = run_config(config, host, offset, n, exclusive, /*in_place=*/true);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(a.data(), c.data(), n * sizeof(float)), 0);
      }
  }
}

// Configurations that differ only in how memory is accessed (register caps, early group-total
// loads, nc loads, L2 prefetch, streaming stores, tile counter vs blockIdx tile order, register vs
// shared-memory tiles with bulk copies) add the same values in the same order: same tile shape and
// group size ("t256_s8_g32"), and the same group-total readers ("_blockG": every thread, "_warpG":
// warp 0), so they must agree bit for bit. Any element read from a wrong tile, a tile prefix taken
// from the wrong totals, a block given the wrong tile or a bulk copy of the wrong bytes breaks it.
// Pairs are found by name; at least one pair must compare a "_tma" configuration with a register one.
TEST_F(ScanTest, ConfigsWithTheSameArithmeticAgreeBitwise) {
  SCOPED_TRACE(seed_note());
  auto arithmetic = [](int c) {  // "t256_s8_g32_" + "blockG" or "warpG"
    const std::string name = detail::scan_f32_config_name(c);
    std::size_t end = std::string::npos;
    for (int part = 0; part < 3; ++part) {
      end = name.find('_', end == std::string::npos ? 0 : end + 1);
      if (end == std::string::npos) return name;
    }
    const char* readers = name.find("_blockG") != std::string::npos ? "blockG" : "warpG";
    return name.substr(0, end + 1) + readers;
  };
  const std::int64_t n = (1 << 22) + 1;
  const auto host = test::random_normal(n + 1, 0.1f, 1.f, rng());
  auto tma = [](int c) { return std::string(detail::scan_f32_config_name(c)).find("_tma") != std::string::npos; };
  int pairs = 0, mixed_pairs = 0;
  for (int a = 0; a < detail::scan_f32_config_count(); ++a) {
    for (int b = a + 1; b < detail::scan_f32_config_count(); ++b) {
      if (arithmetic(a) != arithmetic(b)) continue;
      ++pairs;
      mixed_pairs += tma(a) != tma(b);
      SCOPED_TRACE(config_note(a) + " vs " + config_note(b));
      for (std::int64_t offset : {0, 1})
        for (bool exclusive : {false, true}) {
          SCOPED_TRACE(std::string(exclusive ? "exclusive" : "inclusive") + " offset " + std::to_string(offset));
          const auto x = run_config(a, host, offset, n, exclusive), y = run_config(b, host, offset, n, exclusive);
          EXPECT_EQ(std::memcmp(x.data(), y.data(), n * sizeof(float)), 0);
        }
    }
  }
  EXPECT_GE(pairs, 1) << "no two configurations share their arithmetic";
  EXPECT_GE(mixed_pairs, 1) << "no shared-memory configuration shares its arithmetic with a register one";
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
  for (int c = 0; c < detail::scan_f32_config_count(); ++c) {  // n = 0: nothing launched, output untouched
    SCOPED_TRACE(config_note(c));
    EXPECT_EQ(detail::scan_f32_config_workspace_bytes(c, 0), 0u);
    detail::scan_f32_config(f.data(), f.data(), 0, false, c, nullptr, 0, stream());
    detail::scan_f32_config(f.data(), f.data(), 0, true, c, nullptr, 0, stream());
  }
  for (float v : test::download(f, stream())) EXPECT_TRUE(std::isnan(v));
  for (int c = 0; c < detail::scan_f32_config_count(); ++c) {
    const std::size_t cbytes = detail::scan_f32_config_workspace_bytes(c, n);
    ASSERT_GT(cbytes, 0u);
    DeviceBuffer<std::byte> cws(cbytes);
    EXPECT_THROW(detail::scan_f32_config(big.data(), big.data(), n, false, c, cws.data(), cbytes - 1, stream()),
                 std::invalid_argument);
  }
  EXPECT_THROW(detail::scan_f32_config(big.data(), big.data(), n, false, detail::scan_f32_config_count(), ws.data(),
                                       bytes, stream()),
               std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
