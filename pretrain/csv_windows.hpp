#pragma once
// Supervised samples of historical bars (rl/envs/ohlcv_csv.hpp), restricted to one split part
// [first_bar, end_bar) of the data: the same layouts as MarketWindows (pretrain/market_windows.hpp)
// with the log closes lp_b of the part:
//   start s (a bar), L = max(horizon, vol_horizon), s in [first_bar, end_bar - 1 - window - L]
//   y_t,a = (lp_s+t+1,a - lp_s+t,a) * scale_a, in f32 (the replay observation's arithmetic)
//   x (B, window, assets) = y_0 .. y_window-1; next_returns (B, horizon, assets) = y_window ..;
//   realized_vol (B, assets) = sqrt(mean y_t,a^2 over t = window .. window + vol_horizon - 1);
//   regime (B) = 0 (history has no known regime).
// Every window and its labels read bars s .. s + window + L, all inside the part; only the part's
// log closes are uploaded, so a bar outside it is not on the device at all (no look-ahead, and no
// window crosses a split boundary). The scale is passed in, computed from the TRAIN part only
// (train_return_scale), so no statistic of later bars enters either.
//
// Starts: the Philox block (seed, sample index, *counter) gives 64 random bits r, and
// s = first_bar + floor(r * starts / 2^64) (uniform over the starts to 2^-64). The counter is a
// device uint64 that generate() reads and does not change (as MarketWindows): a batch is a pure
// function of (seed, *counter); capturable, no scratch, no host synchronization.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gpu/buffer.hpp"
#include "pretrain/market_windows.hpp"
#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::pretrain {

// 1 / (volatility of the log closes of bars [train_first, train_end) per asset): the market replay's
// observation scale of that part (rl::close_volatility; MarketParams::ret_scale).
std::vector<double> train_return_scale(const rl::OhlcvData& bars, std::int64_t train_first, std::int64_t train_end);

class CsvWindows {
 public:
  // `return_scale`: the multiplier of every asset's log return (e.g. train_return_scale(...)[0] for
  // one asset); the second form gives one per asset. Throws std::invalid_argument naming the
  // argument (a part too short for one window with its labels among them).
  CsvWindows(const rl::OhlcvData& bars, std::int64_t first_bar, std::int64_t end_bar, WindowSpec spec,
             double return_scale, std::int64_t max_batch);
  CsvWindows(const rl::OhlcvData& bars, std::int64_t first_bar, std::int64_t end_bar, WindowSpec spec,
             const std::vector<double>& return_scale, std::int64_t max_batch);

  std::int64_t assets() const { return assets_; }
  std::int64_t regimes() const { return 1; }
  const WindowSpec& spec() const { return spec_; }
  std::int64_t first_bar() const { return first_; }
  std::int64_t end_bar() const { return end_; }
  std::int64_t starts() const { return starts_; }  // valid window starts: end - first - window - L
  std::int64_t max_batch() const { return max_batch_; }

  void generate(const WindowBatch& out, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter,
                cudaStream_t stream) const;

 private:
  std::int64_t assets_ = 0, first_ = 0, end_ = 0, starts_ = 0, max_batch_ = 0;
  WindowSpec spec_;
  float scale_[rl::kMaxAssets] = {};     // f32, as MarketParams::ret_scale
  gpu::DeviceBuffer<double> log_close_;  // (assets, end - first): the part's bars only
};

}  // namespace foxhunt::pretrain
