// Historical windows of one split part: one thread per sample draws its start and copies the window
// and its labels from the part's log closes.
#include "pretrain/csv_windows.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"

namespace foxhunt::pretrain {
namespace {

constexpr int kSampleBlock = 128;

struct CsvLaunch {
  WindowBatch out;
  const double* log_close;  // (assets, bars) of the part
  const std::uint64_t* counter;
  std::uint64_t seed;
  std::int64_t batch, bars, starts;
  int assets, window, horizon, vol_horizon;
  float scale[rl::kMaxAssets];
};

__global__ void __launch_bounds__(kSampleBlock) csv_windows_kernel(CsvLaunch L) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= L.batch) return;
  const int A = L.assets, W = L.window;
  const uint4 bits = gpu::random_bits4(L.seed, static_cast<std::uint32_t>(i), *L.counter);
  const std::uint64_t r = (static_cast<std::uint64_t>(bits.x) << 32) | bits.y;
  const std::int64_t s = static_cast<std::int64_t>(__umul64hi(r, static_cast<std::uint64_t>(L.starts)));
  if (L.out.regime != nullptr) L.out.regime[i] = 0;
  for (int a = 0; a < A; ++a) {
    const double* lp = L.log_close + a * L.bars + s;
    const double scale = L.scale[a];
    if (L.out.x != nullptr)
      for (int t = 0; t < W; ++t) L.out.x[(i * W + t) * A + a] = static_cast<float>((lp[t + 1] - lp[t]) * scale);
    if (L.out.next_returns != nullptr)
      for (int h = 0; h < L.horizon; ++h)
        L.out.next_returns[(i * L.horizon + h) * A + a] = static_cast<float>((lp[W + h + 1] - lp[W + h]) * scale);
    if (L.out.realized_vol != nullptr) {
      double sq = 0.0;
      for (int h = 0; h < L.vol_horizon; ++h) {
        const float y = static_cast<float>((lp[W + h + 1] - lp[W + h]) * scale);
        sq += static_cast<double>(y) * static_cast<double>(y);
      }
      L.out.realized_vol[i * A + a] = static_cast<float>(sqrt(sq / L.vol_horizon));
    }
  }
}

}  // namespace

std::vector<double> train_return_scale(const rl::OhlcvData& bars, std::int64_t train_first, std::int64_t train_end) {
  FH_EXPECT(train_first >= 0 && train_end <= bars.bars && train_end - train_first >= 2,
            "train_return_scale: [train_first, train_end) must be >= 2 bars of the data");
  std::vector<double> scale = rl::close_volatility(bars, train_first, train_end);
  for (double& v : scale) v = 1.0 / v;
  return scale;
}

CsvWindows::CsvWindows(const rl::OhlcvData& bars, std::int64_t first_bar, std::int64_t end_bar, WindowSpec spec,
                       double return_scale, std::int64_t max_batch)
    : CsvWindows(bars, first_bar, end_bar, spec, std::vector<double>(static_cast<std::size_t>(bars.assets), return_scale),
                 max_batch) {}

CsvWindows::CsvWindows(const rl::OhlcvData& bars, std::int64_t first_bar, std::int64_t end_bar, WindowSpec spec,
                       const std::vector<double>& return_scale, std::int64_t max_batch)
    : assets_(bars.assets), first_(first_bar), end_(end_bar), max_batch_(max_batch), spec_(spec) {
  FH_EXPECT(bars.assets >= 1 && bars.assets <= rl::kMaxAssets, "CsvWindows: bars.assets must be in [1, 16]");
  FH_EXPECT(static_cast<std::int64_t>(bars.close.size()) == bars.assets * bars.bars,
            "CsvWindows: bars.close must hold assets x bars values");
  FH_EXPECT(spec.window >= 1 && spec.horizon >= 1 && spec.vol_horizon >= 1,
            "CsvWindows: spec.window, spec.horizon and spec.vol_horizon must be >= 1");
  FH_EXPECT(first_bar >= 0 && first_bar < end_bar && end_bar <= bars.bars,
            "CsvWindows: [first_bar, end_bar) must be a non-empty range of the data's " + std::to_string(bars.bars) +
                " bars");
  FH_EXPECT(max_batch >= 1 && max_batch <= (std::int64_t{1} << 31), "CsvWindows: max_batch must be in [1, 2^31]");
  FH_EXPECT(static_cast<int>(return_scale.size()) == bars.assets,
            "CsvWindows: return_scale must hold one value per asset");
  for (int a = 0; a < bars.assets; ++a) {
    FH_EXPECT(std::isfinite(return_scale[a]) && return_scale[a] > 0.0, "CsvWindows: return_scale must be finite and > 0");
    scale_[a] = static_cast<float>(return_scale[a]);
  }
  const std::int64_t n = end_bar - first_bar;
  const std::int64_t span = spec.window + std::max(spec.horizon, spec.vol_horizon);  // returns a sample reads
  starts_ = n - span;
  FH_EXPECT(starts_ >= 1, "CsvWindows: bars [first_bar, end_bar) = " + std::to_string(n) +
                              " bars hold no window with its labels (window + max(horizon, vol_horizon) + 1 = " +
                              std::to_string(span + 1) + " bars)");
  std::vector<double> lp(static_cast<std::size_t>(bars.assets * n));
  for (int a = 0; a < bars.assets; ++a)
    for (std::int64_t b = 0; b < n; ++b)
      lp[static_cast<std::size_t>(a * n + b)] =
          std::log(bars.close[static_cast<std::size_t>(a * bars.bars + first_bar + b)]);
  log_close_ = gpu::DeviceBuffer<double>(lp.size());
  log_close_.upload(std::span<const double>(lp), nullptr);
  FH_CHECK(cudaStreamSynchronize(nullptr));  // set-up: the host vector dies here
}

void CsvWindows::generate(const WindowBatch& out, std::int64_t batch, std::uint64_t seed,
                          const std::uint64_t* counter, cudaStream_t stream) const {
  FH_EXPECT(batch >= 1 && batch <= max_batch_, "CsvWindows::generate: batch must be in [1, max_batch]");
  FH_EXPECT(counter != nullptr, "CsvWindows::generate: counter must be a device uint64");
  CsvLaunch l{out,
              log_close_.data(),
              counter,
              seed,
              batch,
              end_ - first_,
              starts_,
              static_cast<int>(assets_),
              static_cast<int>(spec_.window),
              static_cast<int>(spec_.horizon),
              static_cast<int>(spec_.vol_horizon),
              {}};
  std::copy(scale_, scale_ + rl::kMaxAssets, l.scale);
  csv_windows_kernel<<<gpu::ceil_div(batch, kSampleBlock), kSampleBlock, 0, stream>>>(l);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::pretrain
