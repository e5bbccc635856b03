// The market environment's kernels. A step is two launches:
//   step_kernel  one thread per environment: execution, accounting, price move, reward,
//                statistics; writes the newest returns into the environment's ring and the
//                observation tail (weights, unrealized PnL, progress, log equity); on an episode
//                end writes final_obs (from the ring and tail, before the reset) and resets.
//   obs_kernel   one thread per observation element: gathers the window from the ring in time
//                order and writes every row contiguously (coalesced), f32 or bf16.
// Per-asset loops run to a compile-time bound MaxA (1, 4, 8 or 16, guarded by the runtime asset
// count) so that the per-asset arrays live in registers.
#include "rl/envs/market.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/envs/episode_stats.cuh"
#include "rl/envs/market_generator.hpp"
#include "rl/envs/market_process.cuh"
#include "rl/envs/obs_store.cuh"
#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::rl {
namespace {

constexpr int kEnvBlock = 128;

// Philox counters: steps use (counter << 4 | block); resets use the top bit, the step counter at
// the reset and the burn-in step j (< 1024: j < window for burn-in steps, window for the initial
// normals, window + 1 for the initial regime and replay offset), so no two draws share a block.
__device__ __forceinline__ std::uint64_t step_base(std::uint64_t c) { return c << 4; }
__device__ __forceinline__ std::uint64_t reset_base(std::uint64_t c, int j) {
  return (std::uint64_t{1} << 63) | (c << 14) | (static_cast<std::uint64_t>(j) << 4);
}

// The price-level column of asset a (observation.price_level): how far the log price x stands from
// where the law pulls it, in units of its natural spread. OU: (x - OU mean) / stationary sd, the
// state the OU oracle trades on; GBM: (x - log S0) / (step vol sqrt(episode length)). Both from the
// current regime's parameters; 0 when that spread is 0 (sigma = 0).
__device__ __forceinline__ float price_level(const MarketParams& p, double x, int regime, int a) {
  const int k = regime * kMaxAssets + a;
  const bool ou = p.process == static_cast<int>(PriceProcess::ou);
  const double mean = ou ? p.mean[k] : p.log_initial_price[a];
  const double sd =
      ou ? static_cast<double>(p.stationary_sd[k]) : p.step_vol[k] * sqrt(static_cast<double>(p.episode_length));
  return sd > 0.0 ? static_cast<float>((x - mean) / sd) : 0.0f;
}

// Observation element j of environment i (episode step `step`), from the ring, the tail, the
// extra block and (price levels) the state's log price and regime.
__device__ __forceinline__ float obs_value(const MarketState& st, const MarketParams& p, std::int64_t i, std::int64_t n,
                                           int step, int j, const float* extra) {
  const int A = p.assets, W = p.window, WA = W * A;
  if (j < WA) {
    const int k = j / A;  // time, 0 = oldest
    const int a = j - k * A;
    const int slot = (step + k) % W;
    return st.ring[(i * W + slot) * A + a];
  }
  j -= WA;
  if (j < A + 3) return st.tail[i * (A + 3) + j];
  j -= A + 3;
  if (j < p.extra_features) return extra != nullptr ? extra[i * p.extra_features + j] : 0.0f;
  j -= p.extra_features;  // price level of asset j
  return price_level(p, st.log_price[static_cast<std::int64_t>(j) * n + i], st.regime[i], j);
}

// A fresh episode for environment i: regime from the stationary law, `window` steps of history
// (simulated, or the real bars before a random offset), flat book, cash = initial_cash.
// Rotates the n vectors of `a` floats at v left by s (the vector at s comes first): three reversals.
__device__ void reverse_vectors(float* v, int a, int lo, int hi) {
  for (--hi; lo < hi; ++lo, --hi)
    for (int k = 0; k < a; ++k) {
      const float t = v[lo * a + k];
      v[lo * a + k] = v[hi * a + k];
      v[hi * a + k] = t;
    }
}
__device__ void rotate_vectors(float* v, int a, int n, int s) {
  if (s == 0) return;
  reverse_vectors(v, a, 0, s);
  reverse_vectors(v, a, s, n);
  reverse_vectors(v, a, 0, n);
}

// `ring_start`: the ring slot of the oldest return at an episode end (episode_step mod window; 0
// for reset()); a generated market's returns continue into the next episode, so its ring is
// rotated to start at slot 0 (the others refill the ring).
template <int MaxA>
__device__ void reset_env(const MarketState& st, const MarketParams& p, std::uint64_t seed, std::int64_t i,
                          std::int64_t n, std::uint64_t c, int ring_start) {
  const int A = p.assets, W = p.window;
  const std::uint32_t env = static_cast<std::uint32_t>(i);
  // Burn-in steps use reset_base(c, 0 .. W-1); the initial draws use W (normals) and W + 1.
  const float4 u = gpu::uniform4(seed, env, reset_base(c, W + 1));
  int regime = sample_cdf(p.stationary_cdf, p.regimes, u.x);
  float* ring = st.ring + i * W * A;
  double x[MaxA];
#pragma unroll
  for (int a = 0; a < MaxA; ++a) x[a] = 0.0;
  std::int64_t bar = 0;
  if (p.process == static_cast<int>(PriceProcess::replay)) {
    const std::int64_t span = p.replay_bars - p.episode_length - W;  // >= 1, checked on the host
    std::int64_t off = static_cast<std::int64_t>(static_cast<double>(u.y) * static_cast<double>(span));
    if (off >= span) off = span - 1;
    bar = W + off;
    for (int j = 0; j < W; ++j)
      for (int a = 0; a < A; ++a) {
        const double* lp = p.replay_log_price + a * p.replay_bars;
        ring[j * A + a] = static_cast<float>((lp[bar - W + j + 1] - lp[bar - W + j]) * p.ret_scale[a]);
      }
#pragma unroll
    for (int a = 0; a < MaxA; ++a)
      if (a < A) x[a] = p.replay_log_price[a * p.replay_bars + bar];
  } else if (p.process == static_cast<int>(PriceProcess::generated)) {
    rotate_vectors(ring, A, W, ring_start);
#pragma unroll
    for (int a = 0; a < MaxA; ++a)
      if (a < A) x[a] = p.log_initial_price[a];
  } else {
    const bool ou = p.process == static_cast<int>(PriceProcess::ou);
#pragma unroll
    for (int b = 0; b < (MaxA + 3) / 4; ++b) {
      if (4 * b < A) {
        const float4 z = gpu::normal4(seed, env, reset_base(c, W) | static_cast<std::uint64_t>(b));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int a = 4 * b + k;
          if (a < MaxA && a < A) {
            const int idx = regime * kMaxAssets + a;
            x[a] = ou ? p.mean[idx] + static_cast<double>(p.stationary_sd[idx]) * lane(z, k) : p.log_initial_price[a];
          }
        }
      }
    }
    for (int j = 0; j < W; ++j) {
      double prev[MaxA];
#pragma unroll
      for (int a = 0; a < MaxA; ++a) prev[a] = x[a];
      advance_prices<MaxA>(x, regime, p, seed, env, reset_base(c, j));
#pragma unroll
      for (int a = 0; a < MaxA; ++a)
        if (a < A) ring[j * A + a] = static_cast<float>((x[a] - prev[a]) * p.ret_scale[a]);
    }
    if (!ou) {
#pragma unroll
      for (int a = 0; a < MaxA; ++a) x[a] = p.log_initial_price[a];  // GBM: the episode starts at S0
    }
  }
#pragma unroll
  for (int a = 0; a < MaxA; ++a) {
    if (a < A) {
      st.log_price[a * n + i] = x[a];
      st.holdings[a * n + i] = 0.0;
      st.cost_basis[a * n + i] = 0.0;
    }
  }
  st.cash[i] = p.initial_cash;
  st.peak_equity[i] = p.initial_cash;
  st.dsr_a[i] = 0.0;
  st.dsr_b[i] = 0.0;
  st.sum_ret[i] = 0.0;
  st.sum_ret_sq[i] = 0.0;
  st.max_drawdown[i] = 0.0;
  st.turnover[i] = 0.0;
  st.episode_reward[i] = 0.0;
  st.trades[i] = 0;
  st.regime[i] = regime;
  st.episode_step[i] = 0;
  st.bar[i] = bar;
  float* tail = st.tail + i * (A + 3);
  for (int k = 0; k < A + 3; ++k) tail[k] = 0.0f;
}

