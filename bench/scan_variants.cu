// Compares the configurations of the deterministic f32 scan (gpu/scan.cu, ScanCfgs: one tile per
// block; "_pf": L2 prefetch ahead, "_bidx": blockIdx tile order, "_tma": the tile bulk-copied into
// shared memory, 6 or 12 blocks per SM, "_bst": bulk stores from shared memory) with
// each other and with cub::DeviceScan::InclusiveSum on float (faster to write, but NOT bitwise
// reproducible for floats: its look-back order depends on timing), at 1e7 and 1e8 elements.
//
// First every configuration is checked, so a broken variant is visible in the same run:
//   n = 1e6 + 3, uniform [-2, 2): inclusive, exclusive, in place and misaligned (offset 1)
//     against a double host prefix sum, |err| <= 1e-5 * sum|x| so far (the rounding bound of
//     a fixed tree ~50 deep is ~3e-6 of it); and two runs bitwise equal;
//   n = 1e8, integers in [-8, 8] stored as float: every partial sum of any grouping stays far
//     below 2^24, so the float scan must equal an exact int32 scan (CUB) element for element.
//     At this size the look-back reads several batches of group totals, which 1e6 does not.
// Then the timings: bytes = 8n (n reads + n writes), median of 25 runs, % of the 1 GiB
// device-to-device copy measured here. The last line names the fastest correct configuration
// at 1e8: "BEST <name>".
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/scan.hpp"
#include "gpu/stream.hpp"

namespace fg = foxhunt::gpu;
namespace fb = foxhunt::bench;

namespace {

__device__ std::uint64_t hash64(std::uint64_t seed, std::int64_t i) {  // splitmix64
  std::uint64_t z = seed + static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-2, 2), never exactly zero.
__global__ void fill_random(float* x, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = (static_cast<float>(hash64(seed, i) >> 40) + 0.5f) * (4.f / 16777216.f) - 2.f;
}

// Integers in [-8, 8] (zero mean, so running sums stay ~5 sqrt(n)), as float and as int32.
__global__ void fill_small_ints(float* f, std::int32_t* k, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t v = static_cast<std::int32_t>(hash64(seed, i) % 17) - 8;
    f[i] = static_cast<float>(v);
    k[i] = v;
  }
}

__global__ void count_mismatches(unsigned long long* bad, const float* got, const std::int32_t* want, std::int64_t n) {
  unsigned long long mine = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    mine += got[i] != static_cast<float>(want[i]);
  if (mine) atomicAdd(bad, mine);
}

template <class T>
std::vector<T> to_host(const T* d, std::int64_t n, cudaStream_t stream) {
  std::vector<T> h(static_cast<std::size_t>(n));
  FH_CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  FH_CHECK(cudaStreamSynchronize(stream));
  return h;
}

// Max over i of |got[i] - ref[i]| / (1e-5 * scale[i]); <= 1 passes.
double worst_ratio(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& scale) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double r = std::abs(static_cast<double>(got[i]) - ref[i]) / (1e-5 * scale[i] + 1e-30);
    worst = std::max(worst, std::isnan(r) ? 1e30 : r);
  }
  return worst;
}

struct Variant {
  std::string name;
  int config;  // -1: CUB
  bool ok = true;
  double ms[2] = {0, 0};
};

const std::int64_t kTimedSizes[] = {10'000'000, 100'000'000};

}  // namespace

