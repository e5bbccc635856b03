// Throughput of the reductions, the float scan and the row kernels (softmax, layernorm) against
// the device-to-device copy bandwidth measured in the same run.
// Bytes are the minimum traffic: each input read once, each output written once (reductions:
// n reads; scan, softmax, layernorm: n reads + n writes; layernorm's gamma/beta/mean/rstd,
// under 0.2% at 1024 columns, are not counted). Below 64 MB the working set sits in the
// 60 MB L2, so those rows show cache, not memory, speed; the targets apply at 1e8 elements.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/layernorm.hpp"
#include "gpu/reduce.hpp"
#include "gpu/scan.hpp"
#include "gpu/softmax.hpp"
#include "gpu/stream.hpp"

namespace fg = foxhunt::gpu;
namespace fb = foxhunt::bench;

namespace {

// Uniform in [-2, 2), never exactly zero: a splitmix64 hash of the index.
__global__ void fill_random(float* x, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x[i] = (static_cast<float>(z >> 40) + 0.5f) * (4.f / 16777216.f) - 2.f;
  }
}

void randomize(fg::DeviceBuffer<float>& buf, std::uint64_t seed, cudaStream_t stream) {
  fill_random<<<1024, 256, 0, stream>>>(buf.data(), static_cast<std::int64_t>(buf.size()), seed);
  FH_CHECK_LAUNCH();
}

struct Row {
  std::string op;
  std::int64_t elements;
  double bytes, ms;
};

constexpr std::int64_t kCols = 1024;
const std::int64_t kSizes[] = {10'000, 100'000, 1'000'000, 10'000'000, 100'000'000};

}  // namespace

int main() {
  fg::Stream stream;
  const double copy_gbs = fb::copy_bandwidth_gbs(std::size_t{1} << 30, stream);
  std::printf("device-to-device copy (1 GiB): %.1f GB/s (read + write)\n", copy_gbs);
  std::vector<Row> rows;

  for (std::int64_t n : kSizes) {
    fg::DeviceBuffer<float> in(n), out(std::max<std::int64_t>(n, 2));
    randomize(in, 1234 + n, stream);
    fg::DeviceBuffer<std::byte> ws(fg::reduce_workspace_bytes(n));
    rows.push_back({"reduce_sum", n, 4.0 * n,
                    fb::median_ms([&](int) { fg::reduce_sum(out.data(), in.data(), n, ws.data(), stream); }, stream)});
    rows.push_back(
        {"reduce_mean_var", n, 4.0 * n,
         fb::median_ms([&](int) { fg::reduce_mean_var(out.data(), out.data() + 1, in.data(), n, ws.data(), stream); },
                       stream)});
    const std::size_t scan_bytes = fg::scan_workspace_bytes<float>(n);
    fg::DeviceBuffer<std::byte> scan_ws(scan_bytes);
    rows.push_back(
        {"inclusive_scan_f32", n, 8.0 * n,
         fb::median_ms([&](int) { fg::inclusive_scan(out.data(), in.data(), n, scan_ws.data(), scan_bytes, stream); },
                       stream)});
  }
  for (std::int64_t n : kSizes) {
    const std::int64_t r = std::max<std::int64_t>(1, n / kCols), elems = r * kCols;
    fg::DeviceBuffer<float> in(elems), out(elems), gamma(kCols), beta(kCols), mean(r), rstd(r);
    randomize(in, 99 + n, stream);
    randomize(gamma, 7, stream);
    randomize(beta, 8, stream);
    rows.push_back({"softmax_forward", elems, 8.0 * elems,
                    fb::median_ms([&](int) { fg::softmax_forward(out.data(), in.data(), r, kCols, stream); }, stream)});
    rows.push_back({"layernorm_forward", elems, 8.0 * elems,
                    fb::median_ms(
                        [&](int) {
                          fg::layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), gamma.data(),
                                                beta.data(), r, kCols, 1e-5f, stream);
                        },
                        stream)});
  }
  FH_CHECK(cudaStreamSynchronize(stream));

  fb::print_rule();
  std::printf("%-20s %12s %12s %12s %10s %9s\n", "op", "elements", "bytes", "median us", "GB/s", "% copy");
  fb::print_rule();
  for (const Row& row : rows) {
    const double gbs = row.bytes / (row.ms * 1e-3) / 1e9;
    std::printf("%-20s %12lld %12.3g %12.2f %10.1f %8.1f%%%s\n", row.op.c_str(), static_cast<long long>(row.elements),
                row.bytes, row.ms * 1e3, gbs, 100.0 * gbs / copy_gbs, row.bytes < 64e6 ? "  (L2-resident)" : "");
  }
  fb::print_rule();

  struct Target {
    const char* op;
    double pct;
  };
  const Target targets[] = {{"reduce_sum", 80},
                            {"reduce_mean_var", 80},
                            {"inclusive_scan_f32", 70},
                            {"softmax_forward", 70},
                            {"layernorm_forward", 70}};
  for (const Target& t : targets) {
    const Row* largest = nullptr;
    for (const Row& row : rows)
      if (row.op == t.op && (!largest || row.elements > largest->elements)) largest = &row;
    const double pct = 100.0 * (largest->bytes / (largest->ms * 1e-3) / 1e9) / copy_gbs;
    std::printf("TARGET %s: %.1f%% of copy (target >= %.0f%%): %s\n", t.op, pct, t.pct, pct >= t.pct ? "PASS" : "FAIL");
  }
  return 0;
}