template <int MaxA>
__global__ void __launch_bounds__(kEnvBlock)
    reset_kernel(MarketState st, MarketParams p, std::uint64_t seed, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  reset_env<MaxA>(st, p, seed, i, n, 0, 0);
  st.counter[i] = 0;
  st.accum[i] = EpisodeAccum{};
}

template <int MaxA, class ObsT>
__global__ void __launch_bounds__(kEnvBlock)
    step_kernel(ObsT* final_obs, float* reward_out, std::uint8_t* terminated, std::uint8_t* truncated, MarketState st,
                MarketParams p, MarketTrace trace, const std::int32_t* discrete, const float* continuous,
                const float* extra, std::uint64_t seed, std::int64_t n, std::int64_t row0) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int A = p.assets;
  const std::int64_t row = row0 + i;

  double x[MaxA], q[MaxA], cb[MaxA], S[MaxA], w[MaxA];
  bool hold[MaxA];
  double cash = st.cash[i];
  double equity = cash;
#pragma unroll
  for (int a = 0; a < MaxA; ++a) {
    x[a] = q[a] = cb[a] = S[a] = w[a] = 0.0;
    hold[a] = true;
    if (a < A) {
      x[a] = st.log_price[a * n + i];
      q[a] = st.holdings[a * n + i];
      cb[a] = st.cost_basis[a * n + i];
      S[a] = exp(x[a]);
      equity += q[a] * S[a];
    }
  }
  int regime = st.regime[i];
  int step = st.episode_step[i];
  const std::uint64_t c = st.counter[i] + 1;

  // Targets: level x limit (discrete) or clamp(value) x limit (continuous); -1 / NaN holds.
  double gross_held = 0.0, gross_free = 0.0;