int main() {
  fg::Stream stream;
  const double copy_gbs = fb::copy_bandwidth_gbs(std::size_t{1} << 30, stream);
  std::printf("device-to-device copy (1 GiB): %.1f GB/s (read + write)\n", copy_gbs);

  const int configs = fg::detail::scan_f32_config_count();
  std::vector<Variant> variants;
  for (int c = 0; c < configs; ++c) variants.push_back({fg::detail::scan_f32_config_name(c), c});
  variants.push_back({"cub_InclusiveSum_f32 (NOT reproducible)", -1});

  // ---- correctness ----------------------------------------------------------------------------
  {
    const std::int64_t n = 1'000'003;
    fg::DeviceBuffer<float> in(n + 1), out(n + 1), tmp(n + 1);
    fill_random<<<1024, 256, 0, stream>>>(in.data(), n + 1, 42);
    FH_CHECK_LAUNCH();
    const auto x = to_host(in.data(), n + 1, stream);
    // Reference prefix sums starting at offset 0 and at offset 1.
    std::vector<double> incl[2], excl[2], abs_incl[2], abs_excl[2];
    for (int o = 0; o < 2; ++o) {
      double acc = 0, abs_acc = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        excl[o].push_back(acc);
        abs_excl[o].push_back(abs_acc);
        acc += x[o + i];
        abs_acc += std::abs(x[o + i]);
        incl[o].push_back(acc);
        abs_incl[o].push_back(abs_acc);
      }
    }
    std::size_t ws_max = 0;
    for (int c = 0; c < configs; ++c)
      ws_max = std::max(ws_max, fg::detail::scan_f32_config_workspace_bytes(c, std::int64_t{100'000'000}));
    fg::DeviceBuffer<std::byte> ws(std::max<std::size_t>(ws_max, 8));

    std::printf("correctness (n = %lld random, n = 1e8 small integers exact):\n", static_cast<long long>(n));
    for (Variant& v : variants) {
      if (v.config < 0) continue;
      const int c = v.config;
      const std::size_t bytes = fg::detail::scan_f32_config_workspace_bytes(c, n + 1);
      auto scan = [&](float* o, const float* i, std::int64_t m, bool exclusive) {
        FH_CHECK(cudaMemsetAsync(o, 0xFF, m * sizeof(float), stream));  // NaN poison
        fg::detail::scan_f32_config(o, i, m, exclusive, c, ws.data(), bytes, stream);
      };
      double worst = 0;
      scan(out.data(), in.data(), n, false);
      const auto a = to_host(out.data(), n, stream);
      worst = std::max(worst, worst_ratio(a, incl[0], abs_incl[0]));
      scan(out.data(), in.data(), n, false);
      const bool same = std::memcmp(a.data(), to_host(out.data(), n, stream).data(), n * sizeof(float)) == 0;
      scan(out.data(), in.data(), n, true);
      worst = std::max(worst, worst_ratio(to_host(out.data(), n, stream), excl[0], abs_excl[0]));
      scan(out.data() + 1, in.data() + 1, n, false);  // misaligned: the scalar path
      worst = std::max(worst, worst_ratio(to_host(out.data() + 1, n, stream), incl[1], abs_incl[1]));
      FH_CHECK(cudaMemcpyAsync(tmp.data(), in.data(), (n + 1) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      fg::detail::scan_f32_config(tmp.data(), tmp.data(), n, true, c, ws.data(), bytes, stream);  // in place
      worst = std::max(worst, worst_ratio(to_host(tmp.data(), n, stream), excl[0], abs_excl[0]));
      v.ok = worst <= 1.0 && same;
      std::printf("  %-44s random: worst err %.3f of tolerance, repeat %s\n", v.name.c_str(), worst,
                  same ? "bitwise equal" : "DIFFERS");
    }
  }
  {
    const std::int64_t n = 100'000'000;
    fg::DeviceBuffer<float> f(n), out(n);
    fg::DeviceBuffer<std::int32_t> k(n), kref(n);
    fg::DeviceBuffer<unsigned long long> bad(1);
    fill_small_ints<<<4096, 256, 0, stream>>>(f.data(), k.data(), n, 7);
    FH_CHECK_LAUNCH();
    std::size_t cub_bytes = 0;
    FH_CHECK(cub::DeviceScan::InclusiveSum(nullptr, cub_bytes, k.data(), kref.data(), static_cast<int>(n), stream));
    std::size_t ws_bytes = cub_bytes;
    for (int c = 0; c < configs; ++c) ws_bytes = std::max(ws_bytes, fg::detail::scan_f32_config_workspace_bytes(c, n));
    fg::DeviceBuffer<std::byte> ws(ws_bytes);
    FH_CHECK(cub::DeviceScan::InclusiveSum(ws.data(), cub_bytes, k.data(), kref.data(), static_cast<int>(n), stream));
    for (Variant& v : variants) {
      if (v.config < 0) continue;
      FH_CHECK(cudaMemsetAsync(out.data(), 0xFF, n * sizeof(float), stream));
      FH_CHECK(cudaMemsetAsync(bad.data(), 0, sizeof(unsigned long long), stream));
      fg::detail::scan_f32_config(out.data(), f.data(), n, false, v.config, ws.data(),
                                  fg::detail::scan_f32_config_workspace_bytes(v.config, n), stream);
      count_mismatches<<<4096, 256, 0, stream>>>(bad.data(), out.data(), kref.data(), n);
      FH_CHECK_LAUNCH();
      const unsigned long long mismatches = to_host(bad.data(), 1, stream)[0];
      v.ok = v.ok && mismatches == 0;
      std::printf("  %-44s 1e8 integers: %llu mismatches   => %s\n", v.name.c_str(), mismatches, v.ok ? "OK" : "FAIL");
    }
  }

  // ---- timing ---------------------------------------------------------------------------------
  for (int s = 0; s < 2; ++s) {
    const std::int64_t n = kTimedSizes[s];
    fg::DeviceBuffer<float> in(n), out(n);
    fill_random<<<4096, 256, 0, stream>>>(in.data(), n, 1234 + n);
    FH_CHECK_LAUNCH();
    std::size_t cub_bytes = 0;
    FH_CHECK(cub::DeviceScan::InclusiveSum(nullptr, cub_bytes, in.data(), out.data(), static_cast<int>(n), stream));
    std::size_t ws_bytes = cub_bytes;
    for (int c = 0; c < configs; ++c) ws_bytes = std::max(ws_bytes, fg::detail::scan_f32_config_workspace_bytes(c, n));
    fg::DeviceBuffer<std::byte> ws(ws_bytes);
    for (Variant& v : variants) {
      if (v.config < 0) {
        v.ms[s] = fb::median_ms(
            [&](int) {
              std::size_t bytes = cub_bytes;
              FH_CHECK(
                  cub::DeviceScan::InclusiveSum(ws.data(), bytes, in.data(), out.data(), static_cast<int>(n), stream));
            },
            stream);
      } else {
        const std::size_t bytes = fg::detail::scan_f32_config_workspace_bytes(v.config, n);
        v.ms[s] = fb::median_ms(
            [&](int) {
              fg::detail::scan_f32_config(out.data(), in.data(), n, false, v.config, ws.data(), bytes, stream);
            },
            stream);
      }
    }
  }

  fb::print_rule(114);
  std::printf("%-44s %5s", "config (inclusive f32, out of place)", "check");
  for (std::int64_t n : kTimedSizes) std::printf(" | n=%-9.0e %8s %7s", static_cast<double>(n), "GB/s", "% copy");
  std::printf("\n");
  fb::print_rule(114);
  const Variant* best[2] = {nullptr, nullptr};
  for (const Variant& v : variants) {
    std::printf("%-44s %5s", v.name.c_str(), v.config < 0 ? "-" : v.ok ? "OK" : "FAIL");
    for (int s = 0; s < 2; ++s) {
      const double gbs = 8.0 * kTimedSizes[s] / (v.ms[s] * 1e-3) / 1e9;
      std::printf(" | %8.1fus %8.1f %6.1f%%", v.ms[s] * 1e3, gbs, 100.0 * gbs / copy_gbs);
      if (v.config >= 0 && v.ok && (!best[s] || v.ms[s] < best[s]->ms[s])) best[s] = &v;
    }
    std::printf("%s\n", v.config == fg::detail::scan_f32_default_config() ? "  (current default)" : "");
  }
  fb::print_rule(114);
  bool all_ok = true;
  for (const Variant& v : variants) all_ok = all_ok && v.ok;
  std::printf("ALL CONFIGS CORRECT: %s\n", all_ok ? "yes" : "NO");
  if (best[0]) std::printf("best at 1e7: %s\n", best[0]->name.c_str());
  if (best[1]) {
    const double pct = 100.0 * (8.0 * kTimedSizes[1] / (best[1]->ms[1] * 1e-3) / 1e9) / copy_gbs;
    std::printf("TARGET inclusive_scan_f32 (best config): %.1f%% of copy (target >= 70%%): %s\n", pct,
                pct >= 70 ? "PASS" : "FAIL");
    std::printf("BEST %s\n", best[1]->name.c_str());
  } else {
    std::printf("BEST none (no configuration passed)\n");
  }
  return all_ok ? 0 : 1;
}