#pragma unroll
  for (int a = 0; a < MaxA; ++a) {
    if (a < A) {
      bool h;
      double target;
      if (p.action == static_cast<int>(ActionMode::discrete)) {
        int idx = discrete[row * A + a];
        h = idx == -1;
        idx = idx < 0 ? 0 : (idx >= p.num_levels ? p.num_levels - 1 : idx);
        target = p.levels[idx] * p.position_limit;
      } else {
        const float v = continuous[row * A + a];
        h = isnan(v);
        target = h ? 0.0 : fmin(fmax(static_cast<double>(v), -1.0), 1.0) * p.position_limit;
      }
      hold[a] = h;
      w[a] = target;
      if (h)
        gross_held += equity > 0.0 ? fabs(q[a] * S[a]) / equity : 0.0;
      else
        gross_free += fabs(target);
    }
  }
  if (gross_held + gross_free > p.leverage_cap && gross_free > 0.0) {
    const double scale = fmax(p.leverage_cap - gross_held, 0.0) / gross_free;
#pragma unroll
    for (int a = 0; a < MaxA; ++a) w[a] *= scale;  // held assets ignore w
  }

  // Execution at the mid price moved by half-spread and impact; fees on the mid notional.
  double step_turnover = 0.0, step_cost = 0.0;
  int step_trades = 0;
#pragma unroll
  for (int a = 0; a < MaxA; ++a) {
    if (a < A && !hold[a]) {
      const double target_q = equity > 0.0 ? w[a] * equity / S[a] : 0.0;
      const double dq = target_q - q[a];
      if (dq != 0.0) {
        const double notional = fabs(dq) * S[a];
        const double vol = p.step_vol[regime * kMaxAssets + a];
        const double slip = p.slippage * vol * sqrt(notional * p.inv_liquidity);
        const double sgn = dq > 0.0 ? 1.0 : -1.0;
        const double px = S[a] * (1.0 + sgn * (p.half_spread + slip));
        const double fee = p.fee_rate * notional;
        cash -= dq * px + fee;
        step_cost += notional * (p.half_spread + slip) + fee;  // dq (px - S) + fee: what the trade lost
        if (q[a] == 0.0 || (q[a] > 0.0) == (dq > 0.0)) {
          cb[a] = (q[a] * cb[a] + dq * px) / target_q;  // opened or added: average entry price
        } else if (target_q == 0.0) {
          cb[a] = 0.0;  // closed
        } else if ((target_q > 0.0) != (q[a] > 0.0)) {
          cb[a] = px;  // flipped: the new position was entered at px
        }              // reduced: the basis of what is left is unchanged
        if (equity > 0.0) step_turnover += notional / equity;
        ++step_trades;
        q[a] = target_q;
      }
    }
  }
  double short_notional = 0.0;
#pragma unroll
  for (int a = 0; a < MaxA; ++a)
    if (a < A && q[a] < 0.0) short_notional -= q[a] * S[a];
  cash -= p.borrow_per_step * short_notional;  // as written: a contraction into an FMA stays the same
  const double step_borrow = p.borrow_per_step * short_notional;

  // Prices move.
  double xprev[MaxA];
#pragma unroll
  for (int a = 0; a < MaxA; ++a) xprev[a] = x[a];
  std::int64_t bar = st.bar[i];
  // A generated market's return k of this environment's stream (rl/envs/market_generator.hpp),
  // normalized by 1 / step_vol: the log price moves by y step_vol.
  float gen[MaxA];
#pragma unroll
  for (int a = 0; a < MaxA; ++a) gen[a] = 0.0f;
  const bool generated = p.process == static_cast<int>(PriceProcess::generated);
  if (p.process == static_cast<int>(PriceProcess::replay)) {
    ++bar;
#pragma unroll
    for (int a = 0; a < MaxA; ++a)
      if (a < A) x[a] = p.replay_log_price[a * p.replay_bars + bar];
  } else if (generated) {
    const std::uint64_t k = *st.gen_step;
    const std::int64_t slot = static_cast<std::int64_t>(k % static_cast<std::uint64_t>(2 * st.gen_window));
    const float* y = st.gen_returns + (i * 2 * st.gen_window + slot) * A;
#pragma unroll
    for (int a = 0; a < MaxA; ++a) {
      if (a < A) {
        gen[a] = y[a];
        x[a] += static_cast<double>(gen[a]) * p.step_vol[a];
      }
    }
  } else {
    advance_prices<MaxA>(x, regime, p, seed, static_cast<std::uint32_t>(i), step_base(c));
  }
  double equity_new = cash;
#pragma unroll
  for (int a = 0; a < MaxA; ++a) {
    if (a < A) {
      S[a] = exp(x[a]);
      equity_new += q[a] * S[a];
    }
  }

  // Reward.
  const double ret = equity > 0.0 ? equity_new / equity - 1.0 : 0.0;
  double reward;
  if (p.reward == static_cast<int>(RewardKind::pnl)) {
    reward = (equity_new - equity) / p.initial_cash;
  } else if (p.reward == static_cast<int>(RewardKind::log_return)) {
    reward = log(fmax(equity > 0.0 ? equity_new / equity : 0.0, 1e-12));
  } else {
    const double a0 = st.dsr_a[i], b0 = st.dsr_b[i];
    const double da = ret - a0, db = ret * ret - b0;
    const double var = b0 - a0 * a0;
    reward = var > 1e-12 ? (b0 * da - 0.5 * a0 * db) / (var * sqrt(var)) : 0.0;
    st.dsr_a[i] = a0 + p.sharpe_eta * da;
    st.dsr_b[i] = b0 + p.sharpe_eta * db;
  }
  const double peak = fmax(st.peak_equity[i], equity_new);
  const double drawdown = peak > 0.0 ? 1.0 - equity_new / peak : 0.0;
  reward -= p.drawdown_penalty * drawdown + p.turnover_penalty * step_turnover;
  reward *= p.reward_scale;  // reward.scale: what the agent sees, and what the episode return sums

  const double sum_ret = st.sum_ret[i] + ret;
  const double sum_ret_sq = st.sum_ret_sq[i] + ret * ret;
  const double max_dd = fmax(st.max_drawdown[i], drawdown);
  const double turnover = st.turnover[i] + step_turnover;
  const std::int32_t trades = st.trades[i] + step_trades;
  const double episode_reward = st.episode_reward[i] + reward;

  // Observation parts: the newest returns into the ring, the tail.
  const int W = p.window;
  float* ring = st.ring + (i * W + step % W) * A;
#pragma unroll
  for (int a = 0; a < MaxA; ++a)
    if (a < A) ring[a] = generated ? gen[a] : static_cast<float>((x[a] - xprev[a]) * p.ret_scale[a]);
  ++step;
  float* tail = st.tail + i * (A + 3);
  const double inv_e = equity_new > 0.0 ? 1.0 / equity_new : 0.0;
  double upnl = 0.0;
#pragma unroll
  for (int a = 0; a < MaxA; ++a) {
    if (a < A) {
      tail[a] = static_cast<float>(q[a] * S[a] * inv_e);
      upnl += q[a] * (S[a] - cb[a]);
    }
  }
  tail[A] = static_cast<float>(upnl * inv_e);
  tail[A + 1] = static_cast<float>(static_cast<double>(step) / p.episode_length);
  tail[A + 2] = static_cast<float>(equity_new > 0.0 ? log(equity_new / p.initial_cash) : -30.0);

  // State.
#pragma unroll
  for (int a = 0; a < MaxA; ++a) {
    if (a < A) {
      st.log_price[a * n + i] = x[a];
      st.holdings[a * n + i] = q[a];
      st.cost_basis[a * n + i] = cb[a];
    }
  }
  st.cash[i] = cash;
  st.peak_equity[i] = peak;
  st.sum_ret[i] = sum_ret;
  st.sum_ret_sq[i] = sum_ret_sq;
  st.max_drawdown[i] = max_dd;
  st.turnover[i] = turnover;
  st.trades[i] = trades;
  st.episode_reward[i] = episode_reward;
  st.regime[i] = regime;
  st.episode_step[i] = step;
  st.bar[i] = bar;
  st.counter[i] = c;

  const bool term = equity_new < p.min_equity_cash;
  const bool trunc = step >= p.episode_length;
  if (c <= static_cast<std::uint64_t>(trace.steps)) {
    const std::int64_t r = static_cast<std::int64_t>(c - 1) * n + i;
    trace.equity[r] = equity_new;
    trace.cost[r] = step_cost;
    trace.borrow[r] = step_borrow;
    trace.turnover[r] = step_turnover;
    trace.trades[r] = step_trades;
    trace.ended[r] = term ? kTraceTerminated : (trunc ? kTraceTruncated : 0);
#pragma unroll
    for (int a = 0; a < MaxA; ++a)
      if (a < A) trace.weight[r * A + a] = tail[a];
  }
  reward_out[row] = static_cast<float>(reward);
  terminated[row] = term ? 1 : 0;
  truncated[row] = trunc ? 1 : 0;
  if (term || trunc) {
    if (final_obs != nullptr) {
      ObsT* f = final_obs + row * p.obs_dim;
      for (int j = 0; j < p.obs_dim; ++j) store_obs(f + j, obs_value(st, p, i, n, step, j, extra));
    }
    const double len = step;
    const double mean = sum_ret / len;
    const double var = sum_ret_sq / len - mean * mean;
    const double sharpe = var > 1e-14 * (sum_ret_sq / len) && var > 0.0 ? mean / sqrt(var) * p.annualize : 0.0;
    EpisodeAccum* acc = st.accum + i;
    record_episode(acc, episode_reward, len);
    record_market_episode(acc, equity_new / p.initial_cash - 1.0, sharpe, max_dd, turnover, trades);
    reset_env<MaxA>(st, p, seed, i, n, c, step % p.window);
  }
}

template <class ObsT>
__global__ void obs_kernel(ObsT* obs, MarketState st, MarketParams p, const float* extra, std::int64_t n) {
  const std::int64_t d = p.obs_dim;
  const std::int64_t total = n * d;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const bool narrow = total < (std::int64_t{1} << 32);  // 32-bit division is several times cheaper
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    std::int64_t i;
    if (narrow) {
      i = static_cast<std::uint32_t>(e) / static_cast<std::uint32_t>(d);
    } else {
      i = e / d;
    }
    const int j = static_cast<int>(e - i * d);
    store_obs(obs + e, obs_value(st, p, i, n, st.episode_step[i], j, extra));
  }
}

template <class ObsT>
void launch_obs(ObsT* obs, const MarketState& st, const MarketParams& p, const float* extra, std::int64_t n,
                cudaStream_t stream) {
  obs_kernel<<<gpu::grid_stride_blocks(n * p.obs_dim), gpu::kBlock, 0, stream>>>(obs, st, p, extra, n);
  FH_CHECK_LAUNCH();
}

template <int MaxA>
void launch_reset(const MarketState& st, const MarketParams& p, std::uint64_t seed, std::int64_t n,
                  cudaStream_t stream) {
  reset_kernel<MaxA><<<gpu::ceil_div(n, kEnvBlock), kEnvBlock, 0, stream>>>(st, p, seed, n);
  FH_CHECK_LAUNCH();
}

template <int MaxA, class ObsT>
void launch_step(ObsT* final_obs, const StepOutputs& out, const MarketState& st, const MarketParams& p,
                 const MarketTrace& trace, const ActionInput& actions, const float* extra, std::uint64_t seed,
                 std::int64_t n, std::int64_t row0, cudaStream_t stream) {
  step_kernel<MaxA, ObsT><<<gpu::ceil_div(n, kEnvBlock), kEnvBlock, 0, stream>>>(
      final_obs, out.reward, out.terminated, out.truncated, st, p, trace, actions.discrete, actions.continuous, extra,
      seed, n, row0);
  FH_CHECK_LAUNCH();
}

template <class ObsT>
void step_dispatch(ObsT* final_obs, const StepOutputs& out, const MarketState& st, const MarketParams& p,
                   const MarketTrace& trace, const ActionInput& actions, const float* extra, std::uint64_t seed,
                   std::int64_t n, std::int64_t row0, cudaStream_t stream) {
  if (p.assets <= 1)
    launch_step<1>(final_obs, out, st, p, trace, actions, extra, seed, n, row0, stream);
  else if (p.assets <= 4)
    launch_step<4>(final_obs, out, st, p, trace, actions, extra, seed, n, row0, stream);
  else if (p.assets <= 8)
    launch_step<8>(final_obs, out, st, p, trace, actions, extra, seed, n, row0, stream);
  else
    launch_step<16>(final_obs, out, st, p, trace, actions, extra, seed, n, row0, stream);
}

std::size_t count_of(std::int64_t n) { return static_cast<std::size_t>(n > 0 ? n : 0); }

}  // namespace

MarketEnv::MarketEnv(const MarketConfig& config, std::int64_t num_envs, const OhlcvData* replay)
    : config_(config), n_(num_envs), stats_workspace_(episode_stats_workspace_bytes()) {
  FH_EXPECT(num_envs >= 1 && num_envs <= (std::int64_t{1} << 31), "MarketEnv: num_envs must be in [1, 2^31]");
  validate(config_);
  const int A = config_.assets;
  if (config_.process == PriceProcess::replay) {
    FH_EXPECT(replay != nullptr, "MarketEnv: process.kind = \"replay\" needs the loaded OHLCV data (load_ohlcv)");
    FH_EXPECT(replay->assets == A && static_cast<std::int64_t>(replay->close.size()) == A * replay->bars,
              "MarketEnv: replay data must hold market.assets close series of `bars` values");
    std::vector<double> lp(replay->close.size());
    for (std::size_t k = 0; k < lp.size(); ++k) lp[k] = std::log(replay->close[k]);
    replay_log_price_ = gpu::DeviceBuffer<double>(lp.size());
    replay_log_price_.upload(std::span<const double>(lp), nullptr);
    FH_CHECK(cudaStreamSynchronize(nullptr));  // set-up: the host vector dies here
  }
  params_ = make_market_params(config_, replay, replay_log_price_.data());
  obs_dim_ = params_.obs_dim;

  const std::size_t n = count_of(num_envs);
  const std::size_t per_asset = static_cast<std::size_t>(A) * n;
  f64_ = gpu::DeviceBuffer<double>(3 * per_asset + 9 * n);
  i32_ = gpu::DeviceBuffer<std::int32_t>(3 * n);
  bar_ = gpu::DeviceBuffer<std::int64_t>(n);
  counter_ = gpu::DeviceBuffer<std::uint64_t>(n);
  ring_ = gpu::DeviceBuffer<float>(n * static_cast<std::size_t>(config_.window) * A);
  tail_ = gpu::DeviceBuffer<float>(n * static_cast<std::size_t>(A + 3));
  accum_ = gpu::DeviceBuffer<EpisodeAccum>(n);
  double* f = f64_.data();
  state_.log_price = f;
  state_.holdings = f + per_asset;
  state_.cost_basis = f + 2 * per_asset;
  double* g = f + 3 * per_asset;
  state_.cash = g;
  state_.peak_equity = g + n;
  state_.dsr_a = g + 2 * n;
  state_.dsr_b = g + 3 * n;
  state_.sum_ret = g + 4 * n;
  state_.sum_ret_sq = g + 5 * n;
  state_.max_drawdown = g + 6 * n;
  state_.turnover = g + 7 * n;
  state_.episode_reward = g + 8 * n;
  state_.trades = i32_.data();
  state_.regime = i32_.data() + n;
  state_.episode_step = i32_.data() + 2 * n;
  state_.bar = bar_.data();
  state_.counter = counter_.data();
  state_.ring = ring_.data();
  state_.tail = tail_.data();
  state_.accum = accum_.data();
  if (config_.process == PriceProcess::generated) {
    generator_ = std::make_unique<MarketGenerator>(read_generator_checkpoint(config_), num_envs, config_.window, nullptr);
    state_.gen_returns = generator_->returns();
    state_.gen_step = generator_->step_counter();
    state_.gen_window = generator_->window();
  }
}

MarketEnv::~MarketEnv() = default;

ActionSpace MarketEnv::action_space() const {
  if (config_.action == ActionMode::discrete)
    return ActionSpace{
        ActionSpace::Kind::discrete, config_.assets, static_cast<int>(config_.levels.size()), 0, 0.0f, 0.0f};
  return ActionSpace{ActionSpace::Kind::continuous, 1, 0, config_.assets, -1.0f, 1.0f};
}

void MarketEnv::reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) {
  FH_EXPECT(obs != nullptr, "MarketEnv::reset: obs must be a device buffer of (N, obs_dim)");
  FH_EXPECT(obs_dtype == gpu::DType::f32 || obs_dtype == gpu::DType::bf16,
            "MarketEnv::reset: obs_dtype must be f32 or bf16");
  seed_ = seed;
  if (params_.assets <= 1)
    launch_reset<1>(state_, params_, seed, n_, stream);
  else if (params_.assets <= 4)
    launch_reset<4>(state_, params_, seed, n_, stream);
  else if (params_.assets <= 8)
    launch_reset<8>(state_, params_, seed, n_, stream);
  else
    launch_reset<16>(state_, params_, seed, n_, stream);
  if (generator_) generator_->reset(state_.ring, seed, stream);
  if (obs_dtype == gpu::DType::f32)
    launch_obs(static_cast<float*>(obs), state_, params_, extra_, n_, stream);
  else
    launch_obs(static_cast<__nv_bfloat16*>(obs), state_, params_, extra_, n_, stream);
  started_ = true;
}

void MarketEnv::step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps, cudaStream_t stream) {
  FH_EXPECT(started_, "MarketEnv::step: call reset() first");
  check_step_args(out, actions, steps);
  const std::int64_t d = obs_dim_;
  for (std::int64_t t = 0; t < steps; ++t) {
    const std::int64_t row0 = t * n_;
    // Step t's slices of the (T, N, ...) buffers; the kernels then index rows 0 .. N-1.
    const ActionInput act{actions.discrete ? actions.discrete + row0 * config_.assets : nullptr,
                          actions.continuous ? actions.continuous + row0 * config_.assets : nullptr};
    StepOutputs o = out;
    o.reward = out.reward + row0;
    o.terminated = out.terminated + row0;
    o.truncated = out.truncated + row0;
    if (generator_) generator_->refill(seed_, stream);
    if (out.obs_dtype == gpu::DType::f32) {
      float* fo = out.final_obs ? static_cast<float*>(out.final_obs) + row0 * d : nullptr;
      step_dispatch(fo, o, state_, params_, trace_, act, extra_, seed_, n_, 0, stream);
      launch_obs(static_cast<float*>(out.obs) + row0 * d, state_, params_, extra_, n_, stream);
    } else {
      __nv_bfloat16* fo = out.final_obs ? static_cast<__nv_bfloat16*>(out.final_obs) + row0 * d : nullptr;
      step_dispatch(fo, o, state_, params_, trace_, act, extra_, seed_, n_, 0, stream);
      launch_obs(static_cast<__nv_bfloat16*>(out.obs) + row0 * d, state_, params_, extra_, n_, stream);
    }
    if (generator_) generator_->advance(stream);
  }
}

void MarketEnv::set_trace(const MarketTrace& trace) {
  FH_EXPECT(trace.steps >= 0, "MarketEnv::set_trace: steps must be >= 0");
  FH_EXPECT(trace.steps == 0 || (trace.equity && trace.cost && trace.borrow && trace.turnover && trace.weight &&
                                 trace.trades && trace.ended),
            "MarketEnv::set_trace: every trace array must be a device pointer when steps > 0");
  trace_ = trace.steps > 0 ? trace : MarketTrace{};
}

void MarketEnv::reduce_stats(EpisodeStats* out, bool clear, cudaStream_t stream) {
  FH_EXPECT(started_, "MarketEnv::reduce_stats: call reset() first");
  episode_stats_reduce(out, accum_.data(), n_, clear, stats_workspace_.data(), stats_workspace_.size(), stream);
}

std::int64_t MarketEnv::step_bytes(std::int64_t steps, gpu::DType obs_dtype) const {
  const std::int64_t A = config_.assets, W = config_.window, F = config_.extra_features;
  const std::int64_t s = static_cast<std::int64_t>(gpu::dtype_size(obs_dtype));
  const std::int64_t per_step = 4 * A                                      // actions
                                + obs_dim_ * s + 4 + 2                     // obs, reward, flags
                                + 2 * (3 * 8 * A + 9 * 8 + 3 * 4 + 8 + 8)  // state read + written
                                + 4 * A + 4 * (A + 3)                      // ring entry and tail written
                                + 4 * W * A + 4 * (A + 3) + 4 + 4 * F      // obs kernel reads
                                + (config_.price_level ? 8 * A + 4 : 0)    // price levels: log price, regime
                                + (generator_ ? 4 * A + 8 : 0);            // generated: the return, the counter
  return n_ * steps * per_step;
}

std::unique_ptr<MarketEnv> make_market_env(const MarketConfig& config, std::int64_t num_envs) {
  if (config.process != PriceProcess::replay) return std::make_unique<MarketEnv>(config, num_envs);
  const OhlcvData data = load_ohlcv(config);
  return std::make_unique<MarketEnv>(config, num_envs, &data);
}

}  // namespace foxhunt::rl
